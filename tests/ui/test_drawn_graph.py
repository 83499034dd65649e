"""The drawn graph (app/ui/drawing.js) and the drawn diff, in Debian's Chromium, against the live
server with the programs tests/ui/test_ui.py pushes (two versions of a small model that differ by
an added layer, a tiny BERT, a torch.cond program); its fixtures are that module's.

The drawing is laid out in a web worker bundled by `npm run build` in app/ui: without the bundle
these tests fail, saying so, rather than skip.
"""

from __future__ import annotations

from typing import Any

import pytest

from app.api.ui import BUNDLE, UI_DIR
from tests.api.conftest import Server
from tests.ui.test_ui import Page, _graph, _targets, browser, page, server, shots

__all__ = ["browser", "page", "server", "shots"]

READY = ".drawing[data-state='ready']"


@pytest.fixture(autouse=True)
def _bundle_built() -> None:
    assert (UI_DIR / BUNDLE).is_file(), f"{BUNDLE} is not built: npm ci && npm run build in app/ui"


def _ready(p: Any, within: str = "") -> None:
    """Wait until the drawing(s) under `within` have laid out what the outline has open."""
    p.wait_for_selector(f"{within} {READY}".strip(), timeout=60_000)


def _drawn(p: Any, selector: str, attribute: str) -> list[str]:
    found: list[str] = p.locator(selector).evaluate_all(
        f"els => els.map((e) => e.getAttribute({attribute!r}))"
    )
    return found


def _view(p: Any, within: str = "") -> tuple[float, float, float]:
    x, y, k = p.locator(f"{within} .drawing".strip()).get_attribute("data-view").split(",")
    return float(x), float(y), float(k)


def _middle_offset(p: Any, selector: str) -> float:
    """How far (px) the element's centre is from the centre of its drawing."""
    return float(
        p.locator(selector).evaluate(
            """(e) => {
            const a = e.querySelector('rect').getBoundingClientRect();
            const b = e.closest('.drawing').getBoundingClientRect();
            return Math.hypot(a.x + a.width / 2 - (b.x + b.width / 2),
                              a.y + a.height / 2 - (b.y + b.height / 2));
        }"""
        )
    )


def test_small_program_drawn_with_its_edges(page: Page, server: Server) -> None:
    """Every node of the small program's root is drawn, its modules closed as one box each, with
    an edge line for each value between them; the minimap is there."""
    p = page.open("/ui/models/small/versions/1/graph")
    _ready(p)
    graph = _graph(server, "small", "1")
    paths = [m["path"] for m in graph["modules"]]
    assert sorted(_drawn(p, ".drawing .gmodule", "data-path")) == sorted(paths[1:])
    own = [
        n for n, m in zip(graph["nodes"]["name"], graph["nodes"]["module"], strict=True) if m == 0
    ]
    assert sorted(_drawn(p, ".drawing .gnode", "data-name")) == sorted(own)
    edges = p.locator(".drawing path.edges").get_attribute("d") or ""
    # fc1 -> relu -> fc2: at least the two edges between the three items
    assert edges.count("M") >= 2
    assert p.locator(".drawing canvas.minimap").is_visible()


def test_expand_and_collapse_change_what_is_drawn(page: Page, server: Server) -> None:
    """Opening a module (in the drawing or the outline) draws its nodes inside its frame;
    closing it draws it as one box again."""
    p = page.open("/ui/models/bert/versions/1/graph")
    _ready(p)
    assert _drawn(p, ".drawing .gmodule", "data-path") == _drawn(
        p, ".outline .row.module[aria-expanded='false']", "data-path"
    )
    # the last box sits at the bottom, under the minimap: the view is moved up first
    p.focus(".drawing")
    for _ in range(4):
        p.keyboard.press("ArrowDown")
    p.click(".drawing .gmodule[data-path='pooler']")
    _ready(p)
    assert p.locator(".drawing .gframe[data-path='pooler']").count() == 1
    assert p.locator(".drawing .gmodule[data-path='pooler']").count() == 0
    graph = _graph(server, "bert", "1")
    paths = [m["path"] for m in graph["modules"]]
    inside = {
        name
        for name, m in zip(graph["nodes"]["name"], graph["nodes"]["module"], strict=True)
        if paths[m] == "pooler"
    }
    children = {path for path in paths if path.startswith("pooler.") and path.count(".") == 1}
    assert inside
    assert children
    assert inside <= set(_drawn(p, ".drawing .gnode", "data-name"))
    assert children <= set(_drawn(p, ".drawing .gmodule", "data-path"))
    # the outline follows: the module is open there too
    assert p.locator(".outline .row[data-path='pooler']").get_attribute("aria-expanded") == "true"
    p.locator(".drawing .gframe[data-path='pooler'] > rect").click(position={"x": 30, "y": 10})
    _ready(p)
    assert p.locator(".drawing .gmodule[data-path='pooler']").count() == 1
    assert not inside & set(_drawn(p, ".drawing .gnode", "data-name"))
    p.click(".outline .row[data-path='encoder']")
    _ready(p)
    assert p.locator(".drawing .gframe[data-path='encoder']").count() == 1


