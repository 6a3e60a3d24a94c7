"""Training-loop overhead: a hand-written PyTorch loop, Reprise's ``Trainer`` (profiling
on, the default) and Lightning's ``Trainer.fit``, on the same model, data and seed, in the
same run; and the cost of writing a checkpoint.

Workloads (CPU by default): an MLP 64-256-256-10 on 200,000 synthetic rows, batch 256,
and a small CNN (2 conv layers + linear) on 20,000 synthetic 1x28x28 images, batch 128;
one epoch each, AdamW, cross-entropy. Every tool gets a fresh model built from the same
seed and the same ``DataLoader(TensorDataset, shuffle=True)`` with a seeded generator and
``num_workers=0``. Samples per second are steady-state: a forward pre-hook on the model
stamps every forward call, and the rate is taken between the forward calls of step
``WARMUP`` and of the last full batch, so set-up, warm-up and tear-down are left out (the
whole ``fit`` wall time is reported apart); the rate of the median step is reported
beside it (robust to a noisy neighbour, blind to work done every N steps). Each tool
also runs once on a small subset before the timed repeats, and the repeats interleave
the tools, the order rotated each round. Every run must take the same number of
steps; the final weights are compared with the raw loop's.

On a shared 2-core machine one epoch's rate varies by 10-20 % from run to run, more
than the loops differ; so a third workload, the ``probe``, measures the loops' own cost
per step: a ``Linear(16, 10)`` over 3,000 batches of 32 collated up front
(``DataLoader(list, batch_size=None)``), where a step is ~200 µs and the per-step
overhead of each tool stands out in microseconds.

Checkpoints: one checkpoint of a ~100M-parameter MLP (six 4096x4096 Linear layers) with
its AdamW state after one step, written by the Trainer's checkpoint writer, against
``torch.save`` of the same state dict to the same disk; and the share of training time
the Trainer's default checkpoint interval would cost on the MLP workload.

``--device cuda --precision 32,bf16-mixed`` runs the same comparison on a GPU and adds
bf16-mixed vs 32, the Trainer's data-wait fraction and energy per step.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import shutil
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import WORK, finish

WARMUP = 20  # steps left out at the start of every timed epoch
TOOLS = ("raw", "reprise", "lightning")
TAGS = {"32": "fp32", "bf16-mixed": "bf16", "16-mixed": "fp16"}


@dataclass
class Workload:
    name: str
    rows: int
    batch: int
    shape: tuple[int, ...]
    build: Callable[[], Any]
    premade: bool = False  # batches collated up front: the step time is the loop's own


class Case:
    """One workload at one precision on one device: data, seed and timing stamps."""

    def __init__(self, wl: Workload, precision: str, device: str, seed: int = 0) -> None:
        import torch

        self.wl, self.precision, self.device, self.seed = wl, precision, device, seed
        gen = torch.Generator().manual_seed(seed)
        self.x = torch.randn((wl.rows, *wl.shape), generator=gen)
        self.y = torch.randint(0, 10, (wl.rows,), generator=gen)
        self.stamps: list[float] = []
        b = wl.batch
        self.batches = [(self.x[i:i + b], self.y[i:i + b]) for i in range(0, wl.rows, b)] \
            if wl.premade else []

    def model(self) -> Any:
        import torch

        torch.manual_seed(self.seed)
        model = self.wl.build()
        # Stamps each forward call: the same few microseconds in every tool.
        model.register_forward_pre_hook(lambda *_: self.stamps.append(time.perf_counter()))
        return model

    def loader(self, rows: int | None = None) -> Any:
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        n = rows or self.wl.rows
        if self.wl.premade:  # no collation, no shuffling: the same batches in every tool
            return DataLoader(self.batches[:n // self.wl.batch], batch_size=None)
        gen = torch.Generator().manual_seed(self.seed)
        return DataLoader(TensorDataset(self.x[:n], self.y[:n]), batch_size=self.wl.batch,
                          shuffle=True, generator=gen, num_workers=0)

    def steady_rate(self, rows: int) -> tuple[float, float, int]:
        """Samples/s between the forward calls of step WARMUP and of the last full batch;
        the same from the median step (robust to a noisy neighbour, blind to periodic
        work such as logging every N steps); and the number of steps."""
        steps = len(self.stamps)
        full = rows // self.wl.batch  # the last batch may be short; it is never timed
        timed = min(full, steps - 1) - WARMUP
        window = self.stamps[WARMUP:WARMUP + timed + 1]
        gaps = [b - a for a, b in zip(window, window[1:], strict=False)]
        batch = self.wl.batch
        return timed * batch / (window[-1] - window[0]), batch / statistics.median(gaps), steps


def mlp() -> Any:
    import torch.nn as nn

    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                         nn.Linear(256, 10))


def cnn() -> Any:
    import torch.nn as nn

    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(32 * 7 * 7, 10))


def tiny() -> Any:
    import torch.nn as nn

    return nn.Linear(16, 10)


def optimizer(params: Any) -> Any:
    import torch

    return torch.optim.AdamW(params, lr=1e-3)


def autocast(case: Case) -> Any:
    import contextlib

    import torch

    if case.precision == "32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if case.precision.startswith("bf16") else torch.float16
    return torch.autocast(torch.device(case.device).type, dtype=dtype)


# -- the three tools ----------------------------------------------------------------------------


def run_raw(case: Case, rows: int) -> tuple[Any, dict[str, Any]]:
    """The loop most scripts write: no per-step ``.item()``, the loss stays a tensor."""
    import torch
    import torch.nn.functional as F

    if case.precision == "16-mixed":
        raise SystemExit("the raw loop here has no GradScaler; use 32 or bf16-mixed")
    model = case.model().to(case.device)
    opt = optimizer(model.parameters())
    dev = torch.device(case.device)
    model.train()
    loss = None
    for x, y in case.loader(rows):
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        with autocast(case):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    return model, {"last_loss": float(loss.detach()) if loss is not None else None}


def run_reprise(case: Case, rows: int) -> tuple[Any, dict[str, Any]]:
    import torch.nn.functional as F

    from reprise.train import Trainer

    model = case.model()
    trainer = Trainer(model, optimizer, loss=F.cross_entropy, max_epochs=1,
                      precision=case.precision, device=case.device)
    result = trainer.fit(case.loader(rows))
    return model, {"summary": dict(getattr(result, "summary", {}) or {})}


def run_lightning(case: Case, rows: int) -> tuple[Any, dict[str, Any]]:
    import lightning as L
    import torch.nn.functional as F

    class Module(L.LightningModule):
        def __init__(self, model: Any) -> None:
            super().__init__()
            self.model = model

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            return F.cross_entropy(self.model(x), y)

        def configure_optimizers(self) -> Any:
            return optimizer(self.model.parameters())

    model = case.model()
    accel = "cpu" if case.device == "cpu" else "cuda"
    trainer = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        accelerator=accel, devices=1, precision=case.precision)
    trainer.fit(Module(model), train_dataloaders=case.loader(rows))
    return model, {}


RUNNERS: dict[str, Callable[[Case, int], tuple[Any, dict[str, Any]]]] = {
    "raw": run_raw, "reprise": run_reprise, "lightning": run_lightning}


def quiet_peers() -> None:
    warnings.filterwarnings("ignore")  # Lightning's num_workers and GPU-unused hints
    for name in ("lightning", "lightning.pytorch", "lightning.fabric", "pytorch_lightning"):
        logging.getLogger(name).setLevel(logging.ERROR)


def weights_sum(model: Any) -> float:
    return float(sum(p.detach().double().abs().sum() for p in model.parameters()))


def timed_run(case: Case, tool: str, threads: int) -> dict[str, Any]:
    """One full epoch of ``tool``: steady samples/s, whole-fit seconds, steps, weights."""
    import torch

    gc.collect()
    torch.set_num_threads(threads)  # a tool may not change it behind the others' back
    case.stamps.clear()
    t0 = time.perf_counter()
    model, extra = RUNNERS[tool](case, case.wl.rows)
    wall = time.perf_counter() - t0
    rate, median_rate, steps = case.steady_rate(case.wl.rows)
    if torch.get_num_threads() != threads:
        raise AssertionError(f"{tool} changed torch threads to {torch.get_num_threads()}")
    return {"samples_per_s": rate, "median_step_samples_per_s": median_rate, "fit_s": wall,
            "steps": steps, "weights": weights_sum(model), **extra}


# -- side by side -------------------------------------------------------------------------------


def warm_up(case: Case, threads: int) -> None:
    """One short run per tool, so allocators, lazy imports and caches are warm for all."""
    import torch

    rows = min(case.wl.rows, 4 * WARMUP * case.wl.batch)
    for tool in TOOLS:
        torch.set_num_threads(threads)
        RUNNERS[tool](case, rows)


def compare(case: Case, repeats: int, threads: int) -> dict[str, Any]:
    """Interleaved repeats, the order rotated each round (raw-reprise-lightning,
    reprise-lightning-raw, ...) so that no tool always runs in the wake of the same one."""
    warm_up(case, threads)
    runs: dict[str, list[dict[str, Any]]] = {tool: [] for tool in TOOLS}
    for i in range(repeats):
        for tool in TOOLS[i % len(TOOLS):] + TOOLS[:i % len(TOOLS)]:
            runs[tool].append(timed_run(case, tool, threads))
    steps = {tool: {r["steps"] for r in rs} for tool, rs in runs.items()}
    if len({frozenset(s) for s in steps.values()}) != 1 or len(steps["raw"]) != 1:
        raise AssertionError(f"the tools ran different numbers of steps: {steps}")
    return runs


def digest(case: Case, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Figures, ratios, samples and checks of one :func:`compare`."""
    pre = f"{case.wl.name}_{TAGS[case.precision]}"
    batch = case.wl.batch
    med = {t: statistics.median(r["samples_per_s"] for r in rs) for t, rs in runs.items()}
    figures: dict[str, float] = {}
    ratios: dict[str, float] = {}
    for tool in TOOLS:
        figures[f"{pre}_{tool}_samples_per_s"] = med[tool]
        figures[f"{pre}_{tool}_step_us"] = 1e6 * batch / med[tool]
        figures[f"{pre}_{tool}_fit_s"] = statistics.median(r["fit_s"] for r in runs[tool])
        figures[f"{pre}_{tool}_median_step_samples_per_s"] = statistics.median(
            r["median_step_samples_per_s"] for r in runs[tool])
        if tool != "raw":
            figures[f"{pre}_{tool}_overhead_us_per_step"] = 1e6 * batch * (
                1 / med[tool] - 1 / med["raw"])
            ratios[f"{pre}_{tool}_slowdown_vs_raw"] = med["raw"] / med[tool]
            ratios[f"{pre}_{tool}_median_step_slowdown_vs_raw"] = (
                figures[f"{pre}_raw_median_step_samples_per_s"]
                / figures[f"{pre}_{tool}_median_step_samples_per_s"])
    summaries = [r.get("summary", {}) for r in runs["reprise"]]
    for key in ("samples_per_s", "data_wait_fraction", "energy_j_per_step"):
        values = [s[key] for s in summaries if isinstance(s.get(key), int | float)]
        if values:
            figures[f"{pre}_reprise_reported_{key}"] = statistics.median(values)
    raw_w = runs["raw"][0]["weights"]
    checks = {f"{tool}_weights_rel_diff_vs_raw": abs(runs[tool][0]["weights"] - raw_w) / raw_w
              for tool in TOOLS if tool != "raw"}
    checks["steps"] = runs["raw"][0]["steps"]
    checks["energy_source"] = next((s.get("energy_source") for s in summaries), None)
    samples = {f"{pre}_{t}_{k}": [r[k] for r in rs] for t, rs in runs.items()
               for k in ("samples_per_s", "median_step_samples_per_s", "fit_s")}
    return {"figures": figures, "ratios": ratios, "samples": samples, "checks": {pre: checks}}


