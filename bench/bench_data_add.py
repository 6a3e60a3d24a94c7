"""Content hashing and ``reprise data add`` against ``dvc add`` on the same 1 GiB file.

Hashing: MD5 (what DVC uses) and SHA-256 from hashlib, BLAKE3 single-threaded in
1 MiB chunks, and Reprise's ``hash_file`` (BLAKE3 over a memory map with threads),
all over the same file in the page cache, in GB/s.

Adding: a fresh DVC repository and a fresh Reprise workspace per repetition, each
adding the same file from the command line (start-up, hashing, copying into the
cache/store, and for Reprise the metadata row; the file is opaque bytes, so the
profile is its size). A second figure adds a 1 M-row CSV, which Reprise also
parses, checks and profiles.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import reprise
from _common import WORK, command_time, finish, median_time, python
from reprise.core._hashing import hash_file

CHUNK = 1 << 20


def _chunked(path: Path, make: Any) -> str:
    h = make()
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        while n := f.readinto(buf):
            h.update(view[:n])
    return str(h.hexdigest())


def hashing(path: Path, repeats: int) -> dict[str, float]:
    import blake3

    size = path.stat().st_size
    out = {}
    for label, fn in [
        ("md5", lambda: _chunked(path, hashlib.md5)),
        ("sha256", lambda: _chunked(path, hashlib.sha256)),
        ("blake3_1thread", lambda: _chunked(path, blake3.blake3)),
        ("reprise_hash_file", lambda: hash_file(path)),
    ]:
        fn()  # warm the page cache
        t, _ = median_time(fn, repeats)
        out[f"{label}_gb_s"] = size / t / 1e9
    return out


def _warm(path: Path) -> None:
    with open(path, "rb", buffering=0) as f:
        while f.read(1 << 24):
            pass


def _bin(name: str) -> str:
    return str(Path(python()).parent / name)


def add_times(data: Path, root: Path, repeats: int, label: str, link: bool = False
              ) -> dict[str, Any]:
    """``link``: both tools hard-link into their cache/store instead of copying (DVC's
    ``cache.type hardlink``, Reprise's ``--link``)."""
    env = {"PATH": f"{Path(python()).parent}:{os.environ['PATH']}"}
    dvc_dir, rep_dir = root / "dvc", root / "reprise"

    def fresh() -> None:
        for d in (dvc_dir, rep_dir):
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)
        os.link(data, dvc_dir / data.name)  # same inode: both read the same cached pages
        subprocess.run(["git", "init", "-q"], cwd=dvc_dir, check=True)
        subprocess.run([_bin("dvc"), "init", "-q"], cwd=dvc_dir, check=True,
                       env={**os.environ, **env})
        if link:
            subprocess.run([_bin("dvc"), "config", "cache.type", "hardlink"], cwd=dvc_dir,
                           check=True, env={**os.environ, **env})
        subprocess.run([_bin("reprise"), "init", "."], cwd=rep_dir, check=True,
                       stdout=subprocess.DEVNULL)

    samples: dict[str, list[float]] = {"dvc": [], "reprise": []}
    for _ in range(repeats):
        fresh()
        _warm(data)  # both tools start with the file in the page cache
        os.sync()  # and with a quiet disk: DVC does not fsync, so without this its
        # writeback would still be draining while the next tool's fsyncs queue behind it

        t, _s = command_time([_bin("dvc"), "add", "-q", data.name], 1, env=env, cwd=dvc_dir,
                             warmup=False)
        samples["dvc"].append(t)
        os.sync()
        t, _s = command_time([_bin("reprise"), "data", "add", "d", str(data),
                              *(["--link"] if link else [])], 1, env=env, cwd=rep_dir,
                             warmup=False)
        samples["reprise"].append(t)
    shutil.rmtree(root, ignore_errors=True)
    import statistics

    return {f"dvc_add_{label}_s": statistics.median(samples["dvc"]),
            f"reprise_data_add_{label}_s": statistics.median(samples["reprise"]),
            "samples": samples}


def make_blob(path: Path, size: int) -> None:
    if path.exists() and path.stat().st_size == size:
        return
    if path.exists():
        os.chmod(path, 0o644)
    block = os.urandom(CHUNK)
    with open(path, "wb") as f:
        for i in range(size // CHUNK):
            f.write(block[i % 251:] + block[: i % 251])  # distinct blocks, cheap to make


def make_csv(path: Path, rows: int) -> None:
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    pd.DataFrame({"id": np.arange(rows), "x": rng.normal(size=rows),
                  "y": rng.integers(0, 1000, rows),
                  "plan": rng.choice(["basic", "pro", "team"], rows)}).to_csv(path, index=False)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    size = (64 << 20) if args.quick else (1 << 30)
    rows = 100_000 if args.quick else 1_000_000
    if args.quick:
        args.repeats = 2
    if shutil.which("dvc", path=str(Path(python()).parent)) is None:
        print("  dvc is not installed (pip install -e '.[bench]'); skipping")
        return {}
    root = WORK / "data_add"
    root.mkdir(parents=True, exist_ok=True)
    blob, csv = root / "blob.bin", root / "table.csv"
    make_blob(blob, size)
    make_csv(csv, rows)
    figures: dict[str, float] = {"file_bytes": float(size), "csv_rows": float(rows)}
    figures.update(hashing(blob, args.repeats))
    samples: dict[str, Any] = {}
    blob_add = add_times(blob, root / "blob_run", args.repeats, "1gib" if not args.quick else "blob")
    samples["blob"] = blob_add.pop("samples")
    figures.update(blob_add)
    link_add = add_times(blob, root / "link_run", args.repeats, "link", link=True)
    samples["link"] = link_add.pop("samples")
    figures.update(link_add)
    os.chmod(blob, 0o644)
    csv_add = add_times(csv, root / "csv_run", args.repeats, "csv")
    samples["csv"] = csv_add.pop("samples")
    figures.update(csv_add)
    key = "1gib" if not args.quick else "blob"
    ratios = {
        "dvc_add_over_reprise_add": figures[f"dvc_add_{key}_s"] / figures[f"reprise_data_add_{key}_s"],
        "dvc_add_over_reprise_add_hardlink_both": figures["dvc_add_link_s"]
        / figures["reprise_data_add_link_s"],
        "dvc_add_over_reprise_add_csv": figures["dvc_add_csv_s"] / figures["reprise_data_add_csv_s"],
        "reprise_hash_over_md5": figures["reprise_hash_file_gb_s"] / figures["md5_gb_s"],
    }
    import dvc

    result = {"figures": figures, "ratios": ratios, "samples": samples, "repeats": args.repeats,
              "peer": f"dvc {dvc.__version__}", "reprise": reprise.__version__,
              "goal": "hash 1 GiB >= 5 GB/s; reprise data add >= 3x faster than dvc add",
              "note": "CSV figure includes Reprise's parse, checks and profile; DVC only hashes"}
    blob.unlink(missing_ok=True)
    return finish("data_add", result, quick=args.quick)


if __name__ == "__main__":
    sys.exit(0 if main() is not None else 1)
