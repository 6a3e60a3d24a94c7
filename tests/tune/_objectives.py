"""Objectives for the tuning tests, importable by worker processes."""

from __future__ import annotations

import math
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import reprise
from reprise.core.errors import UserError


def quad(p: dict[str, Any]) -> float:
    return (p["x"] - 2.0) ** 2 + (0.5 if p.get("kind") == "b" else 0.0)


def slow_quad(p: dict[str, Any]) -> float:
    time.sleep(float(os.environ.get("REPRISE_TEST_SLEEP", "0.2")))
    return quad(p)


def curve(p: dict[str, Any]) -> float:
    """Reports 8 intermediate values; bad x stays bad at every step (prunable).
    Jitter in timing (never in values) makes parallel runs finish in any order."""
    time.sleep(random.random() * 0.02)
    value = 0.0
    for step in range(8):
        value = (p["x"] - 2.0) ** 2 + 1.0 / (step + 1)
        reprise.tune.report({"loss": value}, step)
    return value


def dies_once(p: dict[str, Any]) -> float:
    """Kills its own process the first time it sees these params (a crashed worker)."""
    marker = Path(os.environ["REPRISE_TEST_MARKERS"]) / f"{p['x']:.12f}"
    if float(p["x"]) > 0 and not marker.exists():
        marker.write_text("died")
        os.kill(os.getpid(), signal.SIGKILL)
    return quad(p)


def fails(p: dict[str, Any]) -> float:
    raise ValueError(f"bad luck with x={p['x']}")


def refuses(p: dict[str, Any]) -> float:
    raise UserError("the objective needs a column 'price' that the data does not have")


def nan(p: dict[str, Any]) -> float:
    return math.nan


def not_a_number(p: dict[str, Any]) -> Any:
    return "high"


def define_by_run(trial: Any) -> float:
    x = trial.suggest_float("x", -5, 5)
    return (x - 1.0) ** 2


def logs(p: dict[str, Any]) -> float:
    reprise.log_metric("seen", p["x"])
    return quad(p)


def _exit_at_load() -> None:
    os._exit(3)


def _raise_at_load() -> None:
    raise RuntimeError("this objective only loads in the tuner's process")


class DiesAtStartup:
    """Unpickling it ends the process: every worker dies before it starts."""

    def __call__(self, p: dict[str, Any]) -> float:
        return quad(p)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_exit_at_load, ())


class FailsToLoad(DiesAtStartup):
    """Unpickling it raises: a worker cannot load the objective."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_raise_at_load, ())


def dies_once_in(folder: str, p: dict[str, Any]) -> float:
    """:func:`dies_once` with its marker folder bound (Ray workers do not get the test's
    environment): ``functools.partial(dies_once_in, folder)``."""
    marker = Path(folder) / f"{p['x']:.12f}"
    if float(p["x"]) > 0 and not marker.exists():
        marker.write_text("died")
        os.kill(os.getpid(), signal.SIGKILL)
    return quad(p)


def sleeps_in(folder: str, p: dict[str, Any]) -> float:
    """Writes its pid to ``folder`` and sleeps a minute (a trial to be cancelled)."""
    (Path(folder) / str(os.getpid())).write_text("")
    time.sleep(60)
    return quad(p)
