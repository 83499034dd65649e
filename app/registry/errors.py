"""The registry's coded failures."""

from __future__ import annotations

from app.failure import Failure


class RegistryFailure(Failure):
    """A registry request that cannot be carried out (unknown model, deleted version, ...)."""


def blob_not_found(digest: str) -> RegistryFailure:
    """The one answer for a blob no live version refers to and for one the caller may not read:
    anything else would tell a caller which digests exist in models it cannot see."""
    return RegistryFailure("blob-not-found", f"no version you may read refers to the blob {digest}")
