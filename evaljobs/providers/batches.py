"""The providers' batch APIs: OpenAI's Batch API (and Azure OpenAI's batch deployments), Anthropic's
Message Batches — submit many chat requests at once, look at them later, read their answers.

One interface over both (:class:`BatchClient`): :meth:`~BatchClient.submit` a list of
:class:`BatchRequest` (each with a ``custom_id`` the caller chooses), :meth:`~BatchClient.status`,
:meth:`~BatchClient.results` once ended (a :class:`BatchItem` per custom id: the parsed
``Completion`` or why there is none), :meth:`~BatchClient.cancel`, and :meth:`~BatchClient.find`:
the batch submitted under a caller's ``key`` — how a submitter that crashed between the provider's
answer and its own commit learns that the batch exists instead of submitting it twice.

* OpenAI: ``POST /files`` (multipart, purpose ``batch``; one JSONL line per request:
  ``{"custom_id", "method": "POST", "url": "/v1/chat/completions", "body"}``), ``POST /batches``
  (``input_file_id``, ``endpoint``, ``completion_window: 24h``, ``metadata: {"evaljobs_key": key}``),
  ``GET /batches/{id}``, the ``output_file_id``/``error_file_id`` contents, ``POST
  /batches/{id}/cancel``; ``find`` pages ``GET /batches`` for the key in the metadata.
* Azure OpenAI: the same through ``/openai/files`` and ``/openai/batches`` (``?api-version=``) or the
  ``/openai/v1`` base; endpoint and line URL ``/chat/completions``; the model is the deployment.
* Anthropic: ``POST /messages/batches`` (``requests: [{custom_id, params}]``), ``GET
  /messages/batches/{id}`` (``processing_status``, ``request_counts``, ``results_url``), the
  results JSONL (``succeeded``/``errored``/``canceled``/``expired``), ``POST …/cancel``. A Message
  Batch carries no metadata, so ``find`` matches by content: a batch created since ``since`` whose
  results hold the key's custom ids; one still processing cannot be told yet (:data:`UNDECIDED`).

Requests are plain HTTP here (a few per batch, not per pair), on httpx, with the key only in its
header; failures are the usual typed :class:`~evaljobs.providers.errors.ProviderError`. Result files
are streamed to a temporary file and read a line at a time (:mod:`evaljobs.providers.batch_results`):
a line that cannot be read, or is over the interactive path's response cap, is its request's error.
"""
from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any
from urllib.parse import urlsplit

from evaljobs.providers.batch_results import KEEP, read_lines, spool
from evaljobs.providers.batched import BatchRequest
from evaljobs.providers.client import DEFAULT_MAX_RESPONSE_BYTES
from evaljobs.providers.completion import Completion
from evaljobs.providers.errors import PermanentError, ProviderError, TransientError
from evaljobs.providers.http_client import httpx
from evaljobs.providers.wire import wire_format
from evaljobs.providers.wire._common import join_url

#: ``find``'s answer when a batch that may be the one is still processing (ask again later).
UNDECIDED = "undecided"
#: Where a batch is: ``open`` (validating, in progress, finalizing, cancelling) or ``ended``.
OPEN, ENDED = "open", "ended"
#: What a request of an ended batch came to.
SUCCEEDED, ERRORED, EXPIRED, CANCELLED = "succeeded", "errored", "expired", "cancelled"
_OPENAI_OPEN = ("validating", "in_progress", "finalizing", "cancelling")
DEFAULT_TIMEOUT = 120.0
#: Batches ``find`` pages through before it gives up (OpenAI lists 100 a page).
FIND_PAGES = 20


@dataclass(frozen=True)
class BatchStatus:
    """A batch as the provider reports it now."""

    id: str
    #: :data:`OPEN` or :data:`ENDED`.
    state: str
    #: The provider's own word (``in_progress``, ``completed``, ``expired``, ``ended``, …).
    provider_status: str
    total: int
    #: Requests answered so far (OpenAI counts as they finish; Anthropic only once the batch ends).
    done: int
    failed: int
    created_at: float | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class BatchItem:
    """What one request of an ended batch came to."""

    custom_id: str
    #: :data:`SUCCEEDED`, :data:`ERRORED`, :data:`EXPIRED` or :data:`CANCELLED`.
    outcome: str
    completion: Completion | None = None
    #: Why there is no completion (the provider's error in one line, ``batch_expired``, …).
    reason: str = ""
    #: For ``errored``: the typed error a chat call would have raised (retryable or not).
    error: ProviderError | None = None


