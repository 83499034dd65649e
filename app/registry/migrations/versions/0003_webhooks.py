"""Webhook subscriptions, the event outbox and delivery records (issue 15).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Placeholder in the chain until its issue fills it; changes nothing."""


def downgrade() -> None:
    """Placeholder in the chain until its issue fills it; changes nothing."""
