"""The web UI in a real browser: Debian's Chromium driven by Playwright, against the live server
with a registry holding real exported programs (a tiny BERT, a model with torch.cond, and two
versions of a small model that differ by one added layer).

Every page is loaded and checked for console errors; screenshots go to pytest's temporary
directory, or to $PT2SERDE_SCREENSHOTS when set (`make screenshots` rewrites docs/ui.md's images
in tests/ui/screenshots/ so).
The 50,000-node timing runs the graph page on a graph answer of that size (a real BERT's graph
repeated), so that it measures the browser. The server's part is a file: a stored version's
answer is built once, after its push (`test_graph_answer_built_at_push`), and a stored graph's
first view is timed from navigation on (`test_stored_graph_end_to_end`); bench/RESULTS.md's
"Web UI" section has both for a real 50,007-node program.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from torch import nn

from app.api.graphs import graph_answer
from app.bridge.exported import storage_bytes, tensor_meta
from app.programs.digest import tensor_digest, weights_digest
from app.programs.inspect.graph_view import NodeColumns
from schema.dtypes import DTYPE_NAMES
from tests.api.conftest import Server, start_server, stop_server
from tests.realzoo import VOCAB, tiny_hf_model
from tests.zoo import archive_bytes, build_program

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: The issue's targets on this 2-core machine, and the bound the test holds them to (3x: the
#: machine is shared with other jobs while the suite runs).
FIRST_VIEW_MS = 2000
EXPAND_MS = 200
SLACK = 3

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium")

sync_api = pytest.importorskip("playwright.sync_api")


class Small(nn.Module):
    """Two linear layers; with `extra`, a third (and its activation) between them."""

    def __init__(self, extra: bool, outputs: int = 4) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = nn.Linear(8, 16)
        self.extra = nn.Sequential(nn.Linear(16, 16), nn.ReLU()) if extra else None
        self.fc2 = nn.Linear(16, outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """fc1, relu, [extra], fc2."""
        y = torch.relu(self.fc1(x))
        if self.extra is not None:
            y = self.extra(y)
        return self.fc2(y)


def _small(extra: bool, outputs: int = 4) -> bytes:
    ep = torch.export.export(Small(extra, outputs).eval(), (torch.randn(2, 8),), strict=False)
    return archive_bytes(ep)


def _bert() -> bytes:
    model = tiny_hf_model("bert")
    ids = torch.randint(3, VOCAB, (2, 8), generator=torch.Generator().manual_seed(0))
    # input_ids alone: the attention mask's `add(Tensor, int)` is refused by semantic validation
    # at the time of writing, which another change is about.
    return archive_bytes(torch.export.export(model, (), {"input_ids": ids}, strict=False))


def _push(client: httpx.Client, name: str, data: bytes) -> None:
    answer = client.post(
        f"/v1/models/{name}/versions", content=data, headers={"Content-Type": "application/zip"}
    )
    assert answer.status_code == 201, answer.text


@contextmanager
def served(programs: list[tuple[str, bytes]]) -> Iterator[Server]:
    """The service (one HTTP process, one torch worker, a registry in a temporary directory)
    with `programs` (model name, archive) pushed in order; stopped at the block's end."""
    running = start_server({"PT2SERDE_HTTP_WORKERS": "1", "PT2SERDE_WORKERS": "1"})
    try:
        with running.client() as client:
            for name, data in programs:
                _push(client, name, data)
        yield running
    finally:
        stop_server(running)


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    """The service with a registry (SQLite in a temporary directory) of pushed programs."""
    programs = [
        ("small", _small(extra=False)),
        ("small", _small(extra=True)),
        ("bert", _bert()),
        ("cond", archive_bytes(build_program("cond").ep)),
    ]
    with served(programs) as running, running.client() as client:
        assert client.put("/v1/models/small/aliases/champion", json={"version": 2}).is_success
        tag = client.put("/v1/models/bert/versions/1/tags/owner", json={"value": "nlp"})
        assert tag.is_success
        yield running


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where screenshots and timings go: $PT2SERDE_SCREENSHOTS, else a temporary directory, so
    that a test run never rewrites the tracked images docs/ui.md shows."""
    chosen = os.environ.get("PT2SERDE_SCREENSHOTS")
    folder = Path(chosen) if chosen else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Debian Chromium (no browser download)."""
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            yield launched
        finally:
            launched.close()


