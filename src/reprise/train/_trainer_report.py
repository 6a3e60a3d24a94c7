"""What a Trainer tells: metric points every ``log_every`` steps (loss, samples/s, data
wait, memory, energy), validation results to an enclosing tuning trial, and the
end-of-fit summary with its advice.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Mapping
from typing import Any

from reprise.train._advice import input_bound_advice
from reprise.train._trainer_base import (
    _TrainerBase,
)


class _ReportMixin(_TrainerBase):
    """Metrics, trial reports and the summary of :class:`Trainer`."""

    def _log_interval(self) -> str | None:
        reason = self._check_losses()
        if reason is not None or self._quiet:
            return reason
        now = time.perf_counter()
        elapsed = now - self._interval_start
        values: dict[str, float] = {"train/loss": self._last_loss,
                                    "train/lr": float(self.optimizer.param_groups[0]["lr"])}
        if self.profile and elapsed > 0:
            busy = self._interval_data + self._interval_compute
            steps = max(self._interval_steps, 1)
            values.update({
                "train/samples_per_s": self._interval_samples / elapsed,
                "train/step_ms": 1000 * elapsed / steps,
                "train/data_wait_frac": self._interval_data / busy if busy else 0.0,
            })
            if self._energy is not None:
                joules = self._energy.read()
                values["train/energy_j_per_step"] = (joules - self._energy_mark) / steps
                self._energy_mark = joules
            values["train/peak_mem_mb"] = self._peak_memory_mb()
        self._t_data += self._interval_data
        self._t_compute += self._interval_compute
        self._interval_start = now
        self._interval_samples = self._interval_steps = 0
        self._interval_data = self._interval_compute = 0.0
        self._log_metrics(values)
        return None

    def _log_metrics(self, values: dict[str, float]) -> None:
        if self.rank != 0 or self._quiet:
            return
        from reprise.tracking._api import active_run

        run = active_run()
        if run is not None:
            run.log_metrics(values, step=self.global_step)

    def _peak_memory_mb(self) -> float:
        import torch

        if self.device.type == "cuda":
            return float(torch.cuda.max_memory_allocated(self.device)) / 2**20
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return float(peak) / (2**20 if sys.platform == "darwin" else 2**10)

    def _report_to_trial(self, metrics: Mapping[str, float]) -> None:
        """Inside a tuning trial, report the validation metrics; stop when it is pruned.

        Rank 0 reports and the decision is shared, so every rank stops together.
        """
        from reprise.core._report import current_reporter

        reporter = current_reporter()
        if reporter is None:
            return
        prune = False
        if self.rank == 0:  # step = the validation's number: warm-ups count validations
            reporter.report(metrics, len(self.validations))
            prune = reporter.should_prune()
        if self.world_size > 1:
            import torch
            import torch.distributed as dist

            flag = torch.tensor([int(prune)], device=self.device if self.device.type == "cuda"
                                else "cpu")
            dist.broadcast(flag, src=0)
            prune = bool(flag.item())
        if prune:
            from reprise.core.errors import TrialPruned

            self._say(f"tuning trial pruned after validation {len(self.validations)} "
                      f"(optimizer step {self.global_step}; {dict(metrics)})")
            raise TrialPruned(f"trial pruned after validation {len(self.validations)} "
                              f"(optimizer step {self.global_step})")

    def _summary(self, wall: float, stopped: str) -> dict[str, Any]:
        self._t_data += self._interval_data
        self._t_compute += self._interval_compute
        self._check_losses()
        busy = self._t_data + self._t_compute
        steps = max(self.global_step, 1)
        samples, wall = self._global_throughput(self.samples_seen, wall)  # all ranks, under DDP
        out: dict[str, Any] = {
            "stopped": stopped, "optimizer_steps": self.global_step, "epochs": self.epoch,
            "samples": samples, "seconds": wall,
            "device": str(self.device), "precision": self.precision,
            "batch_size": self._train_batch_size(), "accumulate": self.accumulate,
            "world_size": self.world_size,
            "final_loss": self._loss_values[-1] if self._loss_values else None,
        }
        if self.profile:
            out.update({
                "samples_per_s": samples / wall if wall > 0 else None,
                "data_wait_fraction": self._t_data / busy if busy else 0.0,
                "data_wait_seconds": self._t_data, "compute_seconds": self._t_compute,
                "peak_mem_mb": self._peak_memory_mb(),
            })
            if self._energy is not None:
                joules = self._energy.read()
                out.update({"energy_j": joules, "energy_j_per_step": joules / steps,
                            "energy_source": self._energy.source})
        if self.checkpoints is not None:
            out.update({"checkpoints": self.checkpoints.count,
                        "checkpoint_seconds": self.checkpoints.seconds,
                        "checkpoint_fraction": self.checkpoints.seconds / wall if wall else 0.0})
        out["input_bound"] = input_bound_advice(out) is not None
        return out

    def _report(self, summary: dict[str, Any]) -> None:
        numbers = {f"train/summary/{k}": float(v) for k, v in summary.items()
                   if isinstance(v, int | float) and not isinstance(v, bool) and v is not None}
        self._log_metrics(numbers)
        parts = [f"{summary['optimizer_steps']} steps", f"{summary['samples']} samples",
                 f"{summary['seconds']:.2f} s ({summary['stopped']})"]
        if self.profile and summary.get("samples_per_s"):
            parts.append(f"{summary['samples_per_s']:,.0f} samples/s")
            parts.append(f"data wait {100 * summary['data_wait_fraction']:.1f}%")
            if "energy_j_per_step" in summary:
                label = "" if summary["energy_source"] != "estimate" else " (estimate)"
                parts.append(f"{summary['energy_j_per_step']:.3g} J/step{label}")
            parts.append(f"peak memory {summary['peak_mem_mb']:.0f} MB")
        if "checkpoint_seconds" in summary:
            parts.append(f"checkpoints {summary['checkpoints']} "
                         f"({100 * summary['checkpoint_fraction']:.1f}% of the time)")
        self._say("trained: " + ", ".join(parts))
        advice = input_bound_advice(summary)
        if advice is not None:
            self._say(advice, logging.WARNING)
