"""The tracking run of a distributed training: started by global rank 0 alone.

Under torchrun every rank runs the same script, so a script that starts a run
would record one per rank — on several nodes, one per process of the job. The
Trainer logs its metrics to the active run on global rank 0 only; this starts
that run on global rank 0 only (``RANK`` in torchrun's environment, which
numbers the processes of all nodes), and gives the other ranks None.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reprise.tracking._run import Run

__all__ = ["global_rank", "rank_zero_run"]


def global_rank() -> int:
    """This process's rank among all processes of the job (0 outside torchrun)."""
    return int(os.environ.get("RANK", "0"))


@contextlib.contextmanager
def rank_zero_run(name: str | None = None, params: dict[str, Any] | None = None,
                  **kwargs: Any) -> Iterator[Run | None]:
    """``reprise.start_run(name, params, **kwargs)`` on global rank 0, as a context
    manager; nothing (None) on the other ranks. One job, one run, however many
    processes and nodes train it.

    Example:
        >>> import reprise, tempfile
        >>> from reprise.train import rank_zero_run
        >>> ws = reprise.init(tempfile.mkdtemp())
        >>> with rank_zero_run("train", params={"lr": 0.1}, workspace=ws) as run:
        ...     pass  # Trainer(...).fit(...) logs to it on rank 0
        >>> [r.name for r in ws.metadata.list_runs()]
        ['train']
    """
    if global_rank() != 0:
        yield None
        return
    from reprise.tracking._api import start_run

    with start_run(name, params, **kwargs) as run:
        yield run