class Page:
    """A browser page that records console errors and uncaught exceptions."""

    def __init__(self, browser: Any, server: Server, shots: Path) -> None:
        self.page = browser.new_page(viewport={"width": 1400, "height": 900})
        self.url = server.url
        self.shots = shots
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def open(self, path: str) -> Any:
        """Load a page and wait until it has drawn itself."""
        self.page.goto(self.url + path)
        self.page.wait_for_selector("body[data-ready='1']", timeout=60_000)
        return self.page

    def shot(self, name: str, full_page: bool = False) -> None:
        """Save a screenshot of the window (or of the whole page) and check it was written."""
        path = self.shots / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=full_page)
        assert path.stat().st_size > 1000

    def close(self) -> None:
        """Close the page, failing on any console error it logged."""
        self.page.close()
        assert self.errors == []


@pytest.fixture
def page(browser: Any, server: Server, shots: Path) -> Iterator[Page]:
    """A fresh page; the test fails if the page logged an error."""
    opened = Page(browser, server, shots)
    yield opened
    opened.close()


def _graph(server: Server, name: str, ref: str) -> dict[str, Any]:
    answer = httpx.get(f"{server.url}/v1/models/{name}/versions/{ref}/graph", timeout=60)
    assert answer.status_code == 200, answer.text
    graph: dict[str, Any] = answer.json()
    return graph


def _targets(graph: dict[str, Any]) -> list[str | None]:
    """Each node's operator, from a graph answer's table of them."""
    return NodeColumns.model_validate(graph["nodes"]).expanded("target")


def test_dtype_names_current() -> None:
    """The UI's dtype names are schema.dtypes' (the registry's summaries use the enum names)."""
    text = (Path(__file__).parents[2] / "app" / "ui" / "dom.js").read_text()
    block = text.split("export const DTYPE_NAMES = {", 1)[1].split("};", 1)[0]
    pairs = dict(re.findall(r'(\w+): "([^"]+)"', block))
    assert pairs == {dtype.name: name for dtype, name in DTYPE_NAMES.items()}


def test_csp_and_assets(server: Server) -> None:
    """Every UI answer forbids inline script; only the UI's own files are served."""
    shell = httpx.get(f"{server.url}/ui/models/x/versions/1/graph")
    assert shell.status_code == 200
    policy = shell.headers["content-security-policy"]
    assert "script-src 'self'" in policy
    assert "unsafe-inline" not in policy
    script = httpx.get(f"{server.url}/ui/static/outline.js")
    assert script.headers["content-type"].startswith("text/javascript")
    assert "content-security-policy" in script.headers
    assert httpx.get(f"{server.url}/ui/static/..%2F..%2Fapi%2Fui.py").status_code == 404
    assert httpx.get(f"{server.url}/ui/static/nothing.js").status_code == 404
    bare = httpx.get(f"{server.url}/ui")
    assert bare.status_code == 308
    assert bare.headers["location"] == "/ui/"
    assert httpx.get(f"{server.url}/ui/static/index.html").status_code == 404


def test_shell_preloads_every_module(server: Server) -> None:
    """The shell names up front (modulepreload) every module the pages import, found by
    following app.js's imports, and nothing that is not served: a module left out is fetched
    a round trip late, a name that is not served is a failed request on every page."""
    shell = httpx.get(f"{server.url}/ui/").text
    preloaded = set(re.findall(r'<link rel="modulepreload" href="/ui/static/([^"]+)">', shell))
    imported: set[str] = set()
    pending = ["app.js"]
    while pending:
        name = pending.pop()
        if name in imported:
            continue
        imported.add(name)
        source = httpx.get(f"{server.url}/ui/static/{name}")
        assert source.status_code == 200, name
        for target in re.findall(r'^import [^;]*? from "([^"]+)";', source.text, re.MULTILINE):
            pending.append(posixpath.normpath(posixpath.join(posixpath.dirname(name), target)))
    assert preloaded == imported


def test_whole_counts_grouped_as_python_groups_them(page: Page) -> None:
    """Counts in full are grouped by thousands (50,007) by our own formatter, which must agree
    with a reference formatter on every shape of number the pages show."""
    p = page.open("/ui/")
    numbers = [0, 7, 999, 1000, 50007, 1234567, -1234567, 2592016, 12.5, 1234.25]
    shown = p.evaluate(
        "async (numbers) => {"
        " const { whole } = await import('/ui/static/dom.js');"
        " return numbers.map((n) => whole(n)); }",
        numbers,
    )
    assert shown == [f"{n:,}" for n in numbers]
    assert page.errors == []


def test_graph_revalidates(server: Server) -> None:
    """A version's graph carries an ETag; asking again with it answers 304 without a body."""
    url = f"{server.url}/v1/models/small/versions/champion/graph"
    first = httpx.get(url, timeout=60)
    assert first.status_code == 200
    again = httpx.get(url, headers={"If-None-Match": first.headers["etag"]}, timeout=60)
    assert again.status_code == 304
    assert again.content == b""
    other = httpx.get(f"{server.url}/v1/models/small/versions/1/graph", timeout=60)
    assert other.headers["etag"] != first.headers["etag"]


