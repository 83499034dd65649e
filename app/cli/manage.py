"""The registry's curation commands: models, tags, aliases, delete, version diffs, search and
webhooks (push and pull are in app.cli.registry; app.client's `Client` does the HTTP)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from app.cli.common import EXIT_OK, Parser, emit, usage_error
from app.cli.registry import client, model_command, service_command, version_line

if TYPE_CHECKING:
    from app.cli.common import Subcommands

#: Pages `pt2serde search --all` follows at most (each up to --limit versions).
MAX_PAGES = 100
_EVENTS = ("version.created", "version.deleted", "version.verified", "alias.moved", "tag.changed")
_TARGET = {"create": "URL", "delete": "id", "deliveries": "id"}


def _models(args: argparse.Namespace) -> int:
    with client(args) as registry:
        page = registry.models()
    lines = [
        f"{m.name}  {m.version_count} live"
        + (f", newest v{m.latest_version}  " if m.latest_version is not None else "  ")
        + " ".join(f"{a}->v{v}" for a, v in m.aliases.items())
        for m in page.models
    ]
    emit(args, page.model_dump(mode="json"), "\n".join(lines) or "no models")
    return EXIT_OK


def _with_tags(info: Any) -> str:
    """A version's line, and its tags on the next."""
    tags = ", ".join(f"{k}={v}" for k, v in info.tags.items()) or "no tags"
    return f"{version_line(info)}\n  {tags}"


def _tag(args: argparse.Namespace) -> int:
    key, equals, value = args.tag.partition("=")
    if args.remove == bool(equals):
        return usage_error("give KEY=VALUE to set a tag, or KEY with --remove")
    with client(args) as registry:
        if args.remove:
            info = registry.delete_tag(args.name, args.ref, key)
        else:
            info = registry.set_tag(args.name, args.ref, key, value)
    emit(args, info.model_dump(mode="json"), _with_tags(info))
    return EXIT_OK


def _alias(args: argparse.Namespace) -> int:
    if args.remove:
        with client(args) as registry:
            registry.delete_alias(args.name, args.alias)
        emit(args, {"model": args.name, "alias": args.alias}, f"{args.name}: {args.alias} removed")
        return EXIT_OK
    if args.version is None and args.protected is None:
        return usage_error("give the version the alias names, --protect or --unprotect")
    with client(args) as registry:
        version = args.version
        if version is None:
            named = registry.aliases(args.name)
            if args.alias not in named:
                return usage_error(f"{args.name} has no alias {args.alias!r}: give a version")
            version = named[args.alias]
        info = registry.set_alias(args.name, args.alias, version, protected=args.protected)
    mark = " (protected)" if info.protected else ""
    emit(args, info.model_dump(mode="json"), f"{args.name}: {args.alias} -> v{version}{mark}")
    return EXIT_OK


def _delete(args: argparse.Namespace) -> int:
    with client(args) as registry:
        info = registry.delete_version(
            args.name, args.ref, args.reason, detach_aliases=args.detach_aliases
        )
    emit(args, info.model_dump(mode="json"), f"deleted {version_line(info)}")
    return EXIT_OK


def _show(args: argparse.Namespace) -> int:
    with client(args) as registry:
        info = registry.version(args.name, args.ref)
    emit(args, info.model_dump(mode="json"), _with_tags(info))
    return EXIT_OK


def _verify(args: argparse.Namespace) -> int:
    with client(args) as registry:
        info = registry.verify(args.name, args.ref)
    emit(args, info.model_dump(mode="json"), version_line(info))
    return EXIT_OK


def _diff(args: argparse.Namespace) -> int:
    from app.programs.diff import render_text

    with client(args) as registry:
        result = registry.diff(args.name, args.new, args.old)
    emit(args, result.model_dump(mode="json"), render_text(result))
    return EXIT_OK


def _search(args: argparse.Namespace) -> int:
    filters: dict[str, Any] = {
        "model": args.model,
        "tag": args.tag or (),
        "alias": args.alias,
        "program_digest": args.program_digest,
        "graph_digest": args.graph_digest,
        "namespace": args.namespace,
        "schema_version": args.schema_version,
        "verified": args.verified,
        "pushed_by": args.pushed_by,
        "created_after": args.since,
        "created_before": args.until,
        "include_deleted": args.include_deleted,
        "limit": args.limit,
    }
    found: list[Any] = []
    after: int | None = None
    with client(args) as registry:
        for _ in range(MAX_PAGES if args.all else 1):
            page = registry.search(**filters, after=after)
            found += page.versions
            if page.next is None:
                break
            after = page.next
    data = [v.model_dump(mode="json") for v in found]
    emit(args, data, "\n".join(version_line(v) for v in found) or "no versions match")
    return EXIT_OK


