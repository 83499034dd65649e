"""The registry's curation commands: models, tags, aliases, delete, version diffs, search and
webhooks (push and pull are in app.cli.registry; the client in app.client does the HTTP)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from app.cli.common import EXIT_OK, Parser, emit, usage_error
from app.cli.registry import model_command, server, service_command, version_line

if TYPE_CHECKING:
    from app.cli.common import Subcommands

#: Pages `pt2serde search --all` follows at most (each up to --limit versions).
MAX_PAGES = 100
_EVENTS = ("version.created", "version.deleted", "alias.moved", "tag.changed")
_TARGET = {"create": "URL", "delete": "id", "deliveries": "id"}


def _models(args: argparse.Namespace) -> int:
    from app import client
    from app.registry.records import ModelPage

    page = ModelPage.model_validate(client.call(server(args), "GET", "models"))
    lines = [
        f"{m.name}  {m.version_count} live"
        + (f", newest v{m.latest_version}  " if m.latest_version is not None else "  ")
        + " ".join(f"{a}->v{v}" for a, v in m.aliases.items())
        for m in page.models
    ]
    emit(args, page.model_dump(mode="json"), "\n".join(lines) or "no models")
    return EXIT_OK


def _tag(args: argparse.Namespace) -> int:
    from app import client
    from app.registry.records import VersionInfo

    key, equals, value = args.tag.partition("=")
    if args.remove == bool(equals):
        return usage_error("give KEY=VALUE to set a tag, or KEY with --remove")
    parts = ("models", args.name, "versions", args.ref, "tags", key)
    if args.remove:
        answer = client.call(server(args), "DELETE", *parts)
    else:
        answer = client.call(server(args), "PUT", *parts, json={"value": value})
    info = VersionInfo.model_validate(answer)
    tags = ", ".join(f"{k}={v}" for k, v in info.tags.items()) or "no tags"
    emit(args, info.model_dump(mode="json"), f"{version_line(info)}\n  {tags}")
    return EXIT_OK


def _alias(args: argparse.Namespace) -> int:
    from app import client
    from app.registry.records import AliasInfo, ModelInfo

    base, parts = server(args), ("models", args.name, "aliases", args.alias)
    if args.remove:
        client.call(base, "DELETE", *parts)
        emit(args, {"model": args.name, "alias": args.alias}, f"{args.name}: {args.alias} removed")
        return EXIT_OK
    version = args.version
    if version is None:
        if args.protected is None:
            return usage_error("give the version the alias names, --protect or --unprotect")
        named = ModelInfo.model_validate(client.call(base, "GET", "models", args.name)).aliases
        if args.alias not in named:
            return usage_error(f"{args.name} has no alias {args.alias!r}: give a version")
        version = named[args.alias]
    body = {"version": version, "protected": args.protected}
    info = AliasInfo.model_validate(client.call(base, "PUT", *parts, json=body))
    mark = " (protected)" if info.protected else ""
    emit(args, info.model_dump(mode="json"), f"{args.name}: {args.alias} -> v{version}{mark}")
    return EXIT_OK


def _delete(args: argparse.Namespace) -> int:
    from app import client
    from app.registry.records import VersionInfo

    params = {"reason": args.reason, "detach_aliases": args.detach_aliases}
    answer = client.call(
        server(args), "DELETE", "models", args.name, "versions", args.ref, params=params
    )
    info = VersionInfo.model_validate(answer)
    emit(args, info.model_dump(mode="json"), f"deleted {version_line(info)}")
    return EXIT_OK


def _diff(args: argparse.Namespace) -> int:
    from app import client
    from app.programs.diff import ProgramDiff, render_text

    parts = ("models", args.name, "versions", args.new, "diff")
    answer = client.call(server(args), "GET", *parts, params={"against": args.old})
    result = ProgramDiff.model_validate(answer)
    emit(args, result.model_dump(mode="json"), render_text(result))
    return EXIT_OK


def _search_params(args: argparse.Namespace) -> dict[str, Any]:
    given = {
        "model": args.model,
        "tag": args.tag or None,
        "alias": args.alias,
        "program_digest": args.program_digest,
        "graph_digest": args.graph_digest,
        "namespace": args.namespace,
        "schema_version": args.schema_version,
        "pushed_by": args.pushed_by,
        "created_after": args.since,
        "created_before": args.until,
        "include_deleted": args.include_deleted or None,
        "limit": args.limit,
    }
    return {k: v for k, v in given.items() if v is not None}


def _search(args: argparse.Namespace) -> int:
    from app import client
    from app.registry.search import SearchPage

    params = _search_params(args)
    found: list[Any] = []
    for _ in range(MAX_PAGES if args.all else 1):
        page = SearchPage.model_validate(client.call(server(args), "GET", "search", params=params))
        found += page.versions
        if page.next is None:
            break
        params["after"] = page.next
    data = [v.model_dump(mode="json") for v in found]
    emit(args, data, "\n".join(version_line(v) for v in found) or "no versions match")
    return EXIT_OK


def _webhook(args: argparse.Namespace) -> int:
    from app import client
    from app.registry import webhooks as hooks

    base = server(args)
    if args.action != "list" and not args.target:
        return usage_error(f"webhook {args.action} needs the webhook's {_TARGET[args.action]}")
    if args.action == "create":
        body = {"url": args.target, "model": args.model, "events": args.event or None}
        created = hooks.CreatedSubscription.model_validate(
            client.call(base, "POST", "webhooks", json=body)
        )
        text = f"webhook {created.id}\nsecret {created.secret}  (shown this once: keep it)"
        emit(args, created.model_dump(mode="json"), text)
    elif args.action == "list":
        params = {"model": args.model} if args.model else {}
        listed = client.call(base, "GET", "webhooks", params=params)["webhooks"]
        subs = [hooks.Subscription.model_validate(s) for s in listed]
        lines = [f"{s.id}  {s.model or '*'}  {','.join(s.events)}  {s.url}" for s in subs]
        emit(args, [s.model_dump(mode="json") for s in subs], "\n".join(lines) or "no webhooks")
    elif args.action == "delete":
        client.call(base, "DELETE", "webhooks", args.target)
        emit(args, {"deleted": args.target}, f"webhook {args.target} deleted")
    else:
        page = hooks.DeliveryPage.model_validate(
            client.call(base, "GET", "webhooks", args.target, "deliveries")
        )
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
    diff = model_command(sub, shared, "diff-versions", _diff, "what changed between two versions")
    diff.add_argument("old", help="a version of this model, or model:ref of another one")
    diff.add_argument("new", help="a version number, an alias or latest")
    _add_search(sub, shared)
    hook = service_command(sub, shared, "webhook", _webhook, "registry event subscriptions")
    hook.add_argument("action", choices=("create", "list", "delete", "deliveries"))
    hook.add_argument("target", nargs="?", default="", help="create: the URL; else the id")
    hook.add_argument("--model", help="one model's events (create), or those reaching it (list)")
    hook.add_argument("--event", action="append", choices=_EVENTS, help="repeat for several")
