"""`import reprise` and the CLI's start-up stay cheap."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HEAVY = ["torch", "sklearn", "fastapi", "uvicorn", "starlette", "sqlalchemy", "alembic",
         "pandas", "pyarrow", "fsspec", "mlflow", "psutil", "pandera", "pydantic", "opentelemetry",
         "ray", "s3fs", "botocore", "boto3", "aiobotocore"]


def _loaded(code: str) -> set[str]:
    probe = f"{code}\nimport sys, json; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    return {m.split(".")[0] for m in json.loads(out.strip().splitlines()[-1])}


def test_import_reprise_loads_nothing_heavy() -> None:
    assert not _loaded("import reprise") & set(HEAVY)


def test_cli_module_loads_nothing_heavy() -> None:
    assert not _loaded("import reprise.cli._app") & (set(HEAVY) - {"pydantic"})  # typer's


def test_data_package_and_fast_cli_path_load_nothing_heavy() -> None:
    assert not _loaded("import reprise.data") & set(HEAVY)
    assert not _loaded("import reprise.cli._fast") & set(HEAVY)
    assert not _loaded("import reprise.train") & set(HEAVY + ["safetensors", "skops"])
    assert not _loaded("import reprise.store") & set(HEAVY + ["safetensors", "skops"]) - {
        "sqlalchemy", "alembic", "fsspec"}


def test_evaluate_package_loads_nothing_heavy() -> None:
    assert not _loaded("import reprise.evaluate") & set(HEAVY + ["scipy", "plotly", "numpy"])
    assert not _loaded("import reprise; reprise.evaluate.__all__") & set(HEAVY + ["plotly"])


def test_monitor_package_loads_nothing_heavy() -> None:
    heavy = set(HEAVY + ["numpy", "scipy", "plotly"])
    assert not _loaded("import reprise.monitor; reprise.monitor.DriftPolicy()") & heavy


def test_tune_package_loads_nothing_heavy() -> None:
    assert not _loaded("import reprise.tune") & set(HEAVY + ["optuna", "plotly", "numpy"])


def test_registry_package_loads_nothing_heavy() -> None:
    assert not _loaded("import reprise.registry") & set(HEAVY + ["numpy", "skops",
                                                                  "safetensors"])


def test_serve_package_loads_no_server_until_one_is_created() -> None:
    heavy = set(HEAVY + ["prometheus_client", "numpy", "orjson", "httptools", "uvloop"])
    assert not _loaded("import reprise.serve; reprise.serve.Settings()") & heavy


def test_public_api_is_pinned() -> None:
    import reprise

    assert sorted(reprise.__all__) == sorted([
        "__version__", "Materializer", "Run", "RunStatus", "Workspace", "active_run", "errors",
        "init", "log_artifact", "log_metric", "log_metrics", "log_param", "log_params",
        "open_workspace", "register_materializer", "set_tag", "start_run",
        "step", "pipeline", "File", "Dir", "Pipeline", "Step",
        "Dataset", "add_dataset", "split", "make_loader", "Trainer", "EarlyStopping",
        "BestParams"])
    for name in reprise.__all__:
        assert getattr(reprise, name) is not None


def test_read_only_commands_load_neither_typer_nor_sqlalchemy(tmp_path: Path) -> None:
    """`runs list`, `runs show`, `data list`, `models list` on the embedded SQLite
    database: argparse and sqlite3, no Typer/click/pydantic, no SQLAlchemy/Alembic."""
    import reprise

    ws = reprise.init(tmp_path)
    with reprise.start_run("lean", workspace=ws) as run:
        run.log_metric("loss", 0.25)
    ws.close()
    heavy = set(HEAVY) | {"typer", "click", "numpy"}
    for argv in (["runs", "list"], ["runs", "show", run.id, "--json"], ["data", "list"],
                 ["models", "list", "--json"]):
        probe = ("import atexit, json, sys\n"
                 "atexit.register(lambda: print(json.dumps(sorted(sys.modules)), "
                 "file=sys.stderr))\n"
                 f"from reprise.cli import main\nmain({argv!r})")
        res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                             timeout=60, cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        loaded = {m.split(".")[0] for m in json.loads(res.stderr.strip().splitlines()[-1])}
        assert not loaded & heavy, argv
        if argv[:2] == ["runs", "show"]:
            assert json.loads(res.stdout)["metrics"] == {"loss": 0.25}
