"""Identities and permissions: API tokens, per-model grants, the organization's default.

A token is 256 random bits shown once; the database keeps only its sha256. A fast hash is
enough here because the secret is not a password: with 2^256 candidates no guessing speed
finds a preimage, and an unsalted digest lets every request find its token by an indexed
equality lookup instead of trying a slow hash against every row (bcrypt/argon2 earn their
cost only on low-entropy secrets chosen by people).

A model's permissions are grants (`principal` -> read, write or manage; ``*`` is every
authenticated principal). A model nobody has configured (no grant names it) follows the
organization's default (PT2SERDE_DEFAULT_PERMISSION). Admins have manage everywhere.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import get_args

from sqlalchemy import (
    Boolean,
    Column,
    ColumnElement,
    Connection,
    DateTime,
    Index,
    String,
    Table,
    delete,
    exists,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from app.failure import ProblemCode
from app.registry.audit import SYSTEM, Actor, Change, record
from app.registry.db import Database, metadata, models, now, utc, versions
from app.registry.errors import RegistryFailure, blob_not_found
from app.registry.records import Grant, Level, NewToken, TokenInfo
from app.settings import Settings

LEVELS: tuple[Level, ...] = get_args(Level)
#: a grant to this principal applies to every authenticated principal.
EVERYONE = "*"
#: the token row the bootstrap secret (PT2SERDE_ADMIN_TOKEN) is kept under.
BOOTSTRAP_ID = "bootstrap-admin"
#: the principal that row belongs to.
BOOTSTRAP_OWNER = "admin"
#: a prefix that makes a leaked token easy to spot by secret scanners.
TOKEN_PREFIX = "pt2s_"
_PRINCIPAL = re.compile(r"[A-Za-z0-9][A-Za-z0-9@._+-]{0,127}")

api_tokens = Table(
    "api_tokens",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("name", String(128), nullable=False),
    Column("owner", String(128), nullable=False),
    Column("secret_sha256", String(64), nullable=False, unique=True),
    Column("admin", Boolean, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("created_by", String(128), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=True),
    Column("revoked_at", DateTime(timezone=True), nullable=True),
    Index("ix_api_tokens_owner", "owner"),
)

model_permissions = Table(
    "model_permissions",
    metadata,
    #: a model name, configured before or after the model's first push
    Column("model", String(128), primary_key=True),
    Column("principal", String(128), primary_key=True),
    Column("level", String(8), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)


#: a bootstrap admin token shorter than this is refused (no guessable default, unlike a password).
MIN_ADMIN_TOKEN = 32


def admin_secret(settings: Settings) -> str | None:
    """The bootstrap admin token (PT2SERDE_ADMIN_TOKEN or the file PT2SERDE_ADMIN_TOKEN_FILE
    names), None if neither is set; ValueError (one line) if it is unreadable or too short."""
    secret = settings.admin_token.get_secret_value()
    if settings.admin_token_file is not None:
        try:
            secret = settings.admin_token_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as error:
            raise ValueError(f"PT2SERDE_ADMIN_TOKEN_FILE cannot be read: {error}") from None
    if not secret:
        return None
    if len(secret) < MIN_ADMIN_TOKEN:
        raise ValueError(
            f"the admin token must be {MIN_ADMIN_TOKEN} characters or more, got {len(secret)}"
        )
    return secret


def auth_configured(settings: Settings) -> bool:
    """Whether any way to authenticate is configured (then every registry call needs one)."""
    return bool(
        settings.admin_token.get_secret_value()
        or settings.admin_token_file
        or settings.identity_header
    )


class AccessFailure(RegistryFailure):
    """Missing or insufficient credentials (401/403), with the headers the answer carries."""

    def __init__(self, code: ProblemCode, message: str) -> None:
        super().__init__(code, message)
        self.headers = (
            {"WWW-Authenticate": 'Bearer realm="pt2serde"'} if code != "forbidden" else {}
        )


@dataclass(frozen=True)
class Identity:
    """An authenticated caller: a principal, the token it used, whether it is an admin."""

    principal: str
    token_id: str | None = None
    admin: bool = False


#: every caller when no way to authenticate is configured (loopback only): today's open registry.
ANONYMOUS = Identity("anonymous", None, admin=True)


def proxied_identity(name: str, admin_users: tuple[str, ...]) -> Identity:
    """The identity a trusted proxy's user name stands for; unauthenticated when the name is
    malformed or is one of the service's own principals (anonymous, system, and the bootstrap
    token's owner unless the operator made that name an admin), which would otherwise let a
    user of that name act in the audit log as the service, or list and revoke the bootstrap
    admin token as its owner."""
    admin = name in admin_users
    reserved = {ANONYMOUS.principal, SYSTEM.principal} | ({BOOTSTRAP_OWNER} - set(admin_users))
    if _PRINCIPAL.fullmatch(name) is None or name in reserved:
        shown = name[:64]
        raise AccessFailure("unauthenticated", f"the proxy's user name {shown!r} is not accepted")
    return Identity(name, None, admin)


def check_principal(principal: str) -> str:
    """`principal` if it is a valid user name (or ``*`` where grants allow it)."""
    if _PRINCIPAL.fullmatch(principal) is None:
        raise RegistryFailure(
            "invalid-name", f"{principal!r} is not a valid principal ({_PRINCIPAL.pattern})"
        )
    return principal


def secret_sha256(secret: str) -> str:
    """The stored form of a token's secret."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def at_least(level: Level, needed: Level) -> bool:
    """Whether `level` includes `needed`."""
    return LEVELS.index(level) >= LEVELS.index(needed)


