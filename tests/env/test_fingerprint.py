"""The environment fingerprint: sections, determinism, diffs, git state, lean import."""

from __future__ import annotations

import json
import os
import random
import stat
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

import reprise.env as env
from reprise.core import canonical_json
from reprise.env import (
    EnvChange,
    diff_environments,
    distribution_for_module,
    fingerprint,
    fingerprint_hash,
    git_state,
    installed_packages,
    scope_fingerprint,
    seed_everything,
)
from reprise.env._fingerprint import _gpus_smi

SECTIONS = {"python", "os", "cpu", "memory", "gpu", "packages", "env_vars", "git"}


def test_public_api_is_pinned() -> None:
    assert sorted(env.__all__) == sorted([
        "ENV_VARS", "EnvChange", "diff_environments", "distribution_for_module", "fingerprint",
        "fingerprint_hash", "git_state", "installed_packages", "normalise_name",
        "scope_fingerprint", "seed_everything"])


# -- sections -------------------------------------------------------------------------


def test_sections_present_and_json_serialisable(tmp_path: Path) -> None:
    fp = fingerprint(tmp_path)
    assert SECTIONS <= set(fp)
    assert json.loads(json.dumps(fp)) == fp
    canonical_json(fp)  # no ambiguous keys or values
    assert fp["python"]["minor"] == "{}.{}".format(*sys.version_info[:2])
    assert fp["python"]["version"].startswith(fp["python"]["minor"])
    assert fp["os"]["system"] and fp["os"]["machine"]
    assert fp["cpu"]["count"] == os.cpu_count()
    assert fp["memory"]["total_bytes"] > 0
    assert isinstance(fp["gpu"], list)
    for name in ("PYTHONHASHSEED", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                 "OPENBLAS_NUM_THREADS", "CUBLAS_WORKSPACE_CONFIG"):
        assert name in fp["env_vars"]
    assert "executable" not in fp["python"]
    assert str(Path(sys.executable).parent) not in json.dumps(fp)


def test_packages_are_normalised_and_sorted() -> None:
    packages = fingerprint()["packages"]
    assert packages["scikit-learn"]
    assert packages["reprise-ml"] == "0.1.0"
    assert list(packages) == sorted(packages)
    assert all(name == name.lower() and "_" not in name and "." not in name
               for name in packages)


def test_fingerprint_is_deterministic(tmp_path: Path) -> None:
    a, b = fingerprint(tmp_path), fingerprint(tmp_path)
    assert a == b
    assert fingerprint_hash(a) == fingerprint_hash(b)
    assert fingerprint(tmp_path, refresh=True) == a
    assert len(fingerprint_hash(a)) == 64
    assert diff_environments(a, b) == []


