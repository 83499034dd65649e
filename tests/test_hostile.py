"""Hostile archives through the four operations and a registry push: refused with their codes,
nothing run, nothing stored. Hostile sample inputs are no reason to refuse a program: they are
left out of what is written, with a warning, and never run."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from app import operations as ops
from app.failure import Failure
from app.jobs import documents as jobs
from app.jobs.push import prepare
from app.jobs.runners import INLINE
from app.programs.findings import Finding
from app.registry.errors import RegistryFailure
from app.registry.store import Registry
from app.settings import Settings
from schema import Issue, SchemaError
from tests.hostile import (
    HOSTILE,
    SAMPLE_INPUT_PAYLOADS,
    Hostile,
    audited,
    consume,
    with_sample_inputs,
)
from tests.registry.conftest import sample_inputs_of, stored_files
from tests.zoo import PROGRAM_NAMES, ZooProgram, archive_bytes, outputs_close

SETTINGS = Settings()


class _NoTorch:
    """A runner that fails the test if a hostile program ever reaches torch."""

    def submit(self, job: Callable[..., Any], *args: object, timeout_s: float | None = None) -> Any:
        raise AssertionError(f"a hostile program reached torch ({job.__name__})")


def _serialize(data: bytes) -> object:
    with ops.open_source(data, "zip", SETTINGS) as source:
        return ops.serialize(source, SETTINGS)


def _canonicalize(data: bytes) -> object:
    with ops.open_source(data, "zip", SETTINGS) as source:
        return ops.canonical(source, SETTINGS)


def _validate(data: bytes) -> object:
    with ops.open_source(data, "zip", SETTINGS) as source:
        report = jobs.validate(source, SETTINGS, "torch", _NoTorch())
    assert not report.valid
    # a refusal that is a finding reads as the failure the other operations raise
    first = _screened([f for f in report.findings if f.severity == "error"])
    raise Failure(first.code, first.message)


_Coded = TypeVar("_Coded", Finding, Issue)


def _screened(errors: list[_Coded]) -> _Coded:
    """The screen's refusal among a report's errors (the failure the other operations raise);
    the first error if the screen found nothing."""
    return next((e for e in errors if e.code.startswith("unsafe-")), errors[0])


def _deserialize(data: bytes) -> object:
    with ops.open_source(data, "zip", SETTINGS) as source:
        # the refusal comes before any torch job, so nothing is ever written here
        jobs.deserialize_to(source, SETTINGS, _NoTorch(), Path("unwritten.pt2"))
    return None


OPERATIONS: dict[str, Callable[[bytes], object]] = {
    "serialize": _serialize,
    "canonicalize": _canonicalize,
    "validate": _validate,
    "deserialize": _deserialize,
}
PUSH = "registry-push"


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """A registry (SQLite) of this module's own, for pushes that must leave nothing stored."""
    opened = Registry(Settings(data_dir=tmp_path_factory.mktemp("registry")))
    try:
        yield opened
    finally:
        opened.close()


def _push(registry: Registry, data: bytes) -> object:
    """Stage, vet and store an upload as the push route does; the staged file never outlives it.
    A program found invalid is refused as its first error, like a refusal by `_validate`."""
    staged = registry.blobs.stage_bytes(data)
    try:
        candidate = prepare(registry, staged.path, INLINE, _NoTorch())
    except RegistryFailure as failure:
        if failure.code != "invalid-program":
            raise
        first = _screened(failure.issues)
        raise Failure(first.code, first.message) from None
    finally:
        staged.discard()
    return registry.push("hostile", candidate)


@pytest.fixture(scope="module")
def runs(registry: Registry) -> dict[str, Callable[[bytes], object]]:
    """Every path a payload is submitted through, by name."""
    return {**OPERATIONS, PUSH: functools.partial(_push, registry)}


@pytest.fixture(scope="module")
def archives(zoo: dict[str, ZooProgram]) -> dict[str, bytes]:
    return {name: archive_bytes(zoo[name].ep) for name in PROGRAM_NAMES}


