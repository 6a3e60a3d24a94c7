"""``reprise data add`` of a folder against ``dvc add`` of the same folder.

Two folders: a few large files (8 x 128 MiB, like Parquet shards) and 20,000 small
files of ~10 KB (like thumbnails). Per repetition each tool gets a fresh repository
(``dvc init --no-scm``; ``reprise init``) and adds the folder from the command line,
copying into its cache/store; then adds the unchanged folder again (DVC's second
``dvc add`` is its own no-op re-add). Peak memory is the whole process's maximum
resident set, read the same way for both (``ru_maxrss`` of the finished child).
The large folder is also added with hard links (``cache.type hardlink`` / ``--link``).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import reprise
from _common import WORK, finish, python

MIB = 1 << 20


def _bin(name: str) -> str:
    return str(Path(python()).parent / name)


def _timed(argv: list[str], cwd: Path) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one command run to completion."""
    env = {**os.environ, "PATH": f"{Path(python()).parent}:{os.environ['PATH']}"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, rusage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"{argv} failed: {err.read().decode(errors='replace')}")
    return wall, rusage.ru_maxrss / 1024


def make_large(root: Path, files: int, size: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        path = root / f"part-{i:05d}.parquet"
        if path.exists() and path.stat().st_size == size:
            continue
        block = os.urandom(MIB)
        with open(path, "wb") as f:
            for j in range(size // MIB):
                f.write(block[j % 251:] + block[: j % 251])


def make_small(root: Path, files: int, size: int) -> None:
    if root.is_dir() and sum(1 for _ in root.rglob("*.jpg")) == files:
        return
    for i in range(files):
        sub = root / f"{i // 1000:03d}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"{i:06d}.jpg").write_bytes(os.urandom(size - 256) + i.to_bytes(256, "big"))


def _repo(kind: str, where: Path, data: Path, link: bool) -> Path:
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    target = where / data.name
    shutil.copytree(data, target, copy_function=os.link)  # same inodes: same cached pages
    if kind == "dvc":
        subprocess.run([_bin("dvc"), "init", "-q", "--no-scm"], cwd=where, check=True)
        if link:
            subprocess.run([_bin("dvc"), "config", "cache.type", "hardlink"], cwd=where,
                           check=True)
    else:
        subprocess.run([_bin("reprise"), "init", "."], cwd=where, check=True,
                       stdout=subprocess.DEVNULL)
    return target


def _add(kind: str, data: Path, link: bool) -> list[str]:
    if kind == "dvc":
        return [_bin("dvc"), "add", "-q", data.name]
    return [_bin("reprise"), "data", "add", "d", data.name, *(["--link"] if link else [])]


def compare(data: Path, label: str, repeats: int, link: bool = False) -> dict[str, Any]:
    samples: dict[str, dict[str, list[float]]] = {
        k: {"add_s": [], "readd_s": [], "peak_mb": []} for k in ("dvc", "reprise")}
    for _ in range(repeats):
        for kind in ("dvc", "reprise"):
            where = WORK / "data_folder" / f"{kind}_repo"
            target = _repo(kind, where, data, link)
            time.sleep(1.1)  # files older than a clock tick, as in real use
            os.sync()  # a quiet disk for each tool: DVC does not fsync, Reprise does
            t, peak = _timed(_add(kind, target, link), where)
            os.sync()
            t2, peak2 = _timed(_add(kind, target, link), where)
            samples[kind]["add_s"].append(t)
            samples[kind]["readd_s"].append(t2)
            samples[kind]["peak_mb"].append(max(peak, peak2))
            shutil.rmtree(where, ignore_errors=True)
    med = {k: {m: statistics.median(v) for m, v in d.items()} for k, d in samples.items()}
    figures = {f"{k}_{m}_{label}": v for k, d in med.items() for m, v in d.items()}
    return {"figures": figures, "samples": {label: samples}, "ratios": {
        f"dvc_over_reprise_add_{label}": med["dvc"]["add_s"] / med["reprise"]["add_s"],
        f"reprise_readd_over_add_{label}": med["reprise"]["readd_s"] / med["reprise"]["add_s"],
    }}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    large_n, large_size = (2, 16 * MIB) if args.quick else (8, 128 * MIB)
    small_n = 500 if args.quick else 20_000
    if args.quick:
        args.repeats = 1
    if shutil.which("dvc", path=str(Path(python()).parent)) is None:
        print("  dvc is not installed (pip install -e '.[bench]'); skipping")
        return {}
    base = WORK / "data_folder"
    large, small = base / "large", base / "small"
    make_large(large, large_n, large_size)
    make_small(small, small_n, 10_000)
    result: dict[str, Any] = {"figures": {"large_files": large_n, "large_file_bytes": large_size,
                                          "small_files": small_n, "small_file_bytes": 10_000},
                              "ratios": {}, "samples": {}}
    for data, label, link in ((large, "large", False), (small, "small", False),
                              (large, "large_link", True)):
        part = compare(data, label, args.repeats, link=link)
        for key in ("figures", "ratios", "samples"):
            result[key].update(part[key])
    import dvc

    result.update({
        "repeats": args.repeats, "peer": f"dvc {dvc.__version__}", "reprise": reprise.__version__,
        "goal": "folder add >= 3x faster than dvc add (large and small folders); peak memory "
                "< 300 MB; re-adding an unchanged 20,000-file folder <= 0.1x the first add",
        "note": "peak_mb is ru_maxrss of the add and re-add processes; times include start-up",
        "bench_self_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
    shutil.rmtree(base, ignore_errors=True)
    return finish("data_folder", result, quick=args.quick)


if __name__ == "__main__":
    sys.exit(0 if main() is not None else 1)
