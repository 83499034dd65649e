"""The registry's storage, measured on a real fine-tune series (issue 31): a GPT-2 and five
full fine-tunes of it (tests/finetunes.py: every tensor changed by a few training steps), in
bfloat16 and float32, pushed as versions of one model into the local directory and into
SeaweedFS over S3. `python -m bench.storage` prints the RESULTS.md section alone.

Stored bytes are what the store holds: the sizes of the objects it lists (the directory's files,
the bucket's keys) once the versions are in, over the archives' own sizes; each series is pushed
into a store of its own, so the listing is that series' alone. The base alone is the listing
after its first push.

Push and pull: the first float32 fine-tune (about 200 MB) pushed as the version after its base,
so that the store may keep it as a delta, against the store's own raw upload and download of
the same bytes. Push is the storing step (`Registry.push`: cutting the archive into skeleton and
tensor objects, claiming, uploading, committing), not the torch validation before it; the raw
upload is the backend's `put` of the whole archive file (for the local directory a copy fsynced
with its folder, the durability a push gives each object; an S3 multipart upload for
SeaweedFS); pull looks the version up and reads the rebuilt archive to its end, raw download
reads the copy.
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
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Protocol

from app.jobs import push
from app.jobs.runners import INLINE
from app.registry.blobs import Objects, Piece
from app.registry.blobs.local import LocalObjects
from app.registry.ingest import Candidate
from app.registry.store import Registry
from app.settings import MiB, Settings
from bench.programs import Cache
from bench.progress import progress
from tests import finetunes
from tests.finetunes import Series, Size
from tests.registry import seaweed_server

HEADING = "## Registry storage"
#: a pull or push slower than this share of the raw rate misses
FLOOR = 0.8
#: stored bytes of a base and its fine-tunes, at most this share of their archives
SERIES_TARGET = 0.50
#: stored bytes of one bfloat16 model, at most this share of its archive
ALONE_TARGET = 0.80
_READ = 1 << 20
#: rounds of raw upload then push (each push a fresh version after the last one was collected,
#: so it stores every object again), each followed by _READS raw downloads and pulls in turn:
#: both sides meet the same state of a shared machine, and the best of each is kept
_ROUNDS = 3
_READS = 3
#: the fine-tune pushed and pulled against the raw rates: the first of the float32 series
_TIMED_DTYPE = "fp32"
_TIMED = 1
_MODEL = "gpt2"


@dataclass
class Stored:
    """What a store holds for one dtype's series: after the base, after every version."""

    dtype: str
    base: int
    base_archive: int
    series: int
    archives: int


@dataclass
class Rates:
    """Push and pull against raw upload and download, in MiB/s, of an archive of `size` bytes."""

    size: int
    push: float
    upload: float
    pull: float
    download: float
    #: whether every timed version pulled back as the archive its push served
    identical: bool
    #: the same pushes and pulls into a store of its own with encoding off
    #: (`PT2SERDE_STORE_ENCODE=false`): what the registry's own path costs without it
    plain: Rates | None = None


def _rate(size: int, seconds: float) -> float:
    return size / MiB / seconds if seconds > 0 else float("inf")


