"""A lean HTTP/1.1 client on asyncio streams, for the requests hetflow makes to a vLLM server: the engine's
reads of ``/metrics`` and ``/tokenize``, and the streamed ``/v1/completions`` of an engine and of a caller
that streams from the model server an engine granted it.

Why not httpx: measured on a live door (issue 63, docs/benchmarks.md), 37% of an engine service's samples
were in httpx reading ``/metrics`` (about 0.5 ms of CPU a read, against 0.02 ms on a kept-alive asyncio
stream), and httpx's per-chunk machinery sits under every streamed token. This client does what those
requests need and nothing else: connections kept alive per origin (RFC 9112 section 9.3), bodies framed
by ``Content-Length``, chunked transfer coding or the connection's close (RFC 9112 section 6.3), a
timeout per connect and per read, and a request on a kept-alive connection the server had closed sent
once more on a new one (nothing of a reply had come, so the server did not take it; RFC 9112 section
9.3.1). A reply left before its end closes its connection: that is how a caller aborts a vLLM stream.
No redirects, cookies, proxies or compression: a vLLM server sends none of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Mapping
from urllib.parse import urlsplit

READ_BYTES = 65536
MAX_HEAD_BYTES = 65536
MAX_CHUNK_BYTES = 16 * 1024 * 1024


class HttpError(Exception):
    """Any failure of a request made with ``Http1Client``."""


class HttpStatusError(HttpError):
    """``Response.raise_for_status``: the server answered, with a status other than 2xx."""


class HttpTransportError(HttpError):
    """The exchange failed below HTTP's statuses: connecting, a timeout, a closed connection, bad framing."""


class HttpConnectError(HttpTransportError):
    """No connection to the server (refused, unresolvable, or not within the connect timeout): nothing
    of the request was sent."""


class HttpTimeout(HttpTransportError):
    """No byte of the reply within the read timeout (or the request not written within it)."""


class HttpConnectTimeout(HttpTimeout):
    """No connection within the connect timeout: the server may be reachable but slow to accept, so it is
    not taken for unreachable (``HttpConnectError``)."""


class HttpInvalidRequest(HttpError, ValueError):
    """A request this client cannot send (not an http(s) URL, a header that would break the framing)."""


class HttpClosed(HttpTransportError):
    """The connection closed or reset before the reply's end."""


class HttpProtocolError(HttpTransportError):
    """The reply is not HTTP/1.1 as RFC 9112 frames it."""


@dataclass(frozen=True)
class Origin:
    scheme: str
    host: str
    port: int

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        return self.host if self.port == default else f"{self.host}:{self.port}"


def split_url(url: str) -> tuple[Origin, str]:
    """An absolute ``http``/``https`` URL as its origin and its request target (path and query)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HttpInvalidRequest(f"not an http(s) URL: {url!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Origin(parts.scheme, parts.hostname, port), target


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.idle_since_s = 0.0

    def usable(self, now_s: float, keepalive_expiry_s: float) -> bool:
        return (not self.writer.is_closing() and not self.reader.at_eof()
                and now_s - self.idle_since_s < keepalive_expiry_s)

    def close(self) -> None:
        self.writer.close()


@dataclass
class Reply:
    """A reply's status and headers (names in lower case), its body read by ``iter_bytes`` or ``read``."""
    status: int
    headers: dict[str, str]
    _body: AsyncIterator[bytes] = field(repr=False)
    complete: bool = False
    """The body was read to its end (the connection may then serve another request)."""

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        """The body as it arrives: what one network read brought, its framing removed."""
        async for data in self._body:
            yield data
        self.complete = True

    async def read(self) -> bytes:
        return b"".join([data async for data in self.iter_bytes()])


@dataclass(frozen=True)
class Response:
    """A reply read whole (``Http1Client.request``)."""
    status: int
    headers: dict[str, str]
    content: bytes

    def json(self) -> Any:
        return json.loads(self.content)

    def raise_for_status(self) -> None:
        if not 200 <= self.status < 300:
            raise HttpStatusError(f"HTTP {self.status}: {self.content[:200].decode(errors='replace')}")


