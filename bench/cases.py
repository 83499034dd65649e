"""The library benchmarks of one program, ours side by side with torch on the same bytes.

Every benchmark checks its output against torch once before any figure counts: the parsed
and dumped document equals torch's (as JSON data), the canonical form equals torch's
`canonicalize` (and its digest is the sha256 of its bytes), a program our semantic validation
accepts is one `torch.export.load` loads, our `.pt2` holds the same members as torch's own
load + save of the archive and computes the same outputs, and the weights manifest's digests
are the sha256 of the tensors torch loads. A failed check (or a raised exception) makes the
row FAIL. Where torch is not run (too slow for the time budget), the check falls back to the
input (round trip, canonical form a fixed point) and the row says so.
"""

from __future__ import annotations

import hashlib
import io
import math
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson
import torch
from torch._export.serde import schema as torch_schema
from torch._export.serde import serialize as torch_serde

import schema
from app import operations as ops
from app.archive import ManifestEntry, manifest, open_archive
from app.bridge.exported import pt2_bytes, write_pt2
from app.programs.canonical import canonical_bytes, canonicalize
from app.programs.digest import Digests, graph_digest_of, weights_digest
from app.programs.findings import Report
from app.settings import Settings
from bench.isolate import ChildFailed, Zygote
from bench.measure import CheckFailed, Timing, timed
from bench.plan import Cost, Plan
from bench.programs import Program
from bench.progress import progress

T = TypeVar("T")

#: Members a re-saved archive may differ in: our .pt2 carries no sample inputs (they are a
#: pickle we never load), and the serialization id is random. Tensor files are compared by
#: tensor name, since torch numbers them in the order of its constants dict, which differs.
_VOLATILE = ("data/sample_inputs/", ".data/serialization_id")
#: Above this many nodes the deserialize check runs our in-memory program instead of loading
#: our .pt2 with torch again (its members are compared with torch's own re-save either way).
_RELOAD_LIMIT = 1500


@dataclass
class Measured:
    """One benchmark of one program: our, torch's and the floor's timings, or why not."""

    ours: Timing | None = None
    torch: Timing | None = None
    floor: Timing | None = None
    #: torch's estimated seconds when it was not run.
    torch_estimate: float | None = None
    torch_note: str = ""
    failure: str | None = None
    #: what the output was checked against.
    checked: str = "torch"
    #: why this program has no figures for this benchmark (zoo rows leave it out).
    excluded: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _same(ours: Any, theirs: Any, what: str) -> None:
    if ours != theirs:
        raise CheckFailed(f"{what} differs from torch's ({_first_difference(ours, theirs)})")


