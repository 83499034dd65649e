"""The model registry: numbered immutable versions of named models, aliases, tags, blobs.

A version becomes visible in one transaction, after its blobs (the .pt2 and its canonical
document) are fsynced in the blob store; a crash before that commit leaves at most blobs that
no version refers to, which `cleanup` removes (it runs whenever a `Registry` opens).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Literal

from sqlalchemy import Connection, Row, delete, func, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite

from app import operations as ops
from app.archive import open_archive
from app.registry.blobs import BlobStore, Staged, is_digest
from app.registry.db import Database, aliases, models, now, tags, utc, versions
from app.registry.errors import RegistryFailure
from app.registry.ingest import Candidate, prepare
from app.registry.records import (
    AliasInfo,
    CleanupReport,
    ModelInfo,
    ModelPage,
    Pushed,
    VersionDigests,
    VersionInfo,
    VersionPage,
)
from app.registry.summary import Summary
from app.settings import Settings

Content = Literal["archive", "canonical"]
BlobKind = Literal["archive", "canonical"]

_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_ALIAS = re.compile(r"[A-Za-z][A-Za-z0-9._-]{0,63}")
_TAG_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}")
#: a version reference naming the newest version not deleted (never an alias).
LATEST = "latest"
MAX_TAG_VALUE = 4096
MAX_REASON = 2000
MAX_PAGE = 1000


def _check(pattern: re.Pattern[str], value: str, what: str) -> str:
    if pattern.fullmatch(value) is None:
        raise RegistryFailure(
            "invalid-name", f"{value!r} is not a valid {what} (allowed: {pattern.pattern})"
        )
    return value


def check_model_name(name: str) -> str:
    """`name` if it is a valid model name, else invalid-name."""
    return _check(_MODEL_NAME, name, "model name")


def check_alias(alias: str) -> str:
    """`alias` if it is a valid alias (a letter first, so never a version number)."""
    _check(_ALIAS, alias, "alias")
    if alias == LATEST:
        raise RegistryFailure("invalid-name", f"{LATEST!r} is reserved for the newest version")
    return alias


#: version numbers are 32-bit integers in the database.
MAX_VERSION = 2**31 - 1


def check_text(value: str, what: str, limit: int) -> str:
    """`value` if it is 1 to `limit` characters a database can store (no NUL, valid UTF-8)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise RegistryFailure("invalid-name", f"the {what} is not valid UTF-8") from None
    if not value.strip() or len(value) > limit or "\x00" in value:
        raise RegistryFailure(
            "invalid-name", f"give a {what} of 1 to {limit} characters, without NUL"
        )
    return value


def version_number(ref: str) -> int | None:
    """The version number `ref` spells (past MAX_VERSION: MAX_VERSION + 1), None if it is not a
    number."""
    if not (ref.isascii() and ref.isdigit()):
        return None
    # int() refuses over 4300 digits, and no version is that long: never parse one that is
    digits = ref.lstrip("0") or "0"
    return int(digits) if len(digits) <= len(str(MAX_VERSION)) else MAX_VERSION + 1


def _live() -> Any:
    return versions.c.deleted_at.is_(None)


