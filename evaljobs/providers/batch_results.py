"""A provider batch's result file, read without holding it: downloaded streamed to a temporary file,
then read back one line at a time, each line a request's own answer or its own error.

Why: a result file was read whole (``response.content``) and parsed whole, so one line that was not
JSON made the whole file a transient error, downloaded again on every poll for ever, and three
100 MB answers took 1.9 GB. Here a line is at most ``cap`` bytes in memory (the interactive path's
response cap): a longer one is skipped, keeping only its first and last :data:`KEEP` bytes, where
its ``custom_id`` is; a line that is not a JSON object is reported with its number and, when its
text names one, its custom id — the caller fails that request, not the batch.
"""
from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from evaljobs.network.http_client import httpx

#: Bytes kept from each end of a line too long or too broken to parse (to find its custom id).
KEEP = 64 * 1024
#: Bytes read from the network, and from the temporary file, at a time.
CHUNK = 1 << 20
_CUSTOM_ID = re.compile(rb'"custom_id"\s*:\s*"((?:[^"\\\n]|\\.){1,256})"')


@dataclass(frozen=True)
class Line:
    """One line of a result file: its JSON object, or why there is none."""

    number: int
    data: dict[str, Any] | None = field(default=None, repr=False)
    #: Why ``data`` is None (``not JSON``, ``… bytes, over the … byte cap``); empty when read.
    problem: str = ""
    #: For an unreadable line: the custom id its text names, if it names one.
    custom_id: str | None = None
    #: For a line over the cap: its size in bytes.
    size: int = 0


def spool(response: httpx.Response) -> IO[bytes]:
    """The body of a streamed ``response`` in a temporary file (deleted when closed), rewound."""
    file = tempfile.TemporaryFile(prefix="evaljobs-batch-")
    try:
        for chunk in response.iter_bytes(CHUNK):
            file.write(chunk)
        file.seek(0)
    except BaseException:
        file.close()
        raise
    return file


def read_lines(file: IO[bytes], cap: int) -> Iterator[Line]:
    """Every non-blank line of ``file``, parsed, holding at most ``cap`` bytes of one line at a time."""
    number = 0
    line = bytearray()
    size = 0  # of the current line when over the cap (then ``line`` holds its head)
    tail = b""
    while True:
        chunk = file.read(CHUNK)
        start = 0
        while start < len(chunk):
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            if size:
                size += len(piece)
                tail = (tail + piece)[-KEEP:]
            else:
                line += piece
                if len(line) > cap:
                    size, tail = len(line), bytes(line[-KEEP:])
                    del line[KEEP:]
            if end < 0:
                break
            number += 1
            found = _finish(number, line, size, tail, cap)
            if found is not None:
                yield found
            line, size, tail = bytearray(), 0, b""
            start = end + 1
        if not chunk:
            break
    if line or size:
        found = _finish(number + 1, line, size, tail, cap)
        if found is not None:
            yield found


def _finish(number: int, line: bytearray, size: int, tail: bytes, cap: int) -> Line | None:
    if size:
        return Line(number, problem=f"{size} bytes, over the {cap}-byte response cap",
                    custom_id=_custom_id(bytes(line)) or _custom_id(tail), size=size)
    if not line.strip():
        return None
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        return Line(number, problem="not JSON", custom_id=_custom_id(bytes(line[:KEEP]))
                    or _custom_id(bytes(line[-KEEP:])))
    if not isinstance(data, dict):
        return Line(number, problem=f"not a JSON object ({type(data).__name__})")
    return Line(number, data)


def _custom_id(text: bytes) -> str | None:
    """The first ``"custom_id": "…"`` of ``text`` (a top-level key is not escaped; one quoted inside an
    answer's text is, so it never matches)."""
    match = _CUSTOM_ID.search(text)
    if match is None:
        return None
    try:
        value = json.loads(b'"' + match.group(1) + b'"')
    except ValueError:
        return None
    return value if isinstance(value, str) else None


__all__ = ["CHUNK", "KEEP", "Line", "read_lines", "spool"]
