"""The registry of inspect views: found in the package's modules, and a new module is a new view
for the library, the API (its parameter, its typed answer, its schema) and the command line."""

from __future__ import annotations

import os
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson

import schema
from app.programs.inspect import views as view_package
from app.programs.inspect.registry import answer, render, run, views
from app.programs.inspect.view import InspectRequest, Subject, View
from app.settings import Settings

ROOT = Path(__file__).resolve().parents[2]

#: A view only this test knows: one module, nothing else touched.
EXTRA_VIEW = '''
"""Call nodes per target (a view only the registry test knows)."""

from __future__ import annotations

from collections import Counter

from pydantic import BaseModel

from app.programs.inspect.view import InspectRequest, Subject, View


class NodeCount(BaseModel):
    """How many call nodes the top graph has, per target."""

    nodes: int
    by_target: dict[str, int]


def _run(subject: Subject, request: InspectRequest) -> NodeCount:
    nodes = subject.doc.graph_module.graph.nodes
    return NodeCount(nodes=len(nodes), by_target=dict(Counter(n.target for n in nodes)))


def _render(count: NodeCount) -> str:
    return f"{count.nodes} call nodes counted by the extra view"


VIEW = View("node-count", "call nodes per target", NodeCount, _run, _render)
'''

#: Runs in a fresh interpreter with the extra view's folder added to the views package: the
#: API and the command line are built after, as a new module in the package would be found.
PROBE = """
import sys

import orjson
from fastapi.testclient import TestClient

import app.programs.inspect.views as views

views.__path__.append(sys.argv[1])

from app.cli import main
from app.main import create_app

with TestClient(create_app()) as client:
    schema = client.get("/openapi.json").json()
    with open(sys.argv[2], "rb") as document:
        answer = client.post(
            "/v1/inspect",
            params={"view": "node-count"},
            content=document.read(),
            headers={"Content-Type": "application/json"},
        )
view_param = next(
    p for p in schema["paths"]["/v1/inspect"]["post"]["parameters"] if p["name"] == "view"
)
print(orjson.dumps({
    "status": answer.status_code,
    "answer": answer.json(),
    "choices": view_param["schema"]["enum"],
    "model": "InspectNodeCount" in schema["components"]["schemas"],
}).decode())
sys.stdout.flush()
main(["inspect", sys.argv[2], "--view", "node-count"])
"""


def _python(code: str, *paths: Path) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter (the views are gathered once per process)."""
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, paths)],
        cwd=paths[0].parent,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_every_module_of_the_package_is_a_view() -> None:
    modules = {m.name for m in pkgutil.iter_modules(view_package.__path__)}
    found = views()
    assert len(found) == len(modules) == 6
    assert set(found) == {"modules", "module-graph", "stages", "partitions", "operators", "weights"}
    for name, view in found.items():
        assert isinstance(view, View)
        assert name == view.name


def test_answers_are_the_view_tagged(zoo_json: dict[str, bytes]) -> None:
    doc = schema.load(zoo_json["conv"])
    subject = Subject(doc, None, Settings().max_nodes)
    for name, view in views().items():
        request = InspectRequest(name, supported=("aten",))
        result = run(request, subject)
        assert isinstance(result, view.result)
        tagged = answer(name, result).model_dump(mode="json")
        assert tagged == {"view": name, **result.model_dump(mode="json")}
        assert list(tagged)[0] == "view"
        assert render(name, result)


def test_a_new_module_is_a_new_view_everywhere(zoo_json: dict[str, bytes], tmp_path: Path) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "node_count.py").write_text(textwrap.dedent(EXTRA_VIEW))
    document = tmp_path / "conv.json"
    document.write_bytes(zoo_json["conv"])
    done = _python(PROBE, extra, document)
    assert done.returncode == 0, done.stderr
    first, *text = done.stdout.splitlines()
    probe = orjson.loads(first)
    nodes = schema.load(zoo_json["conv"]).graph_module.graph.nodes
    assert probe["status"] == 200
    assert probe["answer"]["view"] == "node-count"
    assert probe["answer"]["nodes"] == len(nodes)
    assert "node-count" in probe["choices"]
    assert probe["model"]
    assert text == [f"{len(nodes)} call nodes counted by the extra view"]


def test_a_module_without_a_view_is_refused(tmp_path: Path) -> None:
    """A module without a proper VIEW stops discovery with its name, rather than vanishing."""
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "broken.py").write_text("VIEW = 'not a view'\n")
    probe = (
        "import sys\nimport app.programs.inspect.views as v\nv.__path__.append(sys.argv[1])\n"
        "import app.programs.inspect.registry\n"
    )
    done = _python(probe, bad)
    assert done.returncode != 0
    assert "broken: VIEW must be a View" in done.stderr
