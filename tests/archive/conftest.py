"""Archive fixtures: torch-written .pt2 bytes of every zoo program, and a deflate bomb."""

from __future__ import annotations

import zlib

import pytest

from tests.zoo import PROGRAM_NAMES, ZooProgram, archive_bytes

GiB = 1024**3
BOMB_SEGMENT = 16 * 1024 * 1024


@pytest.fixture(scope="session")
def zoo_archives(zoo: dict[str, ZooProgram]) -> dict[str, bytes]:
    """torch.export.save's bytes of every zoo program."""
    return {name: archive_bytes(zoo[name].ep) for name in PROGRAM_NAMES}


@pytest.fixture(scope="session")
def bomb() -> bytes:
    """A raw deflate stream of about 1 MiB that inflates to exactly 1 GiB of zeros.

    A full flush resets the compressor, so one compressed 16 MiB segment can be repeated: the
    bomb costs a fraction of a second to build instead of compressing 1 GiB.
    """
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    segment = compressor.compress(bytes(BOMB_SEGMENT)) + compressor.flush(zlib.Z_FULL_FLUSH)
    final = zlib.compressobj(9, zlib.DEFLATED, -15).flush()
    return segment * (GiB // BOMB_SEGMENT) + final
