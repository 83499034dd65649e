"""Bridge fixtures: every zoo program serialized by the bridge, and torch's archive of each."""

from __future__ import annotations

import pytest

from app.bridge.exported import SerializedProgram, serialize
from tests.zoo import PROGRAM_NAMES, ZooProgram, archive_bytes


@pytest.fixture(scope="session")
def serialized(zoo: dict[str, ZooProgram]) -> dict[str, SerializedProgram]:
    """The bridge's document and raw tensors of every zoo program."""
    return {name: serialize(zoo[name].ep) for name in PROGRAM_NAMES}


@pytest.fixture(scope="session")
def archives(zoo: dict[str, ZooProgram]) -> dict[str, bytes]:
    """torch.export.save's bytes of every zoo program."""
    return {name: archive_bytes(zoo[name].ep) for name in PROGRAM_NAMES}
