"""Exports of a registered version to other stacks: a Docker build context, Kubernetes
manifests, an MLflow pyfunc model directory.

Every export is written into a temporary folder beside ``out`` and renamed onto it at
the end, so a failure leaves nothing half written; an ``out`` that exists and is not
empty is refused unless ``force`` (then it is replaced, again by one rename).

The Docker context and the Kubernetes manifests are functions of their inputs (the
package's bytes, the options, the installed versions its lock pins): the same inputs
give the same bytes, sorted, without timestamps, every file with the same fixed
modification time.

**Docker.** ``Dockerfile`` (on ``python:X.Y-slim`` of the package's Python, a build
argument to pin it by digest), ``requirements.txt`` (the package's own lock plus
``reprise-ml[serve]`` and what it needs, each pinned to the version installed where
the export ran), ``package/`` (the package's files, byte for byte, with its manifest),
``setup_workspace.py`` (run at build time: registers the package in a workspace
inside the image and points the alias at it), ``entrypoint.sh`` (``reprise serve
NAME@ALIAS`` on 0.0.0.0:8080) and ``wheels/`` (a wheelhouse: with ``wheelhouse=`` the
wheels given are copied there and pip installs from them alone, offline). The image
runs as an unprivileged user (uid 10001) and probes ``/healthz``.

**MLflow.** A pyfunc model "from code": the wrapper is a Python file MLflow stores
and executes at load time (``mlflow.models.set_model``), its one artifact is the
package folder, read and verified by :func:`read_package` (skops, safetensors): no
object of it is pickled, and MLflow does not cloudpickle the wrapper either.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reprise.core.errors import UserError

__all__ = ["ExportResult", "export_docker", "export_kubernetes", "export_mlflow",
           "serving_requirements"]

#: every exported file gets this modification time (1980-01-01, as in wheels and zips)
FIXED_MTIME = 315532800
PORT = 8080
UID = 10001
TOKEN_ENV = "REPRISE_SERVE_TOKEN"  # the serving layer's name for it (reprise.serve)


@dataclass(frozen=True)
class ExportResult:
    kind: str  # docker | kubernetes | mlflow
    model: str  # NAME:VERSION
    alias: str | None
    package: str  # the package's content hash
    output: Path
    files: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "model": self.model, "alias": self.alias,
                "package": self.package, "output": str(self.output), "files": self.files}


# -- shared ---------------------------------------------------------------------------

def _resolve(ref: str, workspace: Any) -> tuple[Any, Any, str | None]:
    """``(workspace, version record, alias)`` for ``ref``."""
    from reprise.registry import _registry as reg
    from reprise.registry._api import _ws

    ws = _ws(workspace)
    rec = reg.parse_ref(ws, ref)
    _, alias, _ = reg.split_ref(ref)
    return ws, rec, alias


def _package_folder(ws: Any, rec: Any, dest: Path) -> Path:
    """The version's package folder, verified, materialised under ``dest``."""
    from reprise.store._materializers import materializer_by_name

    art = ws.metadata.get_artifact(rec.package_hash)
    materializer_by_name(art.materializer).load(ws.artifacts, art.hash, art.meta, dest=dest)
    return dest / "package"  # load() read and verified every file against the manifest


def _check_out(out: Path, force: bool) -> None:
    if out.is_symlink() or out.exists() and not out.is_dir():
        raise UserError(f"{out} exists and is not a folder; choose another -o")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise UserError(f"{out} exists and is not empty; choose another -o, or replace it "
                        "with --force")
    parent = out.parent if str(out.parent) else Path(".")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot write {out}: its folder {parent} cannot be created "
                        f"({exc.strerror or exc})") from None
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"cannot write {out}: the folder {parent} is not writable")


def _write_tree(out: Path, files: dict[str, bytes], *, force: bool,
                executable: Iterable[str] = ()) -> list[str]:
    """Write ``files`` (relative path -> bytes) as the folder ``out``, atomically."""
    _check_out(out, force)
    parent = out.parent if str(out.parent) else Path(".")
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=parent))
    try:
        execs = set(executable)
        for rel in sorted(files):
            path = tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(files[rel])
            path.chmod(0o755 if rel in execs else 0o644)
        _fix_times(tmp)
        tmp.chmod(0o755)
        _replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return sorted(files)