def test_env_var_change_changes_hash_and_shows_in_diff(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    a = fingerprint(tmp_path)
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    b = fingerprint(tmp_path)
    assert fingerprint_hash(a) != fingerprint_hash(b)
    assert diff_environments(a, b) == [EnvChange("env_vars", "OMP_NUM_THREADS", "1", "4")]
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert fingerprint(tmp_path)["env_vars"]["OMP_NUM_THREADS"] is None


def _fake_dist(site: Path, name: str, version: str) -> Path:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return info


def test_package_cache_sees_installs_in_the_same_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    assert "fake-pkg" not in installed_packages()
    info = _fake_dist(site, "Fake_Pkg", "1.0")
    assert installed_packages()["fake-pkg"] == "1.0"  # sys.path entry's mtime moved
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: Fake_Pkg\nVersion: 2.0\n")
    assert fingerprint(refresh=True)["packages"]["fake-pkg"] == "2.0"


def test_gpu_section_from_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA H100 80GB HBM3, 550.54.15, 81559'\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(tmp_path))
    [gpu] = _gpus_smi()
    assert gpu["name"] == "NVIDIA H100 80GB HBM3"
    assert gpu["driver"] == "550.54.15"
    assert gpu["memory_total_bytes"] == 81559 * 1024 * 1024
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert _gpus_smi() == []


def test_cuda_section_only_when_torch_already_imported(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert "cuda" not in fingerprint(tmp_path)
    torch = types.ModuleType("torch")
    torch.version = types.SimpleNamespace(cuda="12.4")  # type: ignore[attr-defined]
    cudnn = types.ModuleType("torch.backends.cudnn")
    cudnn.is_available = lambda: True  # type: ignore[attr-defined]
    cudnn.version = lambda: 90100  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.backends.cudnn", cudnn)
    assert fingerprint(tmp_path)["cuda"] == {"torch_cuda": "12.4", "cudnn": 90100}


# -- diff -----------------------------------------------------------------------------


def test_diff_reports_package_changes_additions_and_removals() -> None:
    a = {"packages": {"numpy": "2.0.0", "old-lib": "1.0", "rich": "13.7.0"}}
    b = {"packages": {"numpy": "2.1.0", "new-lib": "0.3", "rich": "13.7.0"}}
    assert diff_environments(a, b) == [
        EnvChange("packages", "new-lib", None, "0.3"),
        EnvChange("packages", "numpy", "2.0.0", "2.1.0"),
        EnvChange("packages", "old-lib", "1.0", None),
    ]


def test_diff_flattens_nested_sections_and_lists() -> None:
    a = {"gpu": [{"name": "A100", "driver": "550"}], "cpu": {"count": 2}, "git": None}
    b = {"gpu": [{"name": "H100", "driver": "550"}, {"name": "H100", "driver": "550"}],
         "cpu": {"count": 2}, "git": {"commit": "abc", "dirty": False}}
    assert diff_environments(a, b) == [
        EnvChange("git", "commit", None, "abc"),
        EnvChange("git", "dirty", None, False),
        EnvChange("gpu", "0.name", "A100", "H100"),
        EnvChange("gpu", "1.driver", None, "550"),
        EnvChange("gpu", "1.name", None, "H100"),
    ]


def test_diff_tells_a_bool_from_an_int() -> None:
    assert diff_environments({"x": {"k": 1}}, {"x": {"k": True}}) == [
        EnvChange("x", "k", 1, True)]


# -- git ------------------------------------------------------------------------------


@pytest.fixture
def git_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Git that ignores the developer's configuration and stops at tmp_path."""
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    for var in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{var}_NAME", "Test")
        monkeypatch.setenv(f"GIT_{var}_EMAIL", "test@example.com")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, timeout=30).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path, git_env: None) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q", "-b", "main")
    (root / "train.py").write_text("lr = 0.1\n")
    _git(root, "add", "train.py")
    _git(root, "commit", "-q", "-m", "first")
    return root


def test_git_clean_repository(repo: Path) -> None:
    state = fingerprint(repo)["git"]
    assert state == {"commit": _git(repo, "rev-parse", "HEAD"), "branch": "main",
                     "dirty": False, "diff_hash": None}


def test_git_modifications_change_the_diff_hash(repo: Path) -> None:
    (repo / "train.py").write_text("lr = 0.2\n")
    first = git_state(repo)
    assert first is not None and first["dirty"] is True
    assert first["diff_hash"] is not None and len(first["diff_hash"]) == 64
    assert git_state(repo) == first
    (repo / "train.py").write_text("lr = 0.3\n")
    second = git_state(repo)
    assert second is not None and second["dirty"] is True
    assert second["diff_hash"] != first["diff_hash"]
    _git(repo, "add", "train.py")  # staged changes count too
    assert git_state(repo) == second
    _git(repo, "checkout", "-q", "HEAD", "--", "train.py")
    assert git_state(repo) == {**second, "dirty": False, "diff_hash": None}


def test_git_untracked_files_count(repo: Path) -> None:
    (repo / "notes.txt").write_text("one")
    first = git_state(repo)
    assert first is not None and first["dirty"] is True and first["diff_hash"]
    (repo / "notes.txt").write_text("two")
    second = git_state(repo)
    assert second is not None and second["diff_hash"] not in (None, first["diff_hash"])
    (repo / "notes.txt").unlink()
    (repo / "other.txt").write_text("two")
    third = git_state(repo)
    assert third is not None and third["diff_hash"] not in (None, second["diff_hash"])


def test_git_ignores_ignored_files_and_the_workspace(repo: Path) -> None:
    (repo / ".gitignore").write_text("*.log\n")
    _git(repo, "add", ".gitignore")
    _git(repo, "commit", "-q", "-m", "ignore logs")
    (repo / "run.log").write_text("noise")
    (repo / ".reprise" / "artifacts").mkdir(parents=True)
    (repo / ".reprise" / "meta.db").write_bytes(b"changes every run")
    (repo / "sub" / ".reprise").mkdir(parents=True)
    (repo / "sub" / ".reprise" / "meta.db").write_bytes(b"also")
    state = git_state(repo)
    assert state is not None and state["dirty"] is False and state["diff_hash"] is None


