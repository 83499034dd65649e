"""Stored objects in encoded forms: each object's encoding, stored size and delta depth, the
bases deltas were stored against, and the tensor each hole of a stored archive holds.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Every object stored before is raw (NULL encoding and stored size: its size), at depth 0;
    archives stored before name no tensors (a push onto them stores no deltas). Columns are
    added in place, as in 0006."""
    op.add_column("blob_objects", sa.Column("stored_size", sa.BigInteger, nullable=True))
    op.add_column("blob_objects", sa.Column("encoding", sa.String(16), nullable=True))
    op.add_column(
        "blob_objects", sa.Column("depth", sa.Integer, nullable=False, server_default="0")
    )
    op.add_column("blob_archives", sa.Column("tensors", sa.JSON, nullable=True))
    op.create_table(
        "blob_object_bases",
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("base", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("digest", "base", name="pk_blob_object_bases"),
    )
    op.create_index("ix_blob_object_bases_base", "blob_object_bases", ["base"])


def downgrade() -> None:
    """Drop the table and the columns (SQLite 3.35 and newer drop a plain column)."""
    op.drop_index("ix_blob_object_bases_base", table_name="blob_object_bases")
    op.drop_table("blob_object_bases")
    op.drop_column("blob_archives", "tensors")
    for column in ("depth", "encoding", "stored_size"):
        op.drop_column("blob_objects", column)
