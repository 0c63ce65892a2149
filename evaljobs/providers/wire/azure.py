"""Azure OpenAI: the OpenAI chat body, Azure's URL and ``api-key`` header.

Batches are OpenAI's Batch API through ``/openai/files`` and ``/openai/batches`` (``?api-version=``), or
under the ``/openai/v1`` base; the lines' endpoint is ``/chat/completions``.

Two endpoint shapes, told apart by the base URL:

* **v1** (``https://RESOURCE.openai.azure.com/openai/v1``): ``{base}/chat/completions``,
  the deployment name goes in the body's ``model``; no ``api-version`` needed.
* **classic** (``https://RESOURCE.openai.azure.com``, or a base URL already ending
  in ``/openai/deployments/NAME``): ``…/openai/deployments/{deployment}/chat/completions
  ?api-version=…``, the deployment being the model spec's model name
  (``azure/my-gpt4o``). The ``api-version`` comes from the base URL's query string
  or the provider's ``api_version``.
"""
from __future__ import annotations

from urllib.parse import quote, urlsplit

from evaljobs.providers.wire._common import join_url
from evaljobs.providers.wire.openai import OpenAIWire


class AzureWire(OpenAIWire):
    name = "azure"

    def url(self, base_url: str, model: str, api_version: str | None) -> str:
        path = urlsplit(base_url.strip()).path.rstrip("/")
        if path.endswith("/openai/v1"):
            return join_url(base_url, "/chat/completions")
        query = {"api-version": api_version} if api_version else None
        if "/openai/deployments/" in path + "/":
            return join_url(base_url, "/chat/completions", query)
        return join_url(base_url, f"/openai/deployments/{quote(model, safe='')}/chat/completions", query)

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"api-key": api_key}

    example_base_url = "https://RESOURCE.openai.azure.com"

    def endpoint_problem(self, base_url: str, api_version: str | None, fix: str) -> str | None:
        if needs_api_version(base_url) and not api_version:
            return (f"is a classic Azure deployment URL without an api-version; set "
                    f"api_version (e.g. \"2024-10-21\") {fix}, or use the v1 endpoint …/openai/v1")
        return None

    # the batch API: OpenAI's, through /openai/files and /openai/batches (the model is the deployment)
    batch_endpoint = "/chat/completions"

    def batch_url(self, base_url: str, path: str, api_version: str | None) -> str:
        """``path`` under the base URL; under a classic resource URL: under ``/openai``, with
        ``api-version``."""
        if not urlsplit(base_url).path.rstrip("/").endswith("/openai/v1"):
            return join_url(base_url, "/openai" + path, {"api-version": api_version} if api_version else None)
        return join_url(base_url, path)


def needs_api_version(base_url: str) -> bool:
    """True for a classic deployment URL (every call must carry ``api-version``)."""
    parts = urlsplit(base_url.strip())
    return not parts.path.rstrip("/").endswith("/openai/v1") and "api-version=" not in parts.query


__all__ = ["AzureWire", "needs_api_version"]
