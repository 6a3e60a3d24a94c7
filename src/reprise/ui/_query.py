"""The runs table's query language, parsed by a small recursive-descent parser (never
``eval``), and the sort key of its columns.

Grammar (keywords are case-insensitive)::

    query      := or_expr
    or_expr    := and_expr ("or" and_expr)*
    and_expr   := not_expr ("and" not_expr)*
    not_expr   := "not" not_expr | "(" query ")" | comparison
    comparison := field OP value
    field      := id | name | kind | status | parent_id | started_at | ended_at | duration
                | metrics.KEY | params.KEY | tags.KEY     (KEY: letters, digits, _ - / . :)
    OP         := = | == | != | < | <= | > | >=
    value      := number | "string" | 'string' | true | false | null

A comparison with a missing value (a run without that metric) is false; numbers compare
with numbers, strings with strings, anything else is false (``!=`` included).
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Union

from reprise.core._types import RunStatus
from reprise.core.errors import UserError
from reprise.store._run_search import AllOf, AnyOf, Compare, Negate, RunCondition

__all__ = ["And", "Cmp", "Not", "Or", "QueryError", "matches", "parse_query", "pushdown",
           "sort_field", "sort_runs", "to_condition"]

FIELDS = ("id", "name", "kind", "status", "parent_id", "started_at", "ended_at", "duration")
PREFIXES = ("metrics", "params", "tags")
_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq, "==": operator.eq, "!=": operator.ne, "<": operator.lt,
    "<=": operator.le, ">": operator.gt, ">=": operator.ge}
_TOKEN = re.compile(r"""
    \s*(?:
      (?P<num>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)(?![\w.])
    | (?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    | (?P<op><=|>=|==|!=|=|<|>)
    | (?P<paren>[()])
    | (?P<word>[A-Za-z_][\w\-/.:]*)
    )""", re.VERBOSE)
_MAX_QUERY = 2000


class QueryError(UserError):
    """A query string the parser rejects; the message names the problem and where."""


@dataclass(frozen=True)
class Cmp:
    field: str       # "status", "metrics.f1", ...
    op: str
    value: Any


@dataclass(frozen=True)
class And:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Or:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Not:
    item: Node


Node = Union[Cmp, And, Or, Not]  # noqa: UP007 (a runtime alias under from __future__)


def _tokens(text: str) -> list[tuple[str, str, int]]:
    out: list[tuple[str, str, int]] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None or m.lastgroup is None:
            start = len(text) - len(text[pos:].lstrip())
            raise QueryError(f"unexpected character {text[start]!r} at position {start + 1} "
                             "of the query.")
        out.append((m.lastgroup, m.group(m.lastgroup), m.start(m.lastgroup) + 1))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> tuple[str, str, int] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def keyword(self, word: str) -> bool:
        t = self.peek()
        if t is not None and t[0] == "word" and t[1].lower() == word:
            self.i += 1
            return True
        return False

    def parse(self) -> Node:
        if not self.toks:
            raise QueryError("the query is empty.")
        node = self.or_expr()
        t = self.peek()
        if t is not None:
            raise QueryError(f"unexpected {t[1]!r} at position {t[2]}; join conditions with "
                             "'and' or 'or'.")
        return node

    def or_expr(self) -> Node:
        items = [self.and_expr()]
        while self.keyword("or"):
            items.append(self.and_expr())
        return items[0] if len(items) == 1 else Or(tuple(items))

    def and_expr(self) -> Node:
        items = [self.not_expr()]
        while self.keyword("and"):
            items.append(self.not_expr())
        return items[0] if len(items) == 1 else And(tuple(items))

    def not_expr(self) -> Node:
        if self.keyword("not"):
            return Not(self.not_expr())
        t = self.peek()
        if t is not None and t[0] == "paren" and t[1] == "(":
            self.i += 1
            node = self.or_expr()
            close = self.peek()
            if close is None or close[1] != ")":
                raise QueryError(f"the '(' at position {t[2]} is never closed.")
            self.i += 1
            return node
        return self.comparison()

    def comparison(self) -> Node:
        t = self.peek()
        if t is None:
            raise QueryError("the query ends where a condition was expected.")
        if t[0] != "word":
            raise QueryError(f"expected a field (status, metrics.KEY, params.KEY, tags.KEY...) "
                             f"at position {t[2]}, not {t[1]!r}.")
        self.i += 1
        field = _field(t[1], t[2])
        op = self.peek()
        if op is None or op[0] != "op":
            where = f"at position {op[2]}, not {op[1]!r}" if op else "at the end"
            raise QueryError(f"expected a comparison (=, !=, <, <=, >, >=) after {t[1]!r} "
                             f"{where}.")
        self.i += 1
        val = self.peek()
        if val is None:
            raise QueryError(f"expected a value after {t[1]} {op[1]}.")
        self.i += 1
        value = _value(val)
        if field == "status" and value not in {s.value for s in RunStatus}:
            raise QueryError(f"unknown status {value!r}; use one of "
                             f"{', '.join(s.value for s in RunStatus)}.")
        if op[1] in ("<", "<=", ">", ">=") and value is None:
            raise QueryError(f"{t[1]} {op[1]} null compares nothing; use = null or != null.")
        return Cmp(field, op[1], value)


def _field(word: str, pos: int) -> str:
    if word in FIELDS:
        return word
    head, dot, key = word.partition(".")
    if dot and head in PREFIXES and key:
        return word
    raise QueryError(f"unknown field {word!r} at position {pos}; use one of "
                     f"{', '.join(FIELDS)}, metrics.KEY, params.KEY or tags.KEY.")


def _value(tok: tuple[str, str, int]) -> Any:
    kind, text, pos = tok
    if kind == "num":
        number = float(text)
        return int(number) if re.fullmatch(r"[-+]?\d+", text) else number
    if kind == "str":
        return re.sub(r"\\(.)", r"\1", text[1:-1])
    if kind == "word" and text.lower() in ("true", "false", "null"):
        return {"true": True, "false": False, "null": None}[text.lower()]
    raise QueryError(f"expected a value (a number, a \"quoted string\", true, false or null) "
                     f"at position {pos}, not {text!r}.")


def parse_query(text: str) -> Node:
    """Parse a runs query into a tree of :class:`Cmp`, :class:`And`, :class:`Or`, :class:`Not`.

    Raises:
        QueryError: the text is not a query; the message says what and where.

    Example:
        >>> parse_query('metrics.f1 > 0.9 and status = "finished"')
        And(items=(Cmp(field='metrics.f1', op='>', value=0.9), Cmp(field='status', op='=', value='finished')))
    """  # noqa: E501
    if len(text) > _MAX_QUERY:
        raise QueryError(f"the query is longer than {_MAX_QUERY} characters.")
    return _Parser(text).parse()


def column_value(run: dict[str, Any], field: str) -> Any:
    """A run dict's value for a column name (``metrics.f1``, ``status``...); None if absent."""
    head, dot, key = field.partition(".")
    if dot and head in PREFIXES:
        return (run.get(head) or {}).get(key)
    return run.get(field)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _compare(have: Any, op: str, want: Any) -> bool:
    if want is None or have is None:
        return (have is None) == (want is None) if op in ("=", "==") else (
            (have is None) != (want is None) if op == "!=" else False)
    if _number(have) and _number(want):
        if isinstance(have, float) and math.isnan(have):
            return False
        return _OPS[op](have, want)
    if isinstance(have, bool) and isinstance(want, bool) and op in ("=", "==", "!="):
        return _OPS[op](have, want)
    if isinstance(have, str) and isinstance(want, str):
        return _OPS[op](have, want)
    return False


def matches(node: Node, run: dict[str, Any]) -> bool:
    """Whether a run dict (``tracking.run_dict`` with its metrics) satisfies the query."""
    if isinstance(node, Cmp):
        return _compare(column_value(run, node.field), node.op, node.value)
    if isinstance(node, And):
        return all(matches(n, run) for n in node.items)
    if isinstance(node, Or):
        return any(matches(n, run) for n in node.items)
    return not matches(node.item, run)


def pushdown(node: Node | None) -> dict[str, Any]:
    """The equality conditions the store's ``RunFilter`` can apply itself (top-level
    ``and`` of ``status =``, ``name =``, ``tags.K =`` with string values): keyword
    arguments for it. The whole query is still checked in Python afterwards."""
    items = node.items if isinstance(node, And) else (node,) if node is not None else ()
    out: dict[str, Any] = {}
    tags: dict[str, str] = {}
    for n in items:
        if not (isinstance(n, Cmp) and n.op in ("=", "==") and isinstance(n.value, str)):
            continue
        if n.field in ("status", "name") and n.field not in out:
            out[n.field] = RunStatus(n.value) if n.field == "status" else n.value
        elif n.field.startswith("tags.") and n.field[5:] not in tags:
            tags[n.field[5:]] = n.value
    if tags:
        out["tags"] = tags
    return out


def to_condition(node: Node) -> RunCondition:
    """The query as the store's search condition (same tree, same meaning: the store
    evaluates it in SQL where :func:`matches` evaluates it in Python)."""
    if isinstance(node, Cmp):
        return Compare(node.field, node.op, node.value)
    if isinstance(node, And):
        return AllOf(tuple(to_condition(n) for n in node.items))
    if isinstance(node, Or):
        return AnyOf(tuple(to_condition(n) for n in node.items))
    return Negate(to_condition(node.item))


def sort_field(sort: str) -> tuple[str, bool]:
    """``-metrics.f1`` -> ``("metrics.f1", True)`` (descending).

    Raises:
        QueryError: an unknown column.
    """
    return _field(sort.lstrip("-+").strip(), 1), sort.startswith("-")


def sort_runs(runs: list[dict[str, Any]], sort: str) -> list[dict[str, Any]]:
    """Runs sorted by a column (``-`` first: descending); runs without a value come last
    either way, numbers before strings.

    Raises:
        QueryError: an unknown column.
    """
    field, desc = sort_field(sort)

    def key(run: dict[str, Any]) -> tuple[int, Any]:
        v = column_value(run, field)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return (2, 0)
        if _number(v) or isinstance(v, bool):
            return (0, -v if desc else v)
        return (1, str(v))

    present = [r for r in runs if key(r)[0] != 1]
    strings = [r for r in runs if key(r)[0] == 1]
    present.sort(key=key)
    strings.sort(key=key, reverse=desc)  # strings cannot be negated: sort them apart
    numbers = [r for r in present if key(r)[0] == 0]
    missing = [r for r in present if key(r)[0] == 2]
    return numbers + strings + missing