def test_models_list(page: Page) -> None:
    """The list shows every pushed model with its latest version, aliases and tags."""
    p = page.open("/ui/")
    names = p.locator("#models tbody tr").evaluate_all("rows => rows.map(r => r.dataset.model)")
    assert names == ["bert", "cond", "small"]
    small = p.locator("tr[data-model='small']")
    assert "v2" in small.inner_text()
    assert "champion→v2" in small.inner_text()
    assert "owner=nlp" in p.locator("tr[data-model='bert']").inner_text()
    p.fill("#filter", "nlp")
    assert p.locator("#models tbody tr:visible").count() == 1
    p.fill("#filter", "")
    page.shot("models")
    page.open("/ui/models/small")
    assert page.page.locator("#versions tbody tr").count() == 2
    page.shot("model")


def test_version_page(page: Page) -> None:
    """Summary, interface, weights, operators and findings of a version."""
    p = page.open("/ui/models/bert/versions/1")
    summary = p.locator("#summary").inner_text()
    assert "readable by torch" in summary
    assert "2.13.0" in summary
    assert p.locator("#inputs tbody tr").count() == 1
    assert "input_ids" in p.locator("#inputs").inner_text()
    assert "int64[2, 8]" in p.locator("#inputs").inner_text()
    assert "null" not in p.locator("main").inner_text()
    assert "embeddings.word_embeddings.weight" in p.locator("#weights").inner_text()
    assert "aten.linear.default" in p.locator("#operators").inner_text()
    assert p.locator("a[download]").get_attribute("href") == "/v1/models/bert/versions/1/archive"
    assert "digest" in p.locator("#weights thead").inner_text()
    page.shot("version")


def test_weight_digests(page: Page, server: Server) -> None:
    """The weights table's digests are each tensor's, as torch holds it, and together they make
    the version's weights digest."""
    p = page.open("/ui/models/small/versions/1")
    shown = dict(
        p.locator("#weights tbody tr").evaluate_all(
            "rows => rows.map(r => [r.cells[0].textContent, r.querySelector('.digest').title])"
        )
    )
    model = Small(extra=False)
    expected = {}
    for name, tensor in model.state_dict().items():
        meta = tensor_meta(tensor)
        expected[name] = tensor_digest(
            int(meta.dtype),
            list(tensor.shape),
            list(tensor.stride()),
            tensor.storage_offset(),
            [storage_bytes(tensor)],
        )
    assert shown == expected
    info = httpx.get(f"{server.url}/v1/models/small/versions/1").json()
    assert weights_digest(shown.items()) == info["digests"]["weights"]


def test_graph_of_a_transformer(page: Page, server: Server) -> None:
    """The BERT's modules start collapsed, one expands on click, search finds an operator."""
    p = page.open("/ui/models/bert/versions/1/graph")
    top = p.locator(".outline .row.module").evaluate_all("rows => rows.map(r => r.dataset.path)")
    assert top == ["", "embeddings", "encoder", "pooler"]
    p.click(".outline .row[data-path='encoder']")
    assert p.locator(".outline .row[data-path='encoder.layer']").count() == 1
    assert p.locator(".outline .row[data-path='encoder.layer.0']").count() == 0
    p.click(".outline .row[data-path='encoder.layer']")
    p.click(".outline .row[data-path='encoder.layer.1']")
    assert p.locator(".outline .row[data-path='encoder.layer.1.attention']").count() == 1
    p.fill("input.search", "tanh")
    p.press("input.search", "Enter")
    selected = p.locator(".outline .row.node.selected")
    assert "aten.tanh" in selected.inner_text()
    graph = _graph(server, "bert", "1")
    tanh = _targets(graph).index("torch.ops.aten.tanh.default")
    assert selected.get_attribute("data-name") == graph["nodes"]["name"][tanh]
    assert "pooler.activation" in p.locator(".panel").inner_text()
    page.shot("graph")


def test_graph_answer_built_at_push(server: Server) -> None:
    """A pushed version's graph answer is built once, after the push, and served as that file."""
    info = httpx.get(f"{server.url}/v1/models/bert/versions/1").json()
    kept = server.tmp / "data" / "answers" / f"{graph_answer(info['digests']['archive'])}.json"
    deadline = time.monotonic() + 60
    while not kept.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    built = kept.stat().st_mtime_ns
    answer = httpx.get(f"{server.url}/v1/models/bert/versions/1/graph", timeout=60)
    assert answer.content == kept.read_bytes()
    assert kept.stat().st_mtime_ns == built


