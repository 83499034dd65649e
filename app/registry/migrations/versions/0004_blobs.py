"""Tensor-level blob storage: objects, archives as skeleton plus tensor objects.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    """The objects pushes claimed, stored archives' layouts and the objects each one uses."""
    op.create_table(
        "blob_objects",
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("present", sa.Boolean, nullable=False),
        sa.Column("touched_at", _TIME, nullable=False),
        sa.PrimaryKeyConstraint("digest", name="pk_blob_objects"),
    )
    op.create_table(
        "blob_archives",
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("skeleton", sa.String(64), nullable=False),
        sa.Column("holes", sa.JSON, nullable=False),
        sa.Column("created_at", _TIME, nullable=False),
        sa.PrimaryKeyConstraint("digest", name="pk_blob_archives"),
    )
    op.create_table(
        "blob_archive_objects",
        sa.Column("archive_digest", sa.String(64), nullable=False),
        sa.Column("object_digest", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("archive_digest", "object_digest", name="pk_blob_archive_objects"),
    )
    op.create_index(
        "ix_blob_archive_objects_object_digest", "blob_archive_objects", ["object_digest"]
    )


def downgrade() -> None:
    """Drop the three tables."""
    op.drop_index("ix_blob_archive_objects_object_digest", "blob_archive_objects")
    op.drop_table("blob_archive_objects")
    op.drop_table("blob_archives")
    op.drop_table("blob_objects")