def _fix_times(root: Path) -> None:
    for path in sorted(root.rglob("*"), reverse=True):
        os.utime(path, (FIXED_MTIME, FIXED_MTIME), follow_symlinks=False)
    os.utime(root, (FIXED_MTIME, FIXED_MTIME))


def _replace(tmp: Path, out: Path) -> None:
    """Rename ``tmp`` onto ``out`` (an empty or, with force, any folder there goes)."""
    from reprise.core._atomic import fsync_path

    if out.is_dir():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.rename(out, old)
        try:
            os.rename(tmp, out)
        except BaseException:
            os.rename(old, out)
            raise
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, out)
    fsync_path(out.parent if str(out.parent) else ".")


def _folder_files(folder: Path, prefix: str) -> dict[str, bytes]:
    return {f"{prefix}/{p.relative_to(folder).as_posix()}": p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


# -- the requirements lock ---------------------------------------------------------------

def serving_requirements(package_requirements: list[str], python: str) -> list[str]:
    """The package's lock plus ``reprise-ml[serve]`` and every distribution they need
    (closure over the installed distributions' metadata, markers evaluated for CPython
    ``python`` on Linux), each ``name==installed version``, sorted by name."""
    from importlib import metadata

    from packaging.markers import InvalidMarker, UndefinedEnvironmentName
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    env = {"python_version": python, "python_full_version": f"{python}.0",
           "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
           "platform_python_implementation": "CPython", "implementation_name": "cpython",
           "platform_machine": "x86_64"}
    pins: dict[str, str] = {}
    for line in package_requirements:
        name, _, version = line.partition("==")
        if name and version:
            pins[str(canonicalize_name(name))] = f"{name}=={version}"
    todo: list[tuple[str, frozenset[str]]] = [(n, frozenset()) for n in list(pins)]
    todo.append(("reprise-ml", frozenset({"serve"})))
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # not installed here: the lock cannot pin what it cannot see
        key = str(canonicalize_name(dist.metadata["Name"]))
        pins.setdefault(key, f"{dist.metadata['Name']}=={dist.version}")
        for text in dist.requires or []:
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            try:
                wanted = req.marker is None or any(
                    req.marker.evaluate({**env, "extra": e}) for e in (extras or {""}))
            except (InvalidMarker, UndefinedEnvironmentName):
                wanted = False
            if wanted:
                todo.append((str(canonicalize_name(req.name)), frozenset(req.extras)))
    return [pins[k] for k in sorted(pins)]


# -- docker -------------------------------------------------------------------------------

_ENTRYPOINT = """\
#!/bin/sh
# Serve {ref} from the workspace built into the image (setup_workspace.py).
# Inside a container it binds 0.0.0.0: set {token} (a Secret) so only callers with
# the token predict. Extra arguments go to `reprise serve` (see `reprise serve --help`).
set -eu
exec python -m reprise.cli serve "{ref}" --host "${{REPRISE_HOST:-0.0.0.0}}" \\
    --port "${{PORT:-{port}}}" "$@"
"""

_HEALTHCHECK = """\
\"\"\"The image's HEALTHCHECK: exit 0 when the server answers GET /healthz.\"\"\"

import os
import sys
import urllib.request

try:
    port = os.environ.get("PORT", "{port}")
    urllib.request.urlopen(f"http://127.0.0.1:{{port}}/healthz", timeout=2)
except Exception as exc:  # any failure is unhealthy
    print(f"unhealthy: {{exc}}", file=sys.stderr)
    sys.exit(1)
"""

_SETUP = '''\
"""Build step of the image: register the exported package in a fresh workspace and
point the alias at it, so that `reprise serve {ref}` serves exactly these bytes.

Usage: python setup_workspace.py PACKAGE_DIR WORKSPACE_DIR
"""

import sys

import reprise
from reprise.registry import promote, read_package, register_package

NAME, ALIAS = {name!r}, {alias!r}
SOURCE = {source!r}  # the exported version and its package hash


def main(package_dir: str, workspace_dir: str) -> None:
    package = read_package(package_dir)  # verifies every file against the manifest
    ws = reprise.init(workspace_dir)
    try:
        version = register_package(NAME, package, workspace=ws).version
        passed = (package.card.get("gates") or {{}}).get("passed") is True
        promote(NAME, version, ALIAS, force=not passed, workspace=ws,
                reason=None if passed else "exported from " + SOURCE + " (its gates did "
                "not pass there either; it was promoted there)")
    finally:
        ws.close()
    print(f"{{NAME}}@{{ALIAS}} -> {{NAME}}:{{version}} ({{SOURCE}})")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
'''

_DOCKERFILE = """\
# syntax=docker/dockerfile:1
# Built by `reprise export docker` from {model} (package {package}).
#   docker build -t {image} .
#   docker run -p {port}:{port} -e {token}=... {image}
# The base image is the package's Python on Debian slim, by tag; pin it by digest with
#   docker build --build-arg PYTHON_IMAGE=python:{python}-slim@sha256:... .
ARG PYTHON_IMAGE=python:{python}-slim
FROM ${{PYTHON_IMAGE}}

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \\
    PIP_NO_CACHE_DIR=1 REPRISE_WORKSPACE=/srv/reprise PORT={port}
RUN groupadd --system --gid {uid} reprise \\
 && useradd --system --uid {uid} --gid {uid} --home-dir /srv/reprise --no-create-home \\
    --shell /usr/sbin/nologin reprise \\
 && mkdir -p /srv/reprise && chown {uid}:{uid} /srv/reprise

# The lock: the package's requirements and reprise-ml[serve], pinned.{offline}
# A second index for pins the first lacks (torch's +cpu builds): --build-arg PIP_EXTRA_INDEX_URL=
ARG PIP_EXTRA_INDEX_URL=
COPY requirements.txt /opt/reprise/requirements.txt
COPY wheels/ /opt/reprise/wheels/
RUN pip install {index}--find-links /opt/reprise/wheels -r /opt/reprise/requirements.txt

# The package, byte for byte (owned by root: the server cannot alter it).
COPY package/ /opt/reprise/package/
COPY setup_workspace.py entrypoint.sh healthcheck.py /opt/reprise/

USER {uid}:{uid}
WORKDIR /srv/reprise
RUN python /opt/reprise/setup_workspace.py /opt/reprise/package /srv/reprise

EXPOSE {port}
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \\
    CMD ["python", "/opt/reprise/healthcheck.py"]
ENTRYPOINT ["/bin/sh", "/opt/reprise/entrypoint.sh"]
"""

_CONTEXT_README = """\
# {model} as a container

Built by `reprise export docker` (package {package}). Build and run:

    docker build -t {image} .
    docker run --rm -p {port}:{port} -e {token}=change-me {image}
    curl -H 'Authorization: Bearer change-me' -d @rows.json \\
        http://localhost:{port}/v1/models/{name}/predict

- `requirements.txt`: the package's lock plus reprise-ml[serve], pinned to the versions
  of the machine that exported it.{wheels}
- `package/`: the model package, byte for byte; its manifest lists each file's hash.
- Probes: `/healthz` (alive; the image's HEALTHCHECK) and `/readyz` (model loaded and
  warmed up). The server runs as uid {uid}, not root.
"""


def export_docker(ref: str, out: str | Path, *, force: bool = False,
                  wheelhouse: str | Path | None = None, image: str | None = None,
                  workspace: Any = None) -> ExportResult:
    """Write a Docker build context serving ``ref`` into ``out`` (see the module doc).

    ``wheelhouse``: a folder of wheels (``pip wheel`` / ``pip download``) copied into the
    context's ``wheels/``; pip then installs from it alone (``--no-index``), offline.
    """
    ws, rec, alias = _resolve(ref, workspace)
    alias = alias or "production"
    wheels: dict[str, bytes] = {}
    if wheelhouse is not None:
        house = Path(wheelhouse)
        if not house.is_dir():
            raise UserError(f"--wheelhouse {house} is not a folder of wheels")
        wheels = {f"wheels/{p.name}": p.read_bytes() for p in sorted(house.glob("*.whl"))}
        if not wheels:
            raise UserError(f"--wheelhouse {house} holds no .whl file; build one with "
                            "`pip wheel -r requirements.txt -w DIR`")
    with tempfile.TemporaryDirectory(prefix="reprise-export-") as tmp:
        folder = _package_folder(ws, rec, Path(tmp))
        from reprise.registry._package import read_package

        package = read_package(folder)
        files = _folder_files(folder, "package")
    python = str(package.environment.get("python") or "3.11")
    image = image or f"reprise-{rec.name.lower()}:{rec.version}"
    serve_ref = f"{rec.name}@{alias}"
    fmt = {"model": rec.ref, "package": rec.package_hash, "image": image, "port": PORT,
           "token": TOKEN_ENV, "python": python, "uid": UID, "name": rec.name,
           "index": "--no-index " if wheels else "",
           "offline": "\n# Installed from wheels/ alone (offline)." if wheels else
           "\n# From the package index; wheels/ may add wheels it lacks (e.g. reprise-ml).",
           "wheels": "\n- `wheels/`: the wheelhouse; pip installs from it alone (offline)."
           if wheels else "\n- `wheels/`: put wheels the index lacks here (reprise-ml)."}
    files.update(wheels or {"wheels/.keep": b""})
    files["requirements.txt"] = ("\n".join(
        serving_requirements(package.requirements, python)) + "\n").encode()
    files["Dockerfile"] = _DOCKERFILE.format(**fmt).encode()
    files["README.md"] = _CONTEXT_README.format(**fmt).encode()
    files["entrypoint.sh"] = _ENTRYPOINT.format(ref=serve_ref, token=TOKEN_ENV,
                                                port=PORT).encode()
    files["setup_workspace.py"] = _SETUP.format(
        ref=serve_ref, name=rec.name, alias=alias,
        source=f"{rec.ref} (package {rec.package_hash})").encode()
    files["healthcheck.py"] = _HEALTHCHECK.format(port=PORT).encode()
    files[".dockerignore"] = b"# everything in this context is used\n"
    written = _write_tree(Path(out), files, force=force, executable=["entrypoint.sh"])
    return ExportResult("docker", rec.ref, alias, rec.package_hash, Path(out), written)


# -- kubernetes ---------------------------------------------------------------------------

#: the Kubernetes version whose OpenAPI schema the manifests are written for (and tested)
KUBERNETES_VERSION = "1.30.0"


def kubernetes_manifests(name: str, version: int, alias: str, *, image: str,
                         replicas: int = 2, max_replicas: int = 10,
                         cpu: str = "500m", memory: str = "512Mi",
                         cpu_limit: str = "1", memory_limit: str = "1Gi",
                         target_cpu: int = 70, secret: str | None = None
                         ) -> dict[str, dict[str, Any]]:
    """``{file name: manifest}``: Deployment, Service, HorizontalPodAutoscaler (v2)."""
    app = f"reprise-{name.lower().replace('_', '-').replace('.', '-')}"[:57].rstrip("-")
    secret = secret or f"{app}-token"
    labels = {"app.kubernetes.io/name": app, "app.kubernetes.io/component": "model-server",
              "app.kubernetes.io/managed-by": "reprise",
              # a label value: 63 characters at most, alphanumeric at both ends
              "reprise.dev/model": name[:63].rstrip("._-"), "reprise.dev/version": str(version)}
    selector = {"app.kubernetes.io/name": app}
    probe = {"periodSeconds": 10, "timeoutSeconds": 3, "failureThreshold": 3}
    container = {
        "name": "server", "image": image, "imagePullPolicy": "IfNotPresent",
        "args": [], "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
        "env": [{"name": "PORT", "value": str(PORT)},
                {"name": TOKEN_ENV, "valueFrom": {"secretKeyRef": {
                    "name": secret, "key": "token"}}}],
        "resources": {"requests": {"cpu": cpu, "memory": memory},
                      "limits": {"cpu": cpu_limit, "memory": memory_limit}},
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"},
                           "initialDelaySeconds": 2, **probe},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"},
                          "initialDelaySeconds": 10, **probe},
        "startupProbe": {"httpGet": {"path": "/healthz", "port": "http"},
                         "periodSeconds": 2, "failureThreshold": 60},
        "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True,
                            "runAsUser": UID, "runAsGroup": UID,
                            "capabilities": {"drop": ["ALL"]}},
    }
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": app, "labels": labels,
                     "annotations": {"reprise.dev/serves": f"{name}@{alias}"}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": selector},
                 "strategy": {"type": "RollingUpdate",
                              "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
                 "template": {"metadata": {"labels": labels}, "spec": {
                     "securityContext": {"runAsNonRoot": True, "runAsUser": UID,
                                         "runAsGroup": UID, "fsGroup": UID,
                                         "seccompProfile": {"type": "RuntimeDefault"}},
                     "terminationGracePeriodSeconds": 40,
                     "containers": [container]}}},
    }
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": app, "labels": labels},
               "spec": {"type": "ClusterIP", "selector": selector,
                        "ports": [{"name": "http", "port": 80, "targetPort": "http",
                                   "protocol": "TCP"}]}}
    hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
           "metadata": {"name": app, "labels": labels},
           "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                       "name": app},
                    "minReplicas": replicas, "maxReplicas": max(max_replicas, replicas),
                    "metrics": [{"type": "Resource", "resource": {
                        "name": "cpu", "target": {"type": "Utilization",
                                                  "averageUtilization": target_cpu}}}]}}
    return {"deployment.yaml": deployment, "service.yaml": service, "hpa.yaml": hpa}


