"""HTTP/1.1 on asyncio streams: as much of it as the OpenAI-compatible API (http_api.py) needs, with bounds.

A request is a request line and headers (each line at most MAX_LINE bytes, at most MAX_HEADERS of them), then a
body of Content-Length bytes, which the handler reads when it wants it (`Connection.read_body`, bounded by the
handler; `Expect: 100-continue` answered then). A chunked request body is refused (411): the clients this serves
send a length. A response is a body of known length, or a stream of server-sent events in chunked transfer coding
(to an HTTP/1.0 client: unchunked, ended by closing). Connections are kept alive between requests until the client
closes, sends `Connection: close`, idles for IDLE_S, or its request's body was left unread.

While a handler answers (`Connection.watched`), the connection is watched: a client that closes it cancels the
answer (`ClientGone`), so a generation stops at its next step and frees its slot instead of writing into a dead
socket. A client that half-closes (shuts down its sending side) while it waits is taken as gone too: HTTP
clients do not, and a closed socket is what a client that gave up leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus

log = logging.getLogger(__name__)

MAX_LINE = 8192
MAX_HEADERS = 100
IDLE_S = 5.0  # a kept-alive connection with no new request for this long is closed
REQUEST_S = 30.0  # a request begun must arrive whole (head, then body) within this long
READ_AHEAD = 65536  # bytes a watched connection buffers ahead (a pipelined request), then it stops reading


class HttpError(Exception):
    """An answer other than 200, in the OpenAI error shape: {"error": {"message", "type", "param", "code"}}."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: tuple[tuple[str, str], ...] = (),
    ):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = headers

    def body(self) -> bytes:
        error = {"message": self.message, "type": self.type, "param": self.param, "code": self.code}
        return json.dumps({"error": error}).encode()


class ClientGone(Exception):
    """The client closed the connection while its request was being answered."""


@dataclass
class Request:
    method: str
    path: str
    query: str
    version: str
    headers: dict[str, str]  # names lower-cased
    length: int  # of the body (Content-Length)
    body_read: bool = field(default=False)

    @property
    def keep_alive(self) -> bool:
        connection = self.headers.get("connection", "").lower()
        return self.version == "HTTP/1.1" and "close" not in connection


