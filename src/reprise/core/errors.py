"""The one error tree of Reprise.

Every error Reprise raises on purpose derives from :class:`RepriseError`.
Errors caused by the user (bad input, unknown names, missing workspace) derive
from :class:`UserError`; the CLI prints their message on one line and exits
with status 2. Anything else is a bug: the CLI shows the traceback and exits 1.

Leaves also subclass the fitting builtin, so ``except KeyError`` keeps working
for lookups (the habit httpx follows in ``httpx/_exceptions.py``)::

    RepriseError
    ├── UserError
    │   ├── WorkspaceNotFoundError          (FileNotFoundError)
    │   ├── WorkspaceExistsError            (FileExistsError)
    │   ├── WorkspaceWriteError             (OSError)      read-only, full or forbidden folder
    │   ├── ConfigError                     (ValueError)
    │   ├── InvalidNameError                (ValueError)
    │   ├── NotFoundError                   (KeyError)
    │   │   ├── RunNotFoundError
    │   │   ├── ArtifactNotFoundError
    │   │   └── EnvironmentNotFoundError
    │   ├── AmbiguousIdError                (KeyError)
    │   ├── ParamConflictError              (ValueError)   a param logged twice with two values
    │   ├── RunFinishedError                (RuntimeError)
    │   ├── NoActiveRunError                (RuntimeError)
    │   ├── MaterializerError               (TypeError)
    │   ├── MissingExtraError               (ImportError)
    │   └── GateFailedError                                a quality gate of an evaluation failed
    ├── StoreError
    │   ├── IntegrityError                  (ValueError)   a blob whose bytes do not match its hash
    │   ├── JournalWriteError               (OSError)      a journal line not written whole (disk full)
    │   └── SchemaVersionError              (RuntimeError) database newer than this Reprise
    ├── TrialPruned                                        a tuning trial told to stop early
    └── ServingError                    (RuntimeError) a served model failed to load or warm up

Every message says what was wrong, what was given, and what to do next.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AmbiguousIdError",
    "ArtifactNotFoundError",
    "ConfigError",
    "EnvironmentNotFoundError",
    "GateFailedError",
    "IntegrityError",
    "InvalidNameError",
    "JournalWriteError",
    "MaterializerError",
    "MissingExtraError",
    "NoActiveRunError",
    "NotFoundError",
    "ParamConflictError",
    "RepriseError",
    "RunFinishedError",
    "RunNotFoundError",
    "SchemaVersionError",
    "ServingError",
    "StoreError",
    "TrialPruned",
    "UserError",
    "WorkspaceExistsError",
    "WorkspaceNotFoundError",
    "WorkspaceWriteError",
]


class RepriseError(Exception):
    """Base of every error Reprise raises on purpose."""

    def __str__(self) -> str:  # KeyError quotes its message; we never want that.
        return str(self.args[0]) if self.args else self.__class__.__name__


class UserError(RepriseError):
    """The user asked for something that cannot be done; the message says how to fix it."""


class WorkspaceNotFoundError(UserError, FileNotFoundError):
    """No ``.reprise/`` folder in the current directory or any parent."""


class WorkspaceExistsError(UserError, FileExistsError):
    """``reprise init`` where a workspace already exists."""


class WorkspaceWriteError(UserError, OSError):
    """A workspace folder cannot be written: read-only, full, or not ours to write."""


class ConfigError(UserError, ValueError):
    """A configuration value (config.toml, environment variable, URL) is invalid."""


class InvalidNameError(UserError, ValueError):
    """A name (metric key, artifact name, ...) that Reprise cannot accept."""


class NotFoundError(UserError, KeyError):
    """Something looked up by name or id does not exist."""


class RunNotFoundError(NotFoundError):
    """No run with this id (or id prefix)."""


class ArtifactNotFoundError(NotFoundError):
    """No blob with this hash in the artifact store."""


class EnvironmentNotFoundError(NotFoundError):
    """No environment fingerprint with this hash."""


class AmbiguousIdError(UserError, KeyError):
    """A shortened id matches more than one object."""


class ParamConflictError(UserError, ValueError):
    """A parameter logged again with a different value (params are immutable)."""


class RunFinishedError(UserError, RuntimeError):
    """Writing to a run that has already ended."""


class NoActiveRunError(UserError, RuntimeError):
    """A module-level tracking call with no active run."""


class MaterializerError(UserError, TypeError):
    """No safe way to store (or load) an object of this type."""


class MissingExtraError(UserError, ImportError):
    """An optional dependency is needed; the message names the extra to install."""


class GateFailedError(UserError):
    """A quality gate of an evaluation failed; the message is a table of the failures.

    ``results`` holds every gate's outcome and ``evaluation`` the evaluation
    itself (``reprise.evaluate.Evaluation``), when raised in this process.
    """

    def __init__(self, message: str, results: list[dict[str, Any]] | None = None,
                 evaluation: Any = None) -> None:
        super().__init__(message)
        self.results = results or []
        self.evaluation = evaluation


class StoreError(RepriseError):
    """The metadata or artifact store is in a state Reprise cannot work with."""


class JournalWriteError(StoreError, OSError):
    """A journal line could not be written whole (a full disk, an I/O error)."""


class IntegrityError(StoreError, ValueError):
    """Stored bytes do not match their recorded hash or size."""


class SchemaVersionError(StoreError, RuntimeError):
    """The database schema is newer than this version of Reprise understands."""


class TrialPruned(RepriseError):
    """The tuning trial this code runs in was pruned: stop and let the tuner record it.

    Not a failure: the tuner catches it and marks the trial pruned (see
    :mod:`reprise.core._report`).
    """


class ServingError(RepriseError, RuntimeError):
    """A model server could not load or warm up a model version; the message names it."""