class Http1Client:
    """Requests to any number of origins, their connections kept alive per origin.

    ``read_timeout_s`` bounds each wait for the server's bytes (None: no bound), as a streamed reply's
    tokens can be far apart only as long as the caller lets them be; ``connect_timeout_s`` bounds opening
    a connection. At most ``max_idle_per_origin`` idle connections are kept per origin, none longer than
    ``keepalive_expiry_s`` (below a vLLM server's own keep-alive of 5 s, so the server seldom closes one
    first)."""

    def __init__(self, *, read_timeout_s: float | None, connect_timeout_s: float = 10.0,
                 max_idle_per_origin: int = 64, keepalive_expiry_s: float = 4.0,
                 max_connections_per_origin: int | None = None) -> None:
        """``max_connections_per_origin``: requests in progress to one origin at most (the rest wait their
        turn); None: no bound."""
        self.read_timeout_s, self.connect_timeout_s = read_timeout_s, connect_timeout_s
        self.max_idle_per_origin, self.keepalive_expiry_s = max_idle_per_origin, keepalive_expiry_s
        self.max_connections_per_origin = max_connections_per_origin
        self._idle: dict[Origin, list[_Connection]] = {}
        self._slots: dict[Origin, asyncio.Semaphore] = {}
        self.connections_opened = 0
        """Connections this client opened (the rest of its requests went on kept-alive ones)."""

    async def request(self, method: str, url: str, *, body: bytes = b"", headers: Mapping[str, str] | None = None,
                      timeout_s: float | None = None) -> Response:
        """The reply read whole; ``timeout_s`` (else ``read_timeout_s``) bounds each read."""
        async with self.stream(method, url, body=body, headers=headers, timeout_s=timeout_s) as reply:
            return Response(reply.status, reply.headers, await reply.read())

    async def get(self, url: str, *, timeout_s: float | None = None) -> Response:
        return await self.request("GET", url, timeout_s=timeout_s)

    async def post_json(self, url: str, payload: Any, *, timeout_s: float | None = None) -> Response:
        return await self.request("POST", url, body=json.dumps(payload).encode(),
                                  headers={"content-type": "application/json"}, timeout_s=timeout_s)

    @asynccontextmanager
    async def stream(self, method: str, url: str, *, body: bytes = b"", headers: Mapping[str, str] | None = None,
                     timeout_s: float | None = None) -> AsyncIterator[Reply]:
        """The reply once its head has come, its body to be read; leaving before the body's end closes
        the connection (the server sees its client go)."""
        origin, target = split_url(url)
        read_timeout_s = timeout_s if timeout_s is not None else self.read_timeout_s
        head = _request_head(method, target, origin, body, headers or {})
        async with self._slot(origin):
            conn, reply = await self._exchange(origin, head + body, method, read_timeout_s)
            try:
                yield reply
            finally:
                if reply.complete and reply.headers.get("connection", "").lower() != "close":
                    self._keep(origin, conn)
                else:
                    conn.close()

    def _slot(self, origin: Origin) -> contextlib.AbstractAsyncContextManager[Any]:
        if self.max_connections_per_origin is None:
            return contextlib.nullcontext()
        return self._slots.setdefault(origin, asyncio.Semaphore(self.max_connections_per_origin))

    async def aclose(self) -> None:
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()

    async def _exchange(self, origin: Origin, request: bytes, method: str, read_timeout_s: float | None
                        ) -> tuple[_Connection, Reply]:
        """Send on a kept-alive connection if one is usable, else a new one; a kept-alive connection the
        server had closed (nothing of a reply came) is replaced by a new one, once."""
        conn = self._take(origin)
        if conn is not None:
            try:
                return conn, await self._send(conn, request, method, read_timeout_s)
            except _Stale:
                conn.close()
            except BaseException:  # a timeout, bad framing or the caller's cancel: the connection's state is lost
                conn.close()
                raise
        conn = await self._connect(origin)
        try:
            return conn, await self._send(conn, request, method, read_timeout_s)
        except _Stale as exc:
            conn.close()
            raise HttpClosed(f"{origin.host}:{origin.port} closed the connection before replying") from exc
        except BaseException:
            conn.close()
            raise

    async def _send(self, conn: _Connection, request: bytes, method: str, read_timeout_s: float | None) -> Reply:
        try:
            conn.writer.write(request)
            await _timed(conn.writer.drain(), read_timeout_s)
        except (ConnectionResetError, BrokenPipeError) as exc:  # the server had closed it: nothing was read
            raise _Stale from exc
        except OSError as exc:
            raise HttpClosed(f"{type(exc).__name__}: {exc}") from exc
        status, headers = _parse_head(await _timed(_read_head(conn.reader, first=True), read_timeout_s))
        while 100 <= status < 200:  # an interim reply (RFC 9110 15.2); the final one follows
            status, headers = _parse_head(await _timed(_read_head(conn.reader), read_timeout_s))
        return Reply(status, headers, _body(conn.reader, method, status, headers, read_timeout_s))

    async def _connect(self, origin: Origin) -> _Connection:
        context = ssl.create_default_context() if origin.scheme == "https" else None
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                reader, writer = await asyncio.open_connection(origin.host, origin.port, ssl=context,
                                                               limit=MAX_HEAD_BYTES)
        except TimeoutError as exc:
            raise HttpConnectTimeout(f"no connection to {origin.host}:{origin.port} within "
                                     f"{self.connect_timeout_s:.0f}s") from exc
        except OSError as exc:
            raise HttpConnectError(f"no connection to {origin.host}:{origin.port}: {exc}") from exc
        self.connections_opened += 1
        return _Connection(reader, writer)

    def _take(self, origin: Origin) -> _Connection | None:
        conns, now_s = self._idle.get(origin), time.monotonic()
        while conns:
            conn = conns.pop()
            if conn.usable(now_s, self.keepalive_expiry_s):
                return conn
            conn.close()
        return None

    def _keep(self, origin: Origin, conn: _Connection) -> None:
        conns = self._idle.setdefault(origin, [])
        if len(conns) >= self.max_idle_per_origin or conn.writer.is_closing():
            conn.close()
            return
        conn.idle_since_s = time.monotonic()
        conns.append(conn)