def _first_difference(a: Any, b: Any, path: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(a.keys() | b.keys(), key=str):
            if key not in a or key not in b:
                return f"{path}/{key}: only in {'ours' if key in a else 'torch'}"
            if a[key] != b[key]:
                return _first_difference(a[key], b[key], f"{path}/{key}")
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} vs {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                return _first_difference(x, y, f"{path}/{i}")
    return f"{path or '/'}: {str(a)[:80]} vs {str(b)[:80]}"


def time_ours(
    m: Measured,
    plan: Plan,
    key: str,
    nodes: int,
    fn: Callable[[], T],
    check: Callable[[T], None],
    repeats: int,
) -> T | None:
    """Time our side if it fits the budget; a failed check or an exception makes the row FAIL."""
    estimate = plan.estimate(f"ours.{key}", nodes)
    if not plan.fits(estimate):
        m.excluded = f"not run: est. {estimate:.0f} s does not fit the time budget"
        return None
    started = time.perf_counter()
    try:
        m.ours, result = timed(fn, repeats=repeats, check=check, budget=plan.repeat_budget)
    except CheckFailed as exc:
        m.failure = str(exc)
        return None
    except Exception as exc:
        m.failure = f"raised {type(exc).__name__}: {str(exc)[:200]}"
        return None
    plan.observe(f"ours.{key}", nodes, time.perf_counter() - started)
    return result


# ---------------------------------------------------------------- our operations


def our_canonical(doc: schema.ExportedProgram) -> tuple[bytes, Digests]:
    """Our canonical form by torch's rules (`canonicalize`), the part compared with torch's own
    byte for byte; `operations.canonical` then settles it (`stable_form`) before hashing."""
    canon = canonicalize(doc)
    data = canonical_bytes(canon)
    return data, Digests.of(graph_digest_of(data), weights_digest([]))


def our_validate(archive: bytes, settings: Settings) -> Report:
    """Semantic validation of an archive as the service does it (open, bound, parse, check)."""
    with ops.open_source(archive, "zip", settings) as source:
        return ops.check(source, "semantic", settings)


def our_deserialize(archive: bytes, settings: Settings) -> tuple[Any, bytes]:
    """The .pt2 the deserialize job makes: read, screen, read the tensors (as the worker does),
    build with torch (fast route), write with our writer."""
    with ops.open_source(archive, "zip", settings) as source:
        ops.refuse_disallowed_pickles(source, settings)
        doc = ops.read_document(source, None, settings).doc
        tensors = ops.weights_from(None, source, None)
    out = io.BytesIO()
    program = write_pt2(doc, tensors.read(), out)
    return program, out.getvalue()


def our_manifest(path: Any, settings: Settings) -> list[ManifestEntry]:
    """Open an archive and hash every weight, streamed."""
    with open_archive(path, settings.limits) as archive:
        return manifest(archive)


def sha256_file(path: Any) -> str:
    """The floor: sha256 of the whole file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


# ---------------------------------------------------------------- torch's operations


def torch_parse(data: bytes) -> Any:
    """torch's parse: JSON into its schema dataclasses."""
    return torch_serde._bytes_to_dataclass(torch_schema.ExportedProgram, data)


def torch_dump(program: Any) -> bytes:
    """torch's encoder."""
    return torch_serde._to_json_bytes(program)


def torch_canonical(program: Any) -> bytes:
    """torch's canonicalize, encoded."""
    return torch_serde._to_json_bytes(torch_serde.canonicalize(program))


def torch_load(archive: bytes) -> Any:
    """torch.export.load of an archive we generated ourselves."""
    return torch.export.load(io.BytesIO(archive))


# ---------------------------------------------------------------- one program


def warm_up(program: Program, settings: Settings) -> None:
    """Every measured operation once, untimed, on a small program (in the warm zygote): its
    children start with the lazy imports and caches of torch and ours in place, so that a
    measurement run once is not a first call's set-up."""
    program.setup()
    data, archive = program.document, program.archive_bytes
    torch_doc = torch_parse(data)
    torch_dump(torch_doc)
    torch_canonical(torch_doc)
    doc: schema.ExportedProgram = schema.load(data)
    schema.dump(doc)
    our_canonical(doc)
    orjson.dumps(orjson.loads(data))
    our_validate(archive, settings)
    pt2_bytes(torch_load(archive))
    our_deserialize(archive, settings)
    our_manifest(program.archive, settings)
    sha256_file(program.archive)


def _planned(fn: Callable[..., T], plan: Plan, *args: Any) -> tuple[T, dict[str, Cost]]:
    """In the child: the job's result, and the costs it observed (for the parent's estimates)."""
    return fn(plan, *args), plan.learned()


def _job(zygote: Zygote, plan: Plan, fn: Callable[..., T], *args: Any) -> T:
    """`fn(plan, *args)` in a fresh child process (raises ChildFailed)."""
    result: T
    result, costs = zygote.run(_planned, fn, plan, *args)
    plan.learn(costs)
    return result


@dataclass
class TorchSide:
    """torch's parse, dump and canonicalize of one program, and the outputs ours is checked by."""

    measured: dict[str, Measured]
    #: torch's dump of its parse, and its canonical form (None where torch was not run).
    dumped: bytes | None
    canonical: bytes | None


@dataclass
class Isolation:
    """Where the jobs run: children of a zygote holding only the imports, or of one that also
    ran every operation once (`warm_up`).

    A heap that earlier work fragmented slows whatever allocates most (decoder-1.0k's
    orjson.dumps took 1.1-1.4 ms in a child of the first, 1.9-4.2 ms in one of the second, and
    our dump 3.4-4.3 ms against 5.2-5.9 ms), so ours, the floors and torch's repeated runs take
    the first, each side in a child of its own. The jobs that time torch once (its load and its
    save, with our validate and deserialize beside them) take the second: there torch's first
    call does not pay for lazy imports and caches.
    """

    clean: Zygote
    warm: Zygote

    def close(self) -> None:
        """Stop both zygotes."""
        self.clean.close()
        self.warm.close()


def measure_program(
    program: Program, plan: Plan, where: Isolation, *, deserialize: bool = True
) -> dict[str, Measured]:
    """parse, dump, canonicalize, validate and (optionally) deserialize of one program.

    Each part runs in a fresh child (see Isolation): torch's parse, dump and canonicalize first
    (their outputs are what ours is checked by), then ours of each benchmark and its floor, each
    in a child of its own, then validation and deserialize (they share torch's load).
    """
    out: dict[str, Measured] = {}
    progress(f"{program.name}: torch parse, dump, canonicalize")
    try:
        side = _job(where.clean, plan, torch_side, program)
    except ChildFailed as exc:
        out = {bench: Measured(failure=str(exc)) for bench in ("parse", "dump", "canonicalize")}
    else:
        for bench, (ours, floor, expected) in {
            "parse": (parse_ours, parse_floor, side.dumped or program.document),
            "dump": (dump_ours, dump_floor, side.dumped or program.document),
            "canonicalize": (canon_ours, None, side.canonical),
        }.items():
            progress(f"{program.name}: {bench}")
            m = side.measured[bench]
            try:
                m = _job(where.clean, plan, ours, program, m, expected)
                if floor is not None:
                    m.floor = _job(where.clean, plan, floor, program)
            except ChildFailed as exc:
                m.failure = str(exc)
            out[bench] = m
    progress(f"{program.name}: validate (semantic) vs torch.export.load")
    try:
        out |= _job(where.warm, plan, validate_ours, program, deserialize)
    except ChildFailed as exc:
        out["validate"] = Measured(failure=str(exc))
    return out


def torch_side(plan: Plan, program: Program) -> TorchSide:
    """torch's parse, dump and canonicalize of the program, timed where they fit the budget."""
    data, nodes = program.document, program.nodes
    parse_t, torch_doc, parse_note = plan.torch("parse", nodes, lambda: torch_parse(data))
    dump_t = dumped = canon_t = canonical = None
    dump_note = f"not run: needs torch's parse (est. {plan.estimate('dump', nodes):.0f} s)"
    canon_note = f"not run: needs torch's parse (est. {plan.estimate('canonicalize', nodes):.0f} s)"
    if torch_doc is not None:
        dump_t, dumped, dump_note = plan.torch(
            "dump", nodes, lambda: torch_dump(torch_doc), repeats=plan.repeats(nodes)
        )
        canon_t, canonical, canon_note = plan.torch(
            "canonicalize", nodes, lambda: torch_canonical(torch_doc)
        )
    checked = "torch" if dumped is not None else "the input (torch not run)"
    measured = {
        "parse": Measured(torch=parse_t, checked=checked, torch_note=parse_note),
        "dump": Measured(torch=dump_t, checked=checked, torch_note=dump_note),
        "canonicalize": Measured(
            torch=canon_t,
            torch_note=canon_note,
            checked="torch" if canonical else "itself (a fixed point; torch not run)",
        ),
    }
    for key, m in measured.items():
        m.torch_estimate = plan.estimate(key, nodes) if m.torch is None else None
    return TorchSide(measured, dumped, canonical)


def parse_ours(plan: Plan, program: Program, m: Measured, expected: bytes) -> Measured:
    """schema.load, checked against torch's dump of its own parse."""

    def check(doc: schema.ExportedProgram) -> None:
        _same(orjson.loads(schema.dump(doc)), orjson.loads(expected), "parsed document")

    data, reps = program.document, plan.repeats(program.nodes)
    time_ours(m, plan, "parse", program.nodes, lambda: schema.load(data), check, reps)
    return m


def parse_floor(plan: Plan, program: Program) -> Timing:
    """orjson.loads of the document."""
    data = program.document
    return timed(lambda: orjson.loads(data), repeats=plan.repeats(program.nodes))[0]


def dump_ours(plan: Plan, program: Program, m: Measured, expected: bytes) -> Measured:
    """schema.dump of our parse, checked against torch's dump."""
    doc: schema.ExportedProgram = schema.load(program.document)

    def check(dumped: bytes) -> None:
        _same(orjson.loads(dumped), orjson.loads(expected), "dump")

    reps = plan.repeats(program.nodes)
    time_ours(m, plan, "dump", program.nodes, lambda: schema.dump(doc), check, reps)
    return m


def dump_floor(plan: Plan, program: Program) -> Timing:
    """orjson.dumps of the document parsed by orjson (plain dicts and lists)."""
    plain = orjson.loads(program.document)
    return timed(lambda: orjson.dumps(plain), repeats=plan.repeats(program.nodes))[0]


def canon_ours(plan: Plan, program: Program, m: Measured, expected: bytes | None) -> Measured:
    """Our canonical form, bytes and digests, checked against torch's (or as a fixed point)."""
    doc: schema.ExportedProgram = schema.load(program.document)

    def check(result: tuple[bytes, Digests]) -> None:
        data, digests = result
        if digests.graph != hashlib.sha256(data).hexdigest():
            raise CheckFailed("the graph digest is not the sha256 of the canonical bytes")
        if expected is not None:
            _same(orjson.loads(data), orjson.loads(expected), "canonical form")
        elif our_canonical(schema.load(data))[0] != data:
            raise CheckFailed("canonicalizing the canonical form changes it")

    reps = plan.repeats(program.nodes)
    time_ours(m, plan, "canonicalize", program.nodes, lambda: our_canonical(doc), check, reps)
    return m


def validate_ours(plan: Plan, program: Program, deserialize: bool) -> dict[str, Measured]:
    """Semantic validation against torch.export.load, and deserialize against torch's load +
    save (they share torch's load, so they share a process)."""
    program.setup()
    archive = program.archive_bytes
    out: dict[str, Measured] = {}
    out["validate"], loaded = _validate(program, plan, archive)
    if deserialize and plan.deserialize(program.nodes):
        progress(f"{program.name}: deserialize to .pt2")
        out["deserialize"] = _deserialize(program, plan, archive, loaded, out["validate"].torch)
    return out


def _validate(program: Program, plan: Plan, archive: bytes) -> tuple[Measured, Any]:
    nodes = program.nodes
    load_t, loaded, note = plan.torch("load", nodes, lambda: torch_load(archive))
    m = Measured(torch=load_t, torch_note=note)
    if load_t is None:
        m.torch_estimate = plan.estimate("load", nodes)
    torch_failed = note.startswith("torch raised")
    m.checked = "torch" if loaded is not None or torch_failed else "ours only (torch not run)"

    def check(report: Report) -> None:
        errors = [f"{f.code} at {f.path}" for f in report.findings if f.severity == "error"]
        if not report.valid or errors:
            raise CheckFailed(f"ours rejects a program torch loads: {errors[:3]}")
        if torch_failed:
            raise CheckFailed(f"ours accepts what torch.export.load refuses ({note})")

    time_ours(
        m,
        plan,
        "validate",
        nodes,
        lambda: our_validate(archive, plan.settings),
        check,
        plan.repeats(nodes),
    )
    return m, loaded


def _deserialize(
    program: Program, plan: Plan, archive: bytes, loaded: Any, load_t: Timing | None
) -> Measured:
    nodes = program.nodes
    m = Measured()
    if loaded is None or load_t is None:
        m.excluded = "torch.export.load did not run"
        m.torch_estimate = plan.estimate("load", nodes) + plan.estimate("save", nodes)
        return m
    save_t, torch_pt2, note = plan.torch("save", nodes, lambda: pt2_bytes(loaded))
    if save_t is None or torch_pt2 is None:
        m.excluded = note
        return m
    m.torch = load_t.plus(save_t)
    args, kwargs = program.inputs()
    expected = loaded.module()(*args, **kwargs)

    def check(result: tuple[Any, bytes]) -> None:
        ours_program, ours_pt2 = result
        _same_members(ours_pt2, torch_pt2)
        rebuilt = torch_load(ours_pt2) if nodes <= _RELOAD_LIMIT else ours_program
        if not _outputs_close(rebuilt.module()(*args, **kwargs), expected):
            raise CheckFailed("our program computes other outputs than torch's load")

    m.checked = "torch" if nodes <= _RELOAD_LIMIT else "torch (re-save members; outputs in memory)"
    repeats = plan.deserialize_repeats(nodes)
    time_ours(
        m,
        plan,
        "deserialize",
        nodes,
        lambda: our_deserialize(archive, plan.settings),
        check,
        repeats,
    )
    return m


def _same_members(ours: bytes, theirs: bytes) -> None:
    """Same documents, same tensors (by name: meta and bytes), same other members."""
    mine, torchs = _members(ours), _members(theirs)
    if mine.keys() != torchs.keys():
        raise CheckFailed(f"our .pt2 members differ: {sorted(mine.keys() ^ torchs.keys())[:5]}")
    differing = sorted(n for n in mine if mine[n] != torchs[n])
    if differing:
        raise CheckFailed(f"our .pt2 differs from torch's load + save in {differing[:5]}")


def _members(archive: bytes) -> dict[str, Any]:
    """Root-relative members; tensors keyed by name (torch numbers its files in dict order)."""
    with zipfile.ZipFile(io.BytesIO(archive)) as z:
        raw = {n.split("/", 1)[1]: z.read(n) for n in z.namelist()}
    out: dict[str, Any] = {}
    payloads: set[str] = set()
    for name, data in raw.items():
        folder, _, file = name.rpartition("/")
        if folder in ("data/weights", "data/constants") and file.endswith("_config.json"):
            for tensor, entry in orjson.loads(data)["config"].items():
                path = f"{folder}/{entry.pop('path_name')}"
                payloads.add(path)
                out[f"{name}:{tensor}"] = (entry, raw[path])
    for name, data in raw.items():
        skip = name in payloads or name.startswith(_VOLATILE) or name.endswith("_config.json")
        if not skip:
            out[name] = data
    return out


def _outputs_close(a: Any, b: Any) -> bool:
    from tests.zoo import outputs_close

    return outputs_close(a, b)


# ---------------------------------------------------------------- weights hashing


def measure_hashing(program: Program, plan: Plan, where: Isolation) -> Measured:
    """Archive read + weights manifest vs sha256 of the file, in a child process of its own."""
    try:
        return _job(where.clean, plan, hashing_ours, program)
    except ChildFailed as exc:
        return Measured(failure=str(exc))


def hashing_ours(plan: Plan, program: Program) -> Measured:
    """Archive read + weights manifest vs sha256 of the file, on an archive of large weights."""
    path = program.archive
    m = Measured(checked="torch")
    reps = plan.hash_repeats
    m.floor, _ = timed(lambda: sha256_file(path), repeats=reps)
    loaded = torch_load(program.archive_bytes)
    expected = {
        name: hashlib.sha256(t.detach().contiguous().numpy().tobytes()).hexdigest()
        for name, t in loaded.state_dict.items()
    }
    del loaded

    def check(entries: list[ManifestEntry]) -> None:
        _same({e.name: e.sha256 for e in entries}, expected, "weights digests")

    time_ours(m, plan, "hash", 0, lambda: our_manifest(path, plan.settings), check, reps)
    m.extra["bytes"] = path.stat().st_size
    return m


def per_node(seconds: float, nodes: int) -> float:
    """Microseconds per node."""
    return seconds / max(nodes, 1) * 1e6


def mb_per_s(nbytes: int, seconds: float) -> float:
    """Throughput in MB/s (10^6 bytes)."""
    return nbytes / 1e6 / seconds if seconds > 0 else math.inf
