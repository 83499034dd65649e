"""The registry's storage (issue 16): push and pull of a large archive into the local directory
and into SeaweedFS over S3, against the store's own raw upload and download of the same bytes,
and the bytes stored for ten fine-tunes that each change one layer. `python -m bench.storage`
prints the RESULTS.md section.

Push is the storing step (`Registry.push`: cutting the archive into skeleton and tensor objects,
claiming, uploading, committing), not the torch validation before it; the raw upload is the
backend's `put` of the whole archive file (for the local directory a copy fsynced with its
folder, the durability a push gives each object; an S3 multipart upload for SeaweedFS); pull
looks the version up and reads the rebuilt archive to its end, raw download reads the copy.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from app.bridge import jobs
from app.registry import Registry
from app.registry.blobs import Piece
from app.registry.blobs.local import LocalObjects
from app.settings import MiB, Settings
from bench import seaweed
from bench.progress import progress

#: a pull or push slower than this share of the raw rate fails the row
FLOOR = 0.8
_VERSIONS = 10
_READ = 1 << 20
#: reads of the archive timed, the best kept (a write can only be timed once: a second push
#: of the same archive stores nothing)
_READS = 3


class _InProcessTorch:
    """Runs the torch check in this process (the bench has torch loaded already)."""

    def submit(self, job: str, *args: object) -> object:
        """Run a job of app.bridge.jobs here."""
        function: Callable[..., object] = getattr(jobs, job)
        return function(*args)


def _export(module: nn.Module, width: int, path: Path) -> None:
    ep = torch.export.export(module.eval(), (torch.randn(2, width),))
    torch.export.save(ep, path)


def _big(megabytes: int, path: Path) -> None:
    """A stack of 1024x1024 linear layers holding about `megabytes` MB of weights."""
    layers = max(1, megabytes * MiB // (1024 * 1024 * 4))
    torch.manual_seed(0)
    _export(nn.Sequential(*(nn.Linear(1024, 1024) for _ in range(layers))), 1024, path)


def _series(folder: Path) -> list[Path]:
    """Ten archives of a trunk and ten heads, the i-th with head i's weights changed."""
    torch.manual_seed(1)
    base = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024))
    heads = nn.ModuleList(nn.Linear(1024, 16) for _ in range(_VERSIONS))

    class Tower(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.base, self.heads = base, heads

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.base(x)
            return torch.stack([head(h) for head in self.heads]).sum(0)

    tower = Tower()
    paths = []
    for i in range(_VERSIONS):
        with torch.no_grad():
            tower.heads[i].weight.copy_(torch.randn(16, 1024))
        paths.append(folder / f"tune-{i}.pt2")
        _export(tower, 1024, paths[-1])
    return paths


def _rate(size: int, seconds: float) -> float:
    return size / MiB / seconds if seconds > 0 else float("inf")


def _timed(action: Callable[[], object], runs: int = 1) -> float:
    """The shortest of `runs` runs: pull and raw download alike take the best of a few, which
    a scheduler's hiccup on a shared machine does not decide."""
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - start)
    return best


def _read_all(handle: object) -> None:
    with handle:  # type: ignore[attr-defined]
        while handle.read(_READ):  # type: ignore[attr-defined]
            pass


