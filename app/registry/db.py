"""The registry's tables, its database engines (SQLite or PostgreSQL) and their transactions.

Writers are serialized where they must be: on SQLite every write transaction is
``BEGIN IMMEDIATE`` (one writer at a time across processes, the others wait up to the busy
timeout); on PostgreSQL a push locks its model's row (``SELECT ... FOR UPDATE``), so version
numbers of one model are handed out one at a time, and blob placement is fenced from blob
collection by an advisory lock (shared by pushes, exclusive for collection).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from alembic import command
from alembic.config import Config
from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Connection,
    DateTime,
    Engine,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    create_engine,
    event,
    exc,
    false,
    text,
    true,
)
from sqlalchemy.engine import make_url

from app.registry.errors import RegistryFailure
from app.settings import Settings

MIGRATIONS = Path(__file__).with_name("migrations")
SQLITE_FILE = "registry.sqlite3"
#: advisory lock keys (PostgreSQL), arbitrary constants private to this service.
_MIGRATION_LOCK = 0x7074_3273_6572_6401
_BLOB_LOCK = 0x7074_3273_6572_6402
_WRITE_OPTION = "pt2serde_write"
#: how long a SQLite writer waits for another one, in seconds.
_SQLITE_BUSY_S = 60.0

BlobLock = Literal["none", "shared", "exclusive"]

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_name)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

_LIVE = text("deleted_at IS NULL")

models = Table(
    "models",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(128), nullable=False, unique=True),
    #: the last version number handed out (numbers are never reused, even after a delete).
    Column("last_version", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    #: what the model is, for people (None: not described)
    Column("description", Text, nullable=True),
)

versions = Table(
    "versions",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("model_id", ForeignKey("models.id"), nullable=False),
    Column("version", Integer, nullable=False),
    Column("program_digest", String(64), nullable=False),
    Column("graph_digest", String(64), nullable=False),
    Column("weights_digest", String(64), nullable=False),
    Column("archive_digest", String(64), nullable=False),
    Column("archive_size", BigInteger, nullable=False),
    Column("archive_model", String(256), nullable=False),
    Column("schema_version", String(16), nullable=False),
    Column("min_schema_version", String(16), nullable=False),
    Column("readable_by", JSON, nullable=False),
    Column("summary", JSON, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("deleted_at", DateTime(timezone=True), nullable=True),
    Column("deleted_reason", Text, nullable=True),
    #: who pushed it (a principal) and with which token: search and per-token quotas read them
    Column("created_by", String(128), nullable=True),
    Column("created_token", String(32), nullable=True),
    #: whether torch's own check built it, and the release that did (None: before this was
    #: recorded); unverified, the custom operator namespaces the torch workers lacked
    Column("verified", Boolean, nullable=False, server_default=true()),
    Column("verified_torch", String(64), nullable=True),
    Column("unverified_namespaces", JSON, nullable=False, server_default=text("'[]'")),
    UniqueConstraint("model_id", "version"),
    Index(
        "uq_versions_live_program",
        "model_id",
        "program_digest",
        unique=True,
        sqlite_where=_LIVE,
        postgresql_where=_LIVE,
    ),
    Index("ix_versions_archive_digest", "archive_digest"),
    Index("ix_versions_graph_digest", "graph_digest"),
    Index("ix_versions_created_token", "created_token"),
)

tags = Table(
    "version_tags",
    metadata,
    Column("version_id", ForeignKey("versions.id"), primary_key=True),
    Column("key", String(128), primary_key=True),
    Column("value", Text, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

aliases = Table(
    "aliases",
    metadata,
    Column("model_id", ForeignKey("models.id"), primary_key=True),
    Column("alias", String(64), primary_key=True),
    Column("version_id", ForeignKey("versions.id"), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    #: only a caller with `manage` on the model moves or removes a protected alias
    Column("protected", Boolean, nullable=False, server_default=false()),
)


def now() -> datetime:
    """The current UTC time."""
    return datetime.now(UTC)


def utc(value: datetime) -> datetime:
    """A stored time as aware UTC (SQLite gives naive times back)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def database_url(settings: Settings) -> str:
    """The SQLAlchemy URL: PT2SERDE_DATABASE_URL (PostgreSQL through psycopg 3) or SQLite."""
    if not settings.database_url:
        return f"sqlite:///{(settings.data_dir / SQLITE_FILE).resolve()}"
    url = make_url(settings.database_url)
    if url.drivername in ("postgresql", "postgres", "postgresql+psycopg"):
        return url.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    if url.drivername == "sqlite":
        return url.render_as_string(hide_password=False)
    raise RegistryFailure(
        "registry-unavailable",
        f"PT2SERDE_DATABASE_URL must be a postgresql:// or sqlite:// URL, not {url.drivername}://",
    )


def _sqlite_engine(url: str) -> Engine:
    engine = create_engine(
        url, connect_args={"timeout": _SQLITE_BUSY_S, "check_same_thread": False}
    )

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _: Any) -> None:
        # pysqlite's own implicit BEGIN would defeat BEGIN IMMEDIATE
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        # FULL: a commit is durable when it returns, not only consistent
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: Connection) -> None:
        write = connection.get_execution_options().get(_WRITE_OPTION, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


class Database:
    """An engine with read and write transactions and the migrations applied."""

    def __init__(self, settings: Settings) -> None:
        url = database_url(settings)
        if url.startswith("sqlite"):
            settings.data_dir.mkdir(parents=True, exist_ok=True)
            self.engine = _sqlite_engine(url)
        else:
            self.engine = create_engine(url, pool_pre_ping=True)
        self.postgresql = self.engine.dialect.name == "postgresql"

    def close(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A read transaction."""
        with _unavailable(), self.engine.connect() as connection, connection.begin():
            yield connection

    @contextmanager
    def write(self, blobs: BlobLock = "none") -> Iterator[Connection]:
        """A write transaction, serialized with other writers as the module docstring says."""
        with _unavailable(), self.engine.connect() as connection:
            connection.execution_options(**{_WRITE_OPTION: True})
            with connection.begin():
                if self.postgresql and blobs != "none":
                    shared = "_shared" if blobs == "shared" else ""
                    connection.execute(
                        text(f"SELECT pg_advisory_xact_lock{shared}(:key)"), {"key": _BLOB_LOCK}
                    )
                yield connection

    def migrate(self) -> None:
        """Bring the schema to the newest migration (one process at a time)."""
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        with self.write() as connection:
            if self.postgresql:
                connection.execute(
                    text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK}
                )
            config.attributes["connection"] = connection
            command.upgrade(config, "head")


@contextmanager
def _unavailable() -> Iterator[None]:
    """Connection-level database errors as registry-unavailable (503); others are bugs."""
    try:
        yield
    except (exc.OperationalError, exc.InterfaceError) as error:
        raise RegistryFailure(
            "registry-unavailable", f"the registry database cannot be used: {error.orig}"
        ) from error
    except exc.TimeoutError as error:
        raise RegistryFailure(
            "registry-unavailable", f"no database connection came free in time: {error}"
        ) from error