_K8S_README = """\
# {model} on Kubernetes

Built by `reprise export kubernetes` (package {package}) for Kubernetes {k8s}
(apps/v1, v1, autoscaling/v2). The image is `{image}`: build it from
`reprise export docker {ref} -o DIR` and push it where the cluster pulls from.

    kubectl create secret generic {secret} --from-literal=token=$(openssl rand -hex 24)
    kubectl apply -f deployment.yaml -f service.yaml -f hpa.yaml

Callers send `Authorization: Bearer <token>`; `/readyz` gates traffic, `/healthz`
restarts a stuck server; the HPA scales on CPU (needs the metrics server).
"""


def export_kubernetes(ref: str, out: str | Path, *, image: str | None = None,
                      force: bool = False, workspace: Any = None,
                      **options: Any) -> ExportResult:
    """Write Kubernetes manifests serving ``ref``'s image into ``out`` (see
    :func:`kubernetes_manifests` for ``options``)."""
    import yaml

    _, rec, alias = _resolve(ref, workspace)
    alias = alias or "production"
    image = image or f"reprise-{rec.name.lower()}:{rec.version}"
    docs = kubernetes_manifests(rec.name, rec.version, alias, image=image, **options)
    secret = docs["deployment.yaml"]["spec"]["template"]["spec"]["containers"][0]["env"][1][
        "valueFrom"]["secretKeyRef"]["name"]
    files = {fname: yaml.safe_dump(doc, sort_keys=True, default_flow_style=False).encode()
             for fname, doc in docs.items()}
    files["README.md"] = _K8S_README.format(model=rec.ref, package=rec.package_hash,
                                            k8s=KUBERNETES_VERSION, image=image, ref=ref,
                                            secret=secret).encode()
    written = _write_tree(Path(out), files, force=force)
    return ExportResult("kubernetes", rec.ref, alias, rec.package_hash, Path(out), written)


