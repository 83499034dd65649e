"""Webhook subscriptions remember the token that made them, and can be paused.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_TIME = sa.DateTime(timezone=True)
_TABLE = "webhook_subscriptions"


def upgrade() -> None:
    """The creating token, and when and why delivery stopped for the creator's lost standing."""
    with op.batch_alter_table(_TABLE) as table:
        table.add_column(sa.Column("created_token", sa.String(64), nullable=True))
        table.add_column(sa.Column("paused_at", _TIME, nullable=True))
        table.add_column(sa.Column("paused_reason", sa.Text, nullable=True))


def downgrade() -> None:
    """Drop the three columns."""
    with op.batch_alter_table(_TABLE) as table:
        table.drop_column("paused_reason")
        table.drop_column("paused_at")
        table.drop_column("created_token")
