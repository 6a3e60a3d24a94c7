"""``batch_size="auto"``: the largest batch that fits, and the accumulation that keeps a
target effective batch.

On a GPU the answer is found by trying: double the batch until a step runs out
of memory, then bisect between the last size that fit and the first that did
not. On a CPU running out of memory means swapping or the OOM killer, never an
exception, so the batch is computed from a memory budget instead (default a
quarter of the available RAM): parameters, gradients and optimizer state are a
fixed cost, and each sample adds its activations (measured with forward hooks
on a small probe batch), kept once for backward and once for their gradients.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from reprise.core.errors import UserError

__all__ = ["choose_batch", "find_batch_size", "largest_fitting"]

MAX_BATCH = 65_536


def _is_oom(exc: BaseException) -> bool:
    import torch

    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    if oom is not None and isinstance(exc, oom):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc)


def largest_fitting(try_batch: Callable[[int], None], *, start: int = 2,
                    limit: int = MAX_BATCH, is_oom: Callable[[BaseException], bool] = _is_oom
                    ) -> tuple[int, int]:
    """The largest ``b <= limit`` for which ``try_batch(b)`` does not run out of memory,
    and the number of tries. Doubling from ``start``, then bisection.

    Example:
        >>> def fits(b):
        ...     if b > 300: raise MemoryError
        >>> largest_fitting(fits, is_oom=lambda e: isinstance(e, MemoryError))
        (300, 17)
    """
    tries = 0

    def ok(b: int) -> bool:
        nonlocal tries
        tries += 1
        try:
            try_batch(b)
            return True
        except BaseException as exc:
            if is_oom(exc):
                return False
            raise

    good, b = 0, max(1, min(start, limit))
    while b <= limit and ok(b):
        good = b
        if b == limit:
            return good, tries
        b = min(b * 2, limit)
    if good == 0:
        if b > 1 and ok(1):
            good = 1
        else:
            raise UserError("not even a batch of 1 fits in the device's memory; use a smaller "
                            "model, precision='bf16-mixed', or another device")
    bad = b
    while bad - good > 1:
        mid = (good + bad) // 2
        if ok(mid):
            good = mid
        else:
            bad = mid
    return good, tries


def _grow(batch: Any, b: int) -> Any:
    """``batch`` repeated along dimension 0 to exactly ``b`` samples."""
    if hasattr(batch, "shape"):
        reps = math.ceil(b / batch.shape[0])
        return batch.repeat(reps, *([1] * (batch.dim() - 1)))[:b]
    if isinstance(batch, dict):
        return {k: _grow(v, b) for k, v in batch.items()}
    if isinstance(batch, list | tuple):
        return type(batch)(_grow(v, b) for v in batch)
    return batch


def _activation_bytes(model: Any, forward: Callable[[], Any]) -> int:
    """Bytes of every leaf module's output during one forward pass."""
    total = 0

    def add(out: Any) -> None:
        nonlocal total
        if hasattr(out, "nbytes"):
            total += int(out.nbytes)
        elif isinstance(out, list | tuple):
            for o in out:
                add(o)

    hooks = [m.register_forward_hook(lambda _m, _i, out: add(out))
             for m in model.modules() if not list(m.children())]
    try:
        forward()
    finally:
        for h in hooks:
            h.remove()
    return total


def find_batch_size(model: Any, probe: Any, step: Callable[[Any, Any], Any], *,
                    device: Any = "cpu", memory_budget: int | None = None,
                    optimizer_states: int = 2, limit: int = MAX_BATCH) -> dict[str, Any]:
    """The largest batch that fits for ``model``; ``probe`` is a small real batch.

    ``step(model, batch)`` returns the loss (it is backpropagated on a GPU).
    Returns ``{"batch_size", "method", "reason", ...}``.
    """
    import torch

    dev = torch.device(device)
    n_probe = int(probe[0].shape[0]) if isinstance(probe, list | tuple) else None
    if dev.type == "cuda":
        def try_batch(b: int) -> None:
            try:
                model.zero_grad(set_to_none=True)
                step(model, _grow(probe, b)).backward()
            finally:
                model.zero_grad(set_to_none=True)
                torch.cuda.empty_cache()

        size, tries = largest_fitting(try_batch, limit=limit)
        return {"batch_size": size, "method": "oom-search", "tries": tries,
                "reason": f"largest batch without running out of GPU memory ({tries} tries)"}
    if memory_budget is None:
        import psutil

        memory_budget = psutil.virtual_memory().available // 4
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    fixed = params * (2 + optimizer_states)  # weights, gradients, optimizer state
    with torch.no_grad():
        act = _activation_bytes(model, lambda: step(model, probe))
    per_sample = max(1, 2 * act // max(n_probe or 1, 1))
    room = memory_budget - fixed
    if room < per_sample:
        raise UserError(f"memory_budget {memory_budget:,} bytes does not hold the model "
                        f"({fixed:,} bytes with gradients and optimizer state) and one sample "
                        f"({per_sample:,} bytes); raise it")
    raw = min(room // per_sample, limit)
    size = 1 << int(math.log2(raw))
    return {"batch_size": size, "method": "memory-budget", "per_sample_bytes": per_sample,
            "fixed_bytes": fixed, "memory_budget": memory_budget,
            "reason": f"{memory_budget / 2**20:,.0f} MiB budget, {per_sample:,} bytes of "
                      f"activations per sample, {fixed / 2**20:,.1f} MiB for the model"}


def choose_batch(trainer: Any, probe_loader: Any, *, n_samples: int | None,
                 target: int | None, memory_budget: int | None) -> dict[str, Any]:
    """What the Trainer uses for ``batch_size="auto"`` (and ``target_batch_size``)."""
    probe = next(iter(probe_loader))
    device = trainer.device
    if device.type != "cpu":
        from reprise.train._trainer_base import _to_device

        probe = _to_device(probe, device, False)

    def step(model: Any, batch: Any) -> Any:
        with trainer._autocast():
            return trainer._compute_loss(batch, model)

    found = find_batch_size(trainer.module, probe, step, device=device,
                            memory_budget=memory_budget,
                            limit=min(MAX_BATCH, n_samples or MAX_BATCH))
    size, accumulate = int(found["batch_size"]), 1
    agreed = trainer._agree_min(size)  # under DDP every rank must take the same batch
    if agreed != size:
        found["reason"] += (f"; {agreed} on every rank (the smallest any of the "
                            f"{trainer.world_size} ranks fits)")
        size = found["batch_size"] = agreed
    if target is not None:
        accumulate = math.ceil(target / size)
        size = math.ceil(target / accumulate)
        found["reason"] += (f"; target effective batch {target} = {size} × {accumulate}"
                            + ("" if size * accumulate == target
                               else f" (≈ {size * accumulate})"))
    found.update(batch_size=size, accumulate=accumulate)
    return found