def test_search_selects_and_centres_a_node(page: Page, server: Server) -> None:
    """A search found in the outline is selected in the drawing too, in the middle of it."""
    p = page.open("/ui/models/bert/versions/1/graph")
    _ready(p)
    p.fill("input.search", "tanh")
    p.press("input.search", "Enter")
    _ready(p)
    graph = _graph(server, "bert", "1")
    tanh = graph["nodes"]["name"][_targets(graph).index("torch.ops.aten.tanh.default")]
    selected = ".drawing .gnode.selected"
    assert _drawn(p, selected, "data-name") == [tanh]
    assert _middle_offset(p, selected) < 5
    # and a click on a drawn node in view (zoomed out until one is) selects it in the outline,
    # with its details
    in_view = """(d) => {
        const box = d.getBoundingClientRect();
        const inView = (e) => {
            const r = e.getBoundingClientRect();
            return r.left > box.left && r.right < box.right - 220 && r.top > box.top
                && r.bottom < box.bottom && r.width > 20;
        };
        const found = [...d.querySelectorAll('.gnode:not(.selected)')].find(inView);
        return found ? found.dataset.name : null;
    }"""
    p.focus(".drawing")
    for _ in range(5):
        name = p.locator(".drawing").evaluate(in_view)
        if name:
            break
        p.keyboard.press("-")
    assert name
    p.click(f".drawing .gnode[data-name='{name}']")
    assert p.locator(".outline .row.node.selected").get_attribute("data-name") == name
    assert p.locator(".panel h3").inner_text() == name


def test_keyboard_and_wheel_pan_and_zoom(page: Page) -> None:
    """Arrows pan, + and - zoom, 0 fits; the wheel zooms about the pointer; a drag pans."""
    p = page.open("/ui/models/bert/versions/1/graph")
    _ready(p)
    p.focus(".drawing")
    x0, y0, k0 = _view(p)
    p.keyboard.press("ArrowLeft")
    x1, y1, k1 = _view(p)
    assert (x1 - x0, y1 - y0, k1) == (pytest.approx(60, abs=0.2), 0, k0)
    p.keyboard.press("ArrowDown")
    assert _view(p)[1] == pytest.approx(y1 - 60, abs=0.2)
    p.keyboard.press("+")
    assert _view(p)[2] == pytest.approx(k0 * 1.25, rel=1e-3)
    p.keyboard.press("-")
    assert _view(p)[2] == pytest.approx(k0, rel=1e-3)
    box = p.locator(".drawing svg").bounding_box()
    p.mouse.move(box["x"] + 50, box["y"] + box["height"] - 30)
    p.mouse.wheel(0, -300)
    assert _view(p)[2] > k0
    before = _view(p)
    p.mouse.down()
    p.mouse.move(box["x"] + 150, box["y"] + box["height"] - 80, steps=4)
    p.mouse.up()
    after = _view(p)
    assert (round(after[0] - before[0]), round(after[1] - before[1])) == (100, -50)
    p.keyboard.press("0")
    x, y, k = _view(p)
    assert 0 < k <= 2


def test_minimap_moves_the_view(page: Page) -> None:
    """A click on the minimap brings that part of the drawing to the middle."""
    p = page.open("/ui/models/bert/versions/1/graph")
    _ready(p)
    p.click(".outline .row[data-path='encoder']")
    _ready(p)
    before = _view(p)
    mini = p.locator(".drawing canvas.minimap")
    mini.click(position={"x": 5, "y": 130})
    assert _view(p) != before


