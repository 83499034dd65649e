"""The version's views (weights with value statistics, stages, partitions, module graph), label
and description editing by permission, search across models, the diff's severity and the
digests' copy buttons, in Debian's Chromium against a live server with authentication on.

Callers are a writer and a reader of every model (tokens sent by the browser context), so the
same page is seen with and without the right to change it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from torch import nn

from tests.api.conftest import Server, start_server, stop_server
from tests.progs.test_program_diff import _Blocks as Blocks
from tests.ui.test_ui import CHROMIUM, Page, _small, browser
from tests.zoo import archive_bytes

__all__ = ["browser"]

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium")

ADMIN = "admin-" + "views-" * 6
ZIP = {"Content-Type": "application/zip"}
MODELS = ("small", "many", "wide", "blocks")


class Many(nn.Module):
    """60 small linear layers (120 tensors: more than a page of rows) and a buffer holding a
    NaN, an infinity and zeros."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(60))
        self.register_buffer("odd", torch.tensor([0.0, float("nan"), float("inf"), 0.0, 3.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The layers in turn, plus the buffer's finite sum."""
        for layer in self.layers:
            x = layer(x)
        return x + self.odd.nan_to_num(posinf=0.0).sum()


def _blocks(insert_at: int | None) -> bytes:
    return archive_bytes(torch.export.export(Blocks(6, insert_at), (torch.randn(2, 4),)))


def _retrained() -> bytes:
    """`small` v1's program with one bias changed: the same graph, new weights."""
    from tests.ui.test_ui import Small

    model = Small(extra=False).eval()
    with torch.no_grad():
        model.fc2.bias.add_(1.0)
    return archive_bytes(torch.export.export(model, (torch.randn(2, 8),), strict=False))


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[Server, dict[str, str]]]:
    """The service with authentication on, the models pushed by the admin, and tokens of a
    writer and a reader of each model."""
    running = start_server(
        {
            "PT2SERDE_HTTP_WORKERS": "1",
            "PT2SERDE_WORKERS": "1",
            "PT2SERDE_ADMIN_TOKEN": ADMIN,
            "PT2SERDE_DEFAULT_PERMISSION": "none",
        }
    )
    try:
        headers = {"Authorization": f"Bearer {ADMIN}"}
        with httpx.Client(base_url=running.url, headers=headers, timeout=300) as admin:
            pushes = [
                ("small", _small(extra=False)),
                ("small", _small(extra=True)),
                ("small", _retrained()),
                ("many", archive_bytes(torch.export.export(Many(), (torch.randn(2, 4),)))),
                ("wide", _small(extra=False)),
                ("wide", _small(extra=False, outputs=5)),
                ("blocks", _blocks(None)),
                ("blocks", _blocks(3)),
            ]
            for name, data in pushes:
                answer = admin.post(f"/v1/models/{name}/versions", content=data, headers=ZIP)
                assert answer.status_code == 201, answer.text
            assert admin.put("/v1/models/small/aliases/champion", json={"version": 2}).is_success
            tokens = {}
            for role, level in (("writer", "write"), ("reader", "read")):
                made = admin.post("/v1/tokens", json={"name": role, "owner": role})
                tokens[role] = made.json()["secret"]
                for model in MODELS:
                    grant = {"level": level}
                    assert admin.put(
                        f"/v1/models/{model}/permissions/{role}", json=grant
                    ).is_success
        yield running, {"admin": ADMIN, **tokens}
    finally:
        stop_server(running)


class RolePage(Page):
    """A page whose every request carries a role's token; clipboard allowed."""

    def __init__(self, browser: Any, server: Server, token: str, shots: Path, width: int) -> None:
        self.context = browser.new_context(
            viewport={"width": width, "height": 900},
            extra_http_headers={"Authorization": f"Bearer {token}"},
        )
        self.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.url)
        self.page = self.context.new_page()
        self.url = server.url
        self.shots = shots
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def close(self) -> None:
        """Close the context, failing on any console error it logged (a refused change's 4xx is
        logged by the browser as a failed resource: the tests that cause one clear it)."""
        self.context.close()
        assert self.errors == []


def _page(
    browser: Any, server: tuple[Server, dict[str, str]], tmp: Path, role: str, width: int = 1400
) -> Iterator[RolePage]:
    running, tokens = server
    opened = RolePage(browser, running, tokens[role], tmp, width)
    yield opened
    opened.close()


@pytest.fixture
def writer(browser: Any, server: Any, tmp_path: Path) -> Iterator[RolePage]:
    """A page as the writer of every model."""
    yield from _page(browser, server, tmp_path, "writer")


@pytest.fixture
def reader(browser: Any, server: Any, tmp_path: Path) -> Iterator[RolePage]:
    """A page as a reader of every model."""
    yield from _page(browser, server, tmp_path, "reader")


@pytest.fixture
def phone(browser: Any, server: Any, tmp_path: Path) -> Iterator[RolePage]:
    """A 390-pixel-wide page as the writer."""
    yield from _page(browser, server, tmp_path, "writer", width=390)


def _api(server: tuple[Server, dict[str, str]], path: str) -> Any:
    running, tokens = server
    headers = {"Authorization": f"Bearer {tokens['admin']}"}
    answer = httpx.get(f"{running.url}{path}", headers=headers, timeout=120)
    assert answer.status_code == 200, answer.text
    return answer.json()


def _rows(p: Any, grid: str) -> list[list[str]]:
    rows: list[list[str]] = p.locator(f"{grid} tbody tr").evaluate_all(
        "rows => rows.map(r => [...r.cells].map(c => c.textContent))"
    )
    return rows


# ---------------------------------------------------------------- weights


def test_weights_tab_pages_sorts_and_flags(writer: RolePage) -> None:
    """120 tensors and a buffer: a page of 100 rows, the next page, sorted by max as torch
    finds it, and the NaN and infinity counted."""
    p = writer.open("/ui/models/many/versions/1/weights")
    assert p.locator("nav.tabs a[aria-current='page']").inner_text() == "Weights"
    assert p.locator("#weights-grid tbody tr").count() == 100
    assert "rows 1–100 of 121" in p.locator(".pager-status").inner_text()
    p.click(".pager-next")
    assert p.locator("#weights-grid tbody tr").count() == 21
    state = Many().state_dict()
    top = max(
        (name for name in state if state[name].isfinite().any()),
        key=lambda n: float(state[n][state[n].isfinite()].max()),
    )
    p.click("#weights-grid th:has-text('max')")
    assert p.locator("#weights-grid th[aria-sort='descending']").inner_text().startswith("max")
    first = _rows(p, "#weights-grid")[0]
    assert first[0] == top
    p.fill("#weights-filter", "odd")
    [odd] = _rows(p, "#weights-grid")
    headers = p.locator("#weights-grid th").evaluate_all("hs => hs.map(h => h.textContent)")
    cells = dict(zip((h.rstrip(" ▲▼") for h in headers), odd, strict=True))
    assert (cells["NaN"], cells["inf"], cells["zeros"]) == ("1", "1", "2")
    assert cells["max"] == "3"
    assert "1 with NaN or infinite values" in p.locator("#weights-total").inner_text()


def test_grid_keyboard(writer: RolePage) -> None:
    """The grid is one tab stop; arrows move between cells, PageDown turns the page, Enter on
    a header sorts."""
    p = writer.open("/ui/models/many/versions/1/weights")
    assert p.locator("#weights-grid [tabindex='0']").count() == 1
    p.locator("#weights-grid [tabindex='0']").focus()
    p.keyboard.press("ArrowDown")
    focused = p.evaluate("[document.activeElement.dataset.row, document.activeElement.dataset.col]")
    assert focused == ["0", "0"]
    p.keyboard.press("ArrowRight")
    p.keyboard.press("ArrowDown")
    focused = p.evaluate("[document.activeElement.dataset.row, document.activeElement.dataset.col]")
    assert focused == ["1", "1"]
    p.keyboard.press("PageDown")
    assert p.evaluate("document.activeElement.dataset.row") == "100"
    assert "rows 101–121" in p.locator(".pager-status").inner_text()
    p.keyboard.press("Control+Home")
    p.keyboard.press("ArrowUp")
    assert p.evaluate("document.activeElement.getAttribute('role')") == "columnheader"
    p.keyboard.press("Enter")
    assert p.locator("#weights-grid th[aria-sort='ascending']").count() == 1
    assert p.locator("#weights-grid [tabindex='0']").count() == 1


# ---------------------------------------------------------------- stages, partitions, modules


def test_stages_tab(writer: RolePage, server: Any) -> None:
    """The stages the API proposes, and a new count asked for from the page."""
    p = writer.open("/ui/models/small/versions/2/stages")
    view = _api(server, "/v1/models/small/versions/2/inspect?view=stages&stages=2")
    rows = _rows(p, "#stages-grid")
    modules = [", ".join(m or "<root ops>" for m in s["modules"]) for s in view["stages"]]
    assert [r[1] for r in rows] == modules
    p.fill("#stage-count", "3")
    p.press("#stage-count", "Enter")
    p.wait_for_url("**/stages?stages=3*")
    p.wait_for_selector("body[data-ready='1']")
    assert p.locator("#stages-grid tbody tr").count() == 3


def test_partitions_tab(writer: RolePage) -> None:
    """Linear alone is two single nodes (a relu runs between them), which the partitioner
    leaves out; linear and relu together are one partition of v1's three nodes."""
    p = writer.open("/ui/models/small/versions/1/partitions")
    assert p.locator("#partitions-none").count() == 1
    p.check("input[value='torch.ops.aten.linear.default']")
    p.click("#partition")
    p.wait_for_url("**/partitions?supported=*")
    p.wait_for_selector("body[data-ready='1']")
    assert "0 partitions" in p.locator("main").inner_text()
    assert p.locator("input[value='torch.ops.aten.linear.default']").is_checked()
    p.check("input[value='torch.ops.aten.relu.default']")
    p.click("#partition")
    p.wait_for_url("**/partitions?supported=*&supported=*")
    p.wait_for_selector("#partitions-grid")
    assert _rows(p, "#partitions-grid")[0][1] == "3"
    assert "1 partition\n" in p.locator("main").inner_text()


def test_module_graph_tab(writer: RolePage, server: Any) -> None:
    """The module calls at depth 1 as the API lists them, in order, with their edges."""
    p = writer.open("/ui/models/small/versions/2/modules")
    view = _api(server, "/v1/models/small/versions/2/inspect?view=module-graph&depth=1")
    shown = [r[1] for r in _rows(p, "#module-graph-grid")]
    assert shown == [v["id"] for v in view["vertices"]]
    assert ("a chain" in p.locator("#chain").inner_text()) == view["is_chain"]


def test_node_details(writer: RolePage) -> None:
    """A selected node shows its arguments with torch's shapes, its module and the stack trace
    the exporter recorded."""
    p = writer.open("/ui/models/small/versions/1/graph")
    p.fill("input.search", "linear")
    p.press("input.search", "Enter")
    info = p.locator("#node-info")
    info.locator(".node-args").wait_for()
    values = info.locator(".arg-value").all_inner_texts()
    assert values[:3] == [
        "x: float32[2, 8]",
        "p_fc1_weight: float32[16, 8]",
        "p_fc1_bias: float32[16]",
    ]
    assert info.locator(".module-stack li").all_inner_texts() == ["fc1 (Linear)"]
    assert "forward" in (info.locator(".stack-trace pre").text_content() or "")


# ---------------------------------------------------------------- editing


def _labels(server: Any, ref: str) -> tuple[list[str], dict[str, str]]:
    info = _api(server, f"/v1/models/small/versions/{ref}")
    return info["aliases"], info["tags"]


def test_writer_edits_labels(writer: RolePage, server: Any) -> None:
    """A writer sets and removes an alias and a tag from the version page; a refused alias
    shows the API's problem."""
    p = writer.open("/ui/models/small/versions/1")
    p.fill("#new-alias", "baseline")
    p.click("#add-alias")
    p.wait_for_selector(".alias[data-alias='baseline']")
    p.fill("#new-tag-key", "owner")
    p.fill("#new-tag-value", "vision team")
    p.click("#add-tag")
    p.wait_for_selector(".tag[data-tag='owner']")
    assert _labels(server, "1") == (["baseline"], {"owner": "vision team"})
    p.click("button[aria-label='remove tag owner']")
    p.wait_for_selector(".tag[data-tag='owner']", state="detached")
    p.click("button[aria-label='remove alias baseline']")
    p.wait_for_selector(".alias[data-alias='baseline']", state="detached")
    assert _labels(server, "1") == ([], {})
    p.fill("#new-alias", "9lives")
    p.click("#add-alias")
    problem = p.locator("#labels .error")
    problem.wait_for()
    assert problem.inner_text().startswith("422")
    assert "'9lives' is not a valid alias" in problem.inner_text()
    # the browser logs the refused request itself as a failed resource
    writer.errors = [e for e in writer.errors if "422" not in e]


def test_writer_describes_model(writer: RolePage, server: Any) -> None:
    """The description is saved, shown, and kept by the API."""
    p = writer.open("/ui/models/small")
    assert p.locator("#description-text").inner_text() == "No description."
    p.click("#description summary")
    p.fill("#description-input", "Two linear layers, for the UI's tests.")
    p.click("#save-description")
    p.wait_for_selector("#description-text:has-text('Two linear layers')")
    assert _api(server, "/v1/models/small")["description"].startswith("Two linear layers")
    p = writer.open("/ui/")
    assert p.locator("#models tr[data-model='small'] .described").inner_text().startswith("Two")
    p.fill("#filter", "for the ui")
    assert p.locator("#models tbody tr:not([hidden])").count() == 1


def test_reader_sees_no_controls(reader: RolePage) -> None:
    """A reader sees the labels and the description without any control to change them."""
    p = reader.open("/ui/models/small/versions/2")
    assert p.locator(".alias[data-alias='champion']").count() == 1
    assert p.locator("#read-only").count() == 1
    assert p.locator("#labels button, #labels input").count() == 0
    p = reader.open("/ui/models/small")
    assert p.locator("#description textarea, #description button").count() == 0


# ---------------------------------------------------------------- search


def test_header_search(writer: RolePage) -> None:
    """The header's box finds a version by its alias and models by name."""
    p = writer.open("/ui/")
    p.fill("#global-search", "champion")
    p.press("#global-search", "Enter")
    p.wait_for_url("**/ui/search?q=champion")
    p.wait_for_selector("body[data-ready='1']")
    rows = _rows(p, "#version-hits")
    assert [(r[0], r[1], r[2]) for r in rows] == [("small", "v2", "alias")]
    assert p.locator("#global-search").input_value() == "champion"
    p = writer.open("/ui/search?q=wid")
    assert p.locator("#model-hits li").all_inner_texts()[0].startswith("wide")


# ---------------------------------------------------------------- diff severity


@pytest.mark.parametrize(
    ("path", "level", "words"),
    [
        ("/ui/models/small/diff?from=1&to=2", "structural", "Structural change"),
        ("/ui/models/small/diff?from=1&to=3", "weights", "Weights only"),
        ("/ui/models/small/diff?from=1&to=1", "identical", "Identical"),
        ("/ui/models/wide/diff?from=1&to=2", "breaking", "Breaking change"),
    ],
)
def test_diff_severity(writer: RolePage, path: str, level: str, words: str) -> None:
    """An inserted block is a structural change (its module named), a retrained bias weights
    only, a version against itself identical, a wider output breaking: in words."""
    p = writer.open(path)
    verdict = p.locator("#verdict")
    assert verdict.get_attribute("data-severity") == level
    text = verdict.inner_text()
    assert text.startswith(words)
    assert "same-graph-new-weights" not in text
    if level == "structural":
        assert "1 module added (extra)" in text


def test_diff_of_an_inserted_block(writer: RolePage) -> None:
    """A block inserted at index 3 is reported as the new module layers.3 with its own two
    nodes, the blocks after it as moved, and the node changes list exactly those two."""
    p = writer.open("/ui/models/blocks/diff?from=1&to=2")
    text = p.locator("#verdict").inner_text()
    assert text.startswith("Structural change")
    assert "1 module added (layers.3)" in text
    assert "3 modules moved (layers.3 → layers.4, layers.4 → layers.5, layers.5 → layers.6)" in text
    rows = _rows(p, "#node-changes")
    assert [(r[0], r[2]) for r in rows] == [("added", "linear_3"), ("added", "relu_3")]
    assert "moved from layers.3" in p.locator("#module-changes").inner_text()


# ---------------------------------------------------------------- digests, narrow screens


def test_digests_short_with_copy(writer: RolePage, server: Any) -> None:
    """The summary's digests show 12 hex digits; the button copies the whole one."""
    p = writer.open("/ui/models/small/versions/1")
    program = _api(server, "/v1/models/small/versions/1")["digests"]["program"]
    code = p.locator("#summary code.digest").first
    assert code.get_attribute("title") == program
    assert len(code.inner_text()) < 20
    p.locator("#summary .digest-box button.copy").first.click()
    assert p.evaluate("navigator.clipboard.readText()") == program
    assert p.locator("#summary .digest-box button.copy").first.inner_text() == "copied"


@pytest.mark.parametrize(
    "path",
    [
        "/ui/models/many/versions/1",
        "/ui/models/many/versions/1/weights",
        "/ui/models/small/versions/2/stages",
        "/ui/models/small/versions/1/partitions?supported=torch.ops.aten.linear.default",
        "/ui/models/small/versions/2/modules",
        "/ui/models/small",
        "/ui/search?q=small",
        "/ui/models/small/diff?from=1&to=2",
    ],
)
def test_new_pages_at_390_px(phone: RolePage, path: str) -> None:
    """Nothing scrolls the page sideways on a phone; wide grids scroll in their own box."""
    p = phone.open(path)
    width = p.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, (path, width)