class Registry:
    """The registry over one database and one blob directory; safe to share between threads."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.blobs = BlobStore(settings.data_dir)
        try:
            self.db = Database(settings)
            try:
                self.db.migrate()
                self.cleanup()
            except BaseException:
                self.db.close()
                raise
        except BaseException:
            self.blobs.close()
            raise

    def close(self) -> None:
        """Release the database and this process's staging directory."""
        self.db.close()
        self.blobs.close()

    # ------------------------------------------------------------ writes

    def prepare(self, path: Path, runner: ops.TorchRunner, model: str | None = None) -> Candidate:
        """Vet an uploaded .pt2 and stage the archive this registry would serve for it."""
        served = self.blobs.stage()
        try:
            return prepare(path, self.settings, runner, served, model)
        except BaseException:
            served.discard()
            raise

    def push(self, name: str, candidate: Candidate) -> Pushed:
        """Store a validated program as the model's next version, or return the live version
        that already has its program digest (whose served bytes stay as they are: both were
        written by us from proven members). The candidate's archive is placed or discarded."""
        staged = candidate.archive
        canonical: Staged | None = None
        try:
            check_model_name(name)
            canonical = self.blobs.stage_bytes(candidate.canonical)
            if canonical.digest != candidate.digests.graph:
                raise AssertionError("the canonical bytes do not hash to the graph digest")
            with self.db.write(blobs="shared") as conn:
                model_id, last = self._lock_model(conn, name)
                existing = conn.execute(
                    select(versions.c.version).where(
                        versions.c.model_id == model_id,
                        versions.c.program_digest == candidate.digests.program,
                        _live(),
                    )
                ).scalar()
                number = existing
                if existing is None:
                    number = last + 1
                    self._insert(conn, model_id, number, staged, canonical, candidate)
            return Pushed(
                version=self.version(name, str(number)),
                created=existing is None,
                warnings=candidate.warnings,
            )
        finally:
            if canonical is not None:
                canonical.discard()
            staged.discard()

    def _lock_model(self, conn: Connection, name: str) -> tuple[int, int]:
        """The model's row, created if new, locked until the transaction ends."""
        dialect = postgresql if self.db.postgresql else sqlite
        conn.execute(
            dialect.insert(models)
            .values(name=name, last_version=0, created_at=now())
            .on_conflict_do_nothing(index_elements=["name"])
        )
        row = conn.execute(
            select(models.c.id, models.c.last_version)
            .where(models.c.name == name)
            .with_for_update()
        ).one()
        return int(row.id), int(row.last_version)

    def _insert(
        self,
        conn: Connection,
        model_id: int,
        number: int,
        staged: Staged,
        canonical: Staged,
        candidate: Candidate,
    ) -> None:
        archive_digest = self.blobs.place(staged)
        self.blobs.place(canonical)
        conn.execute(update(models).where(models.c.id == model_id).values(last_version=number))
        conn.execute(
            insert(versions).values(
                model_id=model_id,
                version=number,
                program_digest=candidate.digests.program,
                graph_digest=candidate.digests.graph,
                weights_digest=candidate.digests.weights,
                archive_digest=archive_digest,
                archive_size=staged.size,
                archive_model=candidate.archive_model,
                schema_version=candidate.schema_version,
                min_schema_version=candidate.min_schema_version,
                readable_by=candidate.readable_by,
                summary=candidate.summary.model_dump(mode="json"),
                created_at=now(),
            )
        )

    def set_alias(self, name: str, alias: str, version: int) -> AliasInfo:
        """Point `alias` at a live version (creating or moving it)."""
        check_alias(alias)
        with self.db.write() as conn:
            model = self._model(conn, name)
            row = self._live_version(conn, model, str(version))
            dialect = postgresql if self.db.postgresql else sqlite
            stamp = now()
            conn.execute(
                dialect.insert(aliases)
                .values(model_id=model.id, alias=alias, version_id=row.id, updated_at=stamp)
                .on_conflict_do_update(
                    index_elements=["model_id", "alias"],
                    set_={"version_id": row.id, "updated_at": stamp},
                )
            )
        return AliasInfo(model=name, alias=alias, version=row.version, updated_at=stamp)

    def delete_alias(self, name: str, alias: str) -> None:
        """Remove an alias."""
        check_alias(alias)
        with self.db.write() as conn:
            model = self._model(conn, name)
            gone = conn.execute(
                delete(aliases).where(aliases.c.model_id == model.id, aliases.c.alias == alias)
            )
            if gone.rowcount == 0:
                raise RegistryFailure("alias-not-found", f"{name} has no alias {alias!r}")

    def set_tag(self, name: str, ref: str, key: str, value: str) -> VersionInfo:
        """Set a free-form tag on a live version."""
        _check(_TAG_KEY, key, "tag key")
        check_text(value, "tag value", MAX_TAG_VALUE)
        with self.db.write() as conn:
            row = self._live_version(conn, self._model(conn, name), ref)
            dialect = postgresql if self.db.postgresql else sqlite
            stamp = now()
            conn.execute(
                dialect.insert(tags)
                .values(version_id=row.id, key=key, value=value, updated_at=stamp)
                .on_conflict_do_update(
                    index_elements=["version_id", "key"], set_={"value": value, "updated_at": stamp}
                )
            )
        return self.version(name, str(row.version))

    def delete_tag(self, name: str, ref: str, key: str) -> VersionInfo:
        """Remove a tag from a live version."""
        _check(_TAG_KEY, key, "tag key")
        with self.db.write() as conn:
            row = self._live_version(conn, self._model(conn, name), ref)
            gone = conn.execute(delete(tags).where(tags.c.version_id == row.id, tags.c.key == key))
            if gone.rowcount == 0:
                raise RegistryFailure("tag-not-found", f"{name} v{row.version} has no tag {key!r}")
        return self.version(name, str(row.version))

    def delete_version(self, name: str, ref: str, reason: str) -> VersionInfo:
        """Soft-delete a version with a reason; its aliases go, its blobs are collected once no
        live version refers to them."""
        check_text(reason, "reason", MAX_REASON)
        with self.db.write() as conn:
            row = self._live_version(conn, self._model(conn, name), ref)
            marked = conn.execute(
                update(versions)
                .where(versions.c.id == row.id, _live())
                .values(deleted_at=now(), deleted_reason=reason)
            )
            if marked.rowcount == 0:
                raise RegistryFailure("version-deleted", f"{name} v{row.version} is deleted")
            conn.execute(delete(aliases).where(aliases.c.version_id == row.id))
        self.collect([row.archive_digest, row.graph_digest])
        return self.version(name, str(row.version))

    def collect(self, digests: Iterable[str] | None = None) -> list[str]:
        """Remove blobs (these, or every stored one) that no live version refers to."""
        with self.db.write(blobs="exclusive") as conn:
            wanted = sorted(set(digests)) if digests is not None else list(self.blobs.digests())
            referenced = self._referenced(conn, wanted if digests is not None else None)
            removed = [d for d in wanted if d not in referenced and self.blobs.exists(d)]
            for digest in removed:
                self.blobs.remove(digest)
        return removed

    def _referenced(self, conn: Connection, among: Sequence[str] | None) -> set[str]:
        found: set[str] = set()
        for column in (versions.c.archive_digest, versions.c.graph_digest):
            query = select(column).where(_live())
            if among is not None:
                query = query.where(column.in_(among))
            found.update(conn.execute(query.distinct()).scalars())
        return found

    def cleanup(self) -> CleanupReport:
        """Remove what interrupted pushes left: staging of dead processes, unreferenced blobs,
        anything under blobs/ that is not a blob."""
        staging = self.blobs.sweep()
        blobs = self.collect()
        strays = self.blobs.strays()
        for path in strays:
            self.blobs.remove_path(path)
        return CleanupReport(
            blobs=blobs,
            strays=[p.relative_to(self.blobs.blob_dir).as_posix() for p in strays],
            staging=staging,
        )

    # ------------------------------------------------------------ reads

    def models(self, limit: int = 100, after: str | None = None) -> ModelPage:
        """A page of models in name order."""
        limit = max(1, min(limit, MAX_PAGE))
        if after is not None:
            check_text(after, "paging cursor", 1000)
        with self.db.read() as conn:
            query = select(models).order_by(models.c.name).limit(limit + 1)
            if after is not None:
                query = query.where(models.c.name > after)
            rows = list(conn.execute(query))
            page = rows[:limit]
            ids = [r.id for r in page]
            stats = {
                r.model_id: r
                for r in conn.execute(
                    select(
                        versions.c.model_id,
                        func.max(versions.c.version).label("latest"),
                        func.count().label("count"),
                    )
                    .where(versions.c.model_id.in_(ids), _live())
                    .group_by(versions.c.model_id)
                )
            }
            named = self._aliases(conn, ids)
        infos = [
            ModelInfo(
                name=r.name,
                created_at=utc(r.created_at),
                latest_version=stats[r.id].latest if r.id in stats else None,
                version_count=stats[r.id].count if r.id in stats else 0,
                aliases=named.get(r.id, {}),
            )
            for r in page
        ]
        return ModelPage(models=infos, next=page[-1].name if len(rows) > limit else None)

    def model(self, name: str) -> ModelInfo:
        """One model."""
        check_model_name(name)
        with self.db.read() as conn:
            row = self._model(conn, name)
            stats = conn.execute(
                select(func.max(versions.c.version), func.count()).where(
                    versions.c.model_id == row.id, _live()
                )
            ).one()
            named = self._aliases(conn, [row.id]).get(row.id, {})
        return ModelInfo(
            name=row.name,
            created_at=utc(row.created_at),
            latest_version=stats[0],
            version_count=stats[1],
            aliases=named,
        )

    def versions(
        self, name: str, limit: int = 100, after: int | None = None, include_deleted: bool = False
    ) -> VersionPage:
        """A page of a model's versions in number order."""
        limit = max(1, min(limit, MAX_PAGE))
        with self.db.read() as conn:
            model = self._model(conn, name)
            query = (
                select(versions)
                .where(versions.c.model_id == model.id)
                .order_by(versions.c.version)
                .limit(limit + 1)
            )
            if after is not None:
                query = query.where(versions.c.version > min(after, MAX_VERSION))
            if not include_deleted:
                query = query.where(_live())
            rows = list(conn.execute(query))
            infos = self._infos(conn, name, rows[:limit])
        return VersionPage(versions=infos, next=infos[-1].version if len(rows) > limit else None)

    def version(self, name: str, ref: str) -> VersionInfo:
        """A version's metadata, deleted or not; `ref` is a number, an alias or ``latest``."""
        with self.db.read() as conn:
            row = self._resolve(conn, self._model(conn, name), ref)
            return self._infos(conn, name, [row])[0]

    def open_content(self, name: str, ref: str, content: Content) -> tuple[VersionInfo, BinaryIO]:
        """A live version's metadata and its .pt2 or canonical document, opened for reading."""
        info = self.version(name, ref)
        if info.deleted_at is not None:
            raise RegistryFailure(
                "version-deleted", f"{name} v{info.version} is deleted: {info.deleted_reason}"
            )
        digest = info.digests.archive if content == "archive" else info.digests.graph
        try:
            return info, self.blobs.open(digest)
        except FileNotFoundError:
            again = self.version(name, str(info.version))
            if again.deleted_at is not None:
                raise RegistryFailure(
                    "version-deleted", f"{name} v{info.version} was deleted meanwhile"
                ) from None
            raise RegistryFailure(
                "registry-unavailable", f"the blob {digest} of {name} v{info.version} is missing"
            ) from None

    @contextmanager
    def source(self, name: str, ref: str) -> Iterator[tuple[VersionInfo, ops.Source]]:
        """A live version's metadata and its archive opened as an operations source."""
        info, handle = self.open_content(name, ref, "archive")
        with handle, open_archive(handle, self.settings.limits) as archive:
            yield info, ops.Source(dict(archive.documents), archive)

    def open_blob(self, digest: str) -> tuple[BlobKind, BinaryIO]:
        """A blob a live version refers to, with what it is."""
        if not is_digest(digest):
            raise RegistryFailure("blob-not-found", f"{digest!r} is not a sha256 hex digest")
        with self.db.read() as conn:
            row = conn.execute(
                select(versions.c.archive_digest)
                .where(
                    or_(versions.c.archive_digest == digest, versions.c.graph_digest == digest),
                    _live(),
                )
                .limit(1)
            ).first()
        if row is None:
            raise RegistryFailure("blob-not-found", f"no version refers to the blob {digest}")
        kind: BlobKind = "archive" if row.archive_digest == digest else "canonical"
        try:
            return kind, self.blobs.open(digest)
        except FileNotFoundError:
            raise RegistryFailure("blob-not-found", f"the blob {digest} was collected") from None

    # ------------------------------------------------------------ helpers

    def _model(self, conn: Connection, name: str) -> Row[Any]:
        check_model_name(name)
        row = conn.execute(select(models).where(models.c.name == name)).first()
        if row is None:
            raise RegistryFailure("model-not-found", f"no model named {name!r}")
        return row

    def _resolve(self, conn: Connection, model: Row[Any], ref: str) -> Row[Any]:
        query = select(versions).where(versions.c.model_id == model.id)
        number = version_number(ref)
        if number is not None and number > MAX_VERSION:
            # the database would refuse to compare it with a 32-bit column
            row = None
        elif number is not None:
            row = conn.execute(query.where(versions.c.version == number)).first()
        elif ref == LATEST:
            row = conn.execute(query.where(_live()).order_by(versions.c.version.desc())).first()
        else:
            check_alias(ref)
            row = conn.execute(
                query.join(aliases, aliases.c.version_id == versions.c.id).where(
                    aliases.c.alias == ref
                )
            ).first()
            if row is None:
                raise RegistryFailure("alias-not-found", f"{model.name} has no alias {ref!r}")
        if row is None:
            raise RegistryFailure("version-not-found", f"{model.name} has no version {ref}")
        return row

    def _live_version(self, conn: Connection, model: Row[Any], ref: str) -> Row[Any]:
        row = self._resolve(conn, model, ref)
        if row.deleted_at is not None:
            raise RegistryFailure(
                "version-deleted", f"{model.name} v{row.version} is deleted: {row.deleted_reason}"
            )
        return row

    def _aliases(self, conn: Connection, model_ids: list[int]) -> dict[int, dict[str, int]]:
        found: dict[int, dict[str, int]] = {}
        for r in conn.execute(
            select(aliases.c.model_id, aliases.c.alias, versions.c.version)
            .join(versions, versions.c.id == aliases.c.version_id)
            .where(aliases.c.model_id.in_(model_ids))
            .order_by(aliases.c.alias)
        ):
            found.setdefault(r.model_id, {})[r.alias] = r.version
        return found

    def _infos(self, conn: Connection, name: str, rows: Sequence[Row[Any]]) -> list[VersionInfo]:
        ids = [r.id for r in rows]
        tagged: dict[int, dict[str, str]] = {}
        for t in conn.execute(
            select(tags.c.version_id, tags.c.key, tags.c.value)
            .where(tags.c.version_id.in_(ids))
            .order_by(tags.c.key)
        ):
            tagged.setdefault(t.version_id, {})[t.key] = t.value
        named: dict[int, list[str]] = {}
        for a in conn.execute(
            select(aliases.c.version_id, aliases.c.alias)
            .where(aliases.c.version_id.in_(ids))
            .order_by(aliases.c.alias)
        ):
            named.setdefault(a.version_id, []).append(a.alias)
        return [
            VersionInfo(
                model=name,
                version=r.version,
                digests=VersionDigests(
                    program=r.program_digest,
                    graph=r.graph_digest,
                    weights=r.weights_digest,
                    archive=r.archive_digest,
                ),
                archive_size=r.archive_size,
                archive_model=r.archive_model,
                schema_version=r.schema_version,
                min_schema_version=r.min_schema_version,
                readable_by=r.readable_by,
                summary=Summary.model_validate(r.summary),
                created_at=utc(r.created_at),
                deleted_at=utc(r.deleted_at) if r.deleted_at is not None else None,
                deleted_reason=r.deleted_reason,
                tags=tagged.get(r.id, {}),
                aliases=named.get(r.id, []),
            )
            for r in rows
        ]