class _Stale(Exception):
    """A connection that ended before any byte of the reply: the request can go again on a new one."""


def _request_head(method: str, target: str, origin: Origin, body: bytes, headers: Mapping[str, str]) -> bytes:
    """The request line and headers; a header that would break the framing (a line break, or a character
    HTTP/1.1's headers cannot carry) is refused, not sent (RFC 9110 5.5)."""
    lines = [f"{method} {target} HTTP/1.1", f"host: {origin.host_header}"]
    if body or method in ("POST", "PUT", "PATCH"):
        lines.append(f"content-length: {len(body)}")
    for name, value in headers.items():
        if any(c in f"{name}{value}" for c in "\r\n\0") or not name or ":" in name:
            raise HttpInvalidRequest(f"header {name!r} cannot be sent: {value[:80]!r}")
        lines.append(f"{name}: {value}")
    try:
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    except UnicodeEncodeError as exc:
        raise HttpInvalidRequest(f"a request header or target is not latin-1: {exc}") from exc


async def _read_head(reader: asyncio.StreamReader, first: bool = False) -> bytes:
    """A reply's head. ``first``: the first reply to the request, whose loss before any byte of it came
    (the connection closed or reset) means the server did not take the request (``_Stale``)."""
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if first and not exc.partial:
            raise _Stale from exc
        raise HttpClosed("the connection closed within the reply's head") from exc
    except ConnectionResetError as exc:
        if first and not _buffered(reader):
            raise _Stale from exc
        raise HttpClosed("the connection was reset within the reply's head") from exc
    except asyncio.LimitOverrunError as exc:
        raise HttpProtocolError(f"a reply head over {MAX_HEAD_BYTES} bytes") from exc
    except OSError as exc:
        raise HttpClosed(f"{type(exc).__name__}: {exc}") from exc


def _buffered(reader: asyncio.StreamReader) -> bool:
    """Whether any byte of the reply has come: asyncio's reader keeps what it has not handed out in its
    buffer (CPython's ``StreamReader._buffer``; no public view of it)."""
    return bool(getattr(reader, "_buffer", b"x"))


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    status_line, *fields = head.decode("latin-1").split("\r\n")
    version, _, rest = status_line.partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/1.") or not code.isdigit():
        raise HttpProtocolError(f"not an HTTP/1.1 status line: {status_line[:80]!r}")
    headers: dict[str, str] = {}
    for line in fields:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise HttpProtocolError(f"a header line without a colon: {line[:80]!r}")
        name = name.strip().lower()
        headers[name] = f"{headers[name]}, {value.strip()}" if name in headers else value.strip()
    return int(code), headers


