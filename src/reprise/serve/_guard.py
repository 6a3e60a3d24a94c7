"""Connection guard: uvicorn's httptools protocol with the three bounds it lacks.

uvicorn (0.54) with httptools bounds neither the size of a request head (httptools
concatenates a header value as it arrives, so a 100 MB header is read whole, in
quadratic time, before the application sees it) nor the time to receive it (its only
timer is the keep-alive one, armed after a response), nor the number of open
connections (``limit_concurrency`` answers 503 only once a request's head has arrived,
so half-open connections still pile up until file descriptors run out). Its h11
protocol can bound the head size, but answers 400 rather than 431 and is several times
slower per request. So this subclass adds, before anything reaches the parser or the
application:

* a head (request line + headers) larger than ``max_header_bytes`` gets 431;
* a head not received within ``header_timeout`` seconds gets 408 (a connection that
  sent nothing is just closed);
* a connection beyond ``max_connections`` gets 503 at once and is closed.

A refused connection's remaining input is read and dropped for a moment before closing,
so the client reads the answer instead of a connection reset.

It also sends each response's head and body in one write (:class:`_OneWrite`): uvicorn
writes the status line and headers, then the body, as two system calls and two TCP
segments. Joined, the ONNX MLP server of ``bench_onnx`` answered 3 % more single-row
requests/s at concurrency 32 loaded alone, and 6.5 % more with both variants loaded at
once (cores shared: each segment is a wake-up of the client; medians of 6 paired rounds).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from reprise.serve._settings import Settings

__all__ = ["guarded_protocol"]

_LINGER_S = 2.0  # how long a refused connection's input is drained before closing
_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large",
            503: b"Service Unavailable"}


def guarded_protocol(settings: Settings) -> type[asyncio.Protocol]:
    """The protocol class to give ``uvicorn.Config(http=...)``, bound to ``settings``."""
    return type("GuardedHttpToolsProtocol", (_Guarded,), {
        "max_header_bytes": settings.max_header_bytes,
        "header_timeout": settings.header_timeout,
        "max_connections": settings.max_connections})


def _answer(status: int, message: str) -> bytes:
    body = b'{"error":"%s"}' % message.encode()
    extra = b"retry-after: 1\r\n" if status == 503 else b""
    return (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"%sconnection: close\r\n\r\n%s" % (status, _REASONS[status], len(body), extra,
                                                 body))


class _Guarded(HttpToolsProtocol):
    max_header_bytes = 65536
    header_timeout = 10.0
    max_connections = 1000

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True  # waiting for (the rest of) a request line and headers
        self._head_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            self._refuse(503, "the server has too many open connections; retry later",
                         linger=False)
            return
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # draining a refused connection
        if self._in_head:
            room = self.max_header_bytes - self._head_bytes
            if len(data) > room:
                # feed only what the limit allows: if the head is still incomplete, refuse
                super().data_received(data[:room])
                if self._in_head and not self._refused:
                    self._refuse(431, f"the request line and headers exceed the server's "
                                 f"limit of {self.max_header_bytes} bytes")
                    return
                data = data[room:]
            else:
                self._head_bytes += len(data)
        # Bytes after a complete head (the body, or a pipelined request sharing this read)
        # are not counted: a pipelined head can overshoot by at most one read (256 kB).
        if data and not self._refused:
            super().data_received(data)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._head_timer is None:  # a keep-alive connection's next request
            self._arm()

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._disarm()
        before = self.cycle
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle is not before:  # a new request (not an upgrade)
            cycle.transport = _OneWrite(cycle, self.transport)  # type: ignore[assignment]

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head, self._head_bytes = True, 0

    def _arm(self) -> None:
        self._head_timer = self.loop.call_later(self.header_timeout, self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self._in_head or self.transport.is_closing():
            return
        if self._head_bytes == 0 and (self.cycle is None or self.cycle.response_complete):
            self.transport.close()  # idle since connecting: nothing to answer
            return
        self._refuse(408, f"the request line and headers did not arrive within "
                     f"{self.header_timeout:g} s")

    def _refuse(self, status: int, message: str, *, linger: bool = True) -> None:
        """Answer ``status`` and close; with ``linger``, first drop the client's remaining
        input for a moment so that it reads the answer rather than a reset."""
        self._refused = True
        self._disarm()
        self.transport.write(_answer(status, message))
        if status != 503:
            self.logger.warning("refused a request from %s: %d %s", _peer(self.client),
                                status, _REASONS[status].decode())
        if linger and self.transport.can_write_eof():
            self.transport.write_eof()
            self.loop.call_later(_LINGER_S, self.transport.close)
        else:
            self.transport.close()


class _OneWrite:
    """The transport as one response cycle writes to it: the response's head (the status
    line and headers, uvicorn's first write of a response) is held until the body's first
    write, and both leave in one ``write``: one system call and one TCP segment for a
    small answer, not two. A head is held only when a body must follow it (its
    content-length is above 0 and the request is not HEAD; a chunked answer's head is
    sent at once), and is sent before a close (an application that failed after it);
    the rest of the transport's interface is the transport's own.

    The cycle is held by a weak reference: the cycle holds this proxy as its transport,
    and a strong reference back would make every request's cycle (its event, its
    buffers, its callbacks: seven containers) garbage that only the cyclic collector
    frees, not reference counting as soon as the request ends. Measured under ``wrk
    -c32`` (``bench/_gc_probe.py``), those cycles kept the collector's young passes
    promoting objects and put a full pass at ~3 ms, every 0.4 s."""

    __slots__ = ("_cycle", "_head_seen", "_held", "_transport")

    def __init__(self, cycle: Any, transport: asyncio.Transport) -> None:
        self._cycle: Callable[[], Any] = weakref.ref(cycle)
        self._transport = transport
        self._held: bytes | None = None
        self._head_seen = False

    def write(self, data: bytes) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held + data)
            return
        cycle = self._cycle()
        if not self._head_seen and cycle is not None and cycle.response_started:
            # the head ("100 Continue" is written while no response has started): held
            # only when a body must follow (a content-length, not a HEAD request), so it
            # never waits for anything but the application's own next write
            self._head_seen = True
            if cycle.expected_content_length > 0 and not cycle.chunked_encoding \
                    and cycle.scope["method"] != "HEAD":
                self._held = bytes(data)
                return
        self._transport.write(data)

    def close(self) -> None:
        """Send what is held (an application that failed after its head), then close."""
        held = self._held
        if held is not None:
            self._held = None
            if not self._transport.is_closing():
                self._transport.write(held)
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def _peer(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else "a client"