@pytest.fixture(scope="module")
def warmed(
    archives: dict[str, bytes],
    runs: dict[str, Callable[[bytes], object]],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Run every path once unaudited, so lazy imports are not counted against the payloads."""
    marker = tmp_path_factory.mktemp("warm") / "marker"
    for hostile in HOSTILE:
        for run in runs.values():
            try:
                run(hostile.build(archives, marker))
            except (Failure, SchemaError):
                pass


@pytest.mark.parametrize("operation", [*OPERATIONS, PUSH])
@pytest.mark.parametrize("hostile", HOSTILE, ids=[h.name for h in HOSTILE])
@pytest.mark.usefixtures("warmed")
def test_refused_and_nothing_runs(
    hostile: Hostile,
    operation: str,
    archives: dict[str, bytes],
    runs: dict[str, Callable[[bytes], object]],
    registry: Registry,
    tmp_path: Path,
) -> None:
    marker = tmp_path / "marker"
    data = hostile.build(archives, marker)
    with audited() as events, pytest.raises(Failure) as info:
        runs[operation](data)
    assert info.value.code == hostile.code, info.value.message
    assert events == []
    assert not marker.exists()
    assert stored_files(registry.settings.data_dir) == {"blobs": [], "staged": []}
    assert registry.models(limit=10).models == []


def test_clean_archives_pass_every_operation(archives: dict[str, bytes]) -> None:
    for name in ("conv", "dynamic", "constants"):
        _serialize(archives[name])
        _canonicalize(archives[name])
        with ops.open_source(archives[name], "zip", SETTINGS) as source:
            assert ops.check(source, "semantic", SETTINGS).valid


def test_the_audit_hook_sees_what_it_guards_against() -> None:
    import collections
    import pickle

    with audited() as events:
        pickle.loads(pickle.dumps(collections.OrderedDict(a=1)))
        exec("x = 1", {})
    assert [e for e, _ in events] == ["pickle.find_class", "compile", "exec"]


def test_archives_we_write_pass_our_own_checks(archives: dict[str, bytes]) -> None:
    import io

    from app.archive import open_archive, write_archive

    for name in ("conv", "dynamic", "constants"):
        with open_archive(archives[name], SETTINGS) as archive:
            out = io.BytesIO()
            write_archive(out, dict(archive.documents), archive.raw_tensors())
        _serialize(out.getvalue())
        _canonicalize(out.getvalue())
        with ops.open_source(out.getvalue(), "zip", SETTINGS) as source:
            assert ops.check(source, "semantic", SETTINGS).valid


@pytest.mark.parametrize("payload", sorted(SAMPLE_INPUT_PAYLOADS))
def test_unproven_sample_inputs_are_a_warning_and_nothing_runs(
    payload: str, archives: dict[str, bytes], tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    data = with_sample_inputs(archives["conv"], SAMPLE_INPUT_PAYLOADS[payload](marker))

    def every_operation() -> list[Finding]:
        _serialize(data)
        _canonicalize(data)
        with ops.open_source(data, "zip", SETTINGS) as source:
            report = ops.check(source, "semantic", SETTINGS)
        assert report.valid
        return [f for f in report.findings if f.code == ops.SAMPLE_INPUTS_DROPPED]

    every_operation()  # lazy imports happen here, unaudited
    with audited() as events:
        dropped = every_operation()
    assert [(f.severity, f.path) for f in dropped] == [("warning", "")]
    assert "archive/data/sample_inputs/model.pt" in dropped[0].message
    assert events == []
    assert not marker.exists()


def test_deserialize_writes_no_sample_inputs(
    archives: dict[str, bytes], zoo: dict[str, ZooProgram], tmp_path: Path
) -> None:
    """The archive deserialize writes (our writer, after torch rebuilt the program) leaves the
    upload's sample inputs out, so a payload there never reaches its consumer."""
    marker = tmp_path / "marker"
    program = zoo["conv"]
    for payload, build in SAMPLE_INPUT_PAYLOADS.items():
        data = with_sample_inputs(archives["conv"], build(marker))
        target = tmp_path / f"{payload}.pt2"
        with ops.open_source(data, "zip", SETTINGS) as source:
            jobs.deserialize_to(source, SETTINGS, INLINE, target)
        written = target.read_bytes()
        assert sample_inputs_of(written) == b""
        consumed = consume(written, program.args, program.kwargs, tmp_path / payload)
        assert (consumed.events, consumed.error) == ([], None)
        assert outputs_close(consumed.outputs, program.run())
        assert not marker.exists()
