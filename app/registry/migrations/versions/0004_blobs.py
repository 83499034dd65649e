"""Tensor-level blob storage: skeletons, tensor objects and their references (issue 16).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Placeholder in the chain until its issue fills it; changes nothing."""


def downgrade() -> None:
    """Placeholder in the chain until its issue fills it; changes nothing."""
