"""The web UI's one built file (the drawn graph's layout worker): served when built, a clear
answer and a start-up log line when not, and never npm's packages or the bundle's sources."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from app.api import ui
from app.http.problems import ServiceError


def test_missing_bundle_answers_how_to_build_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(ui._ASSETS, ui.BUNDLE, tmp_path / "layout-worker.js")
    with pytest.raises(ServiceError) as raised:
        ui.asset(ui.BUNDLE)
    assert raised.value.code == "not-found"
    assert "npm ci && npm run build" in raised.value.detail


def test_missing_bundle_logged_at_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(ui, "UI_DIR", tmp_path)
    with caplog.at_level(logging.ERROR, logger=ui.__name__):
        ui.check_bundle()
    [record] = caplog.records
    assert ui.BUNDLE in record.getMessage()
    assert "make run" in record.getMessage()


def test_built_bundle_logs_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "build").mkdir()
    (tmp_path / ui.BUNDLE).write_text("self.onmessage = null;\n")
    monkeypatch.setattr(ui, "UI_DIR", tmp_path)
    with caplog.at_level(logging.ERROR, logger=ui.__name__):
        ui.check_bundle()
    assert caplog.records == []


def test_npm_packages_and_sources_not_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("app.js", "pages/graph.js", "worker/layout.js", "node_modules/elkjs/lib/x.js"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    monkeypatch.setattr(ui, "UI_DIR", tmp_path)
    assert sorted(ui._assets()) == sorted(["app.js", "pages/graph.js", ui.BUNDLE])