def test_drawn_graph_screenshot(page: Page) -> None:
    """The BERT with its first encoder layer open, for docs/ui.md."""
    p = page.open(
        "/ui/models/bert/versions/1/graph?open=&open=encoder&open=encoder.layer"
        "&open=encoder.layer.0&open=encoder.layer.0.attention"
    )
    _ready(p)
    assert p.locator(".drawing .gframe[data-path='encoder.layer.0.attention']").count() == 1
    page.shot("graph-drawn")


def test_diff_drawn(page: Page, server: Server) -> None:
    """The added layer is coloured added in the new version's drawing; next and previous change
    walk the changes, and the two drawings pan and zoom together."""
    p = page.open("/ui/models/small/diff?from=1&to=2")
    _ready(p, "#new-graph")
    _ready(p, "#old-graph")
    graph = _graph(server, "small", "2")
    paths = [m["path"] for m in graph["modules"]]
    added = sorted(
        name
        for name, m in zip(graph["nodes"]["name"], graph["nodes"]["module"], strict=True)
        if paths[m].startswith("extra")
    )
    # the changed module is opened, and its nodes are drawn as added; nothing on the old side is
    assert sorted(_drawn(p, "#new-graph .drawing .gnode.mark-added", "data-name")) == added
    assert (
        p.locator("#old-graph .drawing .mark-added, #old-graph .drawing .mark-removed").count() == 0
    )
    status = p.locator("#changes-nav .where")
    p.click("#changes-nav button.next")
    _ready(p, "#new-graph")
    assert status.inner_text().startswith("1 of ")
    first = _drawn(p, "#new-graph .drawing .gnode.selected", "data-name")
    assert first == [added[0]]
    assert _middle_offset(p, "#new-graph .drawing .gnode.selected") < 5
    p.keyboard.press("n")
    _ready(p, "#new-graph")
    assert status.inner_text().startswith("2 of ")
    assert _drawn(p, "#new-graph .drawing .gnode.selected", "data-name") == [added[1]]
    p.keyboard.press("p")
    assert status.inner_text().startswith("1 of ")
    # synced panes: a pan of one moves the other as much
    left = _view(p, "#old-graph")
    p.focus("#new-graph .drawing")
    p.keyboard.press("ArrowLeft")
    assert _view(p, "#old-graph")[0] == pytest.approx(left[0] + 60, abs=0.2)
    page.shot("diff-drawn")


def test_diff_changed_node_drawn_on_both_sides(page: Page) -> None:
    """A node changed in place (fc2 gets a fifth output) is coloured changed in both drawings,
    and next change selects it on both sides."""
    from tests.ui.test_ui import _small

    p = page.open("/ui/diff")
    for field, outputs in (("#old-file", 4), ("#new-file", 5)):
        upload = {"name": f"out{outputs}.pt2", "mimeType": "application/zip"}
        p.set_input_files(field, files=[{**upload, "buffer": _small(False, outputs)}])
    p.wait_for_selector("body[data-done='1']", timeout=60_000)
    _ready(p, "#old-graph")
    _ready(p, "#new-graph")
    p.click("#changes-nav button.next")
    _ready(p, "#old-graph")
    _ready(p, "#new-graph")
    old = _drawn(p, "#old-graph .drawing .gnode.mark-changed.selected", "data-name")
    new = _drawn(p, "#new-graph .drawing .gnode.mark-changed.selected", "data-name")
    assert len(old) == 1
    assert old == new


def test_missing_bundle_shown_in_the_drawing(page: Page) -> None:
    """Without its layout worker (answered 404, as the service does when it was not built) the
    drawing says how to build it, and nothing throws (the page fixture fails on any console
    error); the outline still works."""
    p = page.page
    p.route(
        "**/ui/static/build/layout-worker.js",
        lambda route: route.fulfill(status=404, content_type="application/problem+json", body="{}"),
    )
    page.open("/ui/models/small/versions/1/graph")
    p.wait_for_selector(".drawing[data-state='error']", timeout=60_000)
    assert "npm ci && npm run build" in p.locator(".drawing-status").inner_text()
    p.click(".outline .row[data-path='fc1']")
    assert p.locator(".outline .row[data-path='fc1']").get_attribute("aria-expanded") == "true"
    assert p.locator(".drawing").get_attribute("data-state") == "error"
