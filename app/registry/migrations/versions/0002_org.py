"""Identities, permissions, protected aliases, audit log and quotas.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_TIME = sa.DateTime(timezone=True)

#: the audit log is append-only in the database too (both dialects abort the statement).
_SQLITE_GUARDS = [
    f"CREATE TRIGGER audit_log_no_{verb.lower()} BEFORE {verb} ON audit_log "
    "BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END"
    for verb in ("UPDATE", "DELETE")
]
_PG_GUARDS = [
    "CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS "
    "$$ BEGIN RAISE EXCEPTION 'the audit log is append-only'; END $$",
    "CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log "
    "FOR EACH ROW EXECUTE FUNCTION audit_log_append_only()",
]


def upgrade() -> None:
    """Tokens, permissions and the audit log; who pushed a version; protected aliases."""
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("owner", sa.String(128), nullable=False),
        sa.Column("secret_sha256", sa.String(64), nullable=False),
        sa.Column("admin", sa.Boolean, nullable=False),
        sa.Column("created_at", _TIME, nullable=False),
        sa.Column("created_by", sa.String(128), nullable=False),
        sa.Column("expires_at", _TIME, nullable=True),
        sa.Column("revoked_at", _TIME, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_api_tokens"),
        sa.UniqueConstraint("secret_sha256", name="uq_api_tokens_secret_sha256"),
    )
    op.create_index("ix_api_tokens_owner", "api_tokens", ["owner"])
    op.create_table(
        "model_permissions",
        sa.Column("model", sa.String(128), nullable=False),
        sa.Column("principal", sa.String(128), nullable=False),
        sa.Column("level", sa.String(8), nullable=False),
        sa.Column("updated_at", _TIME, nullable=False),
        sa.PrimaryKeyConstraint("model", "principal", name="pk_model_permissions"),
    )
    op.create_table(
        "audit_log",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("at", _TIME, nullable=False),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("token_id", sa.String(32), nullable=True),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("model", sa.String(128), nullable=True),
        sa.Column("target", sa.String(512), nullable=False),
        sa.Column("before", sa.JSON, nullable=True),
        sa.Column("after", sa.JSON, nullable=True),
        sa.Column("request_id", sa.String(128), nullable=False),
        sa.Column("client", sa.String(128), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_audit_log"),
    )
    op.create_index("ix_audit_log_model", "audit_log", ["model", "id"])
    op.create_index("ix_audit_log_actor", "audit_log", ["actor", "id"])
    for statement in _PG_GUARDS if op.get_bind().dialect.name == "postgresql" else _SQLITE_GUARDS:
        op.execute(statement)
    with op.batch_alter_table("versions") as batch:
        batch.add_column(sa.Column("created_by", sa.String(128), nullable=True))
        batch.add_column(sa.Column("created_token", sa.String(32), nullable=True))
    op.create_index("ix_versions_created_token", "versions", ["created_token"])
    with op.batch_alter_table("aliases") as batch:
        batch.add_column(
            sa.Column("protected", sa.Boolean, nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    """Drop what upgrade added."""
    with op.batch_alter_table("aliases") as batch:
        batch.drop_column("protected")
    op.drop_index("ix_versions_created_token", "versions")
    with op.batch_alter_table("versions") as batch:
        batch.drop_column("created_token")
        batch.drop_column("created_by")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER audit_log_append_only ON audit_log")
        op.execute("DROP FUNCTION audit_log_append_only()")
    op.drop_table("audit_log")
    op.drop_table("model_permissions")
    op.drop_index("ix_api_tokens_owner", "api_tokens")
    op.drop_table("api_tokens")
