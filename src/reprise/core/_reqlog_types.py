"""The request log and feedback as the metadata store keeps them.

Plain records and checks, standard library only: the server writes the log and takes
feedback, the store persists both, ``reprise.monitor`` reads them. A
:class:`RequestChunk` is one Parquet file of logged requests of one model version,
written by one server; its rows are described by the column names below. Feedback is
one label per ``(model name, request id)``, joined to the logged rows by request id.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from reprise.core.errors import UserError

__all__ = ["FEEDBACK_MAX_ITEMS", "INPUT_PREFIX", "OUTPUT_PREFIX", "REQUEST_ID_MAX",
           "FeedbackError", "RequestChunk", "check_feedback", "check_feedback_items",
           "check_request_id",
           "request_id_problem"]

# Columns of a chunk: one row per input row of a logged request.
#   request_id (string), row (int: its index in the request), time (float: Unix seconds
#   of the answer), version (int), latency_ms (float: request to answer), then
#   ``input.<column>`` for each logged input and ``output.<name>`` for each output.
INPUT_PREFIX = "input."
OUTPUT_PREFIX = "output."
REQUEST_ID_MAX = 128
FEEDBACK_MAX_ITEMS = 10_000


@dataclass(frozen=True)
class RequestChunk:
    """One Parquet chunk of logged requests of ``name`` version ``version``."""

    id: str
    name: str
    version: int
    server: str
    first_at: float
    """Time of the chunk's first answer (Unix seconds)."""
    last_at: float
    """Time of its last answer."""
    requests: int
    rows: int
    artifact_hash: str
    size: int
    created_at: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class FeedbackError(UserError, ValueError):
    """Feedback that cannot be stored; ``problems`` lists ``{"field", "problem"}``."""

    def __init__(self, problems: list[dict[str, str]]) -> None:
        shown = "; ".join(f"{p['field']}: {p['problem']}" for p in problems[:10])
        more = f"; and {len(problems) - 10} more" if len(problems) > 10 else ""
        super().__init__(f"the feedback was not stored: {shown}{more}")
        self.problems = problems


def request_id_problem(value: object) -> str | None:
    """Why ``value`` cannot be a request id, or None. A request id is 1 to 128 visible
    ASCII characters (it travels in an HTTP header and names log rows)."""
    if not isinstance(value, str):
        return f"must be a string, got a JSON {_json_type(value)}"
    if not value:
        return "must not be empty"
    if len(value) > REQUEST_ID_MAX:
        return f"must be at most {REQUEST_ID_MAX} characters, got {len(value)}"
    if not all("!" <= c <= "~" for c in value):
        return "must be visible ASCII characters (no spaces or control characters)"
    return None


def check_request_id(value: str) -> str:
    """``value`` if it is a valid request id, else :class:`FeedbackError`."""
    problem = request_id_problem(value)
    if problem is not None:
        raise FeedbackError([{"field": "request_id", "problem": problem}])
    return value


def check_feedback(payload: Any) -> list[tuple[str, str]]:
    """``{"feedback": [{"request_id": ..., "label": ...}, ...]}`` as ``(request id,
    label as JSON)`` pairs, or :class:`FeedbackError` naming every problem.

    A label is a JSON string, number or boolean (not null, NaN or a container); one
    request id appears once per body.

    Example:
        >>> check_feedback({"feedback": [{"request_id": "r1", "label": 1}]})
        [('r1', '1')]
    """
    if not isinstance(payload, dict) or set(payload) != {"feedback"}:
        got = (f"an object with keys {sorted(map(str, payload))[:10]}"
               if isinstance(payload, dict) else f"a JSON {_json_type(payload)}")
        raise FeedbackError([{"field": "$", "problem": 'the body must be {"feedback": '
                              f'[{{"request_id": ..., "label": ...}}, ...]}}, got {got}'}])
    items = payload["feedback"]
    if not isinstance(items, list) or not items:
        raise FeedbackError([{"field": "feedback", "problem": "must be a non-empty list of "
                              "{request_id, label} objects"}])
    if len(items) > FEEDBACK_MAX_ITEMS:
        raise FeedbackError([{"field": "feedback", "problem": f"at most {FEEDBACK_MAX_ITEMS} "
                              f"items per body, got {len(items)}; send several bodies or "
                              "use `reprise monitor feedback NAME FILE`"}])
    return check_feedback_items(items)


def check_feedback_items(items: Sequence[Any], where: str = "feedback",
                         ) -> list[tuple[str, str]]:
    """Each item ``{"request_id": ..., "label": ...}`` as ``(request id, label as
    JSON)``, or :class:`FeedbackError` naming every problem as ``where[i]`` (a request
    id appearing twice is one of them)."""
    problems: list[dict[str, str]] = []
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        at = f"{where}[{i}]"
        if not isinstance(item, dict):
            problems.append({"field": at, "problem": "must be an object "
                             f"{{request_id, label}}, got a JSON {_json_type(item)}"})
            continue
        extra = sorted(set(map(str, item)) - {"request_id", "label"})
        if extra:
            problems.append({"field": at, "problem": f"unknown keys {extra[:5]}; only "
                             "request_id and label are taken"})
        rid, label = item.get("request_id"), item.get("label")
        problem = request_id_problem(rid)
        if problem is not None:
            problems.append({"field": f"{at}.request_id", "problem": problem})
        elif rid in seen:
            problems.append({"field": f"{at}.request_id",
                             "problem": f"{rid!r} appears more than once"})
        label_problem = _label_problem(label, "label" in item)
        if label_problem is not None:
            problems.append({"field": f"{at}.label", "problem": label_problem})
        if problem is None and label_problem is None and rid not in seen and not extra:
            assert isinstance(rid, str)
            seen.add(rid)
            out.append((rid, json.dumps(label)))
    if problems:
        raise FeedbackError(problems)
    return out


def _label_problem(label: object, present: bool) -> str | None:
    if not present or label is None:
        return "is required: a string, number or boolean"
    if isinstance(label, bool | str):
        return None if not isinstance(label, str) or len(label) <= 1000 else \
            "a string label must be at most 1000 characters"
    if isinstance(label, int | float):
        return None if math.isfinite(label) else "must be a finite number"
    return f"must be a string, number or boolean, got a JSON {_json_type(label)}"


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__