def _one_backend(
    label: str, blob_url: str, big: Path, series: list[Path], work: Path
) -> dict[str, float]:
    data = work / label
    settings = Settings(
        data_dir=data, blob_url=blob_url, gc_claim_grace_s=0.0, gc_deleted_grace_s=0.0
    )
    registry = Registry(settings)
    try:
        size = big.stat().st_size
        digest = hashlib.sha256(big.read_bytes()).hexdigest()
        objects = registry.blobs.objects
        if isinstance(objects, LocalObjects):
            # a link would cost nothing: the raw rate of a directory is a copy with fsync
            raw = work / f"{label}-raw"
            raw.mkdir()
            upload = _timed(lambda: _copy_synced(big, raw / "copy"))
            download = _timed(lambda: _read_all((raw / "copy").open("rb")), _READS)
        else:
            upload = _timed(lambda: objects.put(Piece.whole(big), digest))
            download = _timed(lambda: _read_all(objects.open(digest)), _READS)
            objects.remove(digest)
        progress(f"storage {label}: preparing the {size / MiB:.0f} MiB archive (torch check)")
        staged = registry.blobs.stage()
        shutil.copyfile(big, staged.path)
        candidate = registry.prepare(staged.path, _InProcessTorch())
        staged.discard()
        push = _timed(lambda: registry.push("big", candidate))
        pull = _timed(lambda: _read_all(registry.open_content("big", "1", "archive")[1]), _READS)
        registry.delete_version("big", "1", "bench")
        registry.gc()
        for path in series:
            staged = registry.blobs.stage()
            shutil.copyfile(path, staged.path)
            registry.push("tower", registry.prepare(staged.path, _InProcessTorch()))
            staged.discard()
        stored = sum(listed.size for listed in registry.blobs.listing())
        return {
            "size": size,
            "push": _rate(size, push),
            "upload": _rate(size, upload),
            "pull": _rate(size, pull),
            "download": _rate(size, download),
            "stored": stored,
            "one": series[0].stat().st_size,
        }
    finally:
        registry.close()


def _copy_synced(source: Path, target: Path) -> None:
    """A copy made as durable as a stored object: its bytes fsynced, then its folder (which
    holds its name), as the local store does before a push commits."""
    shutil.copyfile(source, target)
    with target.open("rb+") as f:
        os.fsync(f.fileno())
    folder = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def bench_section(megabytes: int = 200) -> tuple[str, bool]:
    """Measure both backends; the RESULTS.md section and whether every ratio held."""
    work = Path(tempfile.mkdtemp(prefix="pt2serde-bench-storage-"))
    try:
        progress(f"storage: exporting a {megabytes} MB model and a {_VERSIONS}-version series")
        big = work / "big.pt2"
        _big(megabytes, big)
        series = _series(work)
        results = {"local": _one_backend("local", "", big, series, work)}
        with seaweed.running():
            results["SeaweedFS (S3)"] = _one_backend("s3", "s3://bench/registry", big, series, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return _section(results)


def _section(results: dict[str, dict[str, float]]) -> tuple[str, bool]:
    held = True
    lines = [
        "## Registry storage (issue 16)",
        "",
        f"Push and pull of a {next(iter(results.values()))['size'] / MiB:.0f} MiB archive "
        "against the store's own raw upload and download of the same bytes (MiB/s; floor "
        f"{FLOOR}), and the bytes stored for {_VERSIONS} fine-tunes that each change one layer.",
        "",
        "| store | push | raw upload | push/raw | pull | raw download | pull/raw | "
        f"{_VERSIONS}-version series stored | one archive | stored/one | status |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, r in results.items():
        up, down = r["push"] / r["upload"], r["pull"] / r["download"]
        ok = up >= FLOOR and down >= FLOOR
        held &= ok
        lines.append(
            f"| {label} | {r['push']:.0f} | {r['upload']:.0f} | {up:.2f} | {r['pull']:.0f} | "
            f"{r['download']:.0f} | {down:.2f} | {r['stored'] / MiB:.2f} MiB | "
            f"{r['one'] / MiB:.2f} MiB | {r['stored'] / r['one']:.2f} | "
            f"{'MET' if ok else f'MISSED (< {FLOOR} of raw)'} |"
        )
    return "\n".join(lines) + "\n", held


def main(argv: list[str] | None = None) -> int:
    """Run the storage bench alone and print its section."""
    parser = argparse.ArgumentParser(prog="python -m bench.storage")
    parser.add_argument("--megabytes", type=int, default=200)
    args = parser.parse_args(argv)
    text, held = bench_section(args.megabytes)
    sys.stdout.write(text)
    return 0 if held else 1


if __name__ == "__main__":
    sys.exit(main())
