"""The Python client of a pt2serde service, `pt2serde.Client`; the CLI's commands use it too.

    with Client("http://127.0.0.1:8000", token=token) as registry:
        pushed = registry.push("resnet", Path("resnet.pt2"))      # or bytes, or an ExportedProgram
        registry.set_alias("resnet", "champion", pushed.version.version)
        registry.pull("resnet", Path("out.pt2"), ref="champion")  # streamed, its sha256 checked

Every request goes to a route of `ROUTES` (a test keeps each in openapi.json). A 503 is retried,
after the `Retry-After` the server gave, at most `retries` times and within `retry_budget_s`.
Every failure is a `ClientFailure`, by HTTP status one of its subclasses:

    ClientFailure        .code, .status (None: no answer), .detail, .issues
    ├── Forbidden        401, 403: no token, a bad one, or not allowed
    ├── NotFound         404: no such model, version, alias, tag, webhook, token
    ├── Conflict         409
    ├── InvalidProgram   422: the program (or the request) was refused; .issues says why
    └── Unavailable      429, and 503 once the retries are spent

`code` is the server's problem code where it answered with one; the client's own codes
(app/cli/codes.py) are ``server-unreachable`` (no answer, or one without a problem) and
``download-corrupt`` (pulled bytes that do not hash to the digest the server gave).
"""

from __future__ import annotations

import contextlib
import email.utils
import hashlib
import io
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, BinaryIO
from urllib.parse import quote

import httpx
from pydantic import TypeAdapter

import schema
from app import files
from app.failure import Failure, ProblemCode
from app.programs.diff import ProgramDiff
from app.programs.findings import Report
from app.registry.records import (
    AliasInfo,
    AuditPage,
    CreatedSubscription,
    DeliveryPage,
    Grant,
    ModelInfo,
    ModelPage,
    NewToken,
    Pushed,
    PushedVersion,
    SearchPage,
    Subscription,
    TokenInfo,
    VersionInfo,
    VersionPage,
)

if TYPE_CHECKING:
    from app.bridge.exported import ExportedProgram

DEFAULT_TIMEOUT_S = 600.0
#: 503s retried at most, and the seconds all the waits between them may take together.
DEFAULT_RETRIES = 5
DEFAULT_RETRY_BUDGET_S = 120.0
_CHUNK = 1 << 20

#: Told the bytes moved so far and the total (0 when the server did not say), after each chunk.
Progress = Callable[[int, int], None]

#: Each route the client calls: its name (the method that calls it) -> (method, path).
ROUTES: dict[str, tuple[str, str]] = {
    "models": ("GET", "/v1/models"),
    "model": ("GET", "/v1/models/{name}"),
    "versions": ("GET", "/v1/models/{name}/versions"),
    "push": ("POST", "/v1/models/{name}/versions"),
    "version": ("GET", "/v1/models/{name}/versions/{ref}"),
    "delete_version": ("DELETE", "/v1/models/{name}/versions/{ref}"),
    "archive": ("GET", "/v1/models/{name}/versions/{ref}/archive"),
    "verify": ("POST", "/v1/models/{name}/versions/{ref}/verify"),
    "diff": ("GET", "/v1/models/{name}/versions/{ref}/diff"),
    "validate": ("GET", "/v1/models/{name}/versions/{ref}/validate"),
    "set_tag": ("PUT", "/v1/models/{name}/versions/{ref}/tags/{key}"),
    "delete_tag": ("DELETE", "/v1/models/{name}/versions/{ref}/tags/{key}"),
    "set_alias": ("PUT", "/v1/models/{name}/aliases/{alias}"),
    "delete_alias": ("DELETE", "/v1/models/{name}/aliases/{alias}"),
    "search": ("GET", "/v1/search"),
    "webhooks": ("GET", "/v1/webhooks"),
    "create_webhook": ("POST", "/v1/webhooks"),
    "delete_webhook": ("DELETE", "/v1/webhooks/{webhook_id}"),
    "deliveries": ("GET", "/v1/webhooks/{webhook_id}/deliveries"),
    "tokens": ("GET", "/v1/tokens"),
    "create_token": ("POST", "/v1/tokens"),
    "revoke_token": ("DELETE", "/v1/tokens/{token_id}"),
    "permissions": ("GET", "/v1/models/{name}/permissions"),
    "set_permission": ("PUT", "/v1/models/{name}/permissions/{principal}"),
    "delete_permission": ("DELETE", "/v1/models/{name}/permissions/{principal}"),
    "audit": ("GET", "/v1/audit"),
}

