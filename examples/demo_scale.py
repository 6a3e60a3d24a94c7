"""Scaling out (``make demo-scale``): the demo's tabular pipeline on shared
infrastructure, by configuration only — steps as Ray tasks on a local Ray cluster,
artifacts in an S3 bucket, metadata in PostgreSQL — then ``reprise verify`` proves
the run reproduces.

Everything runs on this machine, on loopback:

* S3: moto's S3-compatible server (the ``dev`` extra), a fresh bucket;
* PostgreSQL: a fresh database on the server at ``REPRISE_DEMO_PG``
  (default ``postgresql://postgres@127.0.0.1:5432/test``), dropped at the end;
* Ray: ``ray start --head`` on 127.0.0.1 with its own temp folder, stopped at the end.

The workspace is a copy of ``examples/tabular`` in a temporary folder, whose
``.reprise/config.toml`` names the three; nothing else changes, and the CLI is the
same as on a laptop. Credentials for the bucket come from the standard AWS
environment variables (fake ones, for the local server); nothing prints them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
PG_ADMIN = os.environ.get("REPRISE_DEMO_PG", "postgresql://postgres@127.0.0.1:5432/test")
# Ray turns token authentication on for `ray start` on a machine holding a token
# (~/.ray/auth_token, which any local ray.init() writes); its drivers must then say
# RAY_AUTH_MODE=token too. The demo's loopback cluster, and its drivers, say "disabled",
# so it runs the same on any machine.
NO_AUTH = {"RAY_AUTH_MODE": "disabled"}
AWS = {"AWS_ACCESS_KEY_ID": "demo", "AWS_SECRET_ACCESS_KEY": "demo-secret",
       "AWS_DEFAULT_REGION": "us-east-1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.2)
    sys.exit(f"demo-scale: the {what} did not start on 127.0.0.1:{port}")


@contextlib.contextmanager
def s3_server() -> Iterator[tuple[str, str]]:
    """moto's S3 on loopback and a fresh bucket: (endpoint, bucket)."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                             str(port)], env={**os.environ, **AWS}, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_port(port, proc, "S3 server", 30)
        endpoint, bucket = f"http://127.0.0.1:{port}", f"reprise-demo-{uuid.uuid4().hex[:8]}"
        import boto3

        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                     aws_access_key_id=AWS["AWS_ACCESS_KEY_ID"],
                     aws_secret_access_key=AWS["AWS_SECRET_ACCESS_KEY"]
                     ).create_bucket(Bucket=bucket)
        print(f"S3: a moto server at {endpoint}, bucket {bucket}")
        yield endpoint, bucket
    finally:
        _stop(proc)


@contextlib.contextmanager
def pg_database() -> Iterator[str]:
    """A fresh database on the PostgreSQL server; dropped on exit."""
    import psycopg

    name = f"reprise_demo_{uuid.uuid4().hex[:8]}"
    try:
        admin = psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        sys.exit(f"demo-scale: no PostgreSQL server at {PG_ADMIN} ({exc}); start one, or "
                 "point REPRISE_DEMO_PG at one")
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = PG_ADMIN.rsplit("/", 1)[0] + "/" + name
    print(f"PostgreSQL: database {name}")
    try:
        yield url
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def ray_head(node_env: dict[str, str]) -> Iterator[str]:
    """``ray start --head`` on loopback (1 CPU per task slot, 2 slots); its address.
    ``node_env``: what a node of a real cluster has from its own machine (here the
    bucket's endpoint and credentials, the AWS chain a step's worker reads)."""
    port = _free_port()
    temp = Path(tempfile.mkdtemp(prefix="rd", dir="/tmp"))  # Ray's socket paths are short
    env = {**os.environ, **node_env, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
           "RAY_USAGE_STATS_ENABLED": "0", **NO_AUTH}
    log = open(temp / "launcher.log", "wb")  # noqa: SIM115 - closed below
    ray = Path(sys.executable).with_name("ray")
    proc = subprocess.Popen([str(ray), "start", "--head", "--node-ip-address=127.0.0.1",
                             f"--port={port}", "--num-cpus=2", "--num-gpus=0",
                             "--include-dashboard=false", "--disable-usage-stats",
                             "--object-store-memory=200000000", f"--temp-dir={temp}",
                             "--block"], env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        _wait_port(port, proc, "Ray head", 90)
        deadline = time.monotonic() + 60
        while b"Ray runtime started" not in (temp / "launcher.log").read_bytes():
            if time.monotonic() > deadline or proc.poll() is not None:
                sys.exit("demo-scale: the Ray head did not start:\n"
                         + (temp / "launcher.log").read_text(errors="replace")[-2000:])
            time.sleep(0.2)
        print(f"Ray: a local cluster at 127.0.0.1:{port}")
        yield f"127.0.0.1:{port}"
    finally:
        _stop(proc)
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def _set(text: str, section: str, key: str, value: str) -> str:
    """``key = "value"`` in ``[section]`` of the config file ``reprise init`` wrote (the
    line that sets or comments out that key; else a new line under the header)."""
    lines = text.splitlines()
    start = lines.index(f"[{section}]")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("[")),
               len(lines))
    entry = f'{key} = "{value}"'
    for i in range(start + 1, end):
        if re.match(rf"#?\s*{key}\s*=", lines[i]):
            lines[i] = entry
            break
    else:
        lines.insert(start + 1, entry)
    return "\n".join(lines) + "\n"