def _webhook(args: argparse.Namespace) -> int:
    if args.action != "list" and not args.target:
        return usage_error(f"webhook {args.action} needs the webhook's {_TARGET[args.action]}")
    with client(args) as registry:
        if args.action == "create":
            created = registry.create_webhook(args.target, model=args.model, events=args.event)
            text = f"webhook {created.id}\nsecret {created.secret}  (shown this once: keep it)"
            emit(args, created.model_dump(mode="json"), text)
        elif args.action == "list":
            subs = registry.webhooks(args.model or None)
            lines = [f"{s.id}  {s.model or '*'}  {','.join(s.events)}  {s.url}" for s in subs]
            data = [s.model_dump(mode="json") for s in subs]
            emit(args, data, "\n".join(lines) or "no webhooks")
        elif args.action == "delete":
            registry.delete_webhook(args.target)
            emit(args, {"deleted": args.target}, f"webhook {args.target} deleted")
        else:
            page = registry.deliveries(args.target)
            lines = [
                f"{d.id}  {d.kind}  {d.model}  {d.status}  {d.attempts} attempts  "
                f"last {d.last_status or d.last_error or '-'}"
                for d in page.deliveries
            ]
            emit(args, page.model_dump(mode="json"), "\n".join(lines) or "no deliveries")
    return EXIT_OK


def _add_search(sub: Subcommands, shared: Parser) -> None:
    found = service_command(sub, shared, "search", _search, "find versions across models")
    found.add_argument("--model")
    found.add_argument("--tag", action="append", help="KEY or KEY=VALUE (repeat for several)")
    found.add_argument("--alias", help="versions an alias of this name names")
    found.add_argument("--program-digest")
    found.add_argument("--graph-digest")
    found.add_argument("--namespace", help="an operator namespace the program uses")
    found.add_argument("--schema-version")
    state = found.add_mutually_exclusive_group()
    state.add_argument(
        "--verified", dest="verified", action="store_const", const=True, help="verified by torch"
    )
    state.add_argument(
        "--unverified", dest="verified", action="store_const", const=False, help="stored unverified"
    )
    found.add_argument("--pushed-by", help="who pushed them")
    found.add_argument("--since", help="pushed at or after (ISO 8601)")
    found.add_argument("--until", help="pushed before (ISO 8601)")
    found.add_argument("--include-deleted", action="store_true")
    found.add_argument("--limit", type=int, default=100, help="versions per page")
    found.add_argument("--all", action="store_true", help=f"follow up to {MAX_PAGES} pages")


def register(sub: Subcommands, shared: Parser) -> None:
    """Add the curation commands."""
    service_command(sub, shared, "models", _models, "list the registry's models")
    tag = model_command(sub, shared, "tag", _tag, "set (KEY=VALUE) or --remove a version's tag")
    tag.add_argument("ref", help="a version number, an alias or latest")
    tag.add_argument("tag", help="KEY=VALUE to set, KEY with --remove")
    tag.add_argument("--remove", action="store_true")
    ali = model_command(
        sub, shared, "alias", _alias, "point an alias at a version, protect it or remove it"
    )
    ali.add_argument("alias")
    ali.add_argument("version", type=int, nargs="?", help="the version it names")
    mark = ali.add_mutually_exclusive_group()
    mark.add_argument("--protect", dest="protected", action="store_const", const=True)
    mark.add_argument("--unprotect", dest="protected", action="store_const", const=False)
    mark.add_argument("--remove", action="store_true")
    gone = model_command(sub, shared, "delete", _delete, "soft-delete a version, with a reason")
    gone.add_argument("ref", help="a version number, an alias or latest")
    gone.add_argument("--reason", required=True)
    gone.add_argument("--detach-aliases", action="store_true", help="remove aliases naming it")
    show = model_command(sub, shared, "show", _show, "one version: its digests, state and tags")
    show.add_argument(
        "ref", nargs="?", default="latest", help="a version number, an alias or latest"
    )
    verify = model_command(
        sub, shared, "verify", _verify, "run torch's check of an unverified version again"
    )
    verify.add_argument("ref", help="a version number, an alias or latest")
    diff = model_command(sub, shared, "diff-versions", _diff, "what changed between two versions")
    diff.add_argument("old", help="a version of this model, or model:ref of another one")
    diff.add_argument("new", help="a version number, an alias or latest")
    _add_search(sub, shared)
    hook = service_command(sub, shared, "webhook", _webhook, "registry event subscriptions")
    hook.add_argument("action", choices=("create", "list", "delete", "deliveries"))
    hook.add_argument("target", nargs="?", default="", help="create: the URL; else the id")
    hook.add_argument("--model", help="one model's events (create), or those reaching it (list)")
    hook.add_argument("--event", action="append", choices=_EVENTS, help="repeat for several")