class Connection:
    """One client connection. Its bytes are buffered here, so a watcher can read ahead while a response is made."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self.buffer = bytearray()
        self.eof = False
        self.request: Request | None = None
        self.started = False  # a response's head has been written
        self.chunked = False  # the response streams in chunks
        self.busy = False  # a request is being read or answered (not idle between requests)

    async def _fill(self) -> bool:
        data = await self.reader.read(READ_AHEAD)
        if not data:
            self.eof = True
            return False
        self.buffer += data
        return True

    async def _line(self) -> bytes:
        while (end := self.buffer.find(b"\n")) < 0:
            if len(self.buffer) > MAX_LINE:
                raise HttpError(431, f"a request line or header is longer than {MAX_LINE} bytes")
            if self.eof or not await self._fill():
                raise ConnectionError("the client closed the connection mid-request")
        if end > MAX_LINE:
            raise HttpError(431, f"a request line or header is longer than {MAX_LINE} bytes")
        line = bytes(self.buffer[:end]).rstrip(b"\r")
        del self.buffer[: end + 1]
        return line

    async def next_request(self) -> Request | None:
        """The next request's head; None when the client closed or idled between requests."""
        self.request, self.started, self.chunked = None, False, False
        if not self.buffer:
            try:
                async with asyncio.timeout(IDLE_S):
                    if self.eof or not await self._fill():
                        return None
            except TimeoutError:
                return None
        self.busy = True
        try:
            async with asyncio.timeout(REQUEST_S):
                self.request = await self._head()
        except TimeoutError:
            raise HttpError(408, f"the request's head did not arrive within {REQUEST_S:g} s") from None
        return self.request

    async def _head(self) -> Request:
        parts = (await self._line()).decode("latin-1").split(" ")
        if len(parts) != 3 or parts[2] not in ("HTTP/1.1", "HTTP/1.0") or not parts[1].startswith("/"):
            raise HttpError(400, "not an HTTP/1.1 request line (METHOD /path HTTP/1.1)")
        method, target, version = parts
        headers: dict[str, str] = {}
        while line := await self._line():
            if len(headers) >= MAX_HEADERS:
                raise HttpError(431, f"more than {MAX_HEADERS} headers")
            name, sep, value = line.decode("latin-1").partition(":")
            if not sep or not name or name != name.strip():
                raise HttpError(400, f"a malformed header line: {line[:80]!r}")
            name, value = name.lower(), value.strip()
            if name in headers and name == "content-length" and headers[name] != value:
                raise HttpError(400, "two different Content-Length headers")
            headers[name] = f"{headers[name]}, {value}" if name in headers and name != "content-length" else value
        if "transfer-encoding" in headers:
            raise HttpError(411, "a chunked request body is not supported: send the body with a Content-Length")
        length = headers.get("content-length", "0")
        if not length.isdigit():
            raise HttpError(400, f"Content-Length is not a number of bytes: {length[:40]!r}")
        path, _, query = target.partition("?")
        return Request(method, path, query, version, headers, int(length))

    async def read_body(self, max_bytes: int) -> bytes:
        """The request's body; 413 (and the connection closed after the answer) when it is longer than `max_bytes`."""
        request = self.request
        assert request is not None
        if request.length > max_bytes:
            raise HttpError(413, f"the body is {request.length:,} bytes; this server takes at most {max_bytes:,}")
        if request.length and request.headers.get("expect", "").lower() == "100-continue":
            self.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        try:
            async with asyncio.timeout(REQUEST_S):
                while len(self.buffer) < request.length:
                    if self.eof or not await self._fill():
                        raise ConnectionError("the client closed the connection mid-body")
        except TimeoutError:
            raise HttpError(408, f"the request's body did not arrive within {REQUEST_S:g} s") from None
        body = bytes(self.buffer[: request.length])
        del self.buffer[: request.length]
        request.body_read = True
        return body

    @property
    def closing(self) -> bool:
        """Whether the connection closes after this response."""
        request = self.request
        return request is None or not request.keep_alive or (request.length > 0 and not request.body_read)

    def _head_bytes(self, status: int, headers: list[tuple[str, str]]) -> bytes:
        lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}", *(f"{k}: {v}" for k, v in headers)]
        if self.closing:
            lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def respond(
        self, status: int, body: bytes, content_type: str = "application/json", headers: tuple = ()
    ) -> None:
        head = [("Content-Type", content_type), ("Content-Length", str(len(body))), *headers]
        self.started = True
        self.writer.write(self._head_bytes(status, head) + body)
        await self.writer.drain()

    async def respond_error(self, error: HttpError) -> None:
        await self.respond(error.status, error.body(), headers=error.headers)

    def start_events(self) -> None:
        """The head of a server-sent event stream, written without waiting (no await: see requests.busy_problem);
        the first event drains it."""
        self.chunked = self.request is not None and self.request.version == "HTTP/1.1"
        head = [("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache")]
        if self.chunked:
            head.append(("Transfer-Encoding", "chunked"))
        elif self.request is not None:
            self.request.headers["connection"] = "close"  # an HTTP/1.0 stream ends when the connection does
        self.started = True
        self.writer.write(self._head_bytes(200, head))

    async def event(self, data: str) -> None:
        payload = f"data: {data}\n\n".encode()
        if self.chunked:
            payload = f"{len(payload):x}\r\n".encode() + payload + b"\r\n"
        self.writer.write(payload)
        await self.writer.drain()

    async def end_events(self) -> None:
        await self.event("[DONE]")
        if self.chunked:
            self.writer.write(b"0\r\n\r\n")
            await self.writer.drain()

    @contextlib.asynccontextmanager
    async def watched(self):
        """While the block runs (after the request's body was read), read ahead of it: a client that closes the
        connection cancels the block, which then raises ClientGone."""
        task = asyncio.current_task()
        assert task is not None
        gone = False

        async def watch() -> None:
            nonlocal gone
            while len(self.buffer) < READ_AHEAD:
                if self.eof or not await self._fill():
                    gone = True
                    task.cancel()  # the block is awaiting (this runs only then): it gets the CancelledError
                    return

        watcher = asyncio.create_task(watch())
        try:
            yield
        except asyncio.CancelledError:
            if not gone:
                raise
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):  # let go of the reader before anyone reads again
                await watcher
        if gone:  # this watcher's cancel, caught above (or swallowed inside the block)
            task.uncancel()
            raise ClientGone()


Handler = Callable[[Request, Connection], Awaitable[None]]


async def serve_connection(conn: Connection, handle: Handler) -> None:
    """Answer the connection's requests with `handle` until it closes. A handler's HttpError is answered in the
    OpenAI error shape; any other failure is logged and answered 500, never with a traceback."""
    try:
        while True:
            conn.busy = False
            try:
                request = await conn.next_request()
                if request is None:
                    return
                await handle(request, conn)
            except HttpError as exc:
                if conn.started:
                    return
                await conn.respond_error(exc)
            except ClientGone:
                return
            except (ConnectionError, asyncio.IncompleteReadError):
                return
            except Exception as exc:
                log.exception("HTTP %s failed", conn.request.path if conn.request else "request")
                if conn.started:
                    return
                await conn.respond_error(HttpError(500, f"{type(exc).__name__}: {exc}", type="server_error"))
            if conn.closing:
                return
    except ConnectionError:
        pass
    finally:
        conn.writer.close()
