"""The diff page's change rows linked into the drawn graphs, with the change shown in the URL, and
three versions side by side (app/ui/pages/diff.js, app/ui/pages/changes.js), in Debian's Chromium
against a live server holding four versions of tests/ui/test_ui.py's small model: v2 adds a
layer (`extra`), v3 gives fc2 a fifth output, v4 removes the layer again."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.api.conftest import Server
from tests.ui.test_drawn_graph import READY, _bundle_built, _drawn, _middle_offset, _ready
from tests.ui.test_ui import Page, _graph, _small, browser, page, served, shots

__all__ = ["_bundle_built", "browser", "page", "shots"]


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    """The service with four versions of the small model."""
    versions = [
        _small(extra=False),
        _small(extra=True),
        _small(extra=True, outputs=5),
        _small(extra=False, outputs=5),
    ]
    with served([("small", version) for version in versions]) as running:
        yield running


def _selected(p: Any, pane: str) -> list[str]:
    return _drawn(p, f"#{pane} .drawing .gnode.selected", "data-name")


def _query(p: Any) -> str:
    return str(p.evaluate("location.search"))


def _added_in_extra(server: Server, version: str = "2") -> list[str]:
    """The names of the version's nodes in the added layer, in the program's order."""
    graph = _graph(server, "small", version)
    paths = [m["path"] for m in graph["modules"]]
    names = graph["nodes"]["name"]
    return [
        n
        for n, m in zip(names, graph["nodes"]["module"], strict=True)
        if paths[m].startswith("extra")
    ]


def test_node_row_shows_its_change_in_both_graphs(page: Page, server: Server) -> None:
    """A click on a node change row, or Enter on it, selects and centres the node in the drawing
    and the outline, moves "i of n" there and puts the change in the URL; back and forward and a
    deep link show it again."""
    p = page.open("/ui/models/small/diff?from=1&to=2")
    _ready(p, "#old-graph")
    _ready(p, "#new-graph")
    status = p.locator("#changes-nav .where")
    total = int(status.inner_text().split()[0])
    rows = p.locator("#node-changes tbody tr")
    # the rows are the added nodes, each named by its output (the node's own name here)
    names = [row.split("\t")[2] for row in rows.evaluate_all("rs => rs.map(r => r.innerText)")]
    second = names[1]
    rows.nth(1).locator("td").first.click()
    _ready(p, "#new-graph")
    assert _selected(p, "new-graph") == [second]
    assert _middle_offset(p, "#new-graph .drawing .gnode.selected") < 5
    assert (
        p.locator("#new-graph .outline .row[aria-selected='true']").get_attribute("data-name")
        == second
    )
    place = int(status.inner_text().split()[0])
    assert status.inner_text() == f"{place} of {total}"
    assert f"change={place}" in _query(p)
    # the keyboard: the grid's cell, up a row, Enter
    p.keyboard.press("ArrowUp")
    p.keyboard.press("Enter")
    _ready(p, "#new-graph")
    assert _selected(p, "new-graph") == [names[0]]
    first = int(status.inner_text().split()[0])
    assert first != place
    assert f"change={first}" in _query(p)
    # next and previous go on from the row's place
    p.click("#changes-nav button.next")
    assert status.inner_text() == f"{first % total + 1} of {total}"
    # back twice: the second row's change again
    p.go_back()
    p.go_back()
    assert f"change={place}" in _query(p)
    _ready(p, "#new-graph")
    assert _selected(p, "new-graph") == [second]
    assert status.inner_text() == f"{place} of {total}"
    # a deep link
    p = page.open(f"/ui/models/small/diff?from=1&to=2&change={place}")
    _ready(p, "#new-graph")
    assert _selected(p, "new-graph") == [second]
    assert p.locator("#changes-nav .where").inner_text() == f"{place} of {total}"


def test_module_row_shows_its_module(page: Page, server: Server) -> None:
    """Enter on the added module's row opens it in the new drawing, moves "i of n" to its first
    change and names it in the URL."""
    p = page.open("/ui/models/small/diff?from=1&to=2")
    _ready(p, "#new-graph")
    row = p.locator("#module-changes tbody tr", has_text="extra")
    row.locator("td").first.focus()
    p.keyboard.press("Enter")
    assert "module=extra" in _query(p)
    status = p.locator("#changes-nav .where").inner_text()
    assert status.startswith("1 of ")
    _ready(p, "#new-graph")
    # the module's box is drawn and in the middle of the pane
    assert _middle_offset(p, "#new-graph .drawing [data-path='extra']") < 5
    # n from there: the first change inside the module
    p.keyboard.press("n")
    _ready(p, "#new-graph")
    added = _added_in_extra(server)
    assert _selected(p, "new-graph") in ([added[0]], [added[1]])


def test_three_versions_side_by_side(page: Page, server: Server) -> None:
    """from=1&to=2&then=3: three drawings, each step's changes coloured in its newer pane, the walk
    goes through both steps, the panes move together, the picker adds and removes the third."""
    p = page.open("/ui/models/small/diff?from=1&to=2&then=3")
    for pane in ("old-graph", "new-graph", "then-graph"):
        _ready(p, f"#{pane}")
    assert p.locator("h1").inner_text() == "small: v1 → v2 → v3"
    # step 1 (v1 -> v2) coloured in the middle, step 2 (v2 -> v3: fc2 changed) on the right
    added = _added_in_extra(server)
    assert sorted(_drawn(p, "#new-graph .drawing .gnode.mark-added", "data-name")) == sorted(added)
    assert p.locator("#then-graph .drawing .gnode.mark-added").count() == 0
    changed = _drawn(p, "#then-graph .drawing .gnode.mark-changed", "data-name")
    assert changed
    assert p.locator("#step-1 #node-changes-1").count() == 1
    assert p.locator("#step-2 #node-changes-2").count() == 1
    status = p.locator("#changes-nav .where")
    total = int(status.inner_text().split()[0])
    step_two = p.locator("#node-changes-2 tbody tr").count()
    assert total >= len(added) + step_two
    # the keyboard walks through the first step's changes into the second's
    p.focus("body")
    seen_right = []
    for _ in range(total):
        p.keyboard.press("n")
        _ready(p, "#then-graph")
        seen_right += _drawn(p, "#then-graph .drawing .gnode.mark-changed.selected", "data-name")
    assert status.inner_text() == f"{total} of {total}"
    assert seen_right
    # the last change is the second step's: selected on its counterpart in the middle pane too
    assert _selected(p, "new-graph") == _selected(p, "then-graph")
    assert "then=3" in _query(p)
    p.evaluate("document.getElementById('changes-nav').scrollIntoView()")
    page.shot("diff-three")
    # a row of the second step's table shows it in the middle and right panes
    p.locator("#node-changes-2 tbody tr").first.locator("td").first.click()
    assert _selected(p, "then-graph") == _selected(p, "new-graph") != []
    # the three panes pan together
    left = p.locator("#old-graph .drawing").get_attribute("data-view")
    p.focus("#then-graph .drawing")
    p.keyboard.press("ArrowLeft")
    assert p.locator("#old-graph .drawing").get_attribute("data-view") != left
    # the picker removes the third version, and adds it back
    p.select_option("#then", "")
    p.wait_for_selector("body[data-ready='1']")
    _ready(p, "#new-graph")
    assert "then=" not in _query(p)
    assert p.locator("#then-graph").count() == 0
    p.select_option("#then", "3")
    p.wait_for_selector("#then-graph " + READY, timeout=60_000)
    assert "then=3" in _query(p)


def test_three_versions_stack_on_a_phone(page: Page) -> None:
    """At 390 px the three panes stack, each as wide as the page, and nothing scrolls sideways."""
    page.page.set_viewport_size({"width": 390, "height": 844})
    p = page.open("/ui/models/small/diff?from=1&to=2&then=3")
    _ready(p, "#then-graph")
    boxes = [
        p.locator(f"#{pane}").bounding_box() for pane in ("old-graph", "new-graph", "then-graph")
    ]
    assert boxes[0]["x"] == boxes[1]["x"] == boxes[2]["x"]
    assert boxes[0]["y"] < boxes[1]["y"] < boxes[2]["y"]
    assert p.evaluate("document.documentElement.scrollWidth") <= 390


def test_middle_pane_colours_what_the_third_removes(page: Page, server: Server) -> None:
    """from=2&to=3&then=4: v4 removes the layer v3 still has, so the middle pane (v3) colours
    the layer's nodes as removed, beside its own change from v2 (fc2), and the walk to one of
    those removals selects it there, coloured."""
    p = page.open("/ui/models/small/diff?from=2&to=3&then=4")
    for pane in ("old-graph", "new-graph", "then-graph"):
        _ready(p, f"#{pane}")
    layer = _added_in_extra(server, "3")
    removed = _drawn(p, "#new-graph .drawing .gnode.mark-removed", "data-name")
    assert sorted(removed) == sorted(layer)
    assert _drawn(p, "#new-graph .drawing .gnode.mark-changed", "data-name")
    assert p.locator("#old-graph .drawing .gnode.mark-removed").count() == 0
    outline_removed = p.locator("#new-graph .row.node.mark-removed").count()
    assert outline_removed == len(layer)
    p.locator("#node-changes-2 tbody tr").first.locator("td").first.click()
    _ready(p, "#new-graph")
    selected = _drawn(p, "#new-graph .drawing .gnode.mark-removed.selected", "data-name")
    assert selected
    assert selected[0] in layer
