"""The organization's commands: API tokens, model permissions and the audit log (app.client's
`Client` does the HTTP and sends the token of --token or $PT2SERDE_TOKEN)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from app.cli.common import EXIT_OK, Parser, emit, usage_error
from app.cli.registry import client

if TYPE_CHECKING:
    from app.cli.common import Subcommands
    from app.client import Client

_LEVELS = ("none", "read", "write", "manage")


def _token_line(token: Any) -> str:
    if token.revoked_at:
        state = "revoked"
    elif token.expires_at is None:
        state = "no expiry"
    else:
        state = f"expires {token.expires_at:%Y-%m-%d %H:%M}Z"
    role = "  admin" if token.admin else ""
    return f"{token.id}  {token.owner}  {token.name!r}  {state}{role}"


def _token(args: argparse.Namespace) -> int:
    if args.action == "create":
        if not args.name:
            return usage_error("give the token a name: pt2serde token create NAME")
        with client(args) as registry:
            made = registry.create_token(
                args.name, owner=args.owner, admin=args.admin, expires_at=args.expires or ""
            )
        human = f"{_token_line(made)}\n{made.secret}\n(shown once: store it now)"
        emit(args, made.model_dump(mode="json"), human)
    elif args.action == "list":
        with client(args) as registry:
            tokens = registry.tokens(args.owner or None)
        emit(
            args,
            [t.model_dump(mode="json") for t in tokens],
            "\n".join(_token_line(t) for t in tokens) or "no tokens",
        )
    else:
        if not args.name:
            return usage_error("give the id of the token to revoke: pt2serde token revoke ID")
        with client(args) as registry:
            gone = registry.revoke_token(args.name)
        emit(args, gone.model_dump(mode="json"), _token_line(gone))
    return EXIT_OK


def _permission(args: argparse.Namespace) -> int:
    if args.principal is not None and not args.remove and args.level is None:
        return usage_error("give the level (none, read, write, manage) or --remove")
    with client(args) as registry:
        return _permission_with(args, registry)


def _permission_with(args: argparse.Namespace, registry: Client) -> int:
    if args.principal is None:
        grants = registry.permissions(args.name)
        lines = [f"{g.principal}  {g.level}" for g in grants]
        emit(
            args,
            [g.model_dump(mode="json") for g in grants],
            "\n".join(lines) or f"{args.name} has no grants: the organization's default applies",
        )
    elif args.remove:
        registry.delete_permission(args.name, args.principal)
        emit(args, {"model": args.name, "principal": args.principal}, "removed")
    else:
        grant = registry.set_permission(args.name, args.principal, args.level)
        emit(args, grant.model_dump(mode="json"), f"{grant.principal}  {grant.level}")
    return EXIT_OK


def _audit(args: argparse.Namespace) -> int:
    wanted = {
        "model": args.model,
        "actor": args.actor,
        "action": args.action,
        "since": args.since,
        "until": args.until,
        "before": args.before,
        "limit": args.limit,
    }
    with client(args) as registry:
        page = registry.audit(**wanted)
    lines = [
        f"{e.id}  {e.at:%Y-%m-%d %H:%M:%S}Z  {e.actor}  {e.action}  {e.target}"
        + (f"  {e.before} -> {e.after}" if e.before or e.after else "")
        for e in page.entries
    ]
    if page.next is not None:
        lines.append(f"(older: --before {page.next})")
    emit(args, page.model_dump(mode="json"), "\n".join(lines) or "no entries")
    return EXIT_OK


def _command(sub: Subcommands, shared: Parser, name: str, help_: str) -> argparse.ArgumentParser:
    cmd: argparse.ArgumentParser = sub.add_parser(name, help=help_, parents=[shared])
    cmd.add_argument("--url", help="the service (default $PT2SERDE_URL or 127.0.0.1:8000)")
    cmd.add_argument("--json", action="store_true", help="machine-readable output")
    return cmd


def register(sub: Subcommands, shared: Parser) -> None:
    """Add the token, permission and audit commands."""
    token = _command(sub, shared, "token", "create, list or revoke API tokens")
    token.add_argument("action", choices=("create", "list", "revoke"))
    token.add_argument("name", nargs="?", help="create: the token's name; revoke: its id")
    token.add_argument("--owner", help="whose token (admins only: another user's)")
    token.add_argument("--admin", action="store_true", help="an admin token (admins only)")
    token.add_argument("--expires", help="expiry, ISO 8601 (e.g. 2027-01-31T00:00:00Z)")
    token.set_defaults(run=_token)
    perm = _command(sub, shared, "permission", "list, grant or remove a model's permissions")
    perm.add_argument("name", help="the model name")
    perm.add_argument("principal", nargs="?", help="a user, or * for every authenticated one")
    perm.add_argument("level", nargs="?", choices=_LEVELS)
    perm.add_argument("--remove", action="store_true")
    perm.set_defaults(run=_permission)
    audit = _command(sub, shared, "audit", "the audit log, newest first")
    audit.add_argument("--model")
    audit.add_argument("--actor")
    audit.add_argument("--action", help="e.g. version.push, alias.set, token.create")
    audit.add_argument("--since", help="ISO 8601 time")
    audit.add_argument("--until", help="ISO 8601 time")
    audit.add_argument("--before", type=int, help="entries older than this id (paging)")
    audit.add_argument("--limit", type=int, default=100)
    audit.set_defaults(run=_audit)