# -- checkpoints --------------------------------------------------------------------------------


def big_mlp(width: int, layers: int) -> Any:
    import torch.nn as nn

    mods: list[Any] = []
    for _ in range(layers):
        mods += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*mods[:-1])


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def trained_one_step(model: Any, in_dim: int, out: Path) -> Any:
    """A Trainer (default ``checkpoint_every``) that has taken one AdamW step on ``model``,
    so the optimizer state exists; its end-of-fit checkpoint is removed."""
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset

    from reprise.train import Trainer

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(8, in_dim, generator=gen)
    y = torch.randint(0, 10, (8,), generator=gen)
    trainer = Trainer(model, optimizer, loss=F.cross_entropy, max_steps=1, device="cpu",
                      checkpoint_dir=out)
    trainer.fit(DataLoader(TensorDataset(x, y), batch_size=8))
    shutil.rmtree(out, ignore_errors=True)
    return trainer


def time_write(write: Callable[[], Path]) -> tuple[float, int]:
    """Seconds of one ``write`` (dirty pages flushed first, untimed) and the bytes it wrote;
    the file or folder is removed afterwards, so every write starts from the same state."""
    os.sync()
    t0 = time.perf_counter()
    path = write()
    seconds = time.perf_counter() - t0
    if path.is_dir():
        size = folder_bytes(path)
        shutil.rmtree(path)
    else:
        size = path.stat().st_size
        path.unlink()
    return seconds, size


