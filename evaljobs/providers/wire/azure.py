"""Azure OpenAI: the OpenAI chat body, Azure's URL and ``api-key`` header.

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


def needs_api_version(base_url: str) -> bool:
    """True for a classic deployment URL (every call must carry ``api-version``)."""
    parts = urlsplit(base_url.strip())
    return not parts.path.rstrip("/").endswith("/openai/v1") and "api-version=" not in parts.query


__all__ = ["AzureWire", "needs_api_version"]