def test_stored_graph_end_to_end(page: Page) -> None:
    """A stored version's first graph view, from navigation to the first rows drawn (the answer
    fetched from the live server)."""
    marks = page.open("/ui/models/bert/versions/1/graph").evaluate(
        """Object.fromEntries(performance.getEntriesByType('mark')
            .map((m) => [m.name, m.startTime]))"""
    )
    figures = {
        "first_view_from_navigation_ms": round(marks["graph-first-view"]),
        "answer_fetch_ms": round(marks["graph-received"] - marks["graph-start"]),
    }
    (page.shots / "timings-stored.json").write_text(json.dumps(figures, indent=1))
    assert marks["graph-first-view"] < FIRST_VIEW_MS * SLACK, figures


def test_subgraphs_reachable(page: Page) -> None:
    """A cond node links to its branches' subgraphs."""
    p = page.open("/ui/models/cond/versions/1/graph")
    p.fill("input.search", "higher_order.cond")
    p.press("input.search", "Enter")
    p.click(".outline .row.selected button.sublink >> nth=0")
    branch = p.locator(".outline .row.module.subgraph[aria-expanded='true']")
    assert branch.count() == 1
    assert branch.get_attribute("data-path").endswith("true_graph_0")


def test_diff_marks_the_added_layer(page: Page, server: Server) -> None:
    """The diff of v1 and v2 marks exactly the added layer's nodes as added."""
    p = page.open("/ui/models/small/diff?from=1&to=2")
    assert p.locator("#verdict").inner_text().startswith("Structural change")
    graph = _graph(server, "small", "2")
    paths = [m["path"] for m in graph["modules"]]
    nodes = graph["nodes"]
    expected = sorted(
        name
        for name, module in zip(nodes["name"], nodes["module"], strict=True)
        if paths[module].startswith("extra")
    )
    assert len(expected) == 2
    added = p.locator("#new-graph .row.mark-added").evaluate_all(
        "rows => rows.map(r => r.dataset.name)"
    )
    assert sorted(added) == expected
    assert p.locator("#old-graph .row.mark-added, #old-graph .row.mark-removed").count() == 0
    assert "extra.0.weight" in p.locator("#weight-changes").inner_text()
    page.shot("diff", full_page=True)


def test_diff_of_two_files(page: Page) -> None:
    """Two uploaded files are compared without storing them."""
    p = page.open("/ui/diff")
    for field, extra in (("#old-file", False), ("#new-file", True)):
        upload = {
            "name": f"{field[1:4]}.pt2",
            "mimeType": "application/zip",
            "buffer": _small(extra),
        }
        p.set_input_files(field, files=[upload])
    p.wait_for_selector("body[data-done='1']", timeout=60_000)
    assert p.locator("#verdict").get_attribute("data-severity") == "structural"
    assert p.locator("#new-graph .row.mark-added").count() == 2
    page.shot("diff-files", full_page=True)


def test_changed_node_shows_its_twin(page: Page) -> None:
    """A breaking change (fc2 gets a fifth output) marks fc2's node changed on both sides, the
    interface change is listed, and selecting the node on one side selects it on the other."""
    p = page.open("/ui/diff")
    for field, outputs in (("#old-file", 4), ("#new-file", 5)):
        upload = {"name": f"out{outputs}.pt2", "mimeType": "application/zip"}
        p.set_input_files(field, files=[{**upload, "buffer": _small(False, outputs)}])
    p.wait_for_selector("body[data-done='1']", timeout=60_000)
    assert p.locator("#verdict").inner_text().startswith("Breaking change")
    assert "float32[2, 5]" in p.locator("#interface").inner_text()
    old = p.locator("#old-graph .row.mark-changed")
    assert old.count() == 1
    old.click()
    twin = p.locator("#new-graph .row.node.selected")
    assert twin.get_attribute("data-name") == old.get_attribute("data-name")
    assert "mark-changed" in (twin.get_attribute("class") or "")


def test_schema_history(page: Page) -> None:
    """The versions, and the change table between two of them with a mode's verdict."""
    p = page.open("/ui/schema?from=8.15&to=8.20&mode=FORWARD")
    p.wait_for_selector("body[data-done='1']")
    assert p.locator("#versions tbody tr").count() >= 6
    rows = p.locator("#changes tbody tr")
    assert rows.count() == 6
    assert "ScalarType.UINT64" in p.locator("#changes").inner_text()
    assert "FORWARD fails" in p.locator("#mode-verdict").inner_text()
    p.evaluate("delete document.body.dataset.done")
    p.select_option("#mode", "")
    p.wait_for_selector("body[data-done='1']")
    assert p.locator("#mode-verdict").count() == 0
    assert p.locator("#changes tbody tr").count() == 6
    assert "null" not in p.locator("#schema-diff").inner_text()
    page.shot("schema")


