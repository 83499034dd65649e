"""The registry's coded failures."""

from __future__ import annotations

from app.failure import Failure


class RegistryFailure(Failure):
    """A registry request that cannot be carried out (unknown model, deleted version, ...)."""
