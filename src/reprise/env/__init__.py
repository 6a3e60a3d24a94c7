"""Layer 1: the environment fingerprint (python, OS, CPU/GPU, packages, git) and seeding.

Importing this package is cheap: psutil, pynvml and numpy load inside the
functions that need them, and torch is only read when already imported.

Example:
    >>> from reprise.env import diff_environments, fingerprint, fingerprint_hash
    >>> fp = fingerprint()
    >>> len(fingerprint_hash(fp)), diff_environments(fp, fp)
    (64, [])
"""

from __future__ import annotations

from reprise.env._determinism import seed_everything
from reprise.env._fingerprint import (
    ENV_VARS,
    EnvChange,
    diff_environments,
    distribution_for_module,
    fingerprint,
    fingerprint_hash,
    git_state,
    installed_packages,
    normalise_name,
    scope_fingerprint,
)

__all__ = [
    "ENV_VARS",
    "EnvChange",
    "diff_environments",
    "distribution_for_module",
    "fingerprint",
    "fingerprint_hash",
    "git_state",
    "installed_packages",
    "normalise_name",
    "scope_fingerprint",
    "seed_everything",
]
