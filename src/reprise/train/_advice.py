"""What the Trainer advises at the end of a run: only what is large and worth acting on.

A short run on a tiny in-memory table always spends some share of its step time
fetching batches (a few milliseconds of collation against a few milliseconds of
compute); telling the user to add loader workers there is noise. The input-bound
advice therefore needs all three: a large share of the time waiting for data, a
wait long enough to be worth removing, and enough steps for the share to mean
something (the first batches pay for worker start-up and warm caches).
"""

from __future__ import annotations

from typing import Any

__all__ = ["INPUT_BOUND_FRACTION", "INPUT_BOUND_MIN_STEPS", "INPUT_BOUND_MIN_WAIT_S",
           "input_bound", "input_bound_advice"]

INPUT_BOUND_FRACTION = 0.10  # of the step time spent waiting for data
INPUT_BOUND_MIN_WAIT_S = 5.0  # seconds of waiting in the whole run
INPUT_BOUND_MIN_STEPS = 50  # optimizer steps


def input_bound(wait_fraction: float, wait_seconds: float, steps: int) -> bool:
    """Whether a run waited for data long enough, and for a large enough share of its
    step time, over enough steps, that faster loading would pay off."""
    return (wait_fraction >= INPUT_BOUND_FRACTION and wait_seconds >= INPUT_BOUND_MIN_WAIT_S
            and steps >= INPUT_BOUND_MIN_STEPS)


def input_bound_advice(summary: dict[str, Any]) -> str | None:
    """The warning for a profiled run's summary, or None when there is nothing to act on."""
    if "data_wait_fraction" not in summary:
        return None
    fraction, seconds = summary["data_wait_fraction"], summary["data_wait_seconds"]
    if not input_bound(fraction, seconds, summary["optimizer_steps"]):
        return None
    return (f"input-bound: {100 * fraction:.0f}% of step time ({seconds:.0f} s) was spent "
            "waiting for data; raise num_workers / prefetch, or cache the data in memory")