def _token(row: object) -> TokenInfo:
    info = TokenInfo.model_validate(row, from_attributes=True)
    return info.model_copy(
        update={
            "created_at": utc(info.created_at),
            "expires_at": utc(info.expires_at) if info.expires_at else None,
            "revoked_at": utc(info.revoked_at) if info.revoked_at else None,
        }
    )


class Access:
    """Tokens and grants over the registry's database; every change is audited."""

    def __init__(self, db: Database, default: Level) -> None:
        self.db = db
        self.default = default

    # ------------------------------------------------------------ tokens

    def bootstrap(self, secret: str | None) -> None:
        """Keep the bootstrap admin token's row matching `secret` (rotating it replaces the
        old one), so it authenticates, and is audited and rate-limited, like any other; with no
        secret configured any more, the row is revoked (a proxy identity setup keeps no
        forgotten admin token working)."""
        if secret is None:
            with self.db.write() as conn:
                revoked = conn.execute(
                    update(api_tokens)
                    .where(api_tokens.c.id == BOOTSTRAP_ID, api_tokens.c.revoked_at.is_(None))
                    .values(revoked_at=now())
                )
                if revoked.rowcount:
                    target = f"tokens/{BOOTSTRAP_ID}"
                    record(conn, Change(SYSTEM, "token.revoke", target, after={"revoked": True}))
            return
        digest = secret_sha256(secret)
        dialect = postgresql if self.db.postgresql else sqlite
        with self.db.write() as conn:
            conn.execute(
                dialect.insert(api_tokens)
                .values(
                    id=BOOTSTRAP_ID,
                    name="bootstrap admin (PT2SERDE_ADMIN_TOKEN)",
                    owner=BOOTSTRAP_OWNER,
                    secret_sha256=digest,
                    admin=True,
                    created_at=now(),
                    created_by="system",
                )
                .on_conflict_do_update(
                    index_elements=["id"], set_={"secret_sha256": digest, "revoked_at": None}
                )
            )

    def authenticate(self, secret: str) -> Identity:
        """The identity a bearer secret stands for; 401 codes when it is unknown, expired or
        revoked."""
        with self.db.read() as conn:
            row = conn.execute(
                select(api_tokens).where(api_tokens.c.secret_sha256 == secret_sha256(secret))
            ).first()
        if row is None:
            raise AccessFailure("unauthenticated", "the bearer token is not known")
        if row.revoked_at is not None:
            raise AccessFailure("token-revoked", f"the token {row.id} was revoked")
        if row.expires_at is not None and utc(row.expires_at) <= now():
            raise AccessFailure("token-expired", f"the token {row.id} expired")
        return Identity(row.owner, row.id, bool(row.admin))

    def create_token(
        self, actor: Actor, owner: str, name: str, admin: bool, expires_at: datetime | None
    ) -> NewToken:
        """A new token for `owner`; its secret is in this answer and nowhere else. A token made
        with an expiring token expires no later than it (asked for later or never, it gets the
        parent's expiry), so a leaked short-lived token cannot mint itself a lasting one."""
        check_principal(owner)
        expires_at = self._no_later_than_parent(actor, expires_at)
        secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
        values = {
            "id": "tok_" + secrets.token_hex(8),
            "name": name,
            "owner": owner,
            "admin": admin,
            "created_at": now(),
            "created_by": actor.principal,
            "expires_at": expires_at,
            "revoked_at": None,
        }
        with self.db.write() as conn:
            conn.execute(insert(api_tokens).values(**values, secret_sha256=secret_sha256(secret)))
            info = TokenInfo.model_validate(values)
            after = info.model_dump(mode="json")
            record(conn, Change(actor, "token.create", f"tokens/{info.id}", after=after))
        return NewToken(**info.model_dump(), secret=secret)

    def _no_later_than_parent(self, actor: Actor, expires_at: datetime | None) -> datetime | None:
        if actor.token_id is None:
            return expires_at
        with self.db.read() as conn:
            parent = conn.execute(
                select(api_tokens.c.expires_at).where(api_tokens.c.id == actor.token_id)
            ).scalar()
        if parent is None:
            return expires_at
        limit = utc(parent)
        return limit if expires_at is None or utc(expires_at) > limit else expires_at

    def tokens(self, owner: str | None = None) -> list[TokenInfo]:
        """Tokens (of one owner, or all), newest first."""
        query = select(api_tokens).order_by(api_tokens.c.created_at.desc(), api_tokens.c.id)
        if owner is not None:
            query = query.where(api_tokens.c.owner == owner)
        with self.db.read() as conn:
            return [_token(row) for row in conn.execute(query)]

    def token(self, token_id: str) -> TokenInfo:
        """One token's record."""
        with self.db.read() as conn:
            row = conn.execute(select(api_tokens).where(api_tokens.c.id == token_id)).first()
        if row is None:
            raise RegistryFailure("token-not-found", f"no token {token_id!r}")
        return _token(row)

    def revoke_token(self, actor: Actor, token_id: str) -> TokenInfo:
        """Revoke a token (it stays listed); revoking it again changes nothing."""
        with self.db.write() as conn:
            row = conn.execute(
                select(api_tokens).where(api_tokens.c.id == token_id).with_for_update()
            ).first()
            if row is None:
                raise RegistryFailure("token-not-found", f"no token {token_id!r}")
            before = _token(row)
            if before.revoked_at is not None:
                return before
            stamp = now()
            conn.execute(
                update(api_tokens).where(api_tokens.c.id == token_id).values(revoked_at=stamp)
            )
            after = before.model_copy(update={"revoked_at": stamp})
            record(
                conn,
                Change(
                    actor,
                    "token.revoke",
                    f"tokens/{token_id}",
                    before=before.model_dump(mode="json"),
                    after=after.model_dump(mode="json"),
                ),
            )
        return after

    # ------------------------------------------------------------ permissions

    def level(self, identity: Identity, model: str) -> Level:
        """What `identity` may do with `model`."""
        if identity.admin:
            return "manage"
        with self.db.read() as conn:
            return self._level(conn, identity, model)

    def _level(self, conn: Connection, identity: Identity, model: str) -> Level:
        rows = conn.execute(
            select(model_permissions.c.principal, model_permissions.c.level).where(
                model_permissions.c.model == model
            )
        ).all()
        if not rows:
            return self.default
        mine: list[Level] = [r.level for r in rows if r.principal in (identity.principal, EVERYONE)]
        return max(mine, key=LEVELS.index, default="none")

    def lost_standing(
        self,
        principal: str | None,
        token_id: str | None,
        model: str | None,
        admin_users: tuple[str, ...],
    ) -> str | None:
        """Why what `principal` made with `token_id` (a webhook subscription to `model`, None
        for every model's events) may no longer act for them, or None while it may: the token
        revoked, expired or gone; manage on the model (admin, for every model) lost. What the
        library or the open registry made stands."""
        if principal is None or principal in (SYSTEM.principal, ANONYMOUS.principal):
            return None
        admin = principal in admin_users
        with self.db.read() as conn:
            if token_id is not None:
                token = conn.execute(select(api_tokens).where(api_tokens.c.id == token_id)).first()
                if token is None:
                    return f"its creator's token {token_id} is gone"
                if token.revoked_at is not None:
                    return f"its creator's token {token_id} was revoked"
                if token.expires_at is not None and utc(token.expires_at) <= now():
                    return f"its creator's token {token_id} expired"
                admin = bool(token.admin)
            if admin:
                return None
            if model is None:
                return f"{principal} is not an admin, which every model's events need"
            if not at_least(self._level(conn, Identity(principal, token_id), model), "manage"):
                return f"{principal} no longer has manage on {model!r}"
        return None

    def may_read(self, identity: Identity, name: ColumnElement[str]) -> ColumnElement[bool] | None:
        """`_level`'s rule as SQL on a column of model names: whether `identity` may read the
        model (None for an admin, who reads all), so listings filter before they page and a
        page's `next` says nothing of models the caller cannot see."""
        if identity.admin:
            return None
        grant = model_permissions.c
        granted = exists().where(
            grant.model == name,
            grant.principal.in_((identity.principal, EVERYONE)),
            grant.level.in_([level for level in LEVELS if at_least(level, "read")]),
        )
        if not at_least(self.default, "read"):
            return granted
        return or_(~exists().where(grant.model == name), granted)

    def ensure_blob(self, identity: Identity, digest: str) -> None:
        """blob-not-found, as for an unknown digest, unless `identity` may read a model a live
        version of which refers to the blob (an unknown digest passes: the blob lookup answers
        it the same way)."""
        if identity.admin:
            return
        with self.db.read() as conn:
            names = list(
                conn.execute(
                    select(models.c.name)
                    .join(versions, versions.c.model_id == models.c.id)
                    .where(
                        or_(versions.c.archive_digest == digest, versions.c.graph_digest == digest),
                        versions.c.deleted_at.is_(None),
                    )
                    .distinct()
                ).scalars()
            )
            if names and not any(at_least(self._level(conn, identity, n), "read") for n in names):
                raise blob_not_found(digest)

    def grants(self, model: str) -> list[Grant]:
        """A model's grants, by principal."""
        with self.db.read() as conn:
            rows = conn.execute(
                select(model_permissions)
                .where(model_permissions.c.model == model)
                .order_by(model_permissions.c.principal)
            )
            return [
                Grant(
                    model=r.model,
                    principal=r.principal,
                    level=r.level,
                    updated_at=utc(r.updated_at),
                )
                for r in rows
            ]

    def grant(self, actor: Actor, model: str, principal: str, level: Level) -> Grant:
        """Set `principal`'s level on `model` (``none`` is a grant too: it denies the default)."""
        if principal != EVERYONE:
            check_principal(principal)
        stamp = now()
        dialect = postgresql if self.db.postgresql else sqlite
        with self.db.write() as conn:
            before = self._grant(conn, model, principal)
            conn.execute(
                dialect.insert(model_permissions)
                .values(model=model, principal=principal, level=level, updated_at=stamp)
                .on_conflict_do_update(
                    index_elements=["model", "principal"],
                    set_={"level": level, "updated_at": stamp},
                )
            )
            record(
                conn,
                Change(
                    actor,
                    "permission.set",
                    f"models/{model}/permissions/{principal}",
                    model=model,
                    before=before,
                    after={"level": level},
                ),
            )
        return Grant(model=model, principal=principal, level=level, updated_at=stamp)

    def revoke(self, actor: Actor, model: str, principal: str) -> None:
        """Remove `principal`'s grant on `model`."""
        with self.db.write() as conn:
            before = self._grant(conn, model, principal)
            if before is None:
                raise RegistryFailure(
                    "permission-not-found", f"{principal!r} has no grant on {model!r}"
                )
            conn.execute(
                delete(model_permissions).where(
                    model_permissions.c.model == model, model_permissions.c.principal == principal
                )
            )
            record(
                conn,
                Change(
                    actor,
                    "permission.delete",
                    f"models/{model}/permissions/{principal}",
                    model=model,
                    before=before,
                ),
            )

    def _grant(self, conn: Connection, model: str, principal: str) -> dict[str, str] | None:
        level = conn.execute(
            select(model_permissions.c.level)
            .where(model_permissions.c.model == model, model_permissions.c.principal == principal)
            .with_for_update()
        ).scalar()
        return None if level is None else {"level": level}
