"""Shared fixtures (the zoo of real exported programs, torch's documents, the schema history) and
the test lanes: each test's markers, set from what it uses, and the guards that keep them true."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest

from app.workers.pool import WorkerPool
from tests.zoo import PROGRAM_NAMES, ZooProgram, cached_zoo, torch_json

if TYPE_CHECKING:
    from tests.realzoo import RealProgram

ROOT = Path(__file__).resolve().parents[1]
HISTORY = ROOT / "tests" / "data" / "torch-schema-history"


#: What a test needs besides pytest's own process, read from the shared fixtures it uses
#: (`fixturenames` holds the fixtures they use in turn): each lane marker and its fixtures.
LANE_FIXTURES: dict[str, frozenset[str]] = {
    "server": frozenset({"server"}),
    "worker_pool": frozenset({"documents", "bare"}),
    "browser": frozenset({"browser"}),
    "postgres": frozenset({"postgres"}),
    "s3": frozenset({"seaweed"}),
}
#: The helpers that start a server process, a worker pool or a browser, by the names tests import
#: them as: a module that imports one, or calls one (in a script it runs in a child interpreter),
#: is marked as a whole, since a helper called in a test body or in a module's own fixture is no
#: fixture name the item shows.
LANE_HELPERS: dict[str, frozenset[str]] = {
    "server": frozenset(
        {"start_server", "start_registry_server", "start_replicas", "start_audited_server"}
    ),
    # create_app: the app starts its pools on a request's first job (TestClient tests)
    "worker_pool": frozenset(
        {"WorkerPool", "TorchPool", "DocumentRunner", "LazyPool", "create_app"}
    ),
    "browser": frozenset({"sync_api", "sync_playwright"}),
}
#: Tests too long for the fast lane that no helper or fixture above shows (a module's path, or a
#: test's path::name for all its parameters), and why; each took 3 s or more of the fast lane on
#: a quiet 2-core machine, most of it a child interpreter importing torch.
HEAVY: dict[str, str] = {
    "tests/bench/test_bench_smoke.py": "runs `python -m bench --smoke`: servers and worker pools",
    "tests/bench/test_isolate.py": "a zygote process that imports torch, forking a child a job",
    "tests/bridge/test_differential.py": "torch's checks on mutants, in a process of their own",
    "tests/test_packaging.py": "builds the wheel and sdist and installs them in fresh venvs",
    "tests/registry/test_verification.py::test_a_mixtral_verified_where_transformers_is_imported": (
        "exports a Mixtral, then two servers whose workers import transformers or not"
    ),
    "tests/registry/test_client_pipeline.py::test_a_pipeline_ships_a_fine_tuned_gpt2": (
        "exports a GPT-2 twice and loads both pulls in torch"
    ),
    "tests/registry/test_blobs.py::test_gc_racing_pushes_of_the_same_tensors": (
        "pushes race gc over and over"
    ),
    "tests/registry/test_served.py::test_unproven_sample_inputs_are_left_out_and_nothing_runs": (
        "loads what is served with torch in a fresh process, per decoy"
    ),
    "tests/test_hostile.py::test_deserialize_writes_no_sample_inputs": (
        "loads each deserialized archive with torch in a fresh process"
    ),
    "tests/bridge/test_release_rules_current.py": "dumps the release rules in a fresh process",
    "tests/test_finetunes.py": "trains a GPT-2 and five fine-tunes, exports and loads 12 archives",
    "tests/cli/test_cli.py::test_validate_levels": "the command at each level, torch's included",
    "tests/cli/test_cli.py::test_serialize_then_deserialize": "the command there and back",
    "tests/progs/test_canonical.py::test_graph_digest_is_the_same_in_another_process": (
        "a second interpreter with torch"
    ),
    "tests/cli/test_for_torch.py::test_the_archive_for_an_older_release": (
        "the command, then torch loads its archive"
    ),
    "tests/test_zoo.py::test_custom_op_archive_loads_in_fresh_process": (
        "a fresh interpreter with torch"
    ),
    "tests/registry/test_served.py::test_proven_sample_inputs_are_kept_and_served": (
        "torch loads what is served in a fresh process"
    ),
    "tests/api/test_inspect_api.py::test_cli_inspect": "the command in child interpreters",
    "tests/progs/test_round_trip_digest.py::test_real_digest_survives_round_trip": (
        "exports Hugging Face models and round-trips each three ways"
    ),
    "tests/progs/test_expr.py::test_live_exports_are_accepted_and_agree_with_sympy": (
        "exports programs with torch"
    ),
    "tests/test_layers.py::test_service_and_cli_start_without_torch": "child interpreters",
    "tests/archive/test_torch_save_zip.py::"
    "test_files_torch_reads_otherwise_are_unproven_and_torch_does_not_load_them": (
        "torch's weights_only loader on every case"
    ),
    "tests/test_zip_differential.py::test_torch_reads_the_hidden_directory_and_runs_its_pickle": (
        "torch loads the archive in a fresh process"
    ),
}
#: The tests `make check` runs: none that carries a lane marker (tests/test_lane.py holds the
#: Makefile, docs/architecture.md and the registered markers to this).
FAST_LANE = "not (server or worker_pool or browser or postgres or s3 or heavy)"


def _origin(value: object) -> str:
    """The module a function, class or module imported into a test module comes from."""
    origin = getattr(value, "__name__", "") if isinstance(value, ModuleType) else None
    if origin is None:
        origin = getattr(value, "__module__", "")
    return origin if isinstance(origin, str) else ""


def _module_lanes(module: ModuleType) -> set[str]:
    """The lanes a test module's imported or called helpers put all its tests in."""
    ours = ("app.", "tests.", "playwright.")
    names = {name for name, value in vars(module).items() if _origin(value).startswith(ours)}
    text = Path(str(module.__file__)).read_text()
    lanes = {
        lane
        for lane, helpers in LANE_HELPERS.items()
        if names & helpers or any(f"{helper}(" in text for helper in helpers)
    }
    # the CLI run in-process starts the pools its command needs (serialize, validate at level
    # torch, deserialize), as the service does
    if any(_origin(value) == "app.cli" for value in vars(module).values()):
        lanes.add("worker_pool")
    return lanes


