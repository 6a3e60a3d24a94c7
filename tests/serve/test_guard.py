"""``_guard._OneWrite``: a response's head and body leave in one write, and nothing is
held past the event loop's turn or a close. (The guard's limits are tested against a real
server in test_hostile.py.)"""

from __future__ import annotations

import asyncio
from typing import Any

from reprise.serve._guard import _OneWrite


class _Transport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else None


class _Cycle:
    """What _OneWrite reads of uvicorn's RequestResponseCycle (set before the head's write)."""

    def __init__(self) -> None:
        self.response_started = False
        self.expected_content_length = 0
        self.chunked_encoding: bool | None = None
        self.scope = {"method": "POST"}

    def start(self, length: int = 2, *, chunked: bool = False, method: str = "POST") -> None:
        self.response_started = True
        self.expected_content_length, self.chunked_encoding = length, chunked
        self.scope["method"] = method


def _pair() -> tuple[_OneWrite, _Transport, _Cycle]:
    transport, cycle = _Transport(), _Cycle()
    return _OneWrite(cycle, transport), transport, cycle  # type: ignore[arg-type]


HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"


def test_head_and_body_leave_in_one_write() -> None:
    async def main() -> None:
        one, transport, cycle = _pair()
        cycle.start()  # uvicorn sets its state, then writes the head
        one.write(bytearray(HEAD))  # held (a copy: the caller may reuse its buffer)
        assert transport.writes == []
        one.write(b"{}")
        assert transport.writes == [HEAD + b"{}"]
        one.write(b"more")  # anything after goes straight through
        assert transport.writes[-1] == b"more"
    asyncio.run(main())


def test_a_100_continue_is_not_held() -> None:
    async def main() -> None:
        one, transport, cycle = _pair()
        one.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # written while no response started
        assert transport.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]
        cycle.start()
        one.write(HEAD)
        one.write(b"{}")
        assert transport.writes[1:] == [HEAD + b"{}"]
    asyncio.run(main())


def test_a_head_with_no_body_to_follow_is_sent_at_once() -> None:
    async def main() -> None:
        for kwargs in ({"method": "HEAD"}, {"length": 0}, {"length": 0, "chunked": True}):
            one, transport, cycle = _pair()
            cycle.start(**kwargs)  # type: ignore[arg-type]
            one.write(HEAD)
            assert transport.writes == [HEAD], kwargs
    asyncio.run(main())


def test_a_close_sends_what_is_held_first() -> None:
    async def main() -> None:
        one, transport, cycle = _pair()
        cycle.start()
        one.write(HEAD)  # the application then fails before its body: uvicorn closes
        one.close()
        assert transport.writes == [HEAD] and transport.closed
        assert one.is_closing() and one.get_extra_info("peername") == ("127.0.0.1", 1)
    asyncio.run(main())


def test_a_cycle_and_its_proxy_are_freed_by_reference_counting() -> None:
    """The cycle holds the proxy as its transport; the proxy's reference back is weak, so
    a finished request's cycle is freed at once, not left for the cyclic collector
    (which, under load, made a full pass every 0.4 s take ~3 ms)."""
    import gc
    import weakref

    gc.disable()
    try:
        transport, cycle = _Transport(), _Cycle()
        cycle.transport = _OneWrite(cycle, transport)  # type: ignore[attr-defined,arg-type]
        gone = weakref.ref(cycle)
        cycle.start()
        cycle.transport.write(HEAD)  # type: ignore[attr-defined]
        cycle.transport.write(b"{}")  # type: ignore[attr-defined]
        assert transport.writes == [HEAD + b"{}"]
        del cycle
        assert gone() is None
    finally:
        gc.enable()