# -- mlflow -------------------------------------------------------------------------------

def export_mlflow(ref: str, out: str | Path, *, force: bool = False,
                  workspace: Any = None) -> ExportResult:
    """Write an MLflow pyfunc model directory for ``ref`` into ``out`` (see the module
    doc); ``mlflow.pyfunc.load_model(out).predict(frame)`` answers as Reprise does."""
    from reprise.core import require

    require("mlflow", "bench", "reprise export mlflow")
    import warnings

    with warnings.catch_warnings():  # MLflow's own import-time notices (type hints)
        warnings.simplefilter("ignore")
        import mlflow.pyfunc

    ws, rec, alias = _resolve(ref, workspace)
    _check_out(Path(out), force)
    out = Path(out)
    parent = out.parent if str(out.parent) else Path(".")
    with tempfile.TemporaryDirectory(prefix="reprise-export-") as tmp:
        folder = _package_folder(ws, rec, Path(tmp))
        from reprise.registry._package import read_package

        package = read_package(folder)
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=parent))
        try:
            model_dir = staging / "model"
            with warnings.catch_warnings():  # its advice to add type hints to predict
                warnings.simplefilter("ignore", UserWarning)
                mlflow.pyfunc.save_model(
                    str(model_dir),
                    python_model=str(Path(__file__).with_name("_mlflow_model.py")),
                    artifacts={"package": str(folder)},
                    pip_requirements=list(package.requirements),
                    metadata={"reprise_model": rec.ref, "reprise_package": rec.package_hash})
            model_dir.chmod(0o755)
            _replace(model_dir, out)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    return ExportResult("mlflow", rec.ref, alias, rec.package_hash, out, written)
