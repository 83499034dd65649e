"""The battery one corner program goes through, with torch's own save and load as the oracle.

torch.export.save writes the archive and torch.export.load reads it back (a program torch cannot
round-trip is skipped, with the reason). Then ours: validate at levels semantic and torch,
canonicalize (equal to torch's canonical form), deserialize in a torch worker. What we wrote must
be the document torch.export.save writes for torch's own load, and torch.export.load of it must
give that load's state_dict and constants (names, kinds and values), ranges and outputs, also
through torch.export.unflatten where the program asks. Programs with pickled tensors go through
twice: refused by default (by validate and deserialize alike), carried under the opt-in.
"""

from __future__ import annotations

import io
import json
import re
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.utils import _pytree as pytree

from app import operations as ops
from app.failure import Failure
from app.jobs import documents as jobs
from app.jobs.runners import TorchRunner
from app.settings import Settings
from tests.corners.programs import Corner
from tests.progs.test_canonical import our_canonical, torch_canonical

_LEAFSPEC = re.escape("`isinstance(treespec, LeafSpec)` is deprecated")
_GET_ATTR = re.escape("Attempted to insert a get_attr Node with no underlying reference")


@dataclass(frozen=True)
class Outcome:
    """How one program fared: passed, failed at a stage (with why), or skipped (torch's own)."""

    name: str
    klass: str
    verdict: str  # "pass" | "fail" | "skip"
    stage: str = ""
    detail: str = ""


def _outputs(program: ExportedProgram, corner: Corner, *, unflatten: bool) -> Any:
    with warnings.catch_warnings():
        # torch 2.13's unflatten deep-copies module call graphs (tripping its own LeafSpec
        # deprecation) and inserts get_attr nodes for pytree specs before registering them:
        # torch-internal, and harmless to the outputs compared
        warnings.filterwarnings("ignore", message=_LEAFSPEC, category=FutureWarning)
        warnings.filterwarnings("ignore", message=_GET_ATTR, category=UserWarning)
        module: Any = torch.export.unflatten(program) if unflatten else program.module()
        args = pytree.tree_map_only(torch.Tensor, torch.clone, corner.args)
        torch.manual_seed(0)  # programs may draw random numbers
        return module(*args, **corner.kwargs)


def same_tensors(mine: dict[str, Any], theirs: dict[str, Any], what: str) -> None:
    """The same names, kinds (parameter or not) and values, bit for bit."""
    assert list(mine) == list(theirs) or set(mine) == set(theirs), (
        f"{what}: {sorted(mine)} != {sorted(theirs)}"
    )
    for name, value in theirs.items():
        other = mine[name]
        assert type(other) is type(value), f"{what} {name}: {type(other)} != {type(value)}"
        if isinstance(value, torch.Tensor):
            torch.testing.assert_close(other, value, rtol=0, atol=0, msg=f"{what} {name}")


def same_program(ours: ExportedProgram, theirs: ExportedProgram, corner: Corner) -> None:
    """torch's load of our archive equals torch's load of its own: tensors, outputs, ranges."""
    same_tensors(dict(ours.state_dict), dict(theirs.state_dict), "state_dict")
    same_tensors(dict(ours.constants), dict(theirs.constants), "constants")
    assert {str(k) for k in ours.range_constraints} == {str(k) for k in theirs.range_constraints}
    for unflatten in (False, True) if corner.unflatten else (False,):
        torch.testing.assert_close(
            _outputs(ours, corner, unflatten=unflatten),
            _outputs(theirs, corner, unflatten=unflatten),
        )


def _saved(program: ExportedProgram) -> bytes:
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    return buffer.getvalue()


def document(archive: Path | bytes) -> Any:
    """The model document of a .pt2, parsed."""
    with zipfile.ZipFile(archive if isinstance(archive, Path) else io.BytesIO(archive)) as z:
        return json.loads(z.read(next(n for n in z.namelist() if n.endswith("models/model.json"))))


@dataclass(frozen=True)
class TorchOwn:
    """What torch makes of a program: its archive, its load of it, and the document its save
    of that load writes (taken first: torch's unflatten may leave a program it cannot save)."""

    archive: bytes
    loaded: ExportedProgram
    document: Any


def torch_round_trip(corner: Corner) -> TorchOwn:
    """torch.export.save's archive, torch.export.load of it, and the document it saves again
    (raises if torch cannot)."""
    data = _saved(corner.ep)
    # running a program may mutate its buffers: the one compared with ours is never run
    torch.testing.assert_close(
        _outputs(torch.export.load(io.BytesIO(data)), corner, unflatten=False),
        _outputs(corner.ep, corner, unflatten=False),
    )
    loaded = torch.export.load(io.BytesIO(data))
    return TorchOwn(data, loaded, document(_saved(loaded)))


def through_us(
    archive: Path, settings: Settings, pool: TorchRunner, target: Path
) -> tuple[bool, bool, str]:
    """(validate accepted at both levels, deserialize wrote `target`, why not) for one archive."""
    reasons: list[str] = []
    valid = True
    for level in ("semantic", "torch"):
        with ops.open_source(archive, "zip", settings) as source:
            report = jobs.validate(source, settings, level, pool if level == "torch" else None)
        if not report.valid:
            valid = False
            errors = [f"{f.code}: {f.message}" for f in report.findings if f.severity == "error"]
            reasons.append(f"{level}: {errors[:2]}")
            break
    if valid:
        with ops.open_source(archive, "zip", settings) as source:
            wire = source.documents["model"]
            # torch's rules alone (ops.canonical names the stable form the digest covers)
            ours = our_canonical(wire)
        if ours != torch_canonical(wire):
            valid = False
            reasons.append("canonical form differs from torch's")
    try:
        with ops.open_source(archive, "zip", settings) as source:
            jobs.deserialize_to(source, settings, pool, target)
        built = True
    except Failure as exc:
        built = False
        reasons.append(f"deserialize: {exc.code}: {str(exc)[:200]}")
    return valid, built, "; ".join(reasons)


def run(
    corner: Corner, settings: Settings, opted_in: Settings, pool: TorchRunner, folder: Path
) -> Outcome:
    """The whole battery for one program (see the module's docstring)."""
    try:
        own = torch_round_trip(corner)
    except Exception as exc:
        return Outcome(
            corner.name, corner.klass, "skip", "torch", f"{type(exc).__name__}: {exc}"[:200]
        )
    archive = folder / f"{corner.name}.pt2"
    archive.write_bytes(own.archive)
    target = folder / f"{corner.name}.out.pt2"
    try:
        if corner.pickled:
            valid, built, why = through_us(archive, settings, pool, target)
            if valid or built:
                return Outcome(
                    corner.name, corner.klass, "fail", "default", f"accepted by default: {why}"
                )
        valid, built, why = through_us(
            archive, opted_in if corner.pickled else settings, pool, target
        )
        if not (valid and built):
            stage = "validate" if not valid else "deserialize"
            return Outcome(corner.name, corner.klass, "fail", stage, why)
        assert document(target) == own.document, "not the document torch saves"
        same_program(torch.export.load(target), own.loaded, corner)
    except Exception as exc:
        return Outcome(
            corner.name, corner.klass, "fail", "compare", f"{type(exc).__name__}: {exc}"[:300]
        )
    return Outcome(corner.name, corner.klass, "pass")
