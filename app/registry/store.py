"""The model registry: numbered immutable versions of named models, aliases, tags, blobs.

A version becomes visible in one transaction, after its blobs (the .pt2 and its canonical
document) are fsynced in the blob store; a crash before that commit leaves at most blobs that
no version refers to, which `cleanup` removes (it runs whenever a `Registry` opens).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, BinaryIO, Literal

from sqlalchemy import Connection, Row, delete, func, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite

from app import operations as ops
from app.archive import open_archive
from app.archive.zipread import json_members_bytes
from app.registry import labels, objects, outbox, quotas, storing, verification
from app.registry.audit import SYSTEM, Actor, Change, record
from app.registry.auth import Access, Identity, admin_secret
from app.registry.blobs import BlobStore, is_digest
from app.registry.db import Database, aliases, models, now, tags, utc, versions
from app.registry.encoding import open_stored
from app.registry.errors import RegistryFailure, blob_not_found
from app.registry.gc import GcReport, Periodic, collect
from app.registry.ingest import Candidate
from app.registry.names import (
    LATEST,
    MAX_DESCRIPTION,
    MAX_PAGE,
    MAX_REASON,
    MAX_TAG_VALUE,
    MAX_VERSION,
    check_alias,
    check_model_name,
    check_tag_key,
    check_text,
    version_number,
)
from app.registry.records import (
    AliasInfo,
    CleanupReport,
    ModelInfo,
    ModelPage,
    Pushed,
    SearchPage,
    Verified,
    VersionDigests,
    VersionInfo,
    VersionPage,
)
from app.registry.search import SearchQuery, find, index_namespaces
from app.registry.stored import StoredArchive
from app.registry.summary import Summary
from app.settings import Settings

Content = Literal["archive", "canonical"]
BlobKind = Literal["archive", "canonical"]


def _target(name: str, version: int) -> str:
    return f"models/{name}/versions/{version}"


def _live() -> Any:
    return versions.c.deleted_at.is_(None)


class Registry:
    """The registry over one database and one blob directory; safe to share between threads."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.quotas = quotas.Quotas.of(settings)
        self.blobs = BlobStore(settings)
        self._periodic: Periodic | None = None
        try:
            self.db = Database(settings)
            self.layouts = objects.Layouts(self.db)
            self.access = Access(self.db, settings.default_permission)
            try:
                self.db.migrate()
                self.access.bootstrap(admin_secret(settings))
                self.cleanup()
            except BaseException:
                self.db.close()
                raise
        except BaseException:
            self.blobs.close()
            raise
        if settings.gc_interval_s > 0:
            self._periodic = Periodic(self.db, self.blobs, settings)

    def close(self) -> None:
        """Release the database and this process's staging directory."""
        if self._periodic is not None:
            self._periodic.stop()
        self.db.close()
        self.blobs.close()

    # ------------------------------------------------------------ writes

    def push(
        self, name: str, candidate: Candidate, actor: Actor = SYSTEM, parent: int | None = None
    ) -> Pushed:
        """Store a validated program as the model's next version, or return the live version
        that already has its program digest (whose served bytes stay as they are: both were
        written by us from proven members). The candidate's archive is stored as its skeleton
        and tensor objects (each stored once, whoever pushed it first; encoded, and as deltas
        against the tensors of version `parent`, by default the model's latest), or
        discarded."""
        staged = candidate.archive
        parts: storing.Parts | None = None
        try:
            check_model_name(name)
            canonical = self.blobs.stage_bytes(candidate.canonical)
            if canonical.digest != candidate.vetted.digests.graph:
                canonical.discard()
                raise AssertionError("the canonical bytes do not hash to the graph digest")
            coding = self._coding(name, parent) if self.settings.store_encode else None
            parts = storing.stage_parts(self.blobs, staged, canonical, self.settings.limits, coding)
            storing.upload(self.db, self.blobs, parts)
            with self.db.write(blobs="shared") as conn:
                model_id, last = self._lock_model(conn, name)
                existing = conn.execute(
                    select(versions.c.version).where(
                        versions.c.model_id == model_id,
                        versions.c.program_digest == candidate.vetted.digests.program,
                        _live(),
                    )
                ).scalar()
                number = existing
                if existing is not None and isinstance(candidate.verification, Verified):
                    # torch built the program this time: a version stored unverified now is not
                    self._verify(conn, name, str(existing), candidate.verification, actor)
                if existing is None:
                    number = last + 1
                    quotas.check_push(conn, self.quotas, model_id, name, actor, staged.size)
                    storing.commit(conn, self.blobs, parts)
                    self._insert(conn, model_id, number, parts, candidate, actor)
                    after = {
                        "version": number,
                        "program_digest": candidate.vetted.digests.program,
                        "verification": candidate.verification.model_dump(mode="json"),
                    }
                    self._record(
                        conn,
                        Change(actor, "version.push", _target(name, number), name, after=after),
                    )
            # committed: the objects are stored, their staged copies are of no more use
            parts.discard()
            return Pushed(
                version=self.version(name, str(number)),
                created=existing is None,
                warnings=candidate.vetted.warnings,
            )
        finally:
            if parts is not None:
                parts.discard()
            staged.discard()

    def _coding(self, name: str, parent: int | None) -> storing.Coding:
        """How a push to `name` encodes its tensors: against those of version `parent` (an
        error if it is not a live version), by default the latest live one."""
        with self.db.read() as conn:
            query = select(versions.c.archive_digest).join(models).where(models.c.name == name)
            if parent is None:
                query = query.where(_live()).order_by(versions.c.version.desc()).limit(1)
            else:
                query = query.where(versions.c.version == parent, _live())
            archive = conn.execute(query).scalar()
            if archive is None and parent is not None:
                raise RegistryFailure(
                    "version-not-found", f"{name} has no live version {parent} to push onto"
                )
            bases = {} if archive is None else objects.bases_in(conn, archive)
        settings = self.settings
        return storing.Coding(
            settings.store_min_saving,
            settings.store_delta_chain,
            settings.store_zstd_level,
            bases,
            self._known,
        )

    def _known(self, digests: list[str]) -> set[str]:
        with self.db.read() as conn:
            return objects.present(conn, digests)

    def usage(self) -> objects.Usage:
        """The objects the store holds, their raw bytes and the bytes stored for them."""
        with self.db.read() as conn:
            return objects.usage(conn)

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
        parts: storing.Parts,
        candidate: Candidate,
        actor: Actor,
    ) -> None:
        conn.execute(update(models).where(models.c.id == model_id).values(last_version=number))
        version_id = conn.execute(
            insert(versions)
            .values(
                model_id=model_id,
                version=number,
                program_digest=candidate.vetted.digests.program,
                graph_digest=candidate.vetted.digests.graph,
                weights_digest=candidate.vetted.digests.weights,
                archive_digest=parts.archive,
                archive_size=parts.layout.size,
                archive_model=candidate.vetted.archive_model,
                schema_version=candidate.vetted.schema_version,
                min_schema_version=candidate.vetted.min_schema_version,
                readable_by=candidate.vetted.readable_by,
                summary=candidate.vetted.summary.model_dump(mode="json"),
                created_at=now(),
                created_by=actor.principal,
                created_token=actor.token_id,
                **verification.columns(candidate.verification),
            )
            .returning(versions.c.id)
        ).scalar_one()
        index_namespaces(conn, version_id, candidate.vetted.summary.operator_namespaces)

    def verify(self, name: str, ref: str, verified: Verified, actor: Actor = SYSTEM) -> VersionInfo:
        """Record that torch's check built a live version (`verified`: the release that did);
        audited as ``version.verify`` when its state changes."""
        with self.db.write() as conn:
            self._verify(conn, name, ref, verified, actor)
        return self.version(name, ref)

    def _verify(
        self, conn: Connection, name: str, ref: str, verified: Verified, actor: Actor
    ) -> None:
        """`verify` inside the caller's write transaction: nothing changes for a version already
        verified."""
        row = self._live_version(conn, self._model(conn, name, lock=True), ref)
        if row.verified:
            return
        before = verification.of_row(row).model_dump(mode="json")
        conn.execute(
            update(versions).where(versions.c.id == row.id).values(**verification.columns(verified))
        )
        target = _target(name, row.version)
        after = verified.model_dump(mode="json")
        self._record(conn, Change(actor, "version.verify", target, name, before, after))

    def set_alias(
        self,
        name: str,
        alias: str,
        version: int,
        actor: Actor = SYSTEM,
        protected: bool | None = None,
        manage: bool = True,
    ) -> AliasInfo:
        """Point `alias` at a live version (creating or moving it); `protected` marks or unmarks
        it. A protected alias, and the mark itself, need `manage` (the caller says if it has it)."""
        check_alias(alias)
        with self.db.write() as conn:
            model = self._model(conn, name, lock=True)
            row = self._live_version(conn, model, str(version))
            before = labels.alias(conn, model.id, alias)
            labels.guard(model.name, alias, before, manage, marking=protected is not None)
            if before is None:
                quotas.check_alias(conn, self.quotas, model.id, alias)
            keep = bool(before and before["protected"]) if protected is None else protected
            dialect = postgresql if self.db.postgresql else sqlite
            stamp = now()
            values = {"version_id": row.id, "updated_at": stamp, "protected": keep}
            conn.execute(
                dialect.insert(aliases)
                .values(model_id=model.id, alias=alias, **values)
                .on_conflict_do_update(index_elements=["model_id", "alias"], set_=values)
            )
            after = {"version": row.version, "protected": keep}
            target = f"models/{name}/aliases/{alias}"
            self._record(conn, Change(actor, "alias.set", target, name, before, after))
        return AliasInfo(
            model=name, alias=alias, version=row.version, updated_at=stamp, protected=keep
        )

    def delete_alias(
        self, name: str, alias: str, actor: Actor = SYSTEM, manage: bool = True
    ) -> None:
        """Remove an alias (a protected one needs `manage`)."""
        check_alias(alias)
        with self.db.write() as conn:
            model = self._model(conn, name, lock=True)
            before = labels.alias(conn, model.id, alias)
            if before is None:
                raise RegistryFailure("alias-not-found", f"{name} has no alias {alias!r}")
            labels.guard(model.name, alias, before, manage, marking=False)
            conn.execute(
                delete(aliases).where(aliases.c.model_id == model.id, aliases.c.alias == alias)
            )
            target = f"models/{name}/aliases/{alias}"
            self._record(conn, Change(actor, "alias.delete", target, name, before))

    def set_tag(
        self, name: str, ref: str, key: str, value: str, actor: Actor = SYSTEM
    ) -> VersionInfo:
        """Set a free-form tag on a live version."""
        check_tag_key(key)
        check_text(value, "tag value", MAX_TAG_VALUE)
        with self.db.write() as conn:
            row = self._live_version(conn, self._model(conn, name, lock=True), ref)
            quotas.check_tag(conn, self.quotas, row.id, key, value)
            before = labels.tag(conn, row.id, key)
            dialect = postgresql if self.db.postgresql else sqlite
            stamp = now()
            conn.execute(
                dialect.insert(tags)
                .values(version_id=row.id, key=key, value=value, updated_at=stamp)
                .on_conflict_do_update(
                    index_elements=["version_id", "key"], set_={"value": value, "updated_at": stamp}
                )
            )
            target = f"{_target(name, row.version)}/tags/{key}"
            self._record(conn, Change(actor, "tag.set", target, name, before, {"value": value}))
        return self.version(name, str(row.version))

    def delete_tag(self, name: str, ref: str, key: str, actor: Actor = SYSTEM) -> VersionInfo:
        """Remove a tag from a live version."""
        check_tag_key(key)
        with self.db.write() as conn:
            row = self._live_version(conn, self._model(conn, name, lock=True), ref)
            before = labels.tag(conn, row.id, key)
            if before is None:
                raise RegistryFailure("tag-not-found", f"{name} v{row.version} has no tag {key!r}")
            conn.execute(delete(tags).where(tags.c.version_id == row.id, tags.c.key == key))
            target = f"{_target(name, row.version)}/tags/{key}"
            self._record(conn, Change(actor, "tag.delete", target, name, before))
        return self.version(name, str(row.version))

    def delete_version(
        self,
        name: str,
        ref: str,
        reason: str,
        actor: Actor = SYSTEM,
        detach_aliases: bool = False,
    ) -> VersionInfo:
        """Soft-delete a version with a reason; gc collects its objects once no live version
        refers to them and the deleted-version grace period is over.
        A version aliases point at is refused (version-has-aliases) unless
        `detach_aliases`, which removes them, each recorded as its own change."""
        check_text(reason, "reason", MAX_REASON)
        with self.db.write() as conn:
            model = self._model(conn, name, lock=True)
            row = self._live_version(conn, model, ref)
            named = labels.version_aliases(conn, row.id)
            if named and not detach_aliases:
                raise RegistryFailure(
                    "version-has-aliases",
                    f"{name} v{row.version} is what {', '.join(named)} name: move them first, "
                    "or ask for them to be removed with it (detach_aliases=true)",
                )
            marked = conn.execute(
                update(versions)
                .where(versions.c.id == row.id, _live())
                .values(deleted_at=now(), deleted_reason=reason)
            )
            if marked.rowcount == 0:
                raise RegistryFailure("version-deleted", f"{name} v{row.version} is deleted")
            for alias, protected in named.items():
                before = {"version": row.version, "protected": protected}
                target = f"models/{name}/aliases/{alias}"
                self._record(conn, Change(actor, "alias.delete", target, name, before))
            conn.execute(delete(aliases).where(aliases.c.version_id == row.id))
            target = _target(name, row.version)
            after = {"reason": reason, "detached_aliases": sorted(named)}
            self._record(conn, Change(actor, "version.delete", target, name, after=after))
        return self.version(name, str(row.version))

    def _record(self, conn: Connection, change: Change) -> None:
        """The one seam every change passes through, inside its transaction: the audit row
        (and whatever else must commit or roll back with the change): the webhook event."""
        record(conn, change)
        outbox.record_change(conn, change)

    def gc(self, dry_run: bool = False) -> GcReport:
        """Collect the objects no kept version needs (see `app.registry.gc`)."""
        return collect(self.db, self.blobs, self.settings, dry_run)

    def cleanup(self) -> CleanupReport:
        """Remove what interrupted pushes left: staging of dead processes, objects no kept
        version refers to (past the claim grace), anything in the store that is not an object."""
        staging = self.blobs.sweep()
        report = self.gc()
        return CleanupReport(blobs=report.objects, strays=report.strays, staging=staging)

    # ------------------------------------------------------------ reads

    def models(
        self, limit: int = 100, after: str | None = None, reader: Identity | None = None
    ) -> ModelPage:
        """A page of models in name order (of those `reader` may read, when given)."""
        limit = max(1, min(limit, MAX_PAGE))
        if after is not None:
            check_text(after, "paging cursor", 1000)
        with self.db.read() as conn:
            query = select(models).order_by(models.c.name).limit(limit + 1)
            visible = None if reader is None else self.access.may_read(reader, models.c.name)
            if visible is not None:
                query = query.where(visible)
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
                description=r.description,
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
            description=row.description,
        )

    def describe(self, name: str, description: str | None, actor: Actor = SYSTEM) -> ModelInfo:
        """Set (or, with None, remove) the model's description."""
        if description is not None:
            check_text(description, "description", MAX_DESCRIPTION)
        with self.db.write() as conn:
            model = self._model(conn, name, lock=True)
            conn.execute(
                update(models).where(models.c.id == model.id).values(description=description)
            )
            before = None if model.description is None else {"description": model.description}
            after = None if description is None else {"description": description}
            change = Change(actor, "model.describe", f"models/{name}", name, before, after)
            self._record(conn, change)
        return self.model(name)

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

    def search(
        self,
        query: SearchQuery,
        limit: int = 100,
        after: int | None = None,
        reader: Identity | None = None,
    ) -> SearchPage:
        """Versions of every model matching `query` (of those `reader` may read, when given),
        newest first, a page at a time."""
        visible = None if reader is None else self.access.may_read(reader, models.c.name)
        with self.db.read() as conn:
            page = max(1, min(limit, MAX_PAGE))
            return find(conn, query, page, after, self._infos, visible)

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
            return info, self._open(digest, content == "archive")
        except FileNotFoundError:
            raise self._missing(name, info, digest) from None

    def _missing(self, name: str, info: VersionInfo, digest: str) -> RegistryFailure:
        """Why a live version's blob could not be opened: deleted meanwhile, or gone."""
        if self.version(name, str(info.version)).deleted_at is not None:
            return RegistryFailure(
                "version-deleted", f"{name} v{info.version} was deleted meanwhile"
            )
        return RegistryFailure(
            "registry-unavailable", f"the blob {digest} of {name} v{info.version} is missing"
        )

    def stored(self, name: str, ref: str) -> tuple[VersionInfo, StoredArchive]:
        """A live version's metadata and where its archive is, for another process (a document
        worker) to open: looked up here, read there."""
        info = self.version(name, ref)
        if info.deleted_at is not None:
            raise RegistryFailure(
                "version-deleted", f"{name} v{info.version} is deleted: {info.deleted_reason}"
            )
        stored = StoredArchive(info.digests.archive, self.layouts.of(info.digests.archive))
        # the zip directory is in the skeleton (held whole): no tensor bytes are read for it
        try:
            with stored.open(self.blobs.objects) as handle:
                size = json_members_bytes(handle, self.settings.limits)
        except FileNotFoundError:
            raise self._missing(name, info, stored.digest) from None
        return info, dataclasses.replace(stored, document_bytes=size)

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
            raise blob_not_found(digest)
        kind: BlobKind = "archive" if row.archive_digest == digest else "canonical"
        try:
            return kind, self._open(digest, kind == "archive")
        except FileNotFoundError:
            raise RegistryFailure("blob-not-found", f"the blob {digest} was collected") from None

    # ------------------------------------------------------------ helpers

    def _open(self, digest: str, archive: bool) -> BinaryIO:
        """An object, or an archive rebuilt from its skeleton and tensor objects (one stored
        whole, from before tensor-level storage, is its own object); FileNotFoundError if gc
        took it."""
        if archive:
            return StoredArchive(digest, self.layouts.of(digest)).open(self.blobs.objects)
        with self.db.read() as conn:
            size = objects.size_of(conn, digest)
        # sized: a document's bytes may be stored framed, by a push of a tensor holding them
        if size is None:
            return self.blobs.open(digest)
        return open_stored(self.blobs.objects.open, digest, size)

    def _model(self, conn: Connection, name: str, lock: bool = False) -> Row[Any]:
        """The model's row; `lock`: held until the transaction ends, which serializes a model's
        writers on PostgreSQL as SQLite's one writer does (quotas count under that lock)."""
        check_model_name(name)
        query = select(models).where(models.c.name == name)
        row = conn.execute(query.with_for_update() if lock else query).first()
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
                verification=verification.of_row(r),
                created_at=utc(r.created_at),
                deleted_at=utc(r.deleted_at) if r.deleted_at is not None else None,
                deleted_reason=r.deleted_reason,
                tags=tagged.get(r.id, {}),
                aliases=named.get(r.id, []),
            )
            for r in rows
        ]
