"""Imported by a worker (settings.worker_imports) to register the pt2zoo operator namespace."""

from tests.zoo import register_custom_ops

register_custom_ops()
