"""Live ``http`` tools: the model's arguments to an HTTP endpoint, its answer back to the model.

The arguments are sent as a JSON body (``GET``/``DELETE``: as query
parameters); the response body (JSON if it parses, else text) goes back to
the model. A 4xx/5xx status is a tool error. ``${NAME}`` in header values is
read from the environment at call time, only when the operator allows it and the
URL (and each redirect) is an endpoint it allows (:mod:`.allowance`); messages
never show header values or URL query strings.
"""
from __future__ import annotations

import json
import time
from typing import Any

from evaljobs.network.http_client import httpx  # without its CLI (start-up time)

from evaljobs.catalog.model import Tool
from evaljobs.catalog.text import text_of
from evaljobs.catalog.toolspec import validate_live_spec
from evaljobs.errors import one_line
from evaljobs.network import deadline
from evaljobs.tools._common import LiveToolError, ToolFailed, body_of, public_url, resolve_env
from evaljobs.tools.allowance import sends_to, tool_variables

#: Redirects followed by hand for a request that carries the operator's variables (httpx's own limit).
_MAX_REDIRECTS = 20


def call_http(client: httpx.Client, tool: Tool, arguments: dict[str, Any], default_timeout: float) -> Any:
    """What ``tool``'s endpoint answers to ``arguments`` (raises ``ToolFailed`` / ``LiveToolError``)."""
    spec = tool.http or {}
    problems = validate_live_spec("http", spec)
    if problems:
        raise LiveToolError(f"tool '{tool.name}': " + "; ".join(problems))
    url, method = spec["url"], str(spec.get("method") or "POST").upper()
    headers = {name: resolve_env(value, f"tool '{tool.name}': header {name!r}")
               for name, value in (spec.get("headers") or {}).items()}
    timeout = float(spec.get("timeout") or default_timeout)
    where = f"{method} {public_url(url)}"
    if method in ("GET", "DELETE"):
        request: dict[str, Any] = {"params": {k: text_of(v) for k, v in arguments.items()}}
    else:
        request = {"json": arguments}
    started = time.monotonic()
    # The tool's timeout is a wall for the whole exchange (a server trickling bytes never trips a
    # per-read timeout), and the pair's deadline cuts it shorter (see evaljobs.network.deadline).
    cut = deadline.remaining(timeout)
    carried = sorted(tool_variables(spec))
    try:
        with deadline.scope(started + timeout):
            # A request that carries the operator's variables follows a redirect only to where they may go
            # (httpx would forward every header but Authorization to any host).
            response = client.request(method, url, headers=headers, timeout=timeout,
                                      follow_redirects=not carried, **request)
            for _ in range(_MAX_REDIRECTS if carried else 0):
                following = response.next_request if response.is_redirect else None
                if following is None:
                    break
                if not sends_to(carried, str(following.url)):
                    response.close()
                    raise ToolFailed(f"{where} redirected to {public_url(str(following.url))}, which this "
                                     f"process's operator does not allow its {', '.join(carried)} to reach "
                                     "(EVALJOBS_ALLOWED_BASE_URLS); not followed")
                response.close()
                response = client.send(following, follow_redirects=False)
    except httpx.TimeoutException:
        if cut is not None and cut < timeout:
            raise ToolFailed(f"{where} stopped by the pair's time limit after "
                             f"{time.monotonic() - started:.2f}s") from None
        raise ToolFailed(f"{where} timed out after {timeout:g}s") from None
    except httpx.HTTPError as exc:
        raise ToolFailed(f"{where} failed: {type(exc).__name__}: {one_line(exc, 200)}") from None
    body = body_of(response)
    if response.status_code >= 400:
        shown = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)
        raise ToolFailed(f"{where} answered HTTP {response.status_code}: {one_line(shown, 300)}")
    return body


__all__ = ["call_http"]
