"""The trigger policy: which alarms lead to which actions, how often, and how.

A YAML file (or a mapping)::

    window: 1000                 # what the detector judges: the newest N requests, or 15m
    repeat: 1h                   # a same-kind alarm on the same version within this time,
                                 # while its actions are held back, is the same incident
    reference: churn@3           # the detector's reference rows (default: the model's
                                 # training dataset version, from its lineage)
    rules:                       # alarm kinds -> actions, in the order given
      - on: [input_drift, prediction_drift]
        do: [notify, retrain]
      - on: performance
        do: [notify, rollback]
    cooldown:                    # least time between two starts of one action
      rollback: 10m
      retrain: 1h
      notify: 5m
    retrain:
      dataset: latest            # the newest version of the training dataset's name,
                                 # or an explicit ref such as cancer@4
      target: target             # the label column of the evaluation rows
      eval_dataset: cancer@4     # rows the candidate and production are scored on
                                 # (default: the retraining dataset)
      gates: {roc_auc: "no worse than baseline by 0.01", accuracy: ">= 0.9"}
      timeout: 30m               # the retraining process is ended past this (its
                                 # process group: SIGTERM, then SIGKILL)
      rollout: {strategy: canary, steps: [50, 100], interval: 30s,
                policy: {analysis: {min_requests: 200}}}   # the rollout's own policy
    notify:
      url: http://127.0.0.1:9000/hook
      timeout: 5s

The baseline of ``no worse than baseline`` gates is the production model, scored on the
same rows as the candidate. At most one action of each kind is in flight at a time.
Unknown keys and bad values raise :class:`~reprise.core.errors.ConfigError`, naming the
key and the fix.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprise.core._durations import duration_seconds
from reprise.core.errors import ConfigError, UserError
from reprise.monitor._alarm import ALARM_KINDS
from reprise.monitor._policy import parse_window

__all__ = ["ACTIONS", "NotifySettings", "RetrainSettings", "TriggerPolicy", "TriggerRule",
           "load_trigger_policy", "parse_seconds"]

ACTIONS = ("rollback", "retrain", "notify")
DEFAULT_COOLDOWN_S = {"rollback": 600.0, "retrain": 3600.0, "notify": 300.0}
_TOP = {"rules", "cooldown", "retrain", "notify", "window", "repeat", "reference"}
_RULE = {"on", "do"}
_RETRAIN = {"dataset", "target", "eval_dataset", "gates", "timeout", "rollout", "param"}
_ROLLOUT = {"strategy", "steps", "interval", "policy"}
_NOTIFY = {"url", "timeout"}


def parse_seconds(value: Any, key: str) -> float:
    """Seconds in ``250ms``, ``60s``, ``5m``, ``1h``, ``1d`` or a number (of seconds)."""
    seconds = duration_seconds(value)
    if seconds is None:
        raise ConfigError(f"{key}: {value!r} is not a duration; write e.g. 30s, 5m or 1h.")
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ConfigError(f"{key}: a duration must be 0 or more; got {value!r}.")
    return seconds


def _unknown(d: dict[str, Any], known: set[str], where: str) -> None:
    extra = sorted(set(d) - known)
    if extra:
        raise ConfigError(f"unknown key(s) {extra} in {where}; the keys are {sorted(known)}.")


def _names(value: Any, allowed: tuple[str, ...], key: str) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{key} must be one of {list(allowed)} or a non-empty list of them; "
                          f"got {value!r}.")
    for item in items:
        if item not in allowed:
            raise ConfigError(f"{key}: {item!r} is not one of {list(allowed)}.")
    return tuple(dict.fromkeys(items))


def _mapping(value: Any, key: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{key} must be a mapping, not {type(value).__name__} ({value!r}).")
    return value


@dataclass(frozen=True)
class TriggerRule:
    on: tuple[str, ...]  # alarm kinds
    do: tuple[str, ...]  # actions, in order


@dataclass(frozen=True)
class RetrainSettings:
    dataset: str = "latest"  # "latest": the newest version of the training dataset's name
    target: str | None = None
    eval_dataset: str | None = None
    gates: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 3600.0
    param: str | None = None  # the pipeline parameter holding the dataset (if several)
    rollout: dict[str, Any] = field(default_factory=lambda: {"strategy": "canary"})

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RetrainSettings:
        _unknown(d, _RETRAIN, "retrain")
        dataset = d.get("dataset", "latest")
        if not isinstance(dataset, str) or not dataset.strip():
            raise ConfigError(f"retrain.dataset must be 'latest' or a dataset ref such as "
                              f"cancer@4; got {dataset!r}.")
        for key in ("target", "eval_dataset", "param"):
            if d.get(key) is not None and not isinstance(d[key], str):
                raise ConfigError(f"retrain.{key} must be a string; got {d[key]!r}.")
        gates = _gates(d.get("gates"))
        if gates and not d.get("target"):
            raise ConfigError("retrain.gates need retrain.target: the label column of the rows "
                              "the candidate and the production model are scored on.")
        return cls(dataset=dataset, target=d.get("target"), eval_dataset=d.get("eval_dataset"),
                   gates=gates, timeout_s=parse_seconds(d.get("timeout", "1h"),
                                                        "retrain.timeout"),
                   param=d.get("param"), rollout=_rollout(d.get("rollout")))


def _gates(value: Any) -> dict[str, str]:
    gates = _mapping(value, "retrain.gates")
    from reprise.core.errors import UserError
    from reprise.evaluate._gates import parse_gates

    try:
        parse_gates(gates)
    except UserError as exc:
        raise ConfigError(f"retrain.gates: {exc}") from None
    return {str(k): str(v) for k, v in gates.items()}


def _rollout(value: Any) -> dict[str, Any]:
    spec = _mapping(value, "retrain.rollout") or {"strategy": "canary"}
    _unknown(spec, _ROLLOUT, "retrain.rollout")
    strategy = spec.get("strategy", "canary")
    if strategy not in ("canary", "shadow", "blue-green"):
        raise ConfigError(f"retrain.rollout.strategy must be canary, shadow or blue-green; "
                          f"got {strategy!r}.")
    out: dict[str, Any] = {"strategy": strategy}
    steps = spec.get("steps")
    if steps is not None:
        if (not isinstance(steps, list) or not steps
                or any(isinstance(s, bool) or not isinstance(s, int) or not 0 < s <= 100
                       for s in steps)):
            raise ConfigError(f"retrain.rollout.steps must be a list of whole percentages in "
                              f"1..100, e.g. [50, 100]; got {steps!r}.")
        out["steps"] = steps
    if "interval" in spec:
        out["interval"] = parse_seconds(spec["interval"], "retrain.rollout.interval")
    # the rollout's own policy (checked when it starts). A model retrained on shifted data
    # is meant to answer differently: its canary's prediction-shift check is off unless
    # the policy sets it (the gates vouched for its quality; errors and latency are checked)
    pol = dict(_mapping(spec.get("policy"), "retrain.rollout.policy"))
    pol.setdefault("prediction_shift", {"max_distance": None})
    out["policy"] = pol
    return out


@dataclass(frozen=True)
class NotifySettings:
    url: str
    timeout_s: float = 5.0

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NotifySettings:
        _unknown(d, _NOTIFY, "notify")
        url = d.get("url")
        if not isinstance(url, str) or not re.match(r"^https?://[^/\s]+", url):
            raise ConfigError(f"notify.url must be an http:// or https:// URL; got {url!r}.")
        timeout = parse_seconds(d.get("timeout", 5.0), "notify.timeout")
        if not 0 < timeout <= 60:
            raise ConfigError(f"notify.timeout must be more than 0 and at most 60s (the loop "
                              f"waits for it); got {d.get('timeout')!r}.")
        return cls(url=url, timeout_s=timeout)


@dataclass(frozen=True)
class TriggerPolicy:
    rules: tuple[TriggerRule, ...]
    cooldown_s: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_COOLDOWN_S))
    retrain: RetrainSettings | None = None
    notify: NotifySettings | None = None
    window: int | str | None = None  # the detector's window: rows, or a duration ("15m")
    repeat_s: float = 3600.0  # a same-kind alarm on the same version within this: one incident
    reference: str | None = None  # the detector's reference rows (default: training data)

    def actions_for(self, kind: str) -> list[str]:
        """The actions an alarm of ``kind`` calls for, each once, in rule order."""
        return list(dict.fromkeys(a for r in self.rules if kind in r.on for a in r.do))

    def to_dict(self) -> dict[str, Any]:
        return {"rules": [{"on": list(r.on), "do": list(r.do)} for r in self.rules],
                "cooldown": self.cooldown_s,
                "retrain": None if self.retrain is None else {
                    "dataset": self.retrain.dataset, "target": self.retrain.target,
                    "eval_dataset": self.retrain.eval_dataset, "gates": self.retrain.gates,
                    "timeout": self.retrain.timeout_s, "rollout": self.retrain.rollout},
                "notify": None if self.notify is None else {
                    "timeout": self.notify.timeout_s},  # the URL may hold a token
                "window": self.window, "repeat": self.repeat_s, "reference": self.reference}

    @classmethod
    def from_dict(cls, d: Any) -> TriggerPolicy:
        if not isinstance(d, dict):
            raise ConfigError(f"a trigger policy is a mapping with keys {sorted(_TOP)}; got "
                              f"{type(d).__name__}.")
        _unknown(d, _TOP, "the trigger policy")
        rules = d.get("rules")
        if not isinstance(rules, list) or not rules:
            raise ConfigError("rules must be a non-empty list of {on: ALARM_KIND(S), do: "
                              "ACTION(S)}, e.g. [{on: input_drift, do: [notify, retrain]}].")
        parsed = []
        for i, rule in enumerate(rules):
            # YAML 1.1 reads a bare ``on`` as the boolean true: take it for the key it is
            given: dict[Any, Any] = _mapping(rule, f"rules[{i}]")
            rule = {("on" if k is True else k): v for k, v in given.items()}
            _unknown(rule, _RULE, f"rules[{i}]")
            if "on" not in rule or "do" not in rule:
                raise ConfigError(f"rules[{i}] needs both 'on' (alarm kinds) and 'do' "
                                  "(actions).")
            parsed.append(TriggerRule(on=_names(rule["on"], ALARM_KINDS, f"rules[{i}].on"),
                                      do=_names(rule["do"], ACTIONS, f"rules[{i}].do")))
        cooldown = dict(DEFAULT_COOLDOWN_S)
        given = _mapping(d.get("cooldown"), "cooldown")
        _unknown(given, set(ACTIONS), "cooldown")
        cooldown.update({k: parse_seconds(v, f"cooldown.{k}") for k, v in given.items()})
        used = {a for r in parsed for a in r.do}
        retrain = RetrainSettings.from_dict(_mapping(d.get("retrain"), "retrain"))
        notify = None
        if d.get("notify") is not None:
            notify = NotifySettings.from_dict(_mapping(d["notify"], "notify"))
        elif "notify" in used:
            raise ConfigError("a rule does 'notify' but the policy has no notify.url; add "
                              "notify: {url: http://...}.")
        window = d.get("window")
        if window is not None:
            try:  # the detector's own parser: what loads here, the watcher can use
                parse_window(window)
            except UserError:
                raise ConfigError(f"window must be a number of requests (e.g. 1000) or a "
                                  f"duration (e.g. 15m); got {window!r}.") from None
        return cls(rules=tuple(parsed), cooldown_s=cooldown, retrain=retrain, notify=notify,
                   window=window, repeat_s=parse_seconds(d.get("repeat", "1h"), "repeat"),
                   reference=_reference(d.get("reference")))


def _reference(value: Any) -> str | None:
    if value is not None and not (isinstance(value, str) and "@" in value):
        raise ConfigError(f"reference must be a dataset version such as churn@3 (the rows "
                          f"the traffic is compared with); got {value!r}.")
    return value


def load_trigger_policy(path: str | Path | dict[str, Any] | TriggerPolicy) -> TriggerPolicy:
    """A :class:`TriggerPolicy` from a YAML file (or a mapping, or one already parsed)."""
    if isinstance(path, TriggerPolicy):
        return path
    if isinstance(path, dict):
        return TriggerPolicy.from_dict(path)
    import yaml

    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read the trigger policy {p}: {exc.strerror}.") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p} is not valid YAML: {exc}") from None
    try:
        return TriggerPolicy.from_dict(doc)
    except ConfigError as exc:
        raise ConfigError(f"{p}: {exc}") from None