def test_try_a_file(page: Page) -> None:
    """A dropped file is validated, hashed and inspected, and nothing is pushed."""
    p = page.open("/ui/try")
    data = _small(True)
    p.set_input_files(
        "#file", files=[{"name": "model.pt2", "mimeType": "application/zip", "buffer": data}]
    )
    p.wait_for_selector("body[data-done='1']", timeout=60_000)
    assert "valid" in p.locator("#valid").inner_text()
    canonical = httpx.post(
        f"{page.url}/v1/canonicalize", content=data, headers={"Content-Type": "application/zip"}
    )
    shown = p.locator("#digests code.digest").evaluate_all("codes => codes.map(c => c.title)")
    assert canonical.headers["x-program-digest"] in shown
    assert p.locator(".outline .row.module[data-path='extra']").count() == 1
    assert httpx.get(f"{page.url}/v1/models").json()["models"][-1]["version_count"] == 2
    page.shot("try")


# ---------------------------------------------------------------- 50,000 nodes


def _repeated(graph: dict[str, Any], nodes_wanted: int) -> dict[str, Any]:
    """`graph` (one without subgraphs) repeated as modules ``layers.<k>`` of a new root until
    it has `nodes_wanted` nodes: values renamed per copy, so every edge stays in its copy."""
    modules = graph["modules"]
    per = len(graph["nodes"]["name"])
    copies = -(-nodes_wanted // per)
    out_modules: list[dict[str, Any]] = [
        {**modules[0], "total_nodes": per * copies},
        {**modules[0], "path": "layers", "parent": 0, "type": "torch.nn.ModuleList"},
    ]
    # the tables of operators, dtypes and shapes serve every copy as they are
    tables = {key: graph["nodes"][key] for key in ("targets", "dtypes", "shapes")}
    columns: dict[str, list[Any]] = {key: [] for key in graph["nodes"] if key not in tables}
    for k in range(copies):
        base = len(out_modules)
        for m in modules:
            path = f"layers.{k}" + (f".{m['path']}" if m["path"] else "")
            parent = 1 if m["parent"] < 0 else base + m["parent"]
            out_modules.append({**m, "path": path, "parent": parent})
        source = graph["nodes"]
        columns["graph"] += source["graph"]
        columns["position"] += [p + k * per for p in source["position"]]
        columns["module"] += [base + m for m in source["module"]]
        columns["name"] += [f"{n}_{k}" for n in source["name"]]
        columns["target"] += source["target"]
        columns["dtype"] += source["dtype"]
        columns["shape"] += source["shape"]
        columns["inputs"] += [[f"{v}_{k}" for v in vs] for vs in source["inputs"]]
        columns["outputs"] += [[f"{v}_{k}" for v in vs] for vs in source["outputs"]]
    return {**graph, "modules": out_modules, "nodes": {**columns, **tables}}


def _route_graph(p: Any, server: Server, name: str, answer: Path, nodes: int) -> None:
    """Answer model `name`'s version 1 with the graph in file `answer` of `nodes` nodes (and
    bert's version with that count), as the live server would for a stored version; any node's
    details are bert's first node's."""
    info = httpx.get(f"{server.url}/v1/models/bert/versions/1").json()
    info["summary"]["nodes"] = nodes
    node = httpx.get(f"{server.url}/v1/models/bert/versions/1/nodes/0/0", timeout=60).json()
    p.route(
        f"**/v1/models/{name}/versions/1/nodes/**",
        lambda route: route.fulfill(status=200, content_type="application/json", json=node),
    )
    p.route(
        f"**/v1/models/{name}/versions/1/graph",
        lambda route: route.fulfill(status=200, content_type="application/json", path=str(answer)),
    )
    p.route(
        f"**/v1/models/{name}/versions/1",
        lambda route: route.fulfill(status=200, content_type="application/json", json=info),
    )


def test_large_graph_timing(page: Page, server: Server) -> None:
    """First view and expanding a module of a 50,000-node graph, measured in the browser."""
    graph = _repeated(_graph(server, "bert", "1"), 50_000)
    body = json.dumps(graph).encode()
    answer = server.tmp / "graph-50k.json"
    answer.write_bytes(body)
    nodes = len(graph["nodes"]["name"])
    assert nodes >= 50_000
    p = page.page
    _route_graph(p, server, "big", answer, nodes)
    marks = page.open("/ui/models/big/versions/1/graph").evaluate(
        """Object.fromEntries(performance.getEntriesByType('mark')
            .map((m) => [m.name, m.startTime]))"""
    )
    # The browser's part: from the answer's bytes to the drawn first view. Getting the bytes
    # there (Playwright's interception here, the server's build of the graph for a real
    # program) is measured apart.
    first = marks["graph-first-view"] - marks["graph-received"]
    parsed = marks["graph-data"] - marks["graph-received"]
    transfer = marks["graph-received"] - marks["graph-start"]
    expand = """async (path) => {
        const row = document.querySelector(`.outline .row[data-path="${path}"]`);
        const start = performance.now();
        row.click();
        await new Promise((done) => requestAnimationFrame(() => setTimeout(done, 0)));
        return performance.now() - start;
    }"""
    layers = p.evaluate(expand, "layers")
    one = p.evaluate(expand, "layers.0")
    started = time.perf_counter()
    p.fill("input.search", "tanh_400")
    p.press("input.search", "Enter")
    p.wait_for_selector(".outline .row.node.selected[data-name^='tanh']")
    found = (time.perf_counter() - started) * 1000
    figures = {
        "nodes": nodes,
        "modules": len(graph["modules"]),
        "answer_mb": round(len(body) / 1e6, 1),
        "transfer_ms": round(transfer),
        "first_view_ms": round(first),
        "parse_ms": round(parsed),
        "expand_500_children_ms": round(layers, 1),
        "expand_module_ms": round(one, 1),
        "search_reveal_ms": round(found),
    }
    (page.shots / "timings.json").write_text(json.dumps(figures, indent=1))
    page.shot("graph-50k")
    assert first < FIRST_VIEW_MS * SLACK, figures
    assert max(layers, one) < EXPAND_MS * SLACK, figures


# ---------------------------------------------------------------- issue 32's broken list


def _cells(markdown: str) -> list[tuple[str, str]]:
    """The old and new cells of the changelog's table rows, unescaped."""
    rows = []
    for line in markdown.splitlines():
        if not line.startswith("| ") or line.startswith(("| rule ", "| ---")):
            continue
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        rows.append((cells[2], cells[3]))
    return rows


def test_schema_values_in_the_schemas_text_form(page: Page, server: Server) -> None:
    """Bug 1: the default view's old and new cells read as the changelog writes them (an arm's
    type, not `[object Object]`)."""
    p = page.open("/ui/schema")
    p.wait_for_selector("body[data-done='1']")
    chosen = (p.locator("#from").input_value(), p.locator("#to").input_value())
    shown = p.locator("#changes tbody tr").evaluate_all(
        "rows => rows.map(r => [r.cells[2].textContent, r.cells[3].textContent])"
    )
    markdown = httpx.get(
        f"{server.url}/v1/schema/diff",
        params={"from": chosen[0], "to": chosen[1], "format": "markdown"},
    ).text
    assert [tuple(row) for row in shown] == _cells(markdown)
    assert "List[List[float]]" in p.locator("#changes").inner_text()
    assert "[object Object]" not in p.locator("main").inner_text()


def test_diff_title_names_versions_as_the_api_does(page: Page) -> None:
    """Bug 2: no `vnull` without versions; an alias is shown as it is, with its version."""
    p = page.open("/ui/models/small/diff")
    assert "null" not in p.locator("h1").inner_text()
    assert "null" not in p.title()
    p = page.open("/ui/models/small/diff?from=1&to=champion")
    assert p.locator("h1").inner_text() == "small: v1 → champion (v2)"
    assert p.locator("#old-graph h3").inner_text() == "v1"
    assert p.locator("#new-graph h3").inner_text() == "champion (v2)"
    assert "vchampion" not in p.locator("main").inner_text()


NARROW = {"width": 390, "height": 844}


def test_pages_fit_a_narrow_screen(page: Page) -> None:
    """Bug 3: at 390 px no page scrolls sideways, and the outlines keep a usable width."""
    p = page.page
    p.set_viewport_size(NARROW)
    paths = [
        "/ui/",
        "/ui/models/small",
        "/ui/models/bert/versions/1",
        "/ui/models/bert/versions/1/graph",
        "/ui/models/small/diff?from=1&to=2",
        "/ui/schema",
        "/ui/diff",
        "/ui/try",
    ]
    widths = {}
    for path in paths:
        page.open(path)
        if path == "/ui/schema":
            p.wait_for_selector("body[data-done='1']")
        widths[path] = p.evaluate("document.documentElement.scrollWidth")
    p.set_input_files(
        "#file", files=[{"name": "m.pt2", "mimeType": "application/zip", "buffer": _small(True)}]
    )
    p.wait_for_selector("body[data-done='1']", timeout=60_000)
    widths["/ui/try (a file)"] = p.evaluate("document.documentElement.scrollWidth")
    assert all(width <= NARROW["width"] + 1 for width in widths.values()), widths
    for path in ("/ui/models/bert/versions/1/graph", "/ui/models/small/diff?from=1&to=2"):
        page.open(path)
        boxes = p.locator(".outline").evaluate_all(
            "els => els.map(e => e.getBoundingClientRect().width)"
        )
        assert boxes, path
        assert min(boxes) >= 300, (path, boxes)
    page.shot("graph-390")


def _focused(p: Any) -> dict[str, Any]:
    focused: dict[str, Any] = p.evaluate(
        """(() => { const e = document.activeElement;
            return { role: e.getAttribute('role'), level: e.getAttribute('aria-level'),
                     path: e.dataset.path ?? null, node: e.dataset.name ?? null,
                     row: e.dataset.row ? Number(e.dataset.row) : null,
                     expanded: e.getAttribute('aria-expanded'),
                     selected: e.getAttribute('aria-selected'),
                     inTree: !!e.closest('[role=tree]') }; })()"""
    )
    return focused


def test_tree_keyboard(page: Page, server: Server) -> None:
    """Bug 4: the outline is a WAI-ARIA tree: one tab stop, arrows, Home/End, Enter and Space,
    and focus follows into rows that are drawn only once scrolled to."""
    graph = _repeated(_graph(server, "bert", "1"), 3_000)
    copies = len([m for m in graph["modules"] if m["path"].count(".") == 1])
    answer = server.tmp / "graph-keys.json"
    answer.write_text(json.dumps(graph))
    p = page.page
    _route_graph(p, server, "keys", answer, len(graph["nodes"]["name"]))
    page.open("/ui/models/keys/versions/1/graph")
    p.focus("input.search")
    p.keyboard.press("Tab")
    p.keyboard.press("Tab")
    start = _focused(p)
    assert (start["role"], start["level"], start["path"]) == ("treeitem", "1", "")
    assert p.locator(".outline [tabindex='0']").count() == 1
    p.keyboard.press("ArrowDown")
    assert (_focused(p)["path"], _focused(p)["expanded"]) == ("layers", "false")
    p.keyboard.press("ArrowRight")
    assert (_focused(p)["path"], _focused(p)["expanded"]) == ("layers", "true")
    p.keyboard.press("ArrowRight")
    assert (_focused(p)["path"], _focused(p)["level"]) == ("layers.0", "3")
    p.keyboard.press("ArrowLeft")
    assert _focused(p)["path"] == "layers"
    p.keyboard.press("ArrowLeft")
    assert (_focused(p)["path"], _focused(p)["expanded"]) == ("layers", "false")
    p.keyboard.press("Enter")
    assert _focused(p)["expanded"] == "true"
    # The last row is not in the DOM until End scrolls to it.
    last = f"layers.{copies - 1}"
    assert p.locator(f".outline .row[data-path='{last}']").count() == 0
    p.keyboard.press("End")
    assert _focused(p)["path"] == last
    p.keyboard.press("Home")
    assert _focused(p)["path"] == ""
    for _ in range(3):
        p.keyboard.press("ArrowDown")
    assert _focused(p)["path"] == "layers.1"
    p.keyboard.press(" ")
    assert _focused(p)["expanded"] == "true"
    while _focused(p)["node"] is None:
        p.keyboard.press("ArrowDown")
    first = _focused(p)
    assert first["selected"] == "false"
    p.keyboard.press("Enter")
    assert _focused(p)["selected"] == "true"
    assert first["node"] in p.locator(".panel").inner_text()
    # Scrolled away with the wheel, the tree keeps focus, and the next key brings the row back.
    p.locator(".outline").evaluate("e => { e.scrollTop = e.scrollHeight; }")
    p.locator(f".outline .row[data-row='{first['row']}']").wait_for(state="detached")
    assert _focused(p)["inTree"]
    p.keyboard.press("ArrowDown")
    after = _focused(p)
    assert after["row"] == first["row"] + 1
    assert after["role"] == "treeitem"
    p.keyboard.press("Space")
    assert _focused(p)["selected"] == "true"
    assert p.locator(".outline .row[aria-selected='true']").count() == 1


def test_search_results_numbered(page: Page) -> None:
    """Bug 5: the tenth result on is numbered 10., 11., ... in full, inside the panel."""
    p = page.open("/ui/models/bert/versions/1/graph")
    p.fill("input.search", "linear")
    items = p.locator(".results li")
    assert items.count() >= 12
    side = p.locator(".side").bounding_box()
    for k in (9, 10, 11):
        number = items.nth(k).locator(".n")
        assert number.inner_text() == f"{k + 1}."
        box = number.bounding_box()
        assert box is not None
        assert side is not None
        assert box["x"] >= side["x"], (k, box, side)
        assert box["width"] > 0


def _view(p: Any) -> tuple[str, str | None, bool]:
    selected = p.locator(".outline .row.node.selected")
    return (
        p.locator("input.search").input_value(),
        selected.get_attribute("data-name") if selected.count() else None,
        p.locator(".outline .row[data-path='encoder.layer'][aria-expanded='true']").count() == 1,
    )


def test_view_state_in_the_url(page: Page, server: Server) -> None:
    """Bug 7: expanded modules, the selected node and the search live in the URL: back, forward
    and a reload restore them."""
    graph = _graph(server, "bert", "1")
    names = graph["nodes"]["name"]
    tanh = names[_targets(graph).index("torch.ops.aten.tanh.default")]
    p = page.open("/ui/models/bert/versions/1/graph")
    p.click(".outline .row[data-path='encoder']")
    p.click(".outline .row[data-path='encoder.layer']")
    p.fill("input.search", "tanh")
    p.click(".results button.jump >> nth=0")
    assert _view(p) == ("tanh", tanh, True)
    assert "q=tanh" in p.url
    p.click(".crumbs a >> nth=2")
    p.wait_for_selector("body[data-page='version'][data-ready='1']")
    p.go_back()
    p.wait_for_selector("body[data-page='graph'][data-ready='1']")
    p.wait_for_selector(".outline .row.node.selected")
    assert _view(p) == ("tanh", tanh, True)
    p.reload()
    p.wait_for_selector("body[data-ready='1']")
    assert _view(p) == ("tanh", tanh, True)
    # A second selection is a new history entry; back returns to the first (typing replaced
    # the search of the entry it was typed in).
    p.fill("input.search", "linear")
    p.click(".results button.jump >> nth=0")
    second = p.locator(".outline .row.node.selected").get_attribute("data-name")
    assert second != tanh
    p.go_back()
    p.wait_for_selector(f".outline .row.node.selected[data-name='{tanh}']")
    assert _view(p) == ("linear", tanh, True)
    p.go_forward()
    p.wait_for_selector(f".outline .row.node.selected[data-name='{second}']")
    assert _view(p) == ("linear", second, True)


def test_crumbs_counts_and_numbers(page: Page, server: Server) -> None:
    """Bug 8: the breadcrumb names versions as `v2` (an alias with its version); every page
    counts a program's nodes as the version's summary does; long floats are rounded, with the
    exact value in the title."""
    p = page.open("/ui/models/small/versions/2/graph")
    assert p.locator(".crumbs a >> nth=2").inner_text() == "v2"
    p = page.open("/ui/models/small/versions/champion/graph")
    assert p.locator(".crumbs a >> nth=2").inner_text() == "champion (v2)"
    nodes = httpx.get(f"{server.url}/v1/models/cond/versions/1").json()["summary"]["nodes"]
    every = len(_graph(server, "cond", "1")["nodes"]["name"])
    assert every > nodes  # the branches' nodes: the two counts the pages disagreed on
    shown = {}
    p = page.open("/ui/")
    shown["models"] = p.locator("tr[data-model='cond'] td >> nth=5").inner_text()
    p = page.open("/ui/models/cond")
    shown["model"] = p.locator("#versions tbody tr td >> nth=2").inner_text()
    p = page.open("/ui/models/cond/versions/1")
    shown["version"] = p.locator("#summary tr:has-text('nodes') td >> nth=1").inner_text()
    p = page.open("/ui/models/cond/versions/1/graph")
    shown["graph"] = p.locator("#facts").inner_text()
    leading = {k: re.match(r"[\d,]+", v) for k, v in shown.items()}
    counted = {k: m.group(0) if m else shown[k] for k, m in leading.items()}
    assert counted == dict.fromkeys(shown, str(nodes)), shown
    diff = httpx.get(
        f"{server.url}/v1/models/small/versions/2/diff", params={"against": "1"}
    ).json()
    exact = next(w for w in diff["parameters"] if w["name"] == "fc2.weight")["stats"][
        "max_abs_diff"
    ]
    p = page.open("/ui/models/small/diff?from=1&to=2")
    value = p.locator(f"#weight-changes [title='{exact!r}']")
    assert value.inner_text() == f"{exact:.6g}"
    assert not re.search(r"\d\.\d{7,}", p.locator("#weight-changes").inner_text())