class BatchClient:
    """One provider endpoint's batch API; ``wire`` is ``openai``, ``azure`` or ``anthropic``.

    ``base_url`` is the same as a chat client's (``…/v1`` for OpenAI and Anthropic, the resource
    or ``…/openai/v1`` for Azure). ``transport`` is for tests.
    """

    def __init__(self, base_url: str, *, api_key: str | None = None, wire: str = "openai",
                 api_version: str | None = None, timeout: float = DEFAULT_TIMEOUT,
                 headers: Mapping[str, str] | None = None, transport: httpx.BaseTransport | None = None,
                 max_line_bytes: int = DEFAULT_MAX_RESPONSE_BYTES):
        if wire not in ("openai", "azure", "anthropic"):
            raise ValueError(
                f"wire format {wire!r} has no batch API; batch runs take openai, azure, anthropic"
            )
        self.base_url = base_url.rstrip("/")
        self.wire = wire
        #: The longest result line read (the interactive path's response cap): a longer answer errors.
        self.max_line_bytes = max_line_bytes
        self.api_version = api_version
        self._format = wire_format(wire)
        all_headers = {"user-agent": "evaljobs", **self._format.static_headers(api_version),
                       **{k.lower(): v for k, v in (headers or {}).items()}}
        if api_key:
            all_headers.update(self._format.auth_headers(api_key))
        self._http = httpx.Client(headers=all_headers, timeout=timeout, transport=transport)

    def __enter__(self) -> BatchClient:  # noqa: PYI034 - a final class
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # -- the interface ---------------------------------------------------------------------------

    def submit(self, requests: list[BatchRequest], *, key: str) -> BatchStatus:
        """Create a batch of ``requests`` under ``key`` (kept with it where the API allows: :meth:`find`)."""
        if not requests:
            raise ValueError("a batch needs at least one request")
        if self.wire == "anthropic":
            body = {"requests": [{"custom_id": r.custom_id, "params": self._body(r)} for r in requests]}
            return self._anthropic(self._call("POST", "/messages/batches", json=body))
        endpoint = "/chat/completions" if self.wire == "azure" else "/v1/chat/completions"
        lines = "".join(json.dumps({"custom_id": r.custom_id, "method": "POST", "url": endpoint,
                                    "body": self._body(r)}) + "\n" for r in requests)
        file = self._call("POST", "/files", data={"purpose": "batch"},
                          files={"file": (f"evaljobs-{key}.jsonl", lines.encode(), "application/jsonl")})
        created = self._call("POST", "/batches", json={"input_file_id": file["id"], "endpoint": endpoint,
                                                        "completion_window": "24h",
                                                        "metadata": {"evaljobs_key": key}})
        return self._openai(created)

    def status(self, batch_id: str) -> BatchStatus:
        if self.wire == "anthropic":
            return self._anthropic(self._call("GET", f"/messages/batches/{batch_id}"))
        return self._openai(self._call("GET", f"/batches/{batch_id}"))

    def cancel(self, batch_id: str) -> BatchStatus:
        """Ask the provider to cancel; requests it already answered keep their answers."""
        if self.wire == "anthropic":
            return self._anthropic(self._call("POST", f"/messages/batches/{batch_id}/cancel"))
        return self._openai(self._call("POST", f"/batches/{batch_id}/cancel"))

    def results(self, batch_id: str) -> list[BatchItem]:
        """Every request of an ended batch (a :class:`PermanentError` while it is open)."""
        with self.download(batch_id) as items:
            return list(items)

    @contextmanager
    def download(self, batch_id: str, status: BatchStatus | None = None) -> Iterator[Iterator[BatchItem]]:
        """The requests of an ended batch (``status``: as just read, else asked), one at a time.

        Each result file is downloaded streamed to a temporary file before anything is read (a
        failed download raises here, a :class:`TransientError` to try again), then read line by
        line: a line that is not JSON, or longer than ``max_line_bytes`` (the interactive path's
        response cap), is an ``errored`` item of its own request (when its text names one; else an
        item with an empty custom id that says which line could not be read), never the batch's
        error. Memory holds one line at a time, whatever the file's size.
        """
        status = status or self.status(batch_id)
        if status.state != ENDED:
            raise PermanentError(f"batch {batch_id} has not ended yet ({status.provider_status})")
        if self.wire == "anthropic":
            urls = [("results", status.raw.get("results_url")
                     or self._url(f"/messages/batches/{batch_id}/results"))]
        else:
            urls = [(name.split("_")[0], self._url(f"/files/{status.raw[name]}/content"))
                    for name in ("output_file_id", "error_file_id") if status.raw.get(name)]
        with ExitStack() as files:
            spooled = [(what, files.enter_context(self._spool(str(url)))) for what, url in urls]
            yield (item for what, file in spooled for item in self._items(what, file))

    def find(self, key: str, custom_ids: list[str], *, since: float) -> str | None:
        """The id of the batch submitted under ``key`` (holding ``custom_ids``), if one was created at or
        after ``since`` (Unix seconds; a little earlier is allowed for clock skew); None when there is
        none; :data:`UNDECIDED` when a candidate cannot be told yet (Anthropic: still processing)."""
        since -= 300
        wanted = set(custom_ids)
        after: str | None = None
        undecided = False
        for _ in range(FIND_PAGES):
            if self.wire == "anthropic":
                page = self._call("GET", "/messages/batches", params={"limit": 100, **({"after_id": after}
                                                                                          if after else {})})
            else:
                page = self._call(
                    "GET", "/batches", params={"limit": 100, **({"after": after} if after else {})}
                )
            batches = page.get("data") or []
            for raw in batches:
                status = self._anthropic(raw) if self.wire == "anthropic" else self._openai(raw)
                if status.created_at is not None and status.created_at < since:
                    return UNDECIDED if undecided else None  # newest first: the rest are older
                if self.wire != "anthropic":
                    if (raw.get("metadata") or {}).get("evaljobs_key") == key:
                        return status.id
                    continue
                if status.total != len(wanted):
                    continue
                if status.state != ENDED:
                    undecided = True
                    continue
                with self.download(status.id, status) as items:
                    named = [item.custom_id for item in items]
                if set(named) - {""} == wanted or (set(named) - {""} < wanted and len(named) == len(wanted)):
                    return status.id  # (a line that could not be read stands for one of the others)
            if not page.get("has_more") or not batches:
                break
            after = page.get("last_id") or batches[-1].get("id")
        return UNDECIDED if undecided else None

    # -- wire details ----------------------------------------------------------------------------

    def _body(self, request: BatchRequest) -> dict[str, Any]:
        return self._format.body(request.model, request.messages, tools=request.tools,
                                 temperature=request.temperature, max_tokens=request.max_tokens,
                                 extra=request.extra, stream=False)

    def _url(self, path: str) -> str:
        """``path`` under the base URL (Azure's classic resource URL: under ``/openai``, with
        ``api-version``)."""
        if self.wire == "azure" and not urlsplit(self.base_url).path.rstrip("/").endswith("/openai/v1"):
            return join_url(self.base_url, "/openai" + path,
                            {"api-version": self.api_version} if self.api_version else None)
        return join_url(self.base_url, path)

    def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        response = self._send(method, self._url(path), **kwargs)
        try:
            data = response.json()
        except ValueError:
            raise TransientError(f"batch API {method} {path}: the answer is not JSON") from None
        if not isinstance(data, dict):
            raise TransientError(f"batch API {method} {path}: the answer is not a JSON object")
        return data

    @contextmanager
    def _spool(self, url: str) -> Iterator[IO[bytes]]:
        """The body at ``url`` in a temporary file, streamed there (closed and deleted on exit)."""
        try:
            with self._http.stream("GET", url, headers={"accept": "application/binary"}) as response:
                if response.status_code >= 400:
                    body = bytearray()
                    for chunk in response.iter_bytes():  # an error's first bytes are enough to say it
                        body += chunk
                        if len(body) >= KEEP:
                            break
                    raise self._format.error(response.status_code, response.headers, bytes(body[:KEEP]))
                file = spool(response)
        except httpx.TimeoutException:
            raise TransientError("batch API GET: timed out reading a result file") from None
        except httpx.HTTPError as exc:
            raise TransientError(f"batch API GET: {type(exc).__name__} reading a result file") from None
        with file:
            yield file

    def _items(self, what: str, file: IO[bytes]) -> Iterator[BatchItem]:
        """The items of one spooled result file (``what``: ``output``, ``error``, ``results``)."""
        for line in read_lines(file, self.max_line_bytes):
            where = f"{what} file line {line.number}"
            if line.data is None:
                if line.size:
                    reason = f"response too large (> {self.max_line_bytes} bytes; {where}: {line.problem})"
                else:
                    reason = f"batch_error: {where} is {line.problem}"
                yield BatchItem(line.custom_id or "", ERRORED, reason=reason, error=PermanentError(reason))
                continue
            custom_id = line.data.get("custom_id")
            try:
                yield (self._anthropic_item(line.data) if self.wire == "anthropic"
                       else self._openai_item(line.data))
            except (ProviderError, ValueError, TypeError, AttributeError, KeyError, RecursionError) as exc:
                text = exc.reason if isinstance(exc, ProviderError) else f"{type(exc).__name__}: {exc}"
                reason = f"batch_error: {where} is not a readable result ({text})"[:500]
                yield BatchItem(str(custom_id) if isinstance(custom_id, str) else "", ERRORED, reason=reason,
                                error=PermanentError(reason))

    def _send(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, url, **kwargs)
        except httpx.TimeoutException:
            raise TransientError(f"batch API {method}: timed out") from None
        except httpx.HTTPError as exc:
            raise TransientError(f"batch API {method}: {type(exc).__name__}") from None
        if response.status_code >= 400:
            raise self._format.error(response.status_code, response.headers, response.content)
        return response

    def _openai(self, raw: dict[str, Any]) -> BatchStatus:
        counts = raw.get("request_counts") or {}
        status = str(raw.get("status"))
        completed, failed = int(counts.get("completed") or 0), int(counts.get("failed") or 0)
        return BatchStatus(
            id=str(raw.get("id")),
            state=OPEN if status in _OPENAI_OPEN else ENDED,
            provider_status=status,
            total=int(counts.get("total") or 0),
            done=completed + failed,
            failed=failed,
            created_at=_number(raw.get("created_at")),
            raw=raw,
        )

    def _anthropic(self, raw: dict[str, Any]) -> BatchStatus:
        counts = raw.get("request_counts") or {}
        total = sum(
            int(counts.get(k) or 0) for k in ("processing", "succeeded", "errored", "canceled", "expired")
        )
        failed = sum(int(counts.get(k) or 0) for k in ("errored", "canceled", "expired"))
        status = str(raw.get("processing_status"))
        return BatchStatus(
            id=str(raw.get("id")),
            state=ENDED if status == "ended" else OPEN,
            provider_status=status,
            total=total,
            done=total - int(counts.get("processing") or 0),
            failed=failed,
            created_at=_stamp(raw.get("created_at")),
            raw=raw,
        )

    def _openai_item(self, line: dict[str, Any]) -> BatchItem:
        custom_id = str(line.get("custom_id"))
        response, error = line.get("response"), line.get("error")
        if isinstance(response, dict) and response.get("status_code") == 200:
            return BatchItem(custom_id, SUCCEEDED, completion=self._completion(response.get("body")))
        if isinstance(response, dict):
            status = int(response.get("status_code") or 500)
            typed = self._format.error(status, {}, json.dumps(response.get("body")).encode())
            return BatchItem(custom_id, ERRORED, reason=typed.reason, error=typed)
        code = str((error or {}).get("code") or "batch_error")
        outcome = {"batch_expired": EXPIRED, "batch_cancelled": CANCELLED}.get(code, ERRORED)
        reason = f"{code}: {(error or {}).get('message') or ''}".rstrip(": ")
        return BatchItem(custom_id, outcome, reason=reason,
                         error=None if outcome != ERRORED else PermanentError(reason))

    def _anthropic_item(self, line: dict[str, Any]) -> BatchItem:
        custom_id = str(line.get("custom_id"))
        result = line.get("result") or {}
        kind = result.get("type")
        if kind == "succeeded":
            return BatchItem(custom_id, SUCCEEDED, completion=self._completion(result.get("message")))
        if kind == "errored":
            body = result.get("error") or {}
            error_type = str((body.get("error") or {}).get("type") or "api_error")
            status = {
                "invalid_request_error": 400,
                "authentication_error": 401,
                "permission_error": 403,
                "not_found_error": 404,
                "rate_limit_error": 429,
                "overloaded_error": 529,
            }.get(error_type, 500)
            typed = self._format.error(status, {}, json.dumps(body).encode())
            return BatchItem(custom_id, ERRORED, reason=typed.reason, error=typed)
        outcome = CANCELLED if kind == "canceled" else EXPIRED
        return BatchItem(
            custom_id, outcome, reason="batch_cancelled" if outcome == CANCELLED else "batch_expired"
        )

    def _completion(self, body: Any) -> Completion:
        return self._format.completion(body, 200, 0.0, {})


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _stamp(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


__all__ = ["CANCELLED", "ENDED", "ERRORED", "EXPIRED", "OPEN", "SUCCEEDED", "UNDECIDED", "BatchClient",
           "BatchItem", "BatchRequest", "BatchStatus"]
