"""The session's SeaweedFS (seaweed_server.py runs it) for the S3 blob backend's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.registry.seaweed_server import Seaweed, running

__all__ = ["Seaweed", "seaweed"]


@pytest.fixture(scope="session")
def seaweed() -> Iterator[Seaweed]:
    """SeaweedFS on loopback, its AWS_* variables set in this process for the session."""
    with running() as server:
        yield server
