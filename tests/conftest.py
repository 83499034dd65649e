"""Shared fixtures: the zoo of real exported programs, torch's documents, the schema history."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from bench.zoo import PROGRAM_NAMES, ZooProgram, cached_zoo, torch_json

if TYPE_CHECKING:
    from tests.realzoo import RealProgram

ROOT = Path(__file__).resolve().parents[1]
HISTORY = ROOT / "tests" / "data" / "torch-schema-history"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens", action="store_true", help="rewrite golden files from current output"
    )


@pytest.fixture(scope="session")
def zoo() -> dict[str, ZooProgram]:
    """Every zoo program, exported once per session."""
    return cached_zoo()


@pytest.fixture(scope="session")
def zoo_json(zoo: dict[str, ZooProgram]) -> dict[str, bytes]:
    """torch's own JSON of every zoo program."""
    return {name: torch_json(zoo[name].ep) for name in PROGRAM_NAMES}


@pytest.fixture(scope="session")
def real_zoo() -> dict[str, RealProgram]:
    """Every real-zoo program (tiny Hugging Face models, torch features), exported once per
    session."""
    # Imported on first use, so that a session which collects no real-zoo test never registers
    # the zoo's pytree types and quantized operators.
    from tests.realzoo import cached_real_zoo

    return cached_real_zoo()


@pytest.fixture(scope="session")
def history_dir() -> Path:
    """torch's schema.yaml of every release, kept in the repository as test data."""
    return HISTORY
