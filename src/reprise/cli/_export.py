"""``reprise export docker|kubernetes|mlflow``: a registered version for another stack
(see :mod:`reprise.registry._export`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from reprise.cli import _render as render
from reprise.cli._fast import workspace as _ws

export_app = typer.Typer(help="Export a registered model: a Docker build context, "
                              "Kubernetes manifests, an MLflow pyfunc model.",
                         no_args_is_help=True)
RefArg = Annotated[str, typer.Argument(metavar="MODEL",
                                       help="NAME@ALIAS, NAME:VERSION or NAME.")]
OutOpt = Annotated[Path, typer.Option("-o", "--output", help="Folder to write (new or empty).")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Replace a non-empty --output.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a line.")]


def _done(result: Any, as_json: bool, hint: str) -> None:
    if as_json:
        render.print_json(result.to_dict())
        return
    typer.echo(f"exported {result.model} ({result.kind}, {len(result.files)} files) -> "
               f"{result.output}")
    typer.echo(hint)


@export_app.command("docker")
def docker(ref: RefArg, output: OutOpt, force: ForceOpt = False,
           wheelhouse: Annotated[Path | None, typer.Option(
               help="A folder of wheels copied into the context; pip then installs from it "
                    "alone (offline).")] = None,
           image: Annotated[str | None, typer.Option(
               help="The image tag the README suggests (default reprise-NAME:VERSION).")
           ] = None,
           as_json: JsonOpt = False) -> None:
    """A reproducible Docker build context that serves MODEL (`reprise serve`, health
    probes, non-root)."""
    from reprise.registry._export import export_docker

    result = export_docker(ref, output, force=force, wheelhouse=wheelhouse, image=image,
                           workspace=_ws())
    name, _, version = result.model.rpartition(":")
    _done(result, as_json, f"build it: docker build -t "
                           f"{image or f'reprise-{name.lower()}:{version}'} {output}")


@export_app.command("kubernetes")
def kubernetes(ref: RefArg, output: OutOpt, force: ForceOpt = False,
               image: Annotated[str | None, typer.Option(
                   help="The container image (default reprise-NAME:VERSION, from `reprise "
                        "export docker`).")] = None,
               replicas: Annotated[int, typer.Option(help="Minimum replicas.")] = 2,
               max_replicas: Annotated[int, typer.Option(help="Most replicas (HPA).")] = 10,
               cpu: Annotated[str, typer.Option(help="CPU request.")] = "500m",
               memory: Annotated[str, typer.Option(help="Memory request.")] = "512Mi",
               cpu_limit: Annotated[str, typer.Option(help="CPU limit.")] = "1",
               memory_limit: Annotated[str, typer.Option(help="Memory limit.")] = "1Gi",
               target_cpu: Annotated[int, typer.Option(
                   help="Average CPU utilisation (%) the HPA aims at.")] = 70,
               secret: Annotated[str | None, typer.Option(
                   help="The Secret holding the serving token under key 'token' (default "
                        "reprise-NAME-token).")] = None,
               as_json: JsonOpt = False) -> None:
    """Deployment (probes, resources, token from a Secret), Service and
    HorizontalPodAutoscaler for MODEL's image."""
    from reprise.core.errors import UserError
    from reprise.registry._export import export_kubernetes

    if replicas < 1 or max_replicas < 1:
        raise UserError("--replicas and --max-replicas must be at least 1")
    if not 1 <= target_cpu <= 100:
        raise UserError(f"--target-cpu is a percentage between 1 and 100, not {target_cpu}")
    result = export_kubernetes(ref, output, image=image, force=force, workspace=_ws(),
                               replicas=replicas, max_replicas=max_replicas, cpu=cpu,
                               memory=memory, cpu_limit=cpu_limit, memory_limit=memory_limit,
                               target_cpu=target_cpu, secret=secret)
    _done(result, as_json, f"apply it: kubectl apply -f {output}  (see {output}/README.md "
                           "for the Secret)")


@export_app.command("mlflow")
def mlflow(ref: RefArg, output: OutOpt, force: ForceOpt = False,
           as_json: JsonOpt = False) -> None:
    """An MLflow pyfunc model directory of MODEL (no pickle: the package is its artifact)."""
    from reprise.registry._export import export_mlflow

    result = export_mlflow(ref, output, force=force, workspace=_ws())
    _done(result, as_json, f"load it: mlflow.pyfunc.load_model({str(output)!r})")
