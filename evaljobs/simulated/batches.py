"""The simulated provider's batch APIs: OpenAI's Files + Batch API and Anthropic's Message Batches.

Shapes follow the official SDKs' types (``openai.types.Batch``, ``openai.types.FileObject``,
``anthropic.types.messages.MessageBatch`` and ``MessageBatchIndividualResponse``); the tests run
both SDKs' batch clients against this desk.

A batch ends ``delay`` seconds after it is created (checked whenever it is looked at, so no timer
runs): each of its requests is then answered by the same answer logic as a chat request. With a
completion ``window`` shorter than ``delay`` the batch expires at the window's end instead, with
the share ``window / delay`` of its requests answered (in order) and the rest expired, as the real
APIs do with unfinished requests. A cancelled batch answers none of the requests it had not
answered. :meth:`BatchDesk.end_batches` ends the open batches now (a test's own event, instead of
waiting for the delay).

What the desk received is counted: every custom id in every created batch, with how many times it
was submitted (:meth:`BatchDesk.stats`); a batch client that submits a request twice shows here,
not in its own account.
"""
from __future__ import annotations

import collections
import email.parser
import email.policy
import itertools
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from evaljobs.simulated.wire import server_wire

#: (HTTP status, JSON body) of one answered request, from the chat answer logic.
Answerer = Callable[[str, dict[str, Any]], tuple[int, dict[str, Any]]]

#: What a custom id may be (Anthropic's rule; OpenAI accepts it too).
CUSTOM_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
OPENAI_ENDPOINTS = ("/v1/chat/completions", "/chat/completions")
EXPIRED_MESSAGE = "This request could not be executed before the completion window expired."
CANCELLED_MESSAGE = "This request was not executed because the batch was cancelled."


