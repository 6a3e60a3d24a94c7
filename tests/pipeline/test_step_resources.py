"""``@step(resources=...)`` and choosing an executor, without a cluster: what Ray
is asked for, what is refused, and the error when Ray is not installed."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from reprise import step
from reprise.core.errors import ConfigError, MissingExtraError, UserError
from reprise.pipeline._execute import Task
from reprise.pipeline._executors import LocalExecutor, open_executor
from reprise.pipeline._ray import CRASH_RETRIES, ray_options
from reprise.pipeline._step import PipelineDefinitionError, Resources


def _task(st: object) -> Task:
    return Task(node="n", module="m", qualname="q", module_file=None, inputs={}, seed=0,
                artifacts_url="memory://", resources=st.resources,  # type: ignore[attr-defined]
                retries=st.retries)  # type: ignore[attr-defined]


def test_declared_resources_become_the_ray_tasks_options() -> None:
    @step(resources={"cpus": 2, "gpus": 0.5, "memory": 2**30, "reprise_node2": 1}, retries=3)
    def heavy() -> int:
        return 1

    assert ray_options(_task(heavy)) == {
        "num_cpus": 2.0, "num_gpus": 0.5, "memory": 2**30, "resources": {"reprise_node2": 1.0},
        "max_retries": 0, "retry_exceptions": False}  # its own retries cover crashes


def test_default_is_one_cpu_and_crash_retries_only() -> None:
    @step
    def light() -> int:
        return 1

    assert ray_options(_task(light)) == {"num_cpus": 1.0, "num_gpus": 0.0,
                                         "max_retries": CRASH_RETRIES, "retry_exceptions": False}


@pytest.mark.parametrize("bad", [{"cpus": -1}, {"gpus": "one"}, {"memory": 0},
                                 {"memory": 1.5}, {"CPU": 1}, {"num_gpus": 1}, {"": 1},
                                 {"node2": float("inf")}, {"node2": True}, [("cpus", 1)]])
def test_bad_resources_are_refused_when_the_step_is_declared(bad: object) -> None:
    with pytest.raises(PipelineDefinitionError, match="resource"):
        Resources.of(bad)  # type: ignore[arg-type]


def test_custom_resources_are_kept_by_name() -> None:
    assert Resources.of({"x": 1, "cpu": 2}) == Resources(cpus=2.0, custom=(("x", 1.0),))


def test_executor_choice_is_validated() -> None:
    assert isinstance(open_executor(None), LocalExecutor)
    with pytest.raises(UserError, match="executor 'dask' does not exist"):
        open_executor("dask")
    with pytest.raises(UserError, match="--executor ray"):
        open_executor("local", address="127.0.0.1:6379")


def test_without_ray_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # restored afterwards
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    with pytest.raises(MissingExtraError, match=r"pip install 'reprise-ml\[ray\]'"):
        open_executor("ray")


def test_a_bad_address_is_refused_before_ray_is_asked() -> None:
    from reprise.pipeline._ray import check_ray_address as _check_reachable

    for bad in ("nowhere", "127.0.0.1:99999", "127.0.0.1:0", "ray://"):
        with pytest.raises(UserError, match="must be auto, HOST:PORT"):
            _check_reachable(bad, 1.0)
    with pytest.raises(UserError, match="cannot reach the Ray cluster at '127.0.0.1:9'"):
        _check_reachable("127.0.0.1:9", 1.0)
    import socket

    with socket.socket() as listener:  # accepts connections, never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        t0 = time.monotonic()
        with pytest.raises(UserError, match="does not answer as a Ray cluster within 1 s"):
            _check_reachable(f"127.0.0.1:{port}", 1.0)
        assert time.monotonic() - t0 < 5


def test_config_executor_section(tmp_path: Path) -> None:
    import reprise
    from reprise.core._config import load_config

    reprise.init(tmp_path).close()
    cfg = tmp_path / ".reprise" / "config.toml"
    assert load_config(tmp_path).executor == "local"
    text = cfg.read_text()
    cfg.write_text(text.replace('kind = "local"', 'kind = "ray"').replace(
        'address = ""', 'address = "ray://10.0.0.1:10001"'))
    got = load_config(tmp_path)
    assert (got.executor, got.executor_address) == ("ray", "ray://10.0.0.1:10001")
    cfg.write_text(text.replace('kind = "local"', 'kind = "spark"'))
    with pytest.raises(ConfigError, match=r'\[executor\] kind must be "local" or "ray"'):
        load_config(tmp_path)


class _FakeRay:
    """What the executor asks Ray about the cluster's nodes."""

    def __init__(self, nodes: list[str]) -> None:
        import types

        self._nodes = nodes
        self.util = types.SimpleNamespace(get_node_ip_address=lambda: "10.0.0.1")

    def nodes(self) -> list[dict[str, object]]:
        return [{"NodeManagerAddress": a, "Alive": True} for a in self._nodes]