def test_git_from_a_subdirectory_describes_the_whole_repository(repo: Path) -> None:
    (repo / "pkg").mkdir()
    (repo / "notes.txt").write_text("one")
    (repo / "train.py").write_text("lr = 0.2\n")
    assert git_state(repo / "pkg") == git_state(repo)


def test_git_detached_head_has_no_branch(repo: Path) -> None:
    _git(repo, "checkout", "-q", "--detach")
    state = git_state(repo)
    assert state is not None and state["branch"] is None


def test_git_none_outside_a_repository(tmp_path: Path, git_env: None) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    assert fingerprint(plain)["git"] is None
    assert git_state(tmp_path / "missing") is None


def test_git_none_without_commits(tmp_path: Path, git_env: None) -> None:
    _git(tmp_path, "init", "-q")
    (tmp_path / "a.txt").write_text("a")
    assert git_state(tmp_path) is None


def test_git_none_without_git(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(repo / "no-bin"))
    assert git_state(repo) is None


# -- scope, distributions, seeding, start-up ------------------------------------------


def test_scope_fingerprint_keeps_named_installed_packages() -> None:
    fp = {"python": {"minor": "3.11", "version": "3.11.7"},
          "packages": {"numpy": "2.1.0", "scikit-learn": "1.5.0", "rich": "13.7.0"}}
    assert scope_fingerprint(fp, ["scikit_learn", "NumPy", "not-installed"]) == {
        "python": "3.11", "packages": {"numpy": "2.1.0", "scikit-learn": "1.5.0"}}
    assert scope_fingerprint(fp, None)["packages"] == fp["packages"]
    assert scope_fingerprint(fp, []) == {"python": "3.11", "packages": {}}


def test_distribution_for_module() -> None:
    assert distribution_for_module("numpy") == "numpy"
    assert distribution_for_module("numpy.linalg") == "numpy"
    assert distribution_for_module("sklearn") == "scikit-learn"
    assert distribution_for_module("reprise") == "reprise-ml"
    assert distribution_for_module("os") is None
    assert distribution_for_module("no_such_module_xyz") is None


def test_submodules_of_regular_packages_skip_the_full_file_scan(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A model's classes are looked up at every package load (``torch.nn.modules...``):
    reading every distribution's file list cost ~1 s of a server's cold start."""
    from importlib import metadata

    import reprise.env._fingerprint as fpm

    real = metadata.packages_distributions
    scans: list[int] = []

    def counting() -> Any:
        scans.append(1)
        return real()

    monkeypatch.setattr(metadata, "packages_distributions", counting)
    monkeypatch.setattr(fpm, "_modules", None)
    assert distribution_for_module("numpy.linalg") == "numpy"
    assert distribution_for_module("sklearn.linear_model._logistic") == "scikit-learn"
    assert scans == []
    # a namespace package (no __init__.py) may span distributions: the full map. Made here
    # (a package folder and its dist-info) so the test needs no particular installed set.
    (tmp_path / "reprisetestns" / "part").mkdir(parents=True)
    (tmp_path / "reprisetestns" / "part" / "mod.py").write_text("")
    info = tmp_path / "reprise_test_ns-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: reprise-test-ns\nVersion: 1.0\n")
    (info / "RECORD").write_text("reprisetestns/part/mod.py,,\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert distribution_for_module("reprisetestns.part.mod") == "reprise-test-ns"
    assert scans == [1]


def test_seed_everything_makes_random_repeatable() -> None:
    seeded = seed_everything(42)
    a = [random.random() for _ in range(3)]
    assert seed_everything(42) == seeded
    assert [random.random() for _ in range(3)] == a
    assert seeded["random"] is True and seeded["numpy"] is True
    assert seeded["torch"] is ("torch" in sys.modules)
    import numpy as np

    seed_everything(7)
    x = np.random.rand(3)
    seed_everything(7)
    assert (np.random.rand(3) == x).all()


@pytest.mark.parametrize("bad", [-1, 2**32, 1.5, True])
def test_seed_everything_rejects_bad_seeds(bad: object) -> None:
    with pytest.raises(ValueError, match="seed must be"):
        seed_everything(bad)  # type: ignore[arg-type]


def test_import_and_fingerprint_load_nothing_heavy(tmp_path: Path) -> None:
    code = ("import reprise.env, sys; heavy = ('torch', 'numpy', 'sklearn', 'psutil');"
            "before = [m for m in heavy if m in sys.modules];"
            "reprise.env.fingerprint();"
            "after = [m for m in heavy[:3] if m in sys.modules];"
            "print(before, after)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60, cwd=tmp_path).stdout.strip()
    assert out == "[] []"