#: `GET /v1/webhooks` answers ``{"webhooks": [...]}``.
_SUBSCRIPTIONS = TypeAdapter(dict[str, list[Subscription]])
_TOKENS = TypeAdapter(list[TokenInfo])
_GRANTS = TypeAdapter(list[Grant])


class ClientFailure(Failure):
    """A request that failed: the server's problem code where there is one, the HTTP status
    (None when no answer came), the server's detail and, for a refused program, its issues."""

    def __init__(
        self,
        code: ProblemCode,
        message: str,
        issues: list[schema.Issue] | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(code, message, issues)
        self.status = status

    @property
    def detail(self) -> str:
        """The problem's detail (the failure's message)."""
        return self.message


class Forbidden(ClientFailure):
    """401 or 403: the caller has no valid token, or may not do this."""


class NotFound(ClientFailure):
    """404: the model, version, alias, tag, webhook or token does not exist."""


class Conflict(ClientFailure):
    """409: the request conflicts with the registry's state."""


class InvalidProgram(ClientFailure):
    """422: the program or the request was refused; `issues` lists what is wrong."""


class Unavailable(ClientFailure):
    """429, or 503 after the retries: the service could not take the request now."""


_FAMILIES: dict[int, type[ClientFailure]] = {
    401: Forbidden,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    422: InvalidProgram,
    429: Unavailable,
    503: Unavailable,
}


def _failure(response: httpx.Response) -> ClientFailure:
    """The failure a non-2xx answer stands for (its body read)."""
    response.read()
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    status = response.status_code
    if isinstance(body, dict) and isinstance(body.get("code"), str):
        issues = [
            schema.Issue(str(e.get("code")), str(e.get("path")), str(e.get("message")))
            for e in body.get("errors") or []
            if isinstance(e, dict)
        ]
        family = _FAMILIES.get(status, ClientFailure)
        return family(body["code"], str(body.get("detail", "")), issues, status)
    return ClientFailure(
        "server-unreachable",
        f"{response.request.url} answered HTTP {status} without a problem body",
        status=status,
    )


@contextlib.contextmanager
def _reaching() -> Iterator[None]:
    """A transport error (refused, reset, timed out) as the client's failure."""
    try:
        yield
    except httpx.TransportError as exc:
        raise ClientFailure("server-unreachable", f"the registry cannot be reached: {exc}") from exc


def _retry_after(header: str | None, attempt: int) -> float:
    """Seconds to wait before retrying a 503: its Retry-After (seconds or an HTTP date), else
    a backoff doubling from half a second."""
    if header:
        if header.strip().isdigit():
            return float(header)
        with contextlib.suppress(TypeError, ValueError):
            when = email.utils.parsedate_to_datetime(header)
            return max(0.0, when.timestamp() - time.time())
    return 0.5 * (1 << attempt)


def _chunks(body: BinaryIO, size: int, progress: Progress | None) -> Iterator[bytes]:
    sent = 0
    while chunk := body.read(_CHUNK):
        yield chunk
        sent += len(chunk)
        if progress is not None:
            progress(sent, size)


def _query(given: Mapping[str, Any]) -> dict[str, Any]:
    """Query parameters without those left unset (None, or an empty list)."""
    return {k: v for k, v in given.items() if v is not None and v != []}


def base_url(url: str) -> str:
    """The service's base URL: `url` without a trailing slash, ``http://`` put before a bare
    ``host:port`` (as the CLI's help writes the default)."""
    url = url.strip().rstrip("/")
    return url if "://" in url else f"http://{url}"


class Client:
    """A pt2serde service at `url` (``http://host:8000``, or a bare ``host:8000``), with an API
    token or none.

    A context manager (or `close()`): one connection pool serves every request."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        retries: int = DEFAULT_RETRIES,
        retry_budget_s: float = DEFAULT_RETRY_BUDGET_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = base_url(url)
        self.retries = retries
        self.retry_budget_s = retry_budget_s
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(
            timeout=timeout, follow_redirects=False, headers=headers, transport=transport
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    # ------------------------------------------------------------ the request cycle

    def _send(
        self,
        route: str,
        *,
        query: Mapping[str, Any] | None = None,
        json: Any = None,
        body: Callable[[], Iterator[bytes]] | None = None,
        headers: Mapping[str, str] | None = None,
        **parts: str | int,
    ) -> httpx.Response:
        """Send to a route of ROUTES, retrying 503s; the answer, its body not yet read (close
        it), or the failure it stands for. `body` makes the upload anew for each attempt."""
        method, template = ROUTES[route]
        path = template.format(**{k: quote(str(v), safe="") for k, v in parts.items()})
        deadline = time.monotonic() + self.retry_budget_s
        attempt = 0
        while True:
            request = self._http.build_request(
                method,
                self.url + path,
                params=query,
                json=json,
                content=body() if body is not None else None,
                headers=headers,
            )
            with _reaching():
                response = self._http.send(request, stream=True)
            if response.status_code != 503 or attempt >= self.retries:
                break
            wait = _retry_after(response.headers.get("retry-after"), attempt)
            if time.monotonic() + wait > deadline:
                break
            response.close()
            time.sleep(wait)
            attempt += 1
        if not response.is_success:
            with contextlib.closing(response), _reaching():
                raise _failure(response)
        return response

    def _body(self, route: str, **kwargs: Any) -> bytes:
        """A route's answer body, whole."""
        return _read(self._send(route, **kwargs))

    # ------------------------------------------------------------ versions

    def push(
        self,
        name: str,
        program: Path | str | bytes | ExportedProgram,
        *,
        model: str | None = None,
        parent: int | None = None,
        progress: Progress | None = None,
    ) -> Pushed:
        """Upload a .pt2 (a path, its bytes, or an ExportedProgram, which torch.export.save
        writes to a temporary file first) as model `name`'s next version, streamed; `created`
        is False when the same program already was a live version (which is returned).
        `parent`: the version whose tensors the registry stores this one's as deltas of
        (default: the latest)."""
        query = _query({"model": model, "parent": parent})
        if isinstance(program, bytes):
            return self._push(name, lambda: io.BytesIO(program), len(program), query, progress)
        if isinstance(program, Path | str):
            path = Path(program)
            return self._push(name, lambda: path.open("rb"), path.stat().st_size, query, progress)
        # the only branch that needs torch, so the only one that imports it (app.bridge)
        from app.bridge.exported import save_pt2

        with tempfile.TemporaryDirectory(prefix="pt2serde-push-") as folder:
            saved = Path(folder) / "program.pt2"
            save_pt2(program, saved)
            return self.push(name, saved, model=model, parent=parent, progress=progress)

    def _push(
        self,
        name: str,
        opened: Callable[[], BinaryIO],
        size: int,
        query: dict[str, Any],
        progress: Progress | None,
    ) -> Pushed:
        def body() -> Iterator[bytes]:
            with opened() as handle:
                yield from _chunks(handle, size, progress)

        response = self._send(
            "push",
            name=name,
            query=query,
            body=body,
            # a length, not chunked encoding: the server refuses an oversized body up front
            headers={"Content-Type": "application/zip", "Content-Length": str(size)},
        )
        pushed = PushedVersion.model_validate_json(_read(response))
        version = VersionInfo.model_validate(pushed.model_dump(exclude={"warnings"}))
        # 201 made a new version; 200 answers the live version that already is this program
        created = response.status_code == 201
        return Pushed(version=version, created=created, warnings=pushed.warnings)

    def pull(
        self,
        name: str,
        dest: Path | str,
        ref: str | int = "latest",
        *,
        progress: Progress | None = None,
    ) -> VersionInfo:
        """Download a version's .pt2 to `dest`, streamed, written whole or not at all and only
        when it hashes to the archive digest the server gives; `ref` is a version number, an
        alias or ``latest``."""
        info = self.version(name, ref)
        response = self._send("archive", name=name, ref=info.version)
        try:
            with _reaching():
                _save(response, Path(dest), info.digests.archive, progress)
        finally:
            response.close()
        return info

    def version(self, name: str, ref: str | int = "latest") -> VersionInfo:
        """A version's metadata (deleted ones included)."""
        return VersionInfo.model_validate_json(self._body("version", name=name, ref=ref))

    def versions(self, name: str, *, include_deleted: bool = False) -> list[VersionInfo]:
        """Every version of a model in number order (all pages)."""
        found: list[VersionInfo] = []
        after: int | None = None
        while True:
            query = {"limit": 1000, "include_deleted": include_deleted, "after": after}
            page = VersionPage.model_validate_json(
                self._body("versions", name=name, query=_query(query))
            )
            found += page.versions
            if page.next is None:
                return found
            after = page.next

    def delete_version(
        self, name: str, ref: str | int, reason: str, *, detach_aliases: bool = False
    ) -> VersionInfo:
        """Soft-delete a version, with the reason; `detach_aliases` removes aliases naming it."""
        query = {"reason": reason, "detach_aliases": detach_aliases}
        answer = self._body("delete_version", name=name, ref=ref, query=query)
        return VersionInfo.model_validate_json(answer)

    def verify(self, name: str, ref: str | int) -> VersionInfo:
        """Run torch's check of an unverified version again and record it verified; a
        `Conflict` (namespace-unregistered) while the torch workers still lack a namespace it
        calls. A verified version is answered as it is."""
        return VersionInfo.model_validate_json(self._body("verify", name=name, ref=ref))

    def diff(self, name: str, new: str | int, against: str | int) -> ProgramDiff:
        """What changed from version `against` (of this model, or ``model:ref`` of another) to
        version `new`."""
        answer = self._body("diff", name=name, ref=new, query={"against": str(against)})
        return ProgramDiff.model_validate_json(answer)

    def validate(self, name: str, ref: str | int = "latest", level: str = "semantic") -> Report:
        """A stored version's validation report at level ``schema`` or ``semantic`` (how far
        torch's own check went is the version's `verification`)."""
        answer = self._body("validate", name=name, ref=ref, query={"level": level})
        return Report.model_validate_json(answer)

    # ------------------------------------------------------------ models, tags, aliases

    def models(self, *, limit: int | None = None, after: str | None = None) -> ModelPage:
        """A page of the models the caller may read, in name order."""
        query = _query({"limit": limit, "after": after})
        return ModelPage.model_validate_json(self._body("models", query=query))

    def model(self, name: str) -> ModelInfo:
        """A model: its newest version, how many are live, its aliases."""
        return ModelInfo.model_validate_json(self._body("model", name=name))

    def set_tag(self, name: str, ref: str | int, key: str, value: str) -> VersionInfo:
        """Set a tag on a live version."""
        answer = self._body("set_tag", name=name, ref=ref, key=key, json={"value": value})
        return VersionInfo.model_validate_json(answer)

    def delete_tag(self, name: str, ref: str | int, key: str) -> VersionInfo:
        """Remove a tag from a live version."""
        answer = self._body("delete_tag", name=name, ref=ref, key=key)
        return VersionInfo.model_validate_json(answer)

    def aliases(self, name: str) -> dict[str, int]:
        """A model's aliases and the versions they name."""
        return self.model(name).aliases

    def set_alias(
        self, name: str, alias: str, version: int, *, protected: bool | None = None
    ) -> AliasInfo:
        """Point `alias` (``champion``, ``staging``, ...) at a version, or move it; `protected`
        marks or unmarks it (None keeps its mark)."""
        body = {"version": version, "protected": protected}
        answer = self._body("set_alias", name=name, alias=alias, json=body)
        return AliasInfo.model_validate_json(answer)

    def delete_alias(self, name: str, alias: str) -> None:
        """Remove an alias."""
        self._body("delete_alias", name=name, alias=alias)

    # ------------------------------------------------------------ search

    def search(
        self,
        *,
        model: str | None = None,
        tag: Sequence[str] = (),
        alias: str | None = None,
        program_digest: str | None = None,
        graph_digest: str | None = None,
        namespace: str | None = None,
        schema_version: str | None = None,
        verified: bool | None = None,
        pushed_by: str | None = None,
        created_after: datetime | str | None = None,
        created_before: datetime | str | None = None,
        include_deleted: bool = False,
        limit: int | None = None,
        after: int | None = None,
    ) -> SearchPage:
        """A page of the versions matching every filter given, newest first (`tag`: ``key``
        or ``key=value`` each; pass the page's `next` as `after` for the following one)."""
        query = _query(
            {
                "model": model,
                "tag": list(tag),
                "alias": alias,
                "program_digest": program_digest,
                "graph_digest": graph_digest,
                "namespace": namespace,
                "schema_version": schema_version,
                "verified": verified,
                "pushed_by": pushed_by,
                "created_after": created_after,
                "created_before": created_before,
                "include_deleted": include_deleted or None,
                "limit": limit,
                "after": after,
            }
        )
        return SearchPage.model_validate_json(self._body("search", query=query))

    # ------------------------------------------------------------ webhooks

    def webhooks(self, model: str | None = None) -> list[Subscription]:
        """Live subscriptions (those reaching `model`'s events, when given), oldest first."""
        answer = self._body("webhooks", query=_query({"model": model}))
        return _SUBSCRIPTIONS.validate_json(answer)["webhooks"]

    def create_webhook(
        self, url: str, *, model: str | None = None, events: Sequence[str] | None = None
    ) -> CreatedSubscription:
        """Subscribe `url` to registry events (all kinds, or `events`) of one model or all;
        the answer holds the signing secret, shown this once."""
        body = {"url": url, "model": model, "events": list(events) if events else None}
        return CreatedSubscription.model_validate_json(self._body("create_webhook", json=body))

    def delete_webhook(self, webhook_id: str) -> None:
        """Delete a subscription."""
        self._body("delete_webhook", webhook_id=webhook_id)

    def deliveries(self, webhook_id: str) -> DeliveryPage:
        """A subscription's deliveries, newest first."""
        return DeliveryPage.model_validate_json(self._body("deliveries", webhook_id=webhook_id))

    # ------------------------------------------------------------ the organization

    def tokens(self, owner: str | None = None) -> list[TokenInfo]:
        """API tokens, newest first: an admin sees everyone's (or `owner`'s), others their own."""
        return _TOKENS.validate_json(self._body("tokens", query=_query({"owner": owner})))

    def create_token(
        self, name: str, *, owner: str | None = None, admin: bool = False, expires_at: str = ""
    ) -> NewToken:
        """A new API token; the answer holds its secret, shown this once."""
        body: dict[str, Any] = {"name": name, "owner": owner, "admin": admin}
        if expires_at:
            body["expires_at"] = expires_at
        return NewToken.model_validate_json(self._body("create_token", json=body))

    def revoke_token(self, token_id: str) -> TokenInfo:
        """Revoke a token."""
        return TokenInfo.model_validate_json(self._body("revoke_token", token_id=token_id))

    def permissions(self, name: str) -> list[Grant]:
        """A model's grants."""
        return _GRANTS.validate_json(self._body("permissions", name=name))

    def set_permission(self, name: str, principal: str, level: str) -> Grant:
        """Grant a principal (a user, or ``*``) a level on a model."""
        answer = self._body("set_permission", name=name, principal=principal, json={"level": level})
        return Grant.model_validate_json(answer)

    def delete_permission(self, name: str, principal: str) -> None:
        """Remove a principal's grant on a model."""
        self._body("delete_permission", name=name, principal=principal)

    def audit(self, **filters: str | int | None) -> AuditPage:
        """A page of the audit log, newest first (filters: model, actor, action, since, until,
        before, limit)."""
        return AuditPage.model_validate_json(self._body("audit", query=_query(filters)))


def _save(response: httpx.Response, dest: Path, digest: str, progress: Progress | None) -> None:
    """The body written to `dest` whole or not at all, and only when it hashes to `digest`."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    hasher = hashlib.sha256()
    length = response.headers.get("content-length", "")
    total = int(length) if length.isdigit() else 0
    received = 0
    with files.atomic_writer(dest) as out:
        for chunk in response.iter_bytes(_CHUNK):
            hasher.update(chunk)
            out.write(chunk)
            received += len(chunk)
            if progress is not None:
                progress(received, total)
        if hasher.hexdigest() != digest:
            raise ClientFailure(
                "download-corrupt",
                f"the downloaded archive hashes to {hasher.hexdigest()}, not {digest}",
                status=response.status_code,
            )


def _read(response: httpx.Response) -> bytes:
    """A streamed answer's body, whole; the response closed."""
    try:
        with _reaching():
            return response.read()
    finally:
        response.close()