def _seconds(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def _pull(registry: Registry, version: str) -> None:
    _read_all(registry.open_content(_MODEL, version, "archive")[1])


def _read_all(handle: object) -> None:
    with handle:  # type: ignore[attr-defined]
        while handle.read(_READ):  # type: ignore[attr-defined]
            pass


def _stored(registry: Registry) -> int:
    """The bytes the store holds: its objects' sizes as it lists them."""
    return sum(listed.size for listed in registry.blobs.listing())


def _one_backend(
    label: str, url: Callable[[str], str], series: dict[str, Series], work: Path
) -> tuple[Rates, list[Stored]]:
    """Each dtype's series pushed into a store of its own (`url(dtype)`), in order; the timed
    fine-tune's push and pull between its base and the rest."""
    rates: Rates | None = None
    stored: list[Stored] = []
    for dtype, one in series.items():
        settings = Settings(
            data_dir=work / f"{label}-{dtype}",
            blob_url=url(dtype),
            gc_claim_grace_s=0.0,
            gc_deleted_grace_s=0.0,
        )
        registry = Registry(settings)
        try:
            base, *tunes = one.archives
            registry.push(_MODEL, _candidate(registry, base))
            alone = _stored(registry)
            if dtype == _TIMED_DTYPE:
                rates = _rates(registry, tunes[_TIMED - 1], work / f"{label}-raw")
                rates.plain = _plain_rates(
                    settings.model_copy(
                        update={
                            "data_dir": work / f"{label}-{dtype}-plain",
                            "blob_url": url(f"{dtype}-plain"),
                            "store_encode": False,
                        }
                    ),
                    base,
                    tunes[_TIMED - 1],
                    work / f"{label}-plain-raw",
                )
            for tune in tunes:
                registry.push(_MODEL, _candidate(registry, tune))
            total = _stored(registry)
            stored.append(Stored(dtype, alone, base.stat().st_size, total, one.total))
        finally:
            registry.close()
    if rates is None:
        raise ValueError(f"no {_TIMED_DTYPE} series to time")
    return rates, stored


def _rates(registry: Registry, archive: Path, folder: Path) -> Rates:
    """`archive` pushed as the next version and pulled, against the raw rates, _ROUNDS times
    (each version deleted and collected after its round); and whether a pull gave back the
    archive the push served."""
    size = archive.stat().st_size
    objects = registry.blobs.objects
    raw: _Raw = (
        _RawLocal(archive, folder)
        if isinstance(objects, LocalObjects)
        else _RawS3(archive, objects, hashlib.sha256(archive.read_bytes()).hexdigest())
    )
    timings: dict[str, list[float]] = {"upload": [], "push": [], "download": [], "pull": []}
    identical = True
    for _ in range(_ROUNDS):
        candidate = _candidate(registry, archive)
        timings["upload"].append(_seconds(raw.upload))
        start = time.perf_counter()
        pushed = registry.push(_MODEL, candidate).version
        timings["push"].append(time.perf_counter() - start)
        ref = str(pushed.version)
        for _ in range(_READS):
            timings["download"].append(_seconds(raw.download))
            timings["pull"].append(_seconds(partial(_pull, registry, ref)))
        identical &= _pulled_digest(registry, ref) == pushed.digests.archive
        raw.forget()
        registry.delete_version(_MODEL, ref, "bench")
        registry.gc()
    best = {key: _rate(size, min(seconds)) for key, seconds in timings.items()}
    return Rates(size, best["push"], best["upload"], best["pull"], best["download"], identical)


def _plain_rates(settings: Settings, base: Path, archive: Path, folder: Path) -> Rates:
    """`_rates` of `archive` pushed after `base` into a store of `settings` (encoding off)."""
    registry = Registry(settings)
    try:
        registry.push(_MODEL, _candidate(registry, base))
        return _rates(registry, archive, folder)
    finally:
        registry.close()


def _pulled_digest(registry: Registry, version: str) -> str:
    digest = hashlib.sha256()
    with registry.open_content(_MODEL, version, "archive")[1] as handle:
        while chunk := handle.read(_READ):
            digest.update(chunk)
    return digest.hexdigest()


def _candidate(registry: Registry, archive: Path) -> Candidate:
    """An archive uploaded and vetted (the torch check), ready to push."""
    staged = registry.blobs.stage()
    try:
        shutil.copyfile(archive, staged.path)
        return push.prepare(registry, staged.path, INLINE, INLINE)
    finally:
        staged.discard()


class _Raw(Protocol):
    """The store's own upload and download of the archive, without the registry."""

    def upload(self) -> None: ...
    def download(self) -> None: ...
    def forget(self) -> None: ...


class _RawLocal:
    """A directory's raw rates: a copy made durable (a link would cost nothing), a read."""

    def __init__(self, archive: Path, folder: Path) -> None:
        self.archive, self.copy = archive, folder / "copy"
        folder.mkdir()

    def upload(self) -> None:
        _copy_synced(self.archive, self.copy)

    def download(self) -> None:
        _read_all(self.copy.open("rb"))

    def forget(self) -> None:
        self.copy.unlink()


class _RawS3:
    """An object store's raw rates: one object put (in parts) and read, by the same client."""

    def __init__(self, archive: Path, objects: Objects, digest: str) -> None:
        self.archive, self.objects, self.digest = archive, objects, digest

    def upload(self) -> None:
        self.objects.put(Piece.whole(self.archive), self.digest)

    def download(self) -> None:
        _read_all(self.objects.open(self.digest))

    def forget(self) -> None:
        self.objects.remove(self.digest)


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


def bench_section(size: Size, cache: Path) -> tuple[str, bool, bool]:
    """Measure both backends on `size`'s series (generated into `cache` unless there); the
    RESULTS.md section, whether every target held and whether a check failed (a pull that
    differs from what its push served)."""
    progress(f"storage: the {size.name} fine-tune series (cached in {cache})")
    series = finetunes.series(size, cache)
    work = Path(tempfile.mkdtemp(prefix="pt2serde-bench-storage-"))
    try:
        results = {"local": _one_backend("local", lambda _: "", series, work)}
        with seaweed_server.running():
            results["SeaweedFS (S3)"] = _one_backend(
                "s3", lambda dtype: f"s3://bench/{dtype}", series, work
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text, held = section(size, results)
    return text, held, not all(rates.identical for rates, _ in results.values())


def _ratio_row(store: str, what: str, stored: int, archives: int, target: float | None) -> str:
    ratio = stored / archives
    if target is None:
        status = "not judged"
    else:
        status = "MET" if ratio <= target else f"MISSED (> {target:.2f}x)"
    bound = "—" if target is None else f"≤ {target:.2f}x"
    return (
        f"| {store} | {what} | {stored / MiB:.1f} MiB | {archives / MiB:.1f} MiB | "
        f"{ratio:.2f}x | {bound} | {status} |"
    )


def _rate_row(store: str, r: Rates, status: str) -> str:
    return (
        f"| {store} | {r.push:.0f} | {r.upload:.0f} | {r.push / r.upload:.2f} | {r.pull:.0f} | "
        f"{r.download:.0f} | {r.pull / r.download:.2f} | {status} |"
    )


def section(size: Size, results: dict[str, tuple[Rates, list[Stored]]]) -> tuple[str, bool]:
    """The RESULTS.md section of the measured figures, and whether every target held."""
    held = True
    timed = next(iter(results.values()))[0].size
    lines = [
        HEADING,
        "",
        f"A GPT-2 ({size.layers} layers, width {size.hidden}, vocabulary {size.vocab}) and "
        f"{finetunes.TUNES} full fine-tunes of it (every tensor changed by "
        f"{finetunes.TUNE_STEPS} AdamW steps on a task of its own; `tests/finetunes.py`), "
        "pushed as versions of one model. Push and pull of the first float32 fine-tune "
        f"({timed / MiB:.0f} MiB), pushed after its base, against the store's own raw upload "
        f'and download of the same bytes (MiB/s; floor {FLOOR} of raw). The rows "encoding '
        'off" push and pull the same bytes into a store of their own with '
        "`PT2SERDE_STORE_ENCODE=false`: the registry's own path (hashing, cutting, claiming, "
        "committing; rebuilding the archive), without encoding:",
        "",
        "| store | push | raw upload | push/raw | pull | raw download | pull/raw | status |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for store, (r, _) in results.items():
        up, down = r.push / r.upload, r.pull / r.download
        ok = up >= FLOOR and down >= FLOOR
        if not r.identical:
            status = "FAIL (a pull differs from the archive served at push)"
        else:
            status = "MET" if ok else f"MISSED (< {FLOOR} of raw)"
        held &= ok and r.identical
        lines.append(_rate_row(store, r, status))
        if r.plain is not None:
            lines.append(_rate_row(f"{store}, encoding off", r.plain, "not judged (reference)"))
    lines += [
        "",
        "Bytes stored (the sizes of the objects the store lists, each series in a store of "
        "its own) over the archives' bytes: the base and its fine-tunes, and the base alone "
        "(its first push):",
        "",
        "| store | what | stored | archives | stored/archives | target | status |",
        "|---|---|---|---|---|---|---|",
    ]
    for store, (_, stored) in results.items():
        for s in stored:
            alone = ALONE_TARGET if s.dtype == "bf16" else None
            rows = [
                (
                    f"{s.dtype} base + {finetunes.TUNES} fine-tunes",
                    s.series,
                    s.archives,
                    SERIES_TARGET,
                ),
                (f"{s.dtype} base alone", s.base, s.base_archive, alone),
            ]
            for what, bytes_, archives, target in rows:
                lines.append(_ratio_row(store, what, bytes_, archives, target))
                held &= target is None or bytes_ / archives <= target
    return "\n".join(lines) + "\n", held


def main(argv: list[str] | None = None) -> int:
    """Run the storage bench alone and print its section."""
    parser = argparse.ArgumentParser(prog="python -m bench.storage")
    parser.add_argument(
        "--size",
        choices=("small", "large"),
        default="large",
        help="the fine-tune series: small (a few MB, as the tests use) or large (~200 MB)",
    )
    parser.add_argument(
        "--cache-dir", type=Path, default=Path(__file__).resolve().parent / ".cache"
    )
    args = parser.parse_args(argv)
    size = finetunes.SMALL if args.size == "small" else finetunes.LARGE
    text, held, failed = bench_section(size, Cache(args.cache_dir).dir)
    sys.stdout.write(text)
    return 0 if held and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