async def _timed(read: Any, timeout_s: float | None) -> Any:
    if timeout_s is None:
        return await read
    try:
        async with asyncio.timeout(timeout_s):
            return await read
    except TimeoutError as exc:
        raise HttpTimeout(f"no reply within {timeout_s:g}s") from exc


def _body(reader: asyncio.StreamReader, method: str, status: int, headers: Mapping[str, str],
          timeout_s: float | None) -> AsyncIterator[bytes]:
    """The body as RFC 9112 section 6.3 frames it."""
    if method == "HEAD" or status in (204, 304):
        return _empty()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return _chunked(reader, timeout_s)
    if "content-length" in headers:
        try:
            length = int(headers["content-length"])
        except ValueError:
            raise HttpProtocolError(f"content-length {headers['content-length']!r}") from None
        return _sized(reader, length, timeout_s)
    return _until_close(reader, timeout_s)


async def _empty() -> AsyncIterator[bytes]:
    nothing: tuple[bytes, ...] = ()
    for data in nothing:
        yield data


async def _read(reader: asyncio.StreamReader, size: int, timeout_s: float | None) -> bytes:
    try:
        data: bytes = await _timed(reader.read(size), timeout_s)
    except OSError as exc:
        raise HttpClosed(f"{type(exc).__name__}: {exc}") from exc
    return data


async def _sized(reader: asyncio.StreamReader, length: int, timeout_s: float | None) -> AsyncIterator[bytes]:
    left = length
    while left > 0:
        data = await _read(reader, min(left, READ_BYTES), timeout_s)
        if not data:
            raise HttpClosed(f"the connection closed {left} bytes before the reply's end")
        left -= len(data)
        yield data


async def _until_close(reader: asyncio.StreamReader, timeout_s: float | None) -> AsyncIterator[bytes]:
    while data := await _read(reader, READ_BYTES, timeout_s):
        yield data


async def _chunked(reader: asyncio.StreamReader, timeout_s: float | None) -> AsyncIterator[bytes]:
    """Chunked transfer coding (RFC 9112 section 7.1): every chunk complete in what has come is yielded
    together, so the events a server wrote at once go on as one piece."""
    pending = b""
    while True:
        parts, at, ended = _whole_chunks(pending)
        pending = pending[at:]
        if parts:
            yield b"".join(parts)
        if ended:
            if pending:
                raise HttpProtocolError("bytes after the chunked body's end")
            return
        data = await _read(reader, READ_BYTES, timeout_s)
        if not data:
            raise HttpClosed("the connection closed within a chunked reply")
        pending += data


def _whole_chunks(buffer: bytes) -> tuple[list[bytes], int, bool]:
    """The complete chunks at the buffer's start, where they end, and whether the last chunk (size 0,
    trailers, an empty line) was among them."""
    parts: list[bytes] = []
    at = 0
    while (line_end := buffer.find(b"\r\n", at)) >= 0:
        size_field = buffer[at:line_end].split(b";", 1)[0].strip()
        try:
            size = int(size_field, 16)
        except ValueError:
            raise HttpProtocolError(f"a chunk size {size_field[:20]!r}") from None
        if size > MAX_CHUNK_BYTES:
            raise HttpProtocolError(f"a chunk of {size} bytes")
        if size == 0:
            end = _trailers_end(buffer, line_end + 2)
            return (parts, end, True) if end >= 0 else (parts, at, False)
        data_end = line_end + 2 + size
        if len(buffer) < data_end + 2:
            break
        if buffer[data_end:data_end + 2] != b"\r\n":
            raise HttpProtocolError("a chunk not ended by CRLF")
        parts.append(buffer[line_end + 2:data_end])
        at = data_end + 2
    if len(buffer) - at > MAX_HEAD_BYTES and buffer.find(b"\r\n", at) < 0:
        raise HttpProtocolError("a chunk size line without its end")
    return parts, at, False


def _trailers_end(buffer: bytes, start: int) -> int:
    """Where the trailer section that starts at ``start`` ends (its empty line's end), or -1 if it has not
    all come."""
    if buffer.startswith(b"\r\n", start):
        return start + 2
    end = buffer.find(b"\r\n\r\n", start)
    return end + 4 if end >= 0 else -1
