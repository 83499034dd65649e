"""What the command says about itself: `--version`, and `--help` texts written for its user."""

from __future__ import annotations

import argparse
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

import schema
from app.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]

#: What only a developer of pt2serde reads: module paths, source files, issue numbers, to-dos,
#: the command modules' own machinery.
DEVELOPER_NOTES = re.compile(
    r"\b(?:app|schema|tests|bench)\.(?!yaml\b)[a-z_]+"
    r"|\b(?:app|tests|bench)/"
    r"|\w\.py\b"
    r"|\bissues?\b|#\d+"
    r"|\bTODO\b|\bFIXME\b|\bXXX\b"
    r"|\bregister\(|\bGROUPS\b|\bargparse\b"
)


def _parsers(
    parser: argparse.ArgumentParser, path: tuple[str, ...]
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield " ".join(path), parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def test_version_names_the_installed_distribution_and_the_schema_it_writes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    out, err = capsys.readouterr()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert out == (
        f"pt2serde {project['version']} (writes torch export schema "
        f"{schema.format_version(schema.CURRENT)})\n"
    )
    assert err == ""


def test_every_help_text_is_for_the_user() -> None:
    walked = _parsers(build_parser(), ("pt2serde",))
    texts = {path: parser.format_help() for path, parser in walked}
    # every command and subcommand is reached: the walk is not vacuous
    assert {"pt2serde", "pt2serde validate", "pt2serde schema diff", "pt2serde registry gc"} <= set(
        texts
    )
    notes = {
        path: DEVELOPER_NOTES.findall(text)
        for path, text in texts.items()
        if DEVELOPER_NOTES.search(text)
    }
    assert notes == {}


def test_the_pattern_finds_a_developer_note() -> None:
    """The check can fail: each kind of note the pattern is for is found in a sample."""
    for note in (
        "see app.cli.common",
        "in app/cli/programs.py",
        "issue 30",
        "TODO: remove",
        "a module with a register(sub, shared)",
        "schema.describe",
    ):
        assert DEVELOPER_NOTES.search(note), note
    assert not DEVELOPER_NOTES.search("a .pt2 archive, a JSON document or a schema.yaml path")
