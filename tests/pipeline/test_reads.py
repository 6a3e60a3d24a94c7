"""What a step reads beyond its declared inputs (files it opens, environment variables
its code reads) is watched while it runs, recorded on the run and on the cache entry,
checked before the entry is reused, and warned about once."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import reprise
from reprise.core.errors import ConfigError
from reprise.pipeline import _reads
from reprise.pipeline._files import FileHasher
from reprise.pipeline._reads import CHANGED, WatchSpec, read_key, stale_reads, watch_reads

FLOW = '''
import os
import tempfile
from pathlib import Path

import reprise
from reprise import File, step

SETTINGS = SETTINGS_PATH


@step
def configured(n: int) -> str:
    with open(SETTINGS) as f:  # a hard-coded path: not an input
        return f.read() * n


@step
def from_env(n: int) -> str:
    return os.environ.get("RW_TEST_MODE", "plain") * n


@step
def clean(src: File, n: int) -> int:
    text = Path(src).read_text()  # its declared input
    scratch = Path(tempfile.mkdtemp()) / "scratch.txt"
    scratch.write_text(text)  # written first, then read: the step's own file
    own = Path("own-output.txt")
    own.write_text(text)
    os.environ["RW_SET_BY_STEP"] = "1"  # set first, then read
    return len(scratch.read_text()) + len(own.read_text()) + int(os.environ["RW_SET_BY_STEP"]) + n


@step
def branch(tag: str) -> str:
    return Path(SETTINGS).read_text() + tag + os.environ.get("RW_TEST_MODE", "")


@step
def join(a: str, b: str) -> str:
    return a + b


@step
def appends(n: int) -> str:
    with open(SETTINGS, "r+") as f:  # reads the file, then changes it
        text = f.read()
        f.write("!")
    return text


@reprise.pipeline
def by_file(n: int = 2):
    return configured(n)


@reprise.pipeline
def by_env(n: int = 2):
    return from_env(n)


@reprise.pipeline
def declared(src: File = File("input.txt"), n: int = 1):
    return clean(src, n)


@reprise.pipeline
def parallel():
    return join(branch("a"), branch("b"))


@reprise.pipeline
def self_changing():
    return appends(1)
'''


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    root = tmp_path / "proj"
    root.mkdir()
    settings = tmp_path / "settings.txt"  # outside the project: a machine-local config
    settings.write_text("alpha")
    (root / "input.txt").write_text("declared input")
    (root / "readflow.py").write_text(textwrap.dedent(FLOW).replace(
        "SETTINGS_PATH", repr(str(settings))))
    monkeypatch.chdir(root)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delenv("RW_TEST_MODE", raising=False)
    monkeypatch.delenv("RW_SET_BY_STEP", raising=False)
    monkeypatch.delenv("REPRISE_WATCH_READS", raising=False)
    monkeypatch.setattr(_reads, "_warned", set())
    ws = reprise.init(root)
    yield root, settings, ws
    ws.close()
    sys.modules.pop("readflow", None)


def flow(name: str) -> Any:
    from reprise.pipeline import load_pipeline

    return load_pipeline(f"readflow.py:{name}")


def test_a_hard_coded_file_changed_between_runs_re_executes_the_step(project) -> None:  # type: ignore[no-untyped-def]
    root, settings, ws = project
    first = flow("by_file").run(workspace=ws, workers=1)
    assert first["configured"] == "alphaalpha"
    assert list(first.nodes["configured"].reads["files"]) == [str(settings)]
    assert flow("by_file").run(workspace=ws, workers=1).reused == ["configured"]
    settings.write_text("beta")
    again = flow("by_file").run(workspace=ws, workers=1)
    assert again.executed == ["configured"] and again["configured"] == "betabeta"
    assert again.nodes["configured"].rerun_because == [f"file {settings} changed"]
    settings.unlink()
    with pytest.raises(reprise.pipeline.StepFailedError):  # gone: re-executed, and fails
        flow("by_file").run(workspace=ws, workers=1)


def test_an_environment_variable_changed_between_runs_re_executes_the_step(
        project, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    root, _, ws = project
    first = flow("by_env").run(workspace=ws, workers=1)
    assert first["from_env"] == "plainplain"
    assert first.nodes["from_env"].reads == {"env": {"RW_TEST_MODE": None}}  # read while unset
    assert flow("by_env").run(workspace=ws, workers=1).reused == ["from_env"]
    monkeypatch.setenv("RW_TEST_MODE", "s3cret-value")
    set_ = flow("by_env").run(workspace=ws, workers=1)
    assert set_.executed == ["from_env"] and set_["from_env"] == "s3cret-values3cret-value"
    assert set_.nodes["from_env"].rerun_because == ["$RW_TEST_MODE is set"]
    assert flow("by_env").run(workspace=ws, workers=1).reused == ["from_env"]
    monkeypatch.setenv("RW_TEST_MODE", "other")
    assert flow("by_env").run(workspace=ws, workers=1).executed == ["from_env"]
    monkeypatch.delenv("RW_TEST_MODE")
    back = flow("by_env").run(workspace=ws, workers=1)
    assert back.executed == ["from_env"]  # the entry now holds the value "other"
    assert back.nodes["from_env"].rerun_because == ["$RW_TEST_MODE is unset"]
    # the value is never stored in clear text: not in the cache index, the run journals
    # or the database (only in the step's own output, which returns it)
    ws.metadata.get_step_runs(set_.run_id)  # ingests the journals into the database
    stored = {p: p.read_bytes() for p in (root / ".reprise").rglob("*")
              if p.is_file() and "artifacts" not in p.parts}
    assert any(b"RW_TEST_MODE" in text for text in stored.values())
    assert not [p for p, text in stored.items() if b"s3cret" in text]
    digest = set_.nodes["from_env"].reads["env"]["RW_TEST_MODE"]
    assert digest == _reads.env_digest("s3cret-value", read_key(root / ".reprise" / "cache"))
    assert digest != _reads.env_digest("s3cret-value", "11" * 32)  # keyed per workspace


def test_a_step_reading_only_its_inputs_is_cached_without_a_warning(
        project, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    root, _, ws = project
    caplog.set_level(logging.WARNING, logger="reprise")
    first = flow("declared").run(workspace=ws, workers=1)
    assert first.executed == ["clean"] and first.nodes["clean"].reads == {}
    assert not [r for r in caplog.records if "declare" in r.getMessage()]
    assert flow("declared").run(workspace=ws, workers=1).reused == ["clean"]
    (root / "input.txt").write_text("changed input")  # declared: changes the key itself
    assert flow("declared").run(workspace=ws, workers=1).executed == ["clean"]


def test_undeclared_reads_are_warned_once_with_the_way_to_declare_them(
        project, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    root, settings, ws = project
    caplog.set_level(logging.WARNING, logger="reprise")
    flow("by_file").run(workspace=ws, workers=1)
    warnings = [r.getMessage() for r in caplog.records if r.name == "reprise.pipeline._reads"]
    assert len(warnings) == 1
    assert "'configured'" in warnings[0] and str(settings) in warnings[0]
    assert "reprise.File" in warnings[0] and "ignore_reads" in warnings[0]
    caplog.clear()
    settings.write_text("gamma")
    assert flow("by_file").run(workspace=ws, workers=1).executed == ["configured"]
    assert not [r for r in caplog.records if r.name == "reprise.pipeline._reads"]  # once
    flow("by_env").run(workspace=ws, workers=1)
    [env_warning] = [r.getMessage() for r in caplog.records]
    assert "$RW_TEST_MODE" in env_warning and "parameter" in env_warning


def test_steps_in_worker_processes_are_watched_too(
        project, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    root, settings, ws = project
    monkeypatch.setenv("RW_TEST_MODE", "x")
    first = flow("parallel").run(workspace=ws, workers=2)
    steps = {s["step_name"]: s for s in ws.metadata.get_step_runs(first.run_id)}
    assert steps["branch"]["details"]["pid"] != steps["branch_2"]["details"]["pid"]
    assert steps["branch"]["details"]["pid"] != os.getpid() or \
        steps["branch_2"]["details"]["pid"] != os.getpid()
    for name in ("branch", "branch_2"):
        reads = steps[name]["details"]["reads"]
        assert list(reads["files"]) == [str(settings)] and list(reads["env"]) == ["RW_TEST_MODE"]
    assert sorted(flow("parallel").run(workspace=ws, workers=2).reused) == [
        "branch", "branch_2", "join"]
    settings.write_text("changed")
    assert sorted(flow("parallel").run(workspace=ws, workers=2).executed) == [
        "branch", "branch_2", "join"]
    monkeypatch.setenv("RW_TEST_MODE", "y")
    assert sorted(flow("parallel").run(workspace=ws, workers=2).executed) == [
        "branch", "branch_2", "join"]


def test_a_file_the_step_changes_while_reading_is_never_reused(project) -> None:  # type: ignore[no-untyped-def]
    root, settings, ws = project
    first = flow("self_changing").run(workspace=ws, workers=1)
    assert first.nodes["appends"].reads["files"][str(settings)] == CHANGED
    again = flow("self_changing").run(workspace=ws, workers=1)
    assert again.executed == ["appends"] and again["appends"] == "alpha!"


def test_turned_off_nothing_is_watched_and_unwatched_entries_miss_once_turned_on(
        project, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    from reprise.store import Workspace

    root, settings, ws = project
    monkeypatch.setenv("REPRISE_WATCH_READS", "0")  # read with the configuration
    off = Workspace.open(root)
    first = flow("by_file").run(workspace=off, workers=1)
    assert first.nodes["configured"].reads == {}
    settings.write_text("beta")
    assert flow("by_file").run(workspace=off, workers=1).reused == ["configured"]  # stale
    off.close()
    monkeypatch.setenv("REPRISE_WATCH_READS", "1")
    on = Workspace.open(root)
    again = flow("by_file").run(workspace=on, workers=1)
    assert again.executed == ["configured"] and again["configured"] == "betabeta"
    assert again.nodes["configured"].rerun_because == ["its reads were not watched"]
    assert flow("by_file").run(workspace=on, workers=1).reused == ["configured"]
    on.close()


def test_reads_listed_in_the_configuration_are_not_watched(
        project, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    from reprise.store import Workspace

    root, settings, _ = project
    config = root / ".reprise" / "config.toml"
    config.write_text(config.read_text()
                      .replace("ignore_reads = []", 'ignore_reads = ["../settings.txt"]')
                      .replace("ignore_env = []", 'ignore_env = ["RW_TEST_MODE"]'))
    ws = Workspace.open(root)
    assert flow("by_file").run(workspace=ws, workers=1).nodes["configured"].reads == {}
    assert flow("by_env").run(workspace=ws, workers=1).nodes["from_env"].reads == {}
    settings.write_text("beta")
    monkeypatch.setenv("RW_TEST_MODE", "x")
    assert flow("by_file").run(workspace=ws, workers=1).reused == ["configured"]
    assert flow("by_env").run(workspace=ws, workers=1).reused == ["from_env"]
    ws.close()


def test_runs_show_lists_the_reads_and_why_a_step_re_executed(
        project, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    root, settings, ws = project
    flow("by_file").run(workspace=ws, workers=1)
    settings.write_text("beta")
    run_id = flow("by_file").run(workspace=ws, workers=1).run_id
    ws.close()
    # a wide terminal: the table wraps long paths (pytest-xdist's are longer), not the words
    env = {**{k: v for k, v in os.environ.items() if k != "REPRISE_WORKSPACE"},
           "COLUMNS": "250"}

    def show(*args: str) -> str:
        res = subprocess.run([sys.executable, "-m", "reprise.cli", "runs", "show", run_id,
                              *args], cwd=root, env=env, capture_output=True, text=True,
                             timeout=120)
        assert res.returncode == 0, res.stderr
        return res.stdout

    reads = json.loads(show("--json"))["reads"]
    assert {(r["step"], r["kind"], r["name"]) for r in reads} == {
        ("configured", "file", str(settings)),
        ("configured", "rerun", f"file {settings} changed")}
    text = show()
    assert "reads not declared as inputs" in text and "settings.txt" in text


def test_what_the_watch_leaves_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Writes, truncations, library imports and library code's variables are not reads;
    enumerating the environment is noted once, not as a read of every variable."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.txt").write_text("x")
    (tmp_path / "rw.txt").write_text("x")
    monkeypatch.setenv("RW_NAMED", "1")
    (tmp_path / "skip.txt").write_text("x")
    spec = WatchSpec(ignore=(str(tmp_path / "ignored"), str(tmp_path / "skip.txt")),
                     code_dirs=_reads._with_real_paths(
        _reads._code_dirs()), key="00" * 32, ignore_env=("RW_IGNORED",))
    (tmp_path / "ignored").mkdir()
    (tmp_path / "ignored" / "f.txt").write_text("x")
    with watch_reads(spec, declared=[str(tmp_path / "declared.txt")]) as seen:
        Path("in.txt").read_text()
        Path("out.txt").write_text("y")  # O_WRONLY|O_TRUNC: the step's own
        Path("out.txt").read_text()
        with open("rw.txt", "r+") as f:  # read and write: a read
            f.read()
        try:
            open("absent.txt")
        except FileNotFoundError:
            pass
        try:  # a memo: looked for, absent, then made by the step
            Path("memo.txt").read_text()
        except FileNotFoundError:
            Path("memo.txt").write_text("computed")
        Path("ignored/f.txt").read_text()
        Path("skip.txt").read_text()
        open("declared.txt", "w").close()
        os.close(os.open("in.txt", os.O_RDONLY))
        import email.mime.text  # noqa: F401 - an import: .py/.pyc opens are not reads
        dict(os.environ)
        os.environ.copy()
        assert os.getenv("RW_NAMED") == "1"  # named after the enumerations: recorded
        os.environ.get("RW_IGNORED")
        import tempfile

        tempfile._get_default_tempdir()  # library code reading TMPDIR etc.
    record = seen.record(FileHasher(None))
    assert set(record["files"]) == {str(tmp_path / "in.txt"), str(tmp_path / "rw.txt"),
                                   str(tmp_path / "absent.txt"), str(tmp_path / "memo.txt")}
    assert record["files"][str(tmp_path / "absent.txt")] is None
    assert record["files"][str(tmp_path / "memo.txt")] is None  # absent when it was read
    assert set(record["env"]) == {"RW_NAMED"} and record["env_enumerated"] is True
    assert _reads._active is None  # and os.environ is itself again
    assert type(os.environ).__getitem__ is _reads._ORIGINAL["__getitem__"]


def test_stale_reads_names_each_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "f.txt"
    f.write_text("1")
    hasher, key = FileHasher(None), "22" * 32
    monkeypatch.setenv("RW_A", "a")
    recorded = {"files": {str(f): hasher.hash_file(f), str(tmp_path / "new"): None},
                "env": {"RW_A": _reads.env_digest("a", key), "RW_B": None}}
    assert stale_reads(recorded, hasher, key) == []
    f.write_text("2")
    (tmp_path / "new").write_text("now here")
    monkeypatch.setenv("RW_B", "b")
    monkeypatch.delenv("RW_A")
    assert stale_reads(recorded, hasher, key) == [
        f"file {f} changed", f"file {tmp_path / 'new'} appeared", "$RW_A is unset",
        "$RW_B is set"]


def test_the_workspace_key_is_made_once(tmp_path: Path) -> None:
    key = read_key(tmp_path)
    assert len(key) == 64 and read_key(tmp_path) == key
    assert oct((tmp_path / "reads.key").stat().st_mode & 0o777) == "0o600"
    assert [p.name for p in tmp_path.iterdir()] == ["reads.key"]  # no temp file left


def test_bad_watch_settings_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from reprise.core._config import load_config

    reprise.init(tmp_path).close()
    config = tmp_path / ".reprise" / "config.toml"
    assert load_config(tmp_path).watch_reads is True
    monkeypatch.setenv("REPRISE_WATCH_READS", "maybe")
    with pytest.raises(ConfigError, match="REPRISE_WATCH_READS"):
        load_config(tmp_path)
    monkeypatch.delenv("REPRISE_WATCH_READS")
    config.write_text(config.read_text().replace("watch_reads = true", 'watch_reads = "no"'))
    with pytest.raises(ConfigError, match="watch_reads"):
        load_config(tmp_path)
    config.write_text(config.read_text().replace('watch_reads = "no"', "watch_reads = false")
                      .replace("ignore_env = []", "ignore_env = [3]"))
    with pytest.raises(ConfigError, match="ignore_env"):
        load_config(tmp_path)


def test_a_watch_inside_a_watch_leaves_the_recording_to_the_outer_one(tmp_path: Path) -> None:
    """A pipeline run inside a step: what its steps read, the outer step depends on."""
    (tmp_path / "f.txt").write_text("x")
    spec = WatchSpec(ignore=(), code_dirs=(), key="00" * 32)
    with watch_reads(spec) as outer:
        with watch_reads(spec) as inner:
            (tmp_path / "f.txt").read_text()
        assert inner is None and _reads._active is outer
    assert outer is not None and list(outer.files) == [str(tmp_path / "f.txt")]
    assert _reads._active is None
