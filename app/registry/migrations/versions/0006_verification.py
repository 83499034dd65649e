"""A version says how far it was checked: by torch (and which release), or short of torch for
lack of the custom operator namespaces the torch workers import.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Every version pushed before this migration passed torch's check (a push needed it), by a
    torch release nobody recorded: verified, release unknown. The columns are added in place
    (SQLite adds a NOT NULL column with a constant default): a batch's copy of the table could
    not drop the old one that tags and aliases refer to."""
    op.add_column(
        "versions", sa.Column("verified", sa.Boolean, nullable=False, server_default=sa.true())
    )
    op.add_column("versions", sa.Column("verified_torch", sa.String(64), nullable=True))
    op.add_column(
        "versions",
        sa.Column("unverified_namespaces", sa.JSON, nullable=False, server_default=sa.text("'[]'")),
    )


def downgrade() -> None:
    """Drop the three columns, in place as well (SQLite 3.35 and newer drop a plain column)."""
    for column in ("unverified_namespaces", "verified_torch", "verified"):
        op.drop_column("versions", column)