def torch_save(trainer: Any, path: Path, fsync: bool) -> Path:
    import torch

    with open(path, "wb") as f:
        torch.save({"model": trainer.module.state_dict(),
                    "optimizer": trainer.optimizer.state_dict()}, f)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    return path


def checkpoint_writes(trainer: Any, work: Path, repeats: int, tag: str) -> dict[str, Any]:
    """Reprise's ``save_checkpoint`` vs ``torch.save`` (with and without fsync), interleaved."""
    writers: dict[str, Callable[[], Path]] = {
        "reprise": lambda: trainer.save_checkpoint(),
        "torch_save_fsync": lambda: torch_save(trainer, work / "state.pt", fsync=True),
        "torch_save": lambda: torch_save(trainer, work / "state.pt", fsync=False),
    }
    times: dict[str, list[float]] = {name: [] for name in writers}
    size: dict[str, int] = {}
    for _ in range(repeats):
        for name, write in writers.items():
            sec, size[name] = time_write(write)
            times[name].append(sec)
    figures: dict[str, float] = {}
    for name, ts in times.items():
        sec = statistics.median(ts)
        figures[f"{tag}_{name}_s"] = sec
        figures[f"{tag}_{name}_mb_per_s"] = size[name] / sec / 1e6
        figures[f"{tag}_{name}_mb"] = size[name] / 1e6
    return {"figures": figures, "samples": {f"{tag}_{n}_s": ts for n, ts in times.items()}}


