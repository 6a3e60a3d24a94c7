"""The Ray executor on a real two-node cluster (the ``ray_cluster`` fixture): same
outputs as the local executor, a step placed on the second node by its custom
resource, cache hits that schedule nothing, failures, retries, Ctrl-C, the code
snapshot shipped to workers (and refused when tampered with), verify of a Ray run.

Everything goes through ``reprise`` driver processes, as a user runs it; they share
one workspace (module-scoped) so the cluster's workers are warm after the first run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from tests._ray_cluster import NODE2

pytest.importorskip("ray")

FLOW = f'''
import sys
import numpy as np
import reprise
from reprise import step


@step
def make(n: int) -> np.ndarray:
    return np.random.rand(n)


@step
def left(x: np.ndarray) -> np.ndarray:
    return x * 2.0


@step(resources={{"{NODE2}": 1}})
def right(x: np.ndarray, marks: str) -> np.ndarray:
    # where it ran (a Ray worker's argv names its node's folders); not part of the output
    with open(marks + "/right.argv", "a") as f:
        f.write(" ".join(sys.argv) + "\\n")
    return x + 1.0


@step
def combine(a: np.ndarray, b: np.ndarray) -> dict:
    reprise.log_metric("total", float(a.sum() + b.sum()))
    return {{"total": float(a.sum() + b.sum())}}


@reprise.pipeline
def demo(n: int = 100, marks: str = "."):
    x = make(n)
    return combine(left(x), right(x, marks))
'''

FAULTS = '''
import os, time
import reprise
from reprise import step


@step(cache=False)
def boom(x: int) -> int:
    raise ValueError(f"boom-{x}-marker")


@reprise.pipeline
def failing(x: int = 7):
    return boom(x)


@step(cache=False, retries=1)
def flaky(marks: str) -> int:
    path = os.path.join(marks, "flaky.try")
    first = not os.path.exists(path)
    open(path, "a").write("x")
    if first:
        raise RuntimeError("first attempt fails")
    return 1


@step(cache=False)
def crashy(marks: str) -> int:
    path = os.path.join(marks, "crashy.try")
    first = not os.path.exists(path)
    open(path, "a").write("x")
    if first:
        os._exit(3)  # the worker process dies: Ray's to retry
    return 2


@step(cache=False, retries=1)
def crashy_own(marks: str) -> int:
    path = os.path.join(marks, "crashy_own.try")
    first = not os.path.exists(path)
    open(path, "a").write("x")
    if first:
        os._exit(3)  # a failed attempt of a step with retries of its own
    return 3


@reprise.pipeline
def retrying(marks: str = "."):
    return flaky(marks), crashy(marks), crashy_own(marks)


@step(cache=False)
def sleepy(marks: str) -> int:
    open(os.path.join(marks, f"sleepy.{os.getpid()}"), "w").close()
    time.sleep(120)
    return 0


@reprise.pipeline
def slow(marks: str = "."):
    return sleepy(marks)
'''

MUTATE = f'''
import reprise
from reprise import step

VALUE = "snapshotted"


@step(cache=False)
def edit(path: str) -> int:
    # after the driver took the snapshot: this module changes on disk
    text = open(path).read()
    open(path, "w").write(text.replace('VALUE = "snapshotted"', 'VALUE = "edited"'))
    return 1


@step(cache=False, resources={{"{NODE2}": 1}})
def read(done: int) -> str:
    return VALUE


@reprise.pipeline
def mutating(path: str = "mutate.py"):
    return read(edit(path))
'''

TAMPER = '''
import reprise
from reprise import step


@step(cache=False)
def plain() -> int:
    return 42


@reprise.pipeline
def tampered():
    return plain()
'''

COUNT = '''
import json, sys
import reprise
from reprise.pipeline import RayExecutor
from reprise.pipeline._load import load_pipeline
from reprise.pipeline._runner import run_pipeline

ex = RayExecutor(sys.argv[1])
result = run_pipeline(load_pipeline("flow.py:demo"), {"marks": sys.argv[2]},
                      workspace=reprise.open_workspace("."), executor=ex)
ex.shutdown()
print(json.dumps({"submitted": ex.submitted, "reused": result.reused}))
'''


# Ctrl-C in a driver that stays connected to the cluster (it called ray.init itself):
# the step's worker must be gone while the driver still runs, by ray.cancel alone
CANCEL = '''
import json, os, sys, time
import ray
ray.init(address=sys.argv[1], log_to_driver=False)
import reprise
from reprise.pipeline import RayExecutor
from reprise.pipeline._load import load_pipeline
from reprise.pipeline._runner import run_pipeline


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


marks = sys.argv[2]
try:
    run_pipeline(load_pipeline("faults.py:slow"), {"marks": marks},
                 workspace=reprise.open_workspace("."), executor=RayExecutor())
except KeyboardInterrupt:
    pid = int(os.listdir(marks)[0].split(".")[1])
    deadline = time.monotonic() + 15
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    print(json.dumps({"gone": not alive(pid), "connected": ray.is_initialized()}))
'''


@pytest.fixture(scope="module")
def proj(tmp_path_factory: pytest.TempPathFactory, ray_cluster: Any) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("rayws")
    marks = root / "marks"
    marks.mkdir()
    for name, text in (("flow.py", FLOW), ("faults.py", FAULTS), ("mutate.py", MUTATE),
                       ("tamper.py", TAMPER), ("count.py", COUNT), ("cancel.py", CANCEL)):
        (root / name).write_text(textwrap.dedent(text))
    env = {**{k: v for k, v in os.environ.items() if k != "REPRISE_WORKSPACE"},
           **ray_cluster.env}
    subprocess.run([sys.executable, "-m", "reprise.cli", "init"], cwd=root, env=env,
                   check=True, capture_output=True, timeout=60)
    return {"root": root, "marks": marks, "env": env, "address": ray_cluster.address,
            "cluster": ray_cluster}


def cli(proj: dict[str, Any], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "reprise.cli", *args], cwd=proj["root"],
                          env=proj["env"], capture_output=True, text=True, timeout=timeout)


def on_ray(proj: dict[str, Any], *args: str) -> list[str]:
    return [*args, "--executor", "ray", "--ray-address", proj["address"]]


def run_json(proj: dict[str, Any], *args: str) -> dict[str, Any]:
    res = cli(proj, "run", *args, "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    return dict(json.loads(res.stdout))


def test_ray_gives_the_local_executors_outputs_with_a_step_on_the_second_node(
        proj: dict[str, Any]) -> None:
    marks = str(proj["marks"])
    local = run_json(proj, "flow.py:demo", "-p", f"marks={marks}", "--executor", "local")
    assert sorted(local["executed"]) == ["combine", "left", "make", "right"]
    ray = run_json(proj, *on_ray(proj, "flow.py:demo", "-p", f"marks={marks}", "--no-cache"))
    assert sorted(ray["executed"]) == ["combine", "left", "make", "right"]
    assert ray["outputs"] == local["outputs"]
    proj["ray_run"] = ray["run_id"]
    lines = (proj["marks"] / "right.argv").read_text().splitlines()
    assert len(lines) == 2  # the local run's, then the Ray run's
    node2_dir = str(proj["cluster"].folders[1])
    assert node2_dir in lines[1], lines[1]  # a worker of the second node ran it


def test_a_cache_hit_schedules_no_ray_task(proj: dict[str, Any]) -> None:
    res = subprocess.run([sys.executable, "count.py", proj["address"], str(proj["marks"])],
                         cwd=proj["root"], env=proj["env"], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    doc = json.loads(res.stdout.strip().splitlines()[-1])
    assert doc == {"submitted": 0, "reused": ["make", "left", "right", "combine"]}


def test_verify_of_a_ray_run_on_ray_and_locally(proj: dict[str, Any]) -> None:
    run_id = proj.get("ray_run")
    if run_id is None:
        pytest.skip("needs the Ray run of the first test")
    for args in (on_ray(proj, "verify", run_id, "--json"), ["verify", run_id, "--json"]):
        res = cli(proj, *args)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
        doc = json.loads(res.stdout)
        assert doc["ok"] and {s["status"] for s in doc["steps"]} == {"identical"}


def test_a_failing_step_fails_the_run_with_its_traceback(proj: dict[str, Any]) -> None:
    res = cli(proj, "run", *on_ray(proj, "faults.py:failing"))
    assert res.returncode == 1
    assert "Traceback" in res.stderr and "boom-7-marker" in res.stderr
    assert "faults.py" in res.stderr and "step 'boom' failed" in res.stderr


def test_retries_exceptions_by_the_step_and_crashes_by_ray(proj: dict[str, Any]) -> None:
    marks = proj["root"] / "marks-retry"
    marks.mkdir()
    out = run_json(proj, *on_ray(proj, "faults.py:retrying", "-p", f"marks={marks}"))
    assert sorted(out["executed"]) == ["crashy", "crashy_own", "flaky"]
    assert (marks / "flaky.try").read_text() == "xx"  # failed once, retried by the runner
    assert (marks / "crashy.try").read_text() == "xx"  # its worker died once, Ray re-ran it
    assert (marks / "crashy_own.try").read_text() == "xx"  # the step's own retry
    import reprise

    ws = reprise.open_workspace(proj["root"])
    try:
        ws.recover()
        attempts = {s["step_name"]: (s.get("details") or {}).get("attempts")
                    for s in ws.metadata.get_step_runs(out["run_id"])}
    finally:
        ws.close()
    assert attempts.get("crashy_own") == 2 and attempts.get("flaky") == 2, attempts


def test_the_snapshotted_code_runs_on_the_second_node(proj: dict[str, Any]) -> None:
    path = proj["root"] / "mutate.py"
    original = path.read_text()
    try:
        res = cli(proj, "run", *on_ray(proj, "mutate.py:mutating", "--json", "-p",
                                       f"path={path}"))
        assert res.returncode == 0, res.stderr[-3000:]
        assert 'VALUE = "edited"' in path.read_text()  # the file did change mid-run
        run_id = json.loads(res.stdout)["run_id"]
        assert run_id
        value = _output_value(proj, json.loads(res.stdout)["outputs"]["read"]["output"])
        assert value == "snapshotted"
    finally:
        path.write_text(original)


def test_ctrl_c_cancels_the_running_step(proj: dict[str, Any]) -> None:
    marks = proj["root"] / "marks-sigint"
    marks.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "reprise.cli", "run",
                             *on_ray(proj, "faults.py:slow", "-p", f"marks={marks}")],
                            cwd=proj["root"], env=proj["env"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        while not list(marks.iterdir()) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            time.sleep(0.2)
        started = list(marks.iterdir())
        assert started, "the step did not start"
        pid = int(started[0].name.split(".")[1])
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
        assert proc.returncode != 0
        deadline = time.monotonic() + 15
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(pid), f"the step's worker {pid} still runs after Ctrl-C"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_ctrl_c_cancels_the_step_while_the_driver_stays_connected(
        proj: dict[str, Any]) -> None:
    marks = proj["root"] / "marks-cancel"
    marks.mkdir()
    proc = subprocess.Popen([sys.executable, "cancel.py", proj["address"], str(marks)],
                            cwd=proj["root"], env=proj["env"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        while not list(marks.iterdir()) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            time.sleep(0.2)
        assert list(marks.iterdir()), "the step did not start"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert json.loads(out.strip().splitlines()[-1]) == {"gone": True, "connected": True}, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def test_config_selects_ray_and_a_bad_address_fails_fast(proj: dict[str, Any]) -> None:
    t0 = time.monotonic()
    res = cli(proj, "run", "tamper.py:tampered", "--executor", "ray", "--ray-address",
              "127.0.0.1:9")
    assert res.returncode == 2, res.stderr[-2000:]
    assert "cannot reach the Ray cluster at '127.0.0.1:9'" in res.stderr
    assert time.monotonic() - t0 < 60
    config = proj["root"] / ".reprise" / "config.toml"
    original = config.read_text()
    try:
        config.write_text(original.replace('kind = "local"', 'kind = "ray"').replace(
            'address = ""', f'address = "{proj["address"]}"'))
        out = run_json(proj, "tamper.py:tampered", "--no-cache")
        assert out["executed"] == ["plain"]
        proj["tamper_run"] = out["run_id"]
        res = cli(proj, "run", "tamper.py:tampered", "--ray-address", "127.0.0.1:9")
        assert res.returncode == 2 and "127.0.0.1:9" in res.stderr  # the flag wins
    finally:
        config.write_text(original)


def test_a_tampered_snapshot_is_refused(proj: dict[str, Any]) -> None:
    run_id = proj.get("tamper_run")
    if run_id is None:
        pytest.skip("needs the Ray run of tamper.py by the config test")
    snap = _snapshot_blob(proj, run_id)
    original = snap.read_bytes()
    snap.chmod(0o644)
    snap.write_bytes(original.replace(b"return 42", b"return 43"))
    try:
        res = cli(proj, "run", *on_ray(proj, "tamper.py:tampered", "--no-cache"))
        assert res.returncode == 1
        assert "SnapshotMismatchError" in res.stderr and "refusing" in res.stderr
    finally:
        snap.write_bytes(original)


def _output_value(proj: dict[str, Any], h: str) -> Any:
    import reprise
    from reprise.store import load_object

    ws = reprise.open_workspace(proj["root"])
    try:
        return load_object(ws.artifacts, h, "json", {})
    finally:
        ws.close()


def _snapshot_blob(proj: dict[str, Any], run_id: str) -> Path:
    import reprise

    ws = reprise.open_workspace(proj["root"])
    try:
        path = ws.artifacts.local_path(ws.metadata.run_artifacts(run_id)["code"].hash)
    finally:
        ws.close()
    assert path is not None
    return Path(path)
