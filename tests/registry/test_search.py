"""Version search on both backends: every filter, their combination, paging and bad input."""

from __future__ import annotations

from datetime import timedelta

import pytest

from app.jobs import push
from app.jobs.runners import INLINE
from app.registry.audit import Actor
from app.registry.db import now
from app.registry.errors import RegistryFailure
from app.registry.records import VersionInfo
from app.registry.search import SearchQuery, parse_tag
from app.registry.store import Registry
from tests.registry.databases import ON_DATABASES

pytestmark = ON_DATABASES


def _push(registry: Registry, name: str, archive: bytes, who: str) -> VersionInfo:
    staged = registry.blobs.stage_bytes(archive)
    try:
        candidate = push.prepare(registry, staged.path, INLINE, INLINE)
    finally:
        staged.discard()
    return registry.push(name, candidate, Actor(who)).version


def _found(registry: Registry, **filters: object) -> list[str]:
    query = SearchQuery(**filters)  # type: ignore[arg-type]
    return [f"{v.model}{v.version}" for v in registry.search(query).versions]


def test_search_filters_combine_and_page(registry: Registry, archives: dict[str, bytes]) -> None:
    vision1 = _push(registry, "vision", archives["conv"], "alice")
    vision2 = _push(registry, "vision", archives["linear_bn_train"], "bob")
    ops1 = _push(registry, "ops", archives["custom_op"], "alice")
    registry.set_tag("vision", "1", "stage", "prod")
    registry.set_tag("vision", "2", "stage", "dev")
    registry.set_tag("ops", "1", "stage", "prod")
    registry.set_tag("ops", "1", "owner", "x")
    registry.set_alias("vision", "champion", 1)

    assert _found(registry) == ["ops1", "vision2", "vision1"]
    assert _found(registry, model="vision") == ["vision2", "vision1"]
    assert _found(registry, tags=(("stage", "prod"),)) == ["ops1", "vision1"]
    assert _found(registry, tags=(("stage", None),)) == ["ops1", "vision2", "vision1"]
    assert _found(registry, tags=(("stage", "prod"), ("owner", None))) == ["ops1"]
    assert _found(registry, tags=(("owner", "y"),)) == []
    assert _found(registry, alias="champion") == ["vision1"]
    assert _found(registry, program_digest=vision2.digests.program) == ["vision2"]
    assert _found(registry, graph_digest=ops1.digests.graph) == ["ops1"]
    custom = [ns for ns in ops1.summary.operator_namespaces if ns == "pt2zoo"]
    assert custom == ["pt2zoo"]
    assert _found(registry, namespace="pt2zoo") == ["ops1"]
    assert _found(registry, namespace="aten") == ["ops1", "vision2", "vision1"]
    assert _found(registry, schema_version=vision1.schema_version) == ["ops1", "vision2", "vision1"]
    assert _found(registry, schema_version="0.0") == []
    assert _found(registry, pushed_by="alice") == ["ops1", "vision1"]
    assert _found(registry, pushed_by="alice", model="vision") == ["vision1"]
    assert _found(registry, created_after=vision2.created_at) == ["ops1", "vision2"]
    assert _found(registry, created_before=vision2.created_at) == ["vision1"]
    window = {"created_after": vision2.created_at, "created_before": ops1.created_at}
    assert _found(registry, **window) == ["vision2"]

    seen: list[str] = []
    after = None
    for _ in range(5):
        page = registry.search(SearchQuery(), limit=1, after=after)
        seen += [f"{v.model}{v.version}" for v in page.versions]
        after = page.next
        if after is None:
            break
    assert seen == ["ops1", "vision2", "vision1"]

    registry.delete_version("vision", "2", "superseded")
    assert _found(registry, model="vision") == ["vision1"]
    assert _found(registry, model="vision", include_deleted=True) == ["vision2", "vision1"]
    (hit,) = registry.search(SearchQuery(alias="champion")).versions
    assert (hit.tags, hit.aliases) == ({"stage": "prod"}, ["champion"])


def test_search_refuses_malformed_filters(registry: Registry) -> None:
    def refused(**filters: object) -> None:
        with pytest.raises(RegistryFailure, check=lambda e: e.code == "invalid-search"):
            registry.search(SearchQuery(**filters))  # type: ignore[arg-type]

    refused(program_digest="ABC")
    refused(graph_digest="g" * 64)
    start = now()
    refused(created_after=start, created_before=start - timedelta(seconds=1))
    assert registry.search(SearchQuery(created_after=start)).versions == []
    assert parse_tag("stage=prod") == ("stage", "prod")
    assert parse_tag("stage") == ("stage", None)
    assert parse_tag("note=a=b") == ("note", "a=b")
    with pytest.raises(RegistryFailure, check=lambda e: e.code == "invalid-search"):
        parse_tag("=prod")
