"""Verifying the audit log: every event's hash, and the chain that links them.

Each event's hash covers its sequence number, time, actor, action, subject,
payload and the previous event's hash (:func:`reprise.core._types.audit_hash`).
Walking the log in sequence order then tells:

* **edited** — an event whose fields no longer give its stored hash;
* **deleted** — a gap in the sequence numbers;
* **reordered** — an event chained onto another event than the one before it;
* **rehashed** — an event whose hash was recomputed after an edit: it checks
  out alone, but the next event does not chain onto it.

Removing the newest events leaves a shorter log that is consistent in itself;
to catch that, keep the head hash that ``reprise audit verify`` prints somewhere
else and pass it back with ``--expect-head``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from reprise.core._types import GENESIS_HASH, AuditEvent, audit_hash

__all__ = ["AuditProblem", "AuditReport", "verify_events"]


@dataclass(frozen=True)
class AuditProblem:
    seq: int
    kind: str  # edited | deleted | reordered | rehashed | head
    message: str


@dataclass
class AuditReport:
    events: int
    head: str
    problems: list[AuditProblem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "events": self.events, "head": self.head,
                "problems": [p.__dict__ for p in self.problems]}


def verify_events(events: Sequence[AuditEvent], *, expect_head: str | None = None
                  ) -> AuditReport:
    """Check ``events`` (in sequence order); see the module docstring."""
    problems: list[AuditProblem] = []
    by_hash = {e.hash: e.seq for e in events}
    prev: AuditEvent | None = None
    for e in events:
        expected_seq = 1 if prev is None else prev.seq + 1
        if audit_hash(e.seq, e.time, e.actor, e.action, e.subject, e.payload,
                      e.prev_hash) != e.hash:
            problems.append(AuditProblem(e.seq, "edited", f"event #{e.seq} ({e.action} "
                                         f"{e.subject}) was changed after it was written"))
        if e.seq > expected_seq:
            gap = (f"#{expected_seq}" if e.seq == expected_seq + 1
                   else f"#{expected_seq}-#{e.seq - 1}")
            problems.append(AuditProblem(expected_seq, "deleted",
                                         f"event(s) {gap} were deleted"))
        elif e.prev_hash != (GENESIS_HASH if prev is None else prev.hash):
            problems.append(_chain_problem(e, prev, by_hash))
        prev = e
    head = prev.hash if prev is not None else GENESIS_HASH
    if expect_head is not None and expect_head != head:
        where = by_hash.get(expect_head)
        msg = (f"the log ends at event #{prev.seq if prev else 0} ({head[:16]}); the expected "
               f"head {expect_head[:16]} is " + (f"event #{where}: events after it were "
                                                  "added" if where is not None else
                                                  "missing: events were removed from the end"))
        problems.append(AuditProblem(prev.seq if prev else 0, "head", msg))
    return AuditReport(events=len(events), head=head, problems=problems)


def _chain_problem(e: AuditEvent, prev: AuditEvent | None,
                   by_hash: dict[str, int]) -> AuditProblem:
    linked = by_hash.get(e.prev_hash)
    before = prev.seq if prev is not None else 0
    if linked is not None and linked != before:
        return AuditProblem(e.seq, "reordered", f"event #{e.seq} was written after event "
                            f"#{linked}, not after #{before}: events were reordered")
    return AuditProblem(before, "rehashed", f"event #{e.seq} does not follow event #{before}: "
                        f"#{before} was altered and its hash recomputed, or replaced")
