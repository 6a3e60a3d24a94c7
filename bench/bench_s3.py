"""Artifacts on S3: Reprise's S3 store against raw ``s3fs`` put/get of the same files.

Both sides talk to the same local S3 server (moto, on loopback, in its own process)
in the same run. Each repetition uses a fresh bucket per side (content addressing
would otherwise skip the second put of the same bytes) and a cold blob cache.

* put: Reprise ``store.put_file`` (hash, HEAD, upload to the content key in 8 MiB
  parts, one in flight) vs ``s3fs.put_file`` with its defaults (50 MiB parts, up to
  10 in flight: a 64 MiB file goes up as one PUT held whole in memory).
* get (to a file): Reprise ``store.copy_to(h, dest, verify=True)`` (one GET whose body
  is hashed on the way and written into a temp file beside ``dest`` and into the
  cache; ``dest`` appears by a rename once the hash matches and the temp file is
  fsynced: one fsync per get) vs ``s3fs.get_file`` (writes ``dest`` in place: no
  check, no fsync, not atomic). The median time of that one fsync (1 MiB, same disk,
  same run) is reported as ``fsync_1mib_ms``: on a shared disk it is what moves the
  small-file ratio.
  A third side, ``s3fs_durable``, gives ``s3fs.get_file`` the same guarantee as
  Reprise's (into a temp name, fsync, rename; still no hash check): the ratio against
  it shows what the get costs beyond the fsync.
* load (what a pipeline step's input load does): the materializers' own path,
  ``_verified_file(store, h)`` (a verified local file in a temp folder deleted once
  loaded: ``copy_to(verify=True, durable=False, link=True)``, i.e. one GET hashed into
  the read-through cache, the temp file a hard link to the read-only cached copy, no
  fsync) vs ``s3fs.get_file`` of the same files into a temp folder, deleted likewise.
  ``cold``: the cache is emptied before each round, so every load downloads; ``warm``:
  the round after, the blobs cached (s3fs has no cache: it downloads again).
* read (into memory): Reprise ``store.get_bytes(h, verify=True)`` (through the cache,
  cold) vs ``s3fs.cat_file``.

Figures are MB/s (10^6 bytes) medians; the ratio is Reprise over s3fs (goal >= 0.8x).
moto keeps objects in memory in one Python process, so absolute figures are the
server's, not S3's; the ratio is what this measures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests._s3: the moto server

from tests._s3 import FAKE_CREDENTIALS, S3Server  # noqa: E402

import reprise  # noqa: E402
from _common import WORK, finish  # noqa: E402
from reprise.store._materializer import _verified_file  # noqa: E402
from reprise.store._s3 import S3ArtifactStore  # noqa: E402


def _files(root: Path, count: int, size: int, tag: str) -> list[Path]:
    root.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(count):
        p = root / f"{tag}-{i}.bin"
        with open(p, "wb") as f:
            left = size
            while left:
                n = min(left, 1 << 20)
                f.write(os.urandom(n))
                left -= n
        out.append(p)
    return out


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_time(folder: Path, tries: int = 5) -> float:
    """Median milliseconds to fsync a freshly written 1 MiB file in ``folder``."""
    times = []
    for i in range(tries):
        p = folder / f"fsync-{i}.bin"
        p.write_bytes(os.urandom(1 << 20))
        t0 = time.perf_counter()
        _fsync(p)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _rate(total: int, seconds: float) -> float:
    return total / seconds / 1e6


def measure(server: S3Server, files: list[Path], work: Path, repeats: int
            ) -> dict[str, list[float]]:
    import s3fs

    total = sum(p.stat().st_size for p in files)
    samples: dict[str, list[float]] = {k: [] for k in
                                       ("reprise_put", "s3fs_put", "reprise_get", "s3fs_get",
                                        "s3fs_durable_get", "reprise_load", "s3fs_load",
                                        "reprise_load_warm", "s3fs_load_warm",
                                        "reprise_read", "s3fs_read", "fsync_1mib_ms")}
    for r in range(repeats):
        raw = s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False)
        ours_bucket, raw_bucket = server.new_bucket(), server.new_bucket()
        cache = work / f"cache-{r}"
        store = S3ArtifactStore(f"s3://{ours_bucket}/ws", cache_dir=cache)
        store.exists("0" * 64)  # both clients connected before timing
        raw.exists(f"{raw_bucket}/warm")
        order = [("reprise", "s3fs"), ("s3fs", "reprise")][r % 2]  # alternate who goes first
        hashes: list[str] = []
        for who in order:
            t0 = time.perf_counter()
            if who == "reprise":
                hashes = [store.put_file(p)[0] for p in files]
            else:
                for p in files:
                    raw.put_file(str(p), f"{raw_bucket}/{p.name}")
            samples[f"{who}_put"].append(_rate(total, time.perf_counter() - t0))
        out = work / f"out-{r}"
        out.mkdir(parents=True, exist_ok=True)
        three = ["reprise", "s3fs", "s3fs_durable"]
        for who in three[r % 3:] + three[:r % 3]:  # each goes first in turn
            t0 = time.perf_counter()
            if who == "reprise":
                for h, p in zip(hashes, files, strict=True):
                    store.copy_to(h, out / f"r-{p.name}", verify=True)
            elif who == "s3fs":
                for p in files:
                    raw.get_file(f"{raw_bucket}/{p.name}", str(out / f"s-{p.name}"))
            else:
                for p in files:
                    tmp = out / f".tmp-d-{p.name}"
                    raw.get_file(f"{raw_bucket}/{p.name}", str(tmp))
                    _fsync(tmp)
                    os.replace(tmp, out / f"d-{p.name}")
            samples[f"{who}_get"].append(_rate(total, time.perf_counter() - t0))
        samples["fsync_1mib_ms"].append(_fsync_time(out))
        for p in files:
            assert (out / f"r-{p.name}").stat().st_size == p.stat().st_size
        shutil.rmtree(out)
        for temp in ("", "_warm"):  # cold (the cache emptied first), then warm
            for who in order:
                if who == "reprise" and not temp:
                    shutil.rmtree(cache, ignore_errors=True)
                t0 = time.perf_counter()
                if who == "reprise":
                    for h in hashes:
                        with _verified_file(store, h):
                            pass
                else:
                    for p in files:
                        with tempfile.TemporaryDirectory(prefix="reprise-", dir=work) as tmp:
                            raw.get_file(f"{raw_bucket}/{p.name}", os.path.join(tmp, "blob"))
                samples[f"{who}_load{temp}"].append(_rate(total, time.perf_counter() - t0))
        shutil.rmtree(cache, ignore_errors=True)  # cold again
        for who in order:  # into memory: get_bytes(verify=True) vs cat_file
            t0 = time.perf_counter()
            if who == "reprise":
                got = sum(len(store.get_bytes(h, verify=True)) for h in hashes)
            else:
                got = sum(len(raw.cat_file(f"{raw_bucket}/{p.name}")) for p in files)
            assert got == total
            samples[f"{who}_read"].append(_rate(total, time.perf_counter() - t0))
        shutil.rmtree(cache, ignore_errors=True)
    return samples


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats = 2
    os.environ.update(FAKE_CREDENTIALS)
    for var in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_MAX_ATTEMPTS", "AWS_RETRY_MODE"):
        os.environ.pop(var, None)
    work = WORK / "s3"
    shutil.rmtree(work, ignore_errors=True)
    sets = {"small": (10 if args.quick else 20, 1 << 20),
            "large": (1 if args.quick else 2, (16 if args.quick else 64) << 20)}
    server = S3Server().start()
    figures: dict[str, float] = {}
    ratios: dict[str, float] = {}
    all_samples: dict[str, Any] = {}
    load_before = os.getloadavg()
    try:
        os.environ["AWS_ENDPOINT_URL_S3"] = server.endpoint
        for name, (count, size) in sets.items():
            files = _files(work / name, count, size, name)
            samples = measure(server, files, work / f"{name}-run", args.repeats)
            all_samples[name] = samples
            for k, v in samples.items():
                unit = "" if k.endswith("_ms") else "_mb_s"
                figures[f"{name}_{k}{unit}"] = statistics.median(v)
            for op in ("put", "get", "load", "load_warm", "read"):
                ratios[f"{name}_{op}_reprise_over_s3fs"] = (
                    figures[f"{name}_reprise_{op}_mb_s"] / figures[f"{name}_s3fs_{op}_mb_s"])
            ratios[f"{name}_get_reprise_over_s3fs_durable"] = (
                figures[f"{name}_reprise_get_mb_s"] / figures[f"{name}_s3fs_durable_get_mb_s"])
            ratios[f"{name}_get_reprise_over_s3fs_paired_median"] = statistics.median(
                a / b for a, b in zip(samples["reprise_get"], samples["s3fs_get"], strict=True))
            ratios[f"{name}_load_reprise_over_s3fs_paired_median"] = statistics.median(
                a / b for a, b in zip(samples["reprise_load"], samples["s3fs_load"],
                                      strict=True))
            figures[f"{name}_files"] = float(count)
            figures[f"{name}_file_bytes"] = float(size)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    import s3fs

    result = {"figures": figures, "ratios": ratios, "samples": all_samples,
              "repeats": args.repeats, "peer": f"s3fs {s3fs.__version__}",
              "reprise": reprise.__version__, "goal": "reprise >= 0.8x raw s3fs, put and get",
              "cpus": os.cpu_count(),
              "server": "moto (in-memory, one local process) on 127.0.0.1",
              "loadavg_before": list(load_before), "loadavg_after": list(os.getloadavg())}
    return finish("s3", result, quick=args.quick)


if __name__ == "__main__":
    sys.exit(0 if main() is not None else 1)
