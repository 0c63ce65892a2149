"""HTTP/1.1 plumbing for the simulated provider: read a request, write a response, reset a connection."""
from __future__ import annotations

import asyncio
import json
import socket
import struct
from typing import Any, NamedTuple

MAX_REQUEST_BYTES = 64 * 1024 * 1024

REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
            405: "Method Not Allowed", 408: "Request Timeout", 409: "Conflict", 411: "Length Required",
            413: "Payload Too Large", 422: "Unprocessable Entity", 429: "Too Many Requests",
            500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable",
            504: "Gateway Timeout"}


class Request(NamedTuple):
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    keep_alive: bool



async def read_request(reader: asyncio.StreamReader) -> Request | int | None:
    """The next request on the connection; None at EOF; an HTTP status for an unusable request."""
    line = await reader.readline()
    while line in (b"\r\n", b"\n"):
        line = await reader.readline()
    if not line:
        return None
    parts = line.decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return 400
    method, target, version = parts
    headers: dict[str, str] = {}
    while True:
        raw = await reader.readline()
        if raw in (b"\r\n", b"\n", b""):
            break
        name, _, value = raw.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = await _read_chunked(reader)
        if body is None:
            return 413
    else:
        length_text = headers.get("content-length", "0") or "0"
        if not length_text.isdigit():
            return 400
        length = int(length_text)
        if length > MAX_REQUEST_BYTES:
            return 413
        body = await reader.readexactly(length) if length else b""
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    return Request(method.upper(), target, headers, body, keep_alive)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes | None:
    chunks: list[bytes] = []
    total = 0
    while True:
        size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
        if size == 0:
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass
            return b"".join(chunks)
        total += size
        if total > MAX_REQUEST_BYTES:
            return None
        chunks.append(await reader.readexactly(size))
        await reader.readexactly(2)


def head(status: int, length: int, headers: dict[str, str], *, keep_alive: bool) -> bytes:
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}", f"content-length: {length}",
             f"connection: {'keep-alive' if keep_alive else 'close'}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def send(writer: asyncio.StreamWriter, status: int, body: bytes, *,
                headers: dict[str, str] | None = None, keep_alive: bool = True) -> None:
    all_headers = {"content-type": "application/json"}
    all_headers.update(headers or {})
    writer.write(head(status, len(body), all_headers, keep_alive=keep_alive) + body)
    await writer.drain()


async def send_json(writer: asyncio.StreamWriter, status: int, data: Any, *,
                     headers: dict[str, str] | None = None, keep_alive: bool = True) -> None:
    await send(writer, status, json.dumps(data).encode(), headers=headers, keep_alive=keep_alive)


def reset_connection(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP RST (SO_LINGER 0), like a crashed upstream, instead of a polite FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()

