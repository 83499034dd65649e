"""The registry's first schema: models, versions, version tags and aliases.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_LIVE = sa.text("deleted_at IS NULL")


def upgrade() -> None:
    """Create the four tables."""
    op.create_table(
        "models",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("last_version", sa.Integer, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_models"),
        sa.UniqueConstraint("name", name="uq_models_name"),
    )
    op.create_table(
        "versions",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("model_id", sa.Integer, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("program_digest", sa.String(64), nullable=False),
        sa.Column("graph_digest", sa.String(64), nullable=False),
        sa.Column("weights_digest", sa.String(64), nullable=False),
        sa.Column("archive_digest", sa.String(64), nullable=False),
        sa.Column("archive_size", sa.BigInteger, nullable=False),
        sa.Column("archive_model", sa.String(256), nullable=False),
        sa.Column("schema_version", sa.String(16), nullable=False),
        sa.Column("min_schema_version", sa.String(16), nullable=False),
        sa.Column("readable_by", sa.JSON, nullable=False),
        sa.Column("summary", sa.JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("deleted_reason", sa.Text, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_versions"),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"], name="fk_versions_model_id_models"),
        sa.UniqueConstraint("model_id", "version", name="uq_versions_model_id"),
    )
    op.create_index(
        "uq_versions_live_program",
        "versions",
        ["model_id", "program_digest"],
        unique=True,
        sqlite_where=_LIVE,
        postgresql_where=_LIVE,
    )
    op.create_index("ix_versions_archive_digest", "versions", ["archive_digest"])
    op.create_index("ix_versions_graph_digest", "versions", ["graph_digest"])
    op.create_table(
        "version_tags",
        sa.Column("version_id", sa.Integer, nullable=False),
        sa.Column("key", sa.String(128), nullable=False),
        sa.Column("value", sa.Text, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("version_id", "key", name="pk_version_tags"),
        sa.ForeignKeyConstraint(
            ["version_id"], ["versions.id"], name="fk_version_tags_version_id_versions"
        ),
    )
    op.create_table(
        "aliases",
        sa.Column("model_id", sa.Integer, nullable=False),
        sa.Column("alias", sa.String(64), nullable=False),
        sa.Column("version_id", sa.Integer, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("model_id", "alias", name="pk_aliases"),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"], name="fk_aliases_model_id_models"),
        sa.ForeignKeyConstraint(
            ["version_id"], ["versions.id"], name="fk_aliases_version_id_versions"
        ),
    )


def downgrade() -> None:
    """Drop the four tables."""
    op.drop_table("aliases")
    op.drop_table("version_tags")
    op.drop_index("ix_versions_graph_digest", "versions")
    op.drop_index("ix_versions_archive_digest", "versions")
    op.drop_index("uq_versions_live_program", "versions")
    op.drop_table("versions")
    op.drop_table("models")