def checkpoint_cost(work: Path, args: argparse.Namespace, step_s: float) -> dict[str, Any]:
    """(d): the big model's write speed, and the MLP's checkpoint share at the default interval."""
    import torch

    torch.manual_seed(0)
    big = trained_one_step(big_mlp(args.ckpt_width, args.ckpt_layers), args.ckpt_width,
                           work / "big")
    params = sum(p.numel() for p in big.module.parameters())
    out = checkpoint_writes(big, work, args.ckpt_repeats, "big_checkpoint")
    del big
    gc.collect()
    torch.manual_seed(0)
    small = trained_one_step(mlp(), 64, work / "mlp")
    every = int(small.checkpoint_every)  # the Trainer's default (checkpoint_every=None)
    mlp_out = checkpoint_writes(small, work, 5, "mlp_checkpoint")
    out["figures"].update(mlp_out["figures"])
    out["samples"].update(mlp_out["samples"])
    write_s = mlp_out["figures"]["mlp_checkpoint_reprise_s"]
    share = write_s / (every * step_s + write_s)
    out["figures"]["mlp_checkpoint_share_at_default_interval"] = share
    out["checkpoint"] = {
        "big_model": f"{args.ckpt_layers} x Linear({args.ckpt_width}, {args.ckpt_width}) + "
                     "AdamW state after one step",
        "big_model_parameters": params,
        "mlp_default_checkpoint_every": every,
        "mlp_step_s": step_s,
        "share_formula": "write_s / (checkpoint_every * step_s + write_s), write_s = median "
                         "Trainer.save_checkpoint() seconds of the MLP + AdamW state, step_s = "
                         "batch / median Reprise samples/s of the MLP workload",
        "reprise_writer": "Trainer.save_checkpoint(): safetensors + state.json, fsynced, "
                          "renamed into place",
        "torch_save": "torch.save({'model': state_dict, 'optimizer': state_dict}) to one file "
                      "on the same disk, with and without fsync",
    }
    return out


def cpu_stall_us() -> int | None:
    """Microseconds some task waited for a CPU, machine-wide (Linux PSI), or None."""
    try:
        line = Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    return int(line.rsplit("total=", 1)[1])


