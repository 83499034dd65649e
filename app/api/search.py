"""Version search across models: `GET /v1/search`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.api.auth import AUTH_PROBLEMS, CallerDep, has
from app.api.deps import DateTime
from app.api.registry import RegistryDep
from app.http.problems import problem_responses
from app.registry.names import check_model_name
from app.registry.records import SearchPage
from app.registry.search import SearchQuery, parse_tag

router = APIRouter(prefix="/v1", tags=["registry"])


@router.get(
    "/search",
    response_model=SearchPage,
    responses=problem_responses(
        *AUTH_PROBLEMS, "invalid-search", "invalid-name", "registry-unavailable", "request-invalid"
    ),
)
def search_versions(
    who: CallerDep,
    registry: RegistryDep,
    model: Annotated[str | None, Query(description="one model's versions only")] = None,
    tag: Annotated[
        list[str] | None,
        Query(description="`key` (set) or `key=value`; repeat the parameter to ask for several"),
    ] = None,
    alias: Annotated[str | None, Query(description="versions an alias of this name names")] = None,
    program_digest: Annotated[str | None, Query(min_length=64, max_length=64)] = None,
    graph_digest: Annotated[str | None, Query(min_length=64, max_length=64)] = None,
    namespace: Annotated[
        str | None, Query(max_length=128, description="an operator namespace the program uses")
    ] = None,
    schema_version: Annotated[str | None, Query(max_length=16)] = None,
    verified: Annotated[
        bool | None,
        Query(description="verified by torch's own check (true) or stored unverified (false)"),
    ] = None,
    pushed_by: Annotated[
        str | None, Query(max_length=128, description="the principal that pushed it")
    ] = None,
    created_after: Annotated[DateTime | None, Query(description="inclusive")] = None,
    created_before: Annotated[DateTime | None, Query(description="exclusive")] = None,
    include_deleted: bool = False,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    after: Annotated[
        int | None, Query(ge=1, le=2**63 - 1, description="the previous page's `next`")
    ] = None,
) -> SearchPage:
    """Versions of every model (or one) that match all the filters given, newest first; only
    those the caller may read (filtered before paging: `next` says nothing of the others)."""
    if model is not None and not has(registry, who, check_model_name(model), "read"):
        # not even a `next`: it would tell whether more of the model's versions match
        return SearchPage(versions=[], next=None)
    query = SearchQuery(
        model=model,
        tags=tuple(parse_tag(t) for t in tag or ()),
        alias=alias,
        program_digest=program_digest,
        graph_digest=graph_digest,
        namespace=namespace,
        schema_version=schema_version,
        verified=verified,
        pushed_by=pushed_by,
        created_after=created_after,
        created_before=created_before,
        include_deleted=include_deleted,
    )
    return registry.search(query, limit, after, reader=who.identity)
