"""Identities, permissions, protected aliases, audit log and quotas (issue 15).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Placeholder in the chain until its issue fills it; changes nothing."""


def downgrade() -> None:
    """Placeholder in the chain until its issue fills it; changes nothing."""