@pytest.mark.parametrize(("url", "nodes", "refused"), [
    ("/ws/.reprise/artifacts", ["10.0.0.1"], False),
    ("/ws/.reprise/artifacts", ["10.0.0.1", "10.0.0.2"], True),
    ("file:///ws/artifacts", ["10.0.0.2"], True),
    ("s3://bucket/prefix", ["10.0.0.1", "10.0.0.2"], False),
])
def test_a_local_artifact_folder_is_refused_for_nodes_on_other_machines(
        url: str, nodes: list[str], refused: bool) -> None:
    import threading

    from reprise.pipeline._ray import RayExecutor

    ex = RayExecutor.__new__(RayExecutor)
    ex.ray, ex._owns, ex._lock, ex._running = _FakeRay(nodes), False, threading.Lock(), {}
    if refused:
        with pytest.raises(UserError, match="10.0.0.2 cannot read"):
            ex._check_shared_store(url)
    else:
        ex._check_shared_store(url)


@pytest.mark.parametrize("kind", ["file", "dir"])
def test_a_path_input_missing_on_the_worker_comes_from_the_artifact_store(
        tmp_path: Path, kind: str) -> None:
    from reprise.pipeline._ship import localize_paths
    from reprise.store import open_artifact_store, save_object

    store = open_artifact_store(tmp_path / "store")
    src = tmp_path / "driver" / "data"
    if kind == "dir":
        src.mkdir(parents=True)
        (src / "a.txt").write_text("rows")
    else:
        src.parent.mkdir()
        src.write_text("rows")
    art = save_object(store, src).to_dict()
    task = Task(node="n", module="m", qualname="q", module_file=None, seed=0,
                artifacts_url=str(tmp_path / "store"),
                inputs={"x": ("path", {"kind": kind, "path": str(src), "artifact": art}),
                        "n": ("value", 3)})
    assert localize_paths(task, tmp_path / "inputs").inputs == task.inputs  # it exists here
    moved = tmp_path / "driver-gone"
    (tmp_path / "driver").rename(moved)  # as on a node that cannot see the driver's disk
    got = localize_paths(task, tmp_path / "inputs").inputs
    path = Path(got["x"][1]["path"])
    assert path.is_relative_to(tmp_path / "inputs") and got["n"] == ("value", 3)
    assert (path / "a.txt" if kind == "dir" else path).read_text() == "rows"


def test_snapshot_folders_of_dead_workers_are_swept(tmp_path: Path) -> None:
    import os

    from reprise.pipeline._ship import _sweep

    dead, live, other = (tmp_path / "0123abcd-99999999-x1", tmp_path / f"0123abcd-{os.getpid()}-x2",
                         tmp_path / "inputs")
    for folder in (dead, live, other):
        folder.mkdir()
    _sweep(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name])


def test_verify_refuses_a_bad_ray_address_before_replaying(tmp_path: Path) -> None:
    """`reprise verify` checks the address as `reprise run` does, in its own process:
    exit 2 with the message alone (it was a traceback of the replay process, twice)."""
    from tests.pipeline.test_pipelines import cli, run_json, write_project

    write_project(tmp_path)
    cli(tmp_path, "init", ".")
    run_id = run_json(tmp_path)["run_id"]
    for args, says in ((["--ray-address", "auto"], "a Ray address was given with the local"),
                       (["--executor", "ray", "--ray-address", "127.0.0.1:99999"],
                        "must be auto, HOST:PORT")):
        res = cli(tmp_path, "verify", run_id, *args, check=False)
        assert res.returncode == 2, res.stderr[-2000:]
        assert says in res.stderr and "Traceback" not in res.stderr, res.stderr[-2000:]
