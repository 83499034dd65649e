"""Webhook subscriptions, the event outbox, delivery records; operator namespaces for search.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    """Create the webhook tables and the version namespace table search reads."""
    op.create_table(
        "webhook_subscriptions",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("model", sa.String(128), nullable=True),
        sa.Column("events", sa.JSON, nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("secret", sa.String(128), nullable=False),
        sa.Column("created_at", _TIME, nullable=False),
        sa.Column("created_by", sa.String(256), nullable=True),
        sa.Column("deleted_at", _TIME, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_subscriptions"),
    )
    op.create_index(
        "ix_webhook_subscriptions_model", "webhook_subscriptions", ["model"], unique=False
    )
    op.create_table(
        "webhook_events",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("model", sa.String(128), nullable=False),
        sa.Column("data", sa.JSON, nullable=False),
        sa.Column("created_at", _TIME, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_events"),
    )
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.Integer, nullable=False),
        sa.Column("event_id", sa.String(32), nullable=False),
        sa.Column("subscription_id", sa.String(32), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("next_attempt_at", _TIME, nullable=False),
        sa.Column("claimed_until", _TIME, nullable=True),
        sa.Column("claimed_by", sa.String(64), nullable=True),
        sa.Column("last_status", sa.Integer, nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("delivered_at", _TIME, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_deliveries"),
        sa.ForeignKeyConstraint(
            ["event_id"],
            ["webhook_events.id"],
            name="fk_webhook_deliveries_event_id_webhook_events",
        ),
        sa.ForeignKeyConstraint(
            ["subscription_id"],
            ["webhook_subscriptions.id"],
            name="fk_webhook_deliveries_subscription_id_webhook_subscriptions",
        ),
        sa.UniqueConstraint("event_id", "subscription_id", name="uq_webhook_deliveries_event_id"),
    )
    op.create_index(
        "ix_webhook_deliveries_status", "webhook_deliveries", ["status", "next_attempt_at"]
    )
    op.create_index(
        "ix_webhook_deliveries_subscription_id", "webhook_deliveries", ["subscription_id"]
    )
    op.create_table(
        "webhook_attempts",
        sa.Column("delivery_id", sa.Integer, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("started_at", _TIME, nullable=False),
        sa.Column("duration_ms", sa.Integer, nullable=False),
        sa.Column("status", sa.Integer, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("claimed_by", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("delivery_id", "attempt", name="pk_webhook_attempts"),
        sa.ForeignKeyConstraint(
            ["delivery_id"],
            ["webhook_deliveries.id"],
            name="fk_webhook_attempts_delivery_id_webhook_deliveries",
        ),
    )
    op.create_table(
        "version_namespaces",
        sa.Column("version_id", sa.Integer, nullable=False),
        sa.Column("namespace", sa.String(128), nullable=False),
        sa.PrimaryKeyConstraint("version_id", "namespace", name="pk_version_namespaces"),
        sa.ForeignKeyConstraint(
            ["version_id"], ["versions.id"], name="fk_version_namespaces_version_id_versions"
        ),
    )
    op.create_index("ix_version_namespaces_namespace", "version_namespaces", ["namespace"])


def downgrade() -> None:
    """Drop what upgrade created."""
    op.drop_table("version_namespaces")
    op.drop_table("webhook_attempts")
    op.drop_table("webhook_deliveries")
    op.drop_table("webhook_events")
    op.drop_table("webhook_subscriptions")