def reprise(project: Path, env: dict[str, str], *args: str, capture: bool = False) -> str:
    print(f"\n$ reprise {' '.join(args)}", flush=True)
    res = subprocess.run([sys.executable, "-m", "reprise.cli", *args], cwd=project, env=env,
                         text=True, stdout=subprocess.PIPE if capture else None, timeout=900)
    if res.returncode != 0:
        sys.exit(f"demo-scale: `reprise {' '.join(args)}` exited with {res.returncode}")
    return res.stdout or ""


def main() -> None:
    sys.path.insert(0, str(HERE))
    from demo import export_data  # the same data as `make demo`

    export_data()
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="reprise-scale-"))
        endpoint, bucket = stack.enter_context(s3_server())
        pg_url = stack.enter_context(pg_database())
        aws = {**AWS, "AWS_ENDPOINT_URL_S3": endpoint}
        address = stack.enter_context(ray_head(aws))
        project = Path(tmp) / "tabular"
        shutil.copytree(HERE / "tabular", project,
                        ignore=shutil.ignore_patterns(".reprise", "reports", "__pycache__"))
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("REPRISE_", "AWS_"))}
        env.update(aws, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", **NO_AUTH,
                   REPRISE_ARTIFACTS_CACHE_DIR=str(Path(tmp) / "blobcache"))
        reprise(project, env, "init", ".")
        config = project / ".reprise" / "config.toml"
        text = config.read_text()
        for section, key, value in (("store", "url", pg_url),
                                    ("artifacts", "url", f"s3://{bucket}/demo"),
                                    ("executor", "kind", "ray"),
                                    ("executor", "address", address)):
            text = _set(text, section, key, value)
        config.write_text(text)
        print("\n.reprise/config.toml, the three settings that differ from a laptop's:")
        for line in text.splitlines():
            if line.startswith("[") or (line.startswith(("url", "kind", "address"))):
                print("   ", line)
        reprise(project, env, "data", "add", "cancer", "data/cancer.csv", "--schema",
                "schema.py:schema")
        run = json.loads(reprise(project, env, "run", "pipeline.py:tabular", "-p", "C=0.5",
                                 "--executor", "ray", "--json", capture=True))
        print(f"run {run['run_id']}: executed {len(run['executed'])} step(s) as Ray tasks")
        reprise(project, env, "run", "pipeline.py:tabular", "-p", "C=0.5",
                "--executor", "ray", "--progress", "lines")  # every step from the cache
        reprise(project, env, "verify", run["run_id"], "--executor", "ray")
        reprise(project, env, "lineage", run["run_id"])
        reprise(project, env, "fsck")


if __name__ == "__main__":
    main()