def parse(argv: list[str] | None) -> argparse.Namespace:
    import torch

    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--mlp-rows", type=int, default=200_000)
    ap.add_argument("--cnn-rows", type=int, default=20_000)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads(),
                    help="torch.set_num_threads for every tool (default: torch's default)")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    ap.add_argument("--precision", default="32",
                    help="comma-separated: 32, bf16-mixed (e.g. 32,bf16-mixed on a GPU)")
    ap.add_argument("--probe-steps", type=int, default=3000,
                    help="steps of the overhead probe (Linear(16, 10), pre-collated batches)")
    ap.add_argument("--ckpt-width", type=int, default=4096)
    ap.add_argument("--ckpt-layers", type=int, default=6)
    ap.add_argument("--ckpt-repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    args = ap.parse_args(argv)
    args.precisions = [p.strip() for p in args.precision.split(",") if p.strip()]
    bad = [p for p in args.precisions if p not in ("32", "bf16-mixed")]
    if bad:
        ap.error(f"--precision: {bad} not supported; choose from 32, bf16-mixed")
    if args.device != "cpu" and not torch.cuda.is_available():
        ap.error(f"--device {args.device}: CUDA is not available here; use --device cpu")
    if args.quick:
        args.repeats, args.mlp_rows, args.cnn_rows, args.probe_steps = 1, 20_000, 4_000, 200
        args.ckpt_width, args.ckpt_layers, args.ckpt_repeats = 1024, 2, 1
    return args


def workloads(args: argparse.Namespace) -> list[Workload]:
    return [Workload("mlp", args.mlp_rows, 256, (64,), mlp),
            Workload("cnn", args.cnn_rows, 128, (1, 28, 28), cnn),
            Workload("probe", args.probe_steps * 32, 32, (16,), tiny, premade=True)]


def precision_ratios(figures: dict[str, float], precisions: list[str]) -> dict[str, float]:
    if "32" not in precisions or "bf16-mixed" not in precisions:
        return {}
    return {f"{wl}_{tool}_bf16_vs_fp32_speedup": figures[f"{wl}_bf16_{tool}_samples_per_s"]
            / figures[f"{wl}_fp32_{tool}_samples_per_s"]
            for wl in ("mlp", "cnn", "probe") for tool in TOOLS}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    import lightning
    import torch

    quiet_peers()
    logging.getLogger("reprise.train").addHandler(logging.NullHandler())
    logging.getLogger("reprise.train").setLevel(logging.WARNING)
    torch.set_num_threads(args.threads)
    result: dict[str, Any] = {"figures": {}, "ratios": {}, "samples": {}, "checks": {}}
    stall0, t0 = cpu_stall_us(), time.perf_counter()
    for wl in workloads(args):
        for precision in args.precisions:
            case = Case(wl, precision, args.device)
            part = digest(case, compare(case, args.repeats, args.threads))
            for key in ("figures", "ratios", "samples", "checks"):
                result[key].update(part[key])
    result["ratios"].update(precision_ratios(result["figures"], args.precisions))
    stall1 = cpu_stall_us()
    if stall0 is not None and stall1 is not None:  # how noisy the machine was meanwhile
        result["checks"]["cpu_pressure_some_fraction"] = (
            (stall1 - stall0) / 1e6 / (time.perf_counter() - t0))
    work = WORK / "train"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    tag = TAGS[args.precisions[0]]
    step_s = 256 / result["figures"][f"mlp_{tag}_reprise_samples_per_s"]
    part = checkpoint_cost(work, args, step_s)
    shutil.rmtree(work, ignore_errors=True)
    result["figures"].update(part.pop("figures"))
    result["samples"].update(part.pop("samples"))
    result.update(part)
    result.update({
        "repeats": args.repeats, "torch_threads": args.threads, "device": args.device,
        "precisions": args.precisions, "warmup_steps_excluded": WARMUP,
        "sizes": {wl.name: {"rows": wl.rows, "batch": wl.batch, "input": list(wl.shape)}
                  for wl in workloads(args)},
        "peer": f"hand-written torch {torch.__version__} loop; lightning "
                f"{lightning.__version__} Trainer.fit",
        "measure": "steady-state samples/s between the forward calls of step "
                   f"{WARMUP} and of the last full batch (median_step_*: batch / median "
                   "step time); slowdown = raw / tool samples/s; overhead_us_per_step = "
                   "batch * (1/tool - 1/raw) * 1e6; probe = Linear(16, 10) on pre-collated "
                   "batches of 32, so its step time is mostly the loop's own",
        "goal": "Reprise Trainer (profiling on) within 2% of the raw loop in samples/s",
    })
    name = "train" if args.device == "cpu" else f"train_{args.device}"  # the CPU figures stay
    return finish(name, result, quick=args.quick, fmt=lambda k, v: f"{v:>14,.4g}")


if __name__ == "__main__":
    main()
