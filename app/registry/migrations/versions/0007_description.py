"""A model says what it is: a free-text description people write (and may remove).

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Models pushed before this migration are not described (the column is NULL); it is added
    in place, as 0006's columns are, for the same reason."""
    op.add_column("models", sa.Column("description", sa.Text, nullable=True))


def downgrade() -> None:
    """Drop the column, in place as well."""
    op.drop_column("models", "description")
