"""The fast lane (`make check`) leaves out every test that needs a process besides pytest's own.

tests/conftest.py marks tests from the helpers their modules import and the fixtures they use;
these tests hold that marking to a second, plain reading of the tests' sources, and the lane's
expression in the Makefile, tests/conftest.py and docs/architecture.md to one another.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from tests.conftest import FAST_LANE, ROOT

#: Text in a test module that shows it starts a process besides pytest's own, and the lane it
#: belongs to: what the helpers named in tests/conftest.py do, read off the source instead.
STARTS = {
    "start_server(": "server",
    "start_registry_server(": "server",
    "start_replicas(": "server",
    "WorkerPool(": "worker_pool",
    "TorchPool(": "worker_pool",
    "DocumentRunner(": "worker_pool",
    "sync_playwright(": "browser",
}
#: The shared fixtures that start such a process, and their lanes.
FIXTURES = {
    "server": "server",
    "browser": "browser",
    "documents": "worker_pool",
    "bare": "worker_pool",
    "postgres": "postgres",
    "seaweed": "s3",
}


def _registered() -> set[str]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    markers: list[str] = pyproject["tool"]["pytest"]["ini_options"]["markers"]
    return {line.partition(":")[0] for line in markers}


def _lane_names(expression: str) -> set[str]:
    return set(re.findall(r"\w+", expression)) - {"not", "or"}


def test_lane_expression_is_one() -> None:
    """The Makefile runs the expression tests/conftest.py and docs/architecture.md state, and it
    leaves out every registered marker (each marker is a lane)."""
    makefile = re.search(r"^FAST_LANE := (.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert makefile is not None
    assert makefile.group(1) == FAST_LANE
    assert f'pytest -m "{FAST_LANE}"' in (ROOT / "docs" / "architecture.md").read_text()
    assert re.fullmatch(r"not \(\w+( or \w+)*\)", FAST_LANE)
    assert _lane_names(FAST_LANE) == _registered()


def _needs(item: pytest.Item, sources: dict[Path, str]) -> set[str]:
    """What an item needs, from its module's text and its fixture names."""
    path = Path(str(item.fspath))
    if path == Path(__file__):  # it names the calls it looks for
        return set()
    text = sources.setdefault(path, path.read_text())
    needs = {lane for call, lane in STARTS.items() if call in text}
    used = set(getattr(item, "fixturenames", ()))
    return needs | {lane for name, lane in FIXTURES.items() if name in used}


def test_no_test_that_starts_a_process_is_in_the_lane(request: pytest.FixtureRequest) -> None:
    """Each test of this session (all of them under `make test`, the fast lane under `make
    check`) that the plain reading finds starting a server, a worker pool or a browser, or using
    PostgreSQL or SeaweedFS, carries that lane's marker; so none is in the fast lane."""
    sources: dict[Path, str] = {}
    unmarked = {
        item.nodeid: sorted(missing)
        for item in request.session.items
        if (missing := _needs(item, sources) - {m.name for m in item.iter_markers()})
    }
    assert unmarked == {}
