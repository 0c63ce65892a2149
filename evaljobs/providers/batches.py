"""The providers' batch APIs: OpenAI's Batch API (and Azure OpenAI's batch deployments), Anthropic's
Message Batches — submit many chat requests at once, look at them later, read their answers.

One interface over both (:class:`BatchClient`): :meth:`~BatchClient.submit` a list of
:class:`BatchRequest` (each with a ``custom_id`` the caller chooses), :meth:`~BatchClient.status`,
:meth:`~BatchClient.results` once ended (a :class:`BatchItem` per custom id: the parsed
``Completion`` or why there is none), :meth:`~BatchClient.cancel`, and :meth:`~BatchClient.find`:
the batch submitted under a caller's ``key`` — how a submitter that crashed between the provider's
answer and its own commit learns that the batch exists instead of submitting it twice.

The exchanges below are each wire format's (the ``batch_*`` members of ``WireFormat``, in
:mod:`evaljobs.providers.wire`); this client sends them, reads the result files and types the errors:

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
header; failures are the usual typed :class:`~evaljobs.network.errors.ProviderError`. Result files
are streamed to a temporary file and read a line at a time (:mod:`evaljobs.providers.batch_results`):
a line that cannot be read, or is over the interactive path's response cap, is its request's error.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from typing import IO, Any

from evaljobs.network.errors import PermanentError, ProviderError, TransientError
from evaljobs.network.http_client import httpx
from evaljobs.providers.batch_items import (CANCELLED, ENDED, ERRORED, EXPIRED, OPEN, SUCCEEDED, UNDECIDED,
                                            BatchItem, BatchStatus)
from evaljobs.providers.batch_results import KEEP, read_lines, spool
from evaljobs.providers.batched import BatchRequest
from evaljobs.providers.client import DEFAULT_MAX_RESPONSE_BYTES
from evaljobs.providers.wire import batch_wires, wire_format

DEFAULT_TIMEOUT = 120.0
#: Batches ``find`` pages through before it gives up (OpenAI lists 100 a page).
FIND_PAGES = 20


class BatchClient:
    """One provider endpoint's batch API; ``wire`` names a wire format with one (``batch_wires()``).

    The HTTP, the errors and the result files are handled here; what each request and answer looks like
    is the wire format's (``WireFormat.batch_*`` in :mod:`evaljobs.providers.wire`).

    ``base_url`` is the same as a chat client's (``…/v1`` for OpenAI and Anthropic, the resource
    or ``…/openai/v1`` for Azure). ``transport`` is for tests.
    """

    def __init__(self, base_url: str, *, api_key: str | None = None, wire: str = "openai",
                 api_version: str | None = None, timeout: float = DEFAULT_TIMEOUT,
                 headers: Mapping[str, str] | None = None, transport: httpx.BaseTransport | None = None,
                 max_line_bytes: int = DEFAULT_MAX_RESPONSE_BYTES):
        if wire not in batch_wires():
            raise ValueError(
                f"wire format {wire!r} has no batch API; batch runs take {', '.join(batch_wires())}"
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
        created = self._format.batch_submit(self._call, [(r.custom_id, self._body(r)) for r in requests], key)
        return self._format.batch_status(created)

    def status(self, batch_id: str) -> BatchStatus:
        return self._format.batch_status(self._call("GET", f"{self._format.batches_path}/{batch_id}"))

    def cancel(self, batch_id: str) -> BatchStatus:
        """Ask the provider to cancel; requests it already answered keep their answers."""
        return self._format.batch_status(self._call("POST", f"{self._format.batches_path}/{batch_id}/cancel"))

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
        urls = self._format.batch_result_files(status, self._url)
        with ExitStack() as files:
            spooled = [(what, files.enter_context(self._spool(url))) for what, url in urls]
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
            page = self._call("GET", self._format.batches_path, params=self._format.batch_page_params(after))
            batches = page.get("data") or []
            for raw in batches:
                status = self._format.batch_status(raw)
                if status.created_at is not None and status.created_at < since:
                    return UNDECIDED if undecided else None  # newest first: the rest are older
                if self._format.batch_keeps_key:
                    if self._format.batch_key(raw) == key:
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
        """``path`` of the batch API under the base URL, as the wire format places it."""
        return self._format.batch_url(self.base_url, path, self.api_version)

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
                yield self._format.batch_item(line.data)
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


__all__ = ["CANCELLED", "ENDED", "ERRORED", "EXPIRED", "OPEN", "SUCCEEDED", "UNDECIDED", "BatchClient",
           "BatchItem", "BatchRequest", "BatchStatus"]
