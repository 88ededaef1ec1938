"""HTTP/1.1 over a plain TCP socket: the part of `http.client` that `agent.client.wire.KeepAliveWire` uses.

`http.client` imports `email` (its header parser) and `ssl` when it is
imported, which cost a `leasehold` call more CPU than its own work (issue 34,
SPEC §24: a CLI call ≤ 150 ms). A call to an `http://` server needs neither:
this connection sends one request and reads one answer at a time (no
pipelining), with the same request `http.client` sends (`Host`,
`Accept-Encoding: identity`, the caller's headers, `Content-Length` for a
body) and the same reading of the answer (a `Content-Length` body, a chunked
one, or one read to the end of the stream, which then closes the connection).
`https://` still goes through `http.client` (`agent.client.wire`).

Failures raise what `http.client` would raise for them: `RemoteDisconnected`
(a `ConnectionResetError`) when the server closed the connection without an
answer, `OSError` (timeouts among them) from the socket, and
`ProtocolError` for an answer that is not HTTP/1.x or stops short.
"""

from __future__ import annotations

import socket
from io import BufferedReader

MAX_LINE = 65536  # as http.client: a status or header line longer than this is not an answer
MAX_HEADERS = 100


class ProtocolError(Exception):
    """The server's answer is not HTTP/1.x, or stopped short (http.client's `HTTPException`s)."""


class RemoteDisconnected(ConnectionResetError):
    """The server closed the connection without answering (a kept connection it had already closed)."""


class Response:
    """One answer, read whole: `status`, the body (`read()`), and whether the server closes the connection."""

    def __init__(self, status: int, body: bytes, will_close: bool) -> None:
        self.status = status
        self.will_close = will_close
        self._body = body

    def read(self) -> bytes:
        return self._body


class PlainConnection:
    """One HTTP/1.1 connection to `host:port`, opened by `connect()` (`sock` is None until then and after close)."""

    def __init__(self, host: str, port: int | None, *, timeout: float) -> None:
        self.host = host
        self.port = port or 80
        self.timeout = timeout
        self.sock: socket.socket | None = None
        shown = f"[{host}]" if ":" in host else host  # an IPv6 literal, as http.client writes it
        self._host_header = shown if self.port == 80 else f"{shown}:{self.port}"
        self._method = ""

    def connect(self) -> None:
        self.sock = socket.create_connection((self.host, self.port), self.timeout)

    def close(self) -> None:
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()

    def request(self, method: str, target: str, *, body: bytes | None, headers: dict[str, str]) -> None:
        """Send the request (connecting first if need be); a header value with a line break is refused."""
        if self.sock is None:
            self.connect()
        assert self.sock is not None
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self._host_header}", "Accept-Encoding: identity"]
        for name, value in headers.items():
            if "\r" in value or "\n" in value or "\r" in name or "\n" in name or ":" in name:
                raise ValueError(f"Invalid header {name!r}: {value!r}")
            lines.append(f"{name}: {value}")
        if body is not None and not any(name.lower() == "content-length" for name in headers):
            lines.append(f"Content-Length: {len(body)}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        self.sock.sendall(head + body if body else head)
        self._method = method

    def getresponse(self) -> Response:
        """Read the answer to the request just sent."""
        assert self.sock is not None
        reader = self.sock.makefile("rb")
        try:
            while True:
                version, status = _status_line(reader)
                headers = _headers(reader)
                if status != 100:  # an interim "100 Continue" is skipped, as http.client does
                    break
            connection = headers.get("connection", "").lower()
            will_close = connection == "close" or (version == "HTTP/1.0" and connection != "keep-alive")
            if status in (204, 304) or 100 <= status < 200 or self._method == "HEAD":
                return Response(status, b"", will_close)
            if headers.get("transfer-encoding", "").lower() == "chunked":
                return Response(status, _chunked(reader), will_close)
            length = headers.get("content-length")
            if length is None:
                return Response(status, reader.read(), True)  # to the end of the stream
            try:
                expected = int(length)
            except ValueError:
                raise ProtocolError(f"bad Content-Length {length!r}") from None
            body = reader.read(expected)
            if len(body) < expected:
                raise ProtocolError(f"incomplete answer: {len(body)} of {expected} bytes")
            return Response(status, body, will_close)
        finally:
            reader.close()  # the socket stays open: the file was one view of it


def _line(reader: BufferedReader) -> bytes:
    line = reader.readline(MAX_LINE + 1)
    if len(line) > MAX_LINE:
        raise ProtocolError("line too long")
    return line


def _status_line(reader: BufferedReader) -> tuple[str, int]:
    line = _line(reader)
    if not line:
        raise RemoteDisconnected("Remote end closed connection without response")
    version, _, rest = line.decode("iso-8859-1").rstrip("\r\n").partition(" ")
    code = rest.partition(" ")[0]
    if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit():
        raise ProtocolError(f"bad status line {line!r}")
    return version, int(code)


def _headers(reader: BufferedReader) -> dict[str, str]:
    """The answer's headers, by lower-case name (a repeated one keeps its last value)."""
    headers: dict[str, str] = {}
    for _ in range(MAX_HEADERS + 1):
        line = _line(reader)
        if line in (b"\r\n", b"\n", b""):
            return headers
        name, colon, value = line.decode("iso-8859-1").partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    raise ProtocolError(f"more than {MAX_HEADERS} headers")


def _chunked(reader: BufferedReader) -> bytes:
    parts: list[bytes] = []
    while True:
        size_line = _line(reader).split(b";", 1)[0].strip()
        try:
            size = int(size_line, 16)
        except ValueError:
            raise ProtocolError(f"bad chunk size {size_line!r}") from None
        if size == 0:
            _headers(reader)  # the trailer, up to its blank line
            return b"".join(parts)
        chunk = reader.read(size)
        if len(chunk) < size:
            raise ProtocolError("incomplete chunk")
        parts.append(chunk)
        _line(reader)  # the CRLF after the chunk
