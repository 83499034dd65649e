"""docs/architecture.md stays current: every package under app/ is named in it."""

from __future__ import annotations

from tests.conftest import ROOT


def test_every_app_package_is_named() -> None:
    """Each directory of app/ (a Python package, or the UI's assets) appears as app/<name>/."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    packages = [p for p in (ROOT / "app").iterdir() if p.is_dir() and p.name != "__pycache__"]
    assert len(packages) > 10
    assert sorted(p.name for p in packages if f"app/{p.name}/" not in text) == []