def _backend_lanes(item: pytest.Item) -> set[str]:
    """The services a registry backend parameter ("postgresql-s3", ...) needs: `make_backend`
    asks for them with getfixturevalue, so no fixture name shows them."""
    callspec = getattr(item, "callspec", None)
    values = [v for v in callspec.params.values() if isinstance(v, str)] if callspec else []
    lanes = {"postgres" for v in values if v.startswith("postgresql")}
    return lanes | {"s3" for v in values if v.endswith("-s3")}


def lanes_of(item: pytest.Item, modules: dict[str, set[str]]) -> set[str]:
    """The lane markers a test needs (see LANE_FIXTURES, LANE_HELPERS); `modules` caches each
    module's."""
    module = getattr(item, "module", None)
    lanes: set[str] = set()
    if module is not None:
        if module.__name__ not in modules:
            modules[module.__name__] = _module_lanes(module)
        lanes = set(modules[module.__name__])
    used = set(getattr(item, "fixturenames", ()))
    lanes |= {lane for lane, fixtures in LANE_FIXTURES.items() if used & fixtures}
    if {item.nodeid.partition("::")[0], item.nodeid.partition("[")[0]} & HEAVY.keys():
        lanes.add("heavy")
    return lanes | _backend_lanes(item)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test with the lanes it needs, so that `make check` can leave out whatever
    needs a process besides pytest's own."""
    modules: dict[str, set[str]] = {}
    for item in items:
        for lane in sorted(lanes_of(item, modules)):
            item.add_marker(lane)


#: The test whose setup, call or teardown runs now (a stack: pytest runs one at a time).
_running: list[pytest.Item] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[object]:
    """Remember the running test, for the worker pool guard."""
    _running.append(item)
    try:
        return (yield)
    finally:
        _running.pop()


def _require(lane: str, what: str) -> None:
    """Fail the running test unless it carries `lane`'s marker: without it, the test would slow
    the fast lane unseen, so the helper lists above are kept current by this failure."""
    if _running and _running[-1].get_closest_marker(lane) is None:
        raise AssertionError(
            f"{_running[-1].nodeid} {what} but is not marked {lane}: name the helper it does it "
            "with in tests/conftest.py's LANE_HELPERS"
        )


def _guarded_pool(start: Callable[..., None]) -> Callable[..., None]:
    """WorkerPool.__init__, failing in a test not marked worker_pool."""

    def __init__(self: WorkerPool, *args: Any, **kwargs: Any) -> None:
        _require("worker_pool", "starts a worker pool")
        start(self, *args, **kwargs)

    return __init__


def _guarded_popen(start: Callable[..., None]) -> Callable[..., None]:
    """subprocess.Popen.__init__, failing in a test not marked server when it starts the service
    (start_server, whatever its command, gives the service its port in PT2SERDE_PORT)."""

    def __init__(self: subprocess.Popen[Any], *args: Any, **kwargs: Any) -> None:
        if "PT2SERDE_PORT" in (kwargs.get("env") or {}):
            _require("server", "starts the service")
        start(self, *args, **kwargs)

    return __init__


def pytest_configure() -> None:
    """Guard the starts of a worker pool and of the service (see _require)."""
    WorkerPool.__init__ = _guarded_pool(WorkerPool.__init__)  # type: ignore[method-assign]
    subprocess.Popen.__init__ = _guarded_popen(  # type: ignore[method-assign]
        subprocess.Popen.__init__
    )


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens", action="store_true", help="rewrite golden files from current output"
    )


@pytest.fixture(scope="session")
def zoo() -> dict[str, ZooProgram]:
    """Every zoo program, exported once per session."""
    return cached_zoo()


@pytest.fixture(scope="session")
def zoo_json(zoo: dict[str, ZooProgram]) -> dict[str, bytes]:
    """torch's own JSON of every zoo program."""
    return {name: torch_json(zoo[name].ep) for name in PROGRAM_NAMES}


@pytest.fixture(scope="session")
def real_zoo() -> dict[str, RealProgram]:
    """Every real-zoo program (tiny Hugging Face models, torch features), exported once per
    session."""
    # Imported on first use, so that a session which collects no real-zoo test never registers
    # the zoo's pytree types and quantized operators.
    from tests.realzoo import cached_real_zoo

    return cached_real_zoo()


@pytest.fixture(scope="session")
def history_dir() -> Path:
    """torch's schema.yaml of every release, kept in the repository as test data."""
    return HISTORY
