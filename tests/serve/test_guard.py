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
    response_started = False


def _pair(loop: asyncio.AbstractEventLoop) -> tuple[_OneWrite, _Transport, _Cycle]:
    transport, cycle = _Transport(), _Cycle()
    return _OneWrite(cycle, transport, loop), transport, cycle  # type: ignore[arg-type]


HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"


def test_head_and_body_leave_in_one_write() -> None:
    async def main() -> None:
        one, transport, cycle = _pair(asyncio.get_running_loop())
        cycle.response_started = True  # uvicorn sets it before writing the head
        one.write(bytearray(HEAD))  # held (a copy: the caller may reuse its buffer)
        assert transport.writes == []
        one.write(b"{}")
        assert transport.writes == [HEAD + b"{}"]
        await asyncio.sleep(0)  # the loop's turn: nothing left to send
        assert transport.writes == [HEAD + b"{}"]
        one.write(b"later chunk")  # a streaming body's next chunks go straight through
        assert transport.writes[-1] == b"later chunk"
    asyncio.run(main())


def test_a_100_continue_is_not_held() -> None:
    async def main() -> None:
        one, transport, cycle = _pair(asyncio.get_running_loop())
        one.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # written while no response started
        assert transport.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]
        cycle.response_started = True
        one.write(HEAD)
        one.write(b"{}")
        assert transport.writes[1:] == [HEAD + b"{}"]
    asyncio.run(main())


def test_a_head_without_a_body_leaves_at_the_loops_next_turn_or_before_a_close() -> None:
    async def main() -> None:
        one, transport, cycle = _pair(asyncio.get_running_loop())
        cycle.response_started = True
        one.write(HEAD)  # a HEAD request's answer, or a stream whose first chunk is late
        await asyncio.sleep(0)
        assert transport.writes == [HEAD]
        one2, transport2, cycle2 = _pair(asyncio.get_running_loop())
        cycle2.response_started = True
        one2.write(HEAD)
        one2.close()  # connection: close right after the head
        assert transport2.writes == [HEAD] and transport2.closed
        await asyncio.sleep(0)  # the scheduled flush finds nothing held
        assert transport2.writes == [HEAD]
        assert one2.is_closing() and one2.get_extra_info("peername") == ("127.0.0.1", 1)
    asyncio.run(main())
