"""A command whose extra is not installed says which one to install, in one line, exit 3.

tests/test_packaging.py checks this in a real torch-free install; here the missing modules are
simulated so the check runs without building one.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from app import cli


@pytest.fixture
def without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name.partition(".")[0] == "torch" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


@pytest.mark.parametrize(
    ("args", "command"),
    [
        (["deserialize", "doc.json", "-o", "out.pt2"], "deserialize"),
        (["validate", "doc.json"], "validate --level torch"),
        (["validate", "doc.json", "--level", "torch"], "validate --level torch"),
    ],
)
@pytest.mark.usefixtures("without_torch")
def test_torch_commands_name_the_torch_extra(
    args: list[str], command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main([*args[:1], str(tmp_path / args[1]), *args[2:]]) == 3
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"pt2serde: missing-extra: {command} needs torch, which is not installed: "
        "pip install 'pt2serde[torch]'\n"
    )
    assert not (tmp_path / "out.pt2").exists()


@pytest.mark.usefixtures("without_torch")
def test_torch_free_levels_do_not_ask_for_torch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "doc.json"
    assert cli.main(["validate", str(missing), "--level", "semantic"]) == cli.EXIT_INVALID
    assert "io-error" in capsys.readouterr().err


def test_serve_names_the_server_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # None in sys.modules makes `import uvicorn` raise ModuleNotFoundError, as when absent.
    monkeypatch.setitem(sys.modules, "uvicorn", None)
    assert cli.main(["serve"]) == 3
    assert capsys.readouterr().err == (
        "pt2serde: missing-extra: serve needs uvicorn, which is not installed: "
        "pip install 'pt2serde[server]'\n"
    )


def test_other_missing_modules_are_not_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(args: Any) -> int:
        raise ModuleNotFoundError("No module named 'nonexistent'", name="nonexistent")

    monkeypatch.setattr(cli.schemas, "_versions", broken)
    with pytest.raises(ModuleNotFoundError):
        cli.main(["schema", "versions"])