class BatchRequestError(ValueError):
    """A batch request the API would refuse (HTTP ``status``, one line)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass
class _File:
    id: str
    filename: str
    purpose: str
    data: bytes
    created: float

    def body(self) -> dict[str, Any]:
        return {"id": self.id, "object": "file", "bytes": len(self.data), "created_at": int(self.created),
                "filename": self.filename, "purpose": self.purpose, "status": "processed"}


@dataclass
class _Batch:
    id: str
    wire: str  # openai | anthropic
    created: float
    requests: list[tuple[str, dict[str, Any]]]
    endpoint: str = ""
    input_file_id: str = ""
    completion_window: str = "24h"
    metadata: dict[str, str] | None = None
    #: in_progress, cancelling, ended
    state: str = "in_progress"
    #: completed, expired, cancelled (once ended)
    outcome: str = ""
    cancel_at: float | None = None
    ended: float | None = None
    #: custom id -> (HTTP status, body) for the requests answered; the others expired or were cancelled.
    answers: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)
    output_file_id: str | None = None
    error_file_id: str | None = None


class BatchDesk:
    """Files and batches, both wire formats; thread-safe (the server's loop and a test's thread)."""

    def __init__(self, answer: Answerer, *, delay: float = 0.0, window: float | None = None,
                 clock: Callable[[], float] = time.time):
        self.answer = answer
        self.delay = float(delay)
        self.window = window
        self.clock = clock
        self._lock = threading.RLock()
        self._ids = itertools.count(1)
        self._files: dict[str, _File] = {}
        self._batches: dict[str, _Batch] = {}
        self._submitted: collections.Counter[str] = collections.Counter()
        self._uploads = 0
        self._cancels = 0
        #: Hold back the answer to a batch create (the batch is created): a crash test's moment.
        self.hold_creates = False

    # -- statistics ------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """What the desk received: batches created, files uploaded, cancels, and each custom id's
        submissions."""
        with self._lock:
            return {"batches_created": len(self._batches), "files_uploaded": self._uploads,
                    "cancel_requests": self._cancels, "requests_submitted": sum(self._submitted.values()),
                    "submitted": dict(self._submitted),
                    "open": sum(1 for b in self._batches.values() if b.state != "ended")}

    def end_batches(self, *, expire: bool = False) -> int:
        """End every open batch now: answered (completed), or ``expire``: expired with nothing answered."""
        with self._lock:
            count = 0
            for batch in self._batches.values():
                if batch.state == "ended":
                    continue
                if batch.state == "cancelling" or not expire:
                    self._end(batch, "cancelled" if batch.state == "cancelling" else "completed",
                              len(batch.requests) if batch.state != "cancelling" else 0)
                else:
                    self._end(batch, "expired", 0)
                count += 1
            return count

    # -- OpenAI: files ---------------------------------------------------------------------------

    def upload(self, content_type: str, body: bytes) -> dict[str, Any]:
        """``POST /v1/files`` (multipart: ``purpose`` and ``file``)."""
        fields = _multipart(content_type, body)
        purpose = fields.get("purpose", (None, b""))[1].decode("utf-8", "replace")
        if "file" not in fields:
            raise BatchRequestError("'file' is a required property")
        if purpose != "batch":
            raise BatchRequestError(
                f"purpose {purpose!r}: this simulated provider takes files of purpose 'batch'"
            )
        filename, data = fields["file"]
        with self._lock:
            self._uploads += 1
            file = _File(
                f"file-sim{next(self._ids)}", filename or "upload.jsonl", purpose, data, self.clock()
            )
            self._files[file.id] = file
            return file.body()

    def file(self, file_id: str) -> dict[str, Any]:
        return self._file(file_id).body()

    def file_content(self, file_id: str) -> bytes:
        return self._file(file_id).data

    def list_files(self, purpose: str | None = None) -> dict[str, Any]:
        with self._lock:
            data = [f.body() for f in reversed(self._files.values()) if purpose in (None, "", f.purpose)]
        return {"object": "list", "data": data, "has_more": False,
                "first_id": data[0]["id"] if data else None, "last_id": data[-1]["id"] if data else None}

    def _file(self, file_id: str) -> _File:
        with self._lock:
            file = self._files.get(file_id)
        if file is None:
            raise BatchRequestError(f"No such File object: {file_id}", 404)
        return file

    # -- OpenAI: batches -------------------------------------------------------------------------

    def create_openai(self, payload: Any) -> dict[str, Any]:
        """``POST /v1/batches``: the input file's lines become the batch's requests."""
        if not isinstance(payload, dict):
            raise BatchRequestError("request body must be a JSON object")
        for name in ("input_file_id", "endpoint", "completion_window"):
            if not isinstance(payload.get(name), str):
                raise BatchRequestError(f"'{name}' is a required property")
        endpoint = payload["endpoint"]
        if endpoint not in OPENAI_ENDPOINTS:
            raise BatchRequestError(f"endpoint {endpoint!r}: this simulated provider batches "
                                    f"{', '.join(OPENAI_ENDPOINTS)}")
        if payload["completion_window"] != "24h":
            raise BatchRequestError("completion_window: only '24h' is supported")
        metadata = payload.get("metadata")
        if metadata is not None and not (isinstance(metadata, dict)
                                         and all(isinstance(v, str) for v in metadata.values())):
            raise BatchRequestError("metadata: an object of string values")
        file = self._file(payload["input_file_id"])
        requests = []
        for number, line in enumerate(file.data.decode("utf-8", "replace").splitlines(), 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except ValueError:
                raise BatchRequestError(f"input file line {number} is not JSON") from None
            if not isinstance(item, dict) or item.get("method") != "POST" or item.get("url") != endpoint \
                    or not isinstance(item.get("body"), dict) or not isinstance(item.get("custom_id"), str):
                raise BatchRequestError(
                    f"input file line {number}: needs custom_id, method POST, url {endpoint} "
                    f"and a body object"
                )
            requests.append((item["custom_id"], item["body"]))
        batch = self._create("openai", requests, endpoint=endpoint, input_file_id=file.id,
                             completion_window=payload["completion_window"], metadata=metadata)
        return self.openai_body(batch)

    def openai(self, batch_id: str) -> dict[str, Any]:
        return self.openai_body(self._batch(batch_id, "openai"))

    def cancel_openai(self, batch_id: str) -> dict[str, Any]:
        return self.openai_body(self._cancel(self._batch(batch_id, "openai")), settle=False)

    def list_openai(self, after: str | None = None, limit: int = 20) -> dict[str, Any]:
        data = [self.openai_body(b) for b in self._page("openai", after, limit + 1)]
        more = len(data) > limit
        data = data[:limit]
        return {"object": "list", "data": data, "has_more": more,
                "first_id": data[0]["id"] if data else None, "last_id": data[-1]["id"] if data else None}

    def openai_body(self, batch: _Batch, *, settle: bool = True) -> dict[str, Any]:
        """The Batch object (brought up to now first unless ``settle`` is False: a cancel's own answer
        says ``cancelling``, as the real API's does; the next look finds it ``cancelled``)."""
        with self._lock:
            if settle:
                self._settle(batch)
            status = {"in_progress": "in_progress", "cancelling": "cancelling"}.get(
                batch.state, batch.outcome
            )
            failed = sum(1 for s, _ in batch.answers.values() if s != 200)
            completed = len(batch.answers) - failed
            if batch.state == "ended":
                failed += len(batch.requests) - len(batch.answers)
            stamp = int(batch.ended) if batch.ended is not None else None
            return {
                "id": batch.id,
                "object": "batch",
                "endpoint": batch.endpoint,
                "errors": None,
                "input_file_id": batch.input_file_id,
                "completion_window": batch.completion_window,
                "status": status,
                "output_file_id": batch.output_file_id,
                "error_file_id": batch.error_file_id,
                "created_at": int(batch.created),
                "in_progress_at": int(batch.created),
                "expires_at": int(batch.created + 24 * 3600),
                "finalizing_at": stamp if batch.outcome == "completed" else None,
                "completed_at": stamp if batch.outcome == "completed" else None,
                "failed_at": None,
                "expired_at": stamp if batch.outcome == "expired" else None,
                "cancelling_at": int(batch.cancel_at) if batch.cancel_at is not None else None,
                "cancelled_at": stamp if batch.outcome == "cancelled" else None,
                "request_counts": {"total": len(batch.requests), "completed": completed, "failed": failed},
                "metadata": batch.metadata,
            }

    # -- Anthropic -------------------------------------------------------------------------------

    def create_anthropic(self, payload: Any) -> dict[str, Any]:
        """``POST /v1/messages/batches``: ``{"requests": [{"custom_id", "params"}, …]}``."""
        requests = payload.get("requests") if isinstance(payload, dict) else None
        if not isinstance(requests, list) or not requests:
            raise BatchRequestError("requests: Field required (a non-empty list)")
        items = []
        for number, item in enumerate(requests):
            if not isinstance(item, dict) or not isinstance(item.get("params"), dict):
                raise BatchRequestError(f"requests.{number}: needs custom_id and a params object")
            items.append((item.get("custom_id"), item["params"]))
        return self.anthropic_body(self._create("anthropic", items), "")

    def anthropic(self, batch_id: str, base: str) -> dict[str, Any]:
        return self.anthropic_body(self._batch(batch_id, "anthropic"), base)

    def cancel_anthropic(self, batch_id: str, base: str) -> dict[str, Any]:
        return self.anthropic_body(self._cancel(self._batch(batch_id, "anthropic")), base, settle=False)

    def list_anthropic(self, base: str, after: str | None = None, limit: int = 20) -> dict[str, Any]:
        data = [self.anthropic_body(b, base) for b in self._page("anthropic", after, limit + 1)]
        more = len(data) > limit
        data = data[:limit]
        return {"data": data, "has_more": more, "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None}

    def anthropic_results(self, batch_id: str) -> bytes:
        """The results JSONL of an ended batch (one line per request, its custom id and result)."""
        with self._lock:
            batch = self._batch(batch_id, "anthropic")
            self._settle(batch)
            if batch.state != "ended":
                raise BatchRequestError(f"Message Batch {batch_id} has not ended yet", 404)
            lines = []
            for custom_id, _ in batch.requests:
                answer = batch.answers.get(custom_id)
                if answer is None:
                    result: dict[str, Any] = {
                        "type": "canceled" if batch.outcome == "cancelled" else "expired"
                    }
                elif answer[0] == 200:
                    result = {"type": "succeeded", "message": answer[1]}
                else:
                    result = {"type": "errored", "error": answer[1]}
                lines.append(json.dumps({"custom_id": custom_id, "result": result}))
            return ("\n".join(lines) + "\n").encode()

    def anthropic_body(self, batch: _Batch, base: str, *, settle: bool = True) -> dict[str, Any]:
        with self._lock:
            if settle:
                self._settle(batch)
            counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
            if batch.state != "ended":
                counts["processing"] = len(batch.requests)
            else:
                for custom_id, _ in batch.requests:
                    answer = batch.answers.get(custom_id)
                    if answer is None:
                        counts["canceled" if batch.outcome == "cancelled" else "expired"] += 1
                    else:
                        counts["succeeded" if answer[0] == 200 else "errored"] += 1
            ended = batch.state == "ended"
            return {"id": batch.id, "type": "message_batch",
                    "processing_status": {"cancelling": "canceling"}.get(batch.state, batch.state),
                    "request_counts": counts, "created_at": _rfc3339(batch.created),
                    "expires_at": _rfc3339(batch.created + 24 * 3600),
                    "ended_at": _rfc3339(batch.ended) if ended and batch.ended is not None else None,
                    "cancel_initiated_at": _rfc3339(batch.cancel_at) if batch.cancel_at is not None else None,
                    "archived_at": None,
                    "results_url": f"{base}/v1/messages/batches/{batch.id}/results" if ended else None}

    # -- shared ----------------------------------------------------------------------------------

    def _create(self, wire: str, requests: list[tuple[Any, dict[str, Any]]], **fields: Any) -> _Batch:
        seen: set[str] = set()
        for number, (custom_id, _) in enumerate(requests):
            if not isinstance(custom_id, str) or not CUSTOM_ID.fullmatch(custom_id):
                raise BatchRequestError(f"requests.{number}.custom_id: {custom_id!r} must match "
                                        f"^[a-zA-Z0-9_-]{{1,64}}$")
            if custom_id in seen:
                raise BatchRequestError(
                    f"custom_id {custom_id!r} appears twice in one batch; each must be unique"
                )
            seen.add(custom_id)
        with self._lock:
            batch_id = f"{server_wire(wire).batch_prefix}{next(self._ids)}"
            batch = _Batch(batch_id, wire, self.clock(), list(requests), **fields)
            self._batches[batch.id] = batch
            self._submitted.update(custom_id for custom_id, _ in requests)
            return batch

    def _batch(self, batch_id: str, wire: str) -> _Batch:
        with self._lock:
            batch = self._batches.get(batch_id)
        if batch is None or batch.wire != wire:
            raise BatchRequestError(f"No such batch: {batch_id}", 404)
        return batch

    def _page(self, wire: str, after: str | None, limit: int) -> list[_Batch]:
        with self._lock:
            newest_first = [b for b in reversed(self._batches.values()) if b.wire == wire]
        if after:
            ids = [b.id for b in newest_first]
            newest_first = newest_first[ids.index(after) + 1:] if after in ids else []
        return newest_first[:max(1, min(limit, 101))]

    def _cancel(self, batch: _Batch) -> _Batch:
        with self._lock:
            self._cancels += 1
            self._settle(batch)
            if batch.state == "in_progress":
                batch.state, batch.cancel_at = "cancelling", self.clock()
            return batch

    def _settle(self, batch: _Batch) -> None:
        """Bring ``batch`` up to now: a cancelling batch is cancelled; an open one ends after its delay."""
        if batch.state == "ended":
            return
        if batch.state == "cancelling":
            self._end(batch, "cancelled", 0)
            return
        age = self.clock() - batch.created
        if self.window is not None and self.delay > self.window:
            if age >= self.window:
                self._end(batch, "expired", int(len(batch.requests) * self.window / self.delay))
        elif age >= self.delay:
            self._end(batch, "completed", len(batch.requests))

    def _end(self, batch: _Batch, outcome: str, answered: int) -> None:
        for custom_id, body in batch.requests[:answered]:
            batch.answers[custom_id] = self.answer(batch.wire, body)
        batch.state, batch.outcome, batch.ended = "ended", outcome, self.clock()
        if server_wire(batch.wire).writes_result_files:
            self._openai_files(batch)

    def _openai_files(self, batch: _Batch) -> None:
        """The output file (answered 200) and the error file (the rest), as the Batch API writes them."""
        output: list[str] = []
        errors: list[str] = []
        for number, (custom_id, _) in enumerate(batch.requests):
            line: dict[str, Any] = {"id": f"batch_req_{batch.id}_{number}", "custom_id": custom_id}
            answer = batch.answers.get(custom_id)
            if answer is None:
                code = "batch_cancelled" if batch.outcome == "cancelled" else "batch_expired"
                line.update(response=None, error={"code": code, "message": CANCELLED_MESSAGE
                                                  if code == "batch_cancelled" else EXPIRED_MESSAGE})
            else:
                line.update(response={"status_code": answer[0], "request_id": f"req_sim_{batch.id}_{number}",
                                      "body": answer[1]}, error=None)
            (output if answer is not None and answer[0] == 200 else errors).append(json.dumps(line))
        for lines, name, attr in ((output, "output", "output_file_id"), (errors, "errors", "error_file_id")):
            if lines:
                file = _File(f"file-sim{next(self._ids)}", f"{batch.id}_{name}.jsonl", "batch_output",
                             ("\n".join(lines) + "\n").encode(), self.clock())
                self._files[file.id] = file
                setattr(batch, attr, file.id)


def _multipart(content_type: str, body: bytes) -> dict[str, tuple[str | None, bytes]]:
    """The fields of a ``multipart/form-data`` body: name -> (filename, bytes)."""
    if "multipart/form-data" not in content_type.lower():
        raise BatchRequestError("expected a multipart/form-data body with 'purpose' and 'file'")
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"content-type: " + content_type.encode("latin-1") + b"\r\n\r\n" + body)
    fields: dict[str, tuple[str | None, bytes]] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if name:
            payload = part.get_payload(decode=True)
            fields[str(name)] = (part.get_filename(), payload if isinstance(payload, bytes) else b"")
    return fields


def _rfc3339(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
