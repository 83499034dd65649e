"""Zip member names: what a name may be (nothing that could escape or confuse a directory),
how names repeat, and how a message shows one."""

from __future__ import annotations

import functools
import re

from app.archive.errors import ArchiveFailure

MAX_NAME_LENGTH = 1024
_WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:")


def check_name(name: str) -> None:
    """Refuse a member name that could escape or confuse a directory (archive-bad-name)."""
    problem = _name_problem(name)
    if problem:
        raise ArchiveFailure("archive-bad-name", f"member name {show_name(name)} {problem}")


@functools.lru_cache(maxsize=4096)
def _name_problem(name: str) -> str:
    if not name:
        return "is empty"
    if len(name) > MAX_NAME_LENGTH:
        return f"is {len(name)} characters long (limit {MAX_NAME_LENGTH})"
    if "\x00" in name:
        return "contains NUL"
    if "\\" in name:
        return "contains a backslash"
    if name.startswith("/") or _WINDOWS_DRIVE.match(name):
        return "is absolute"
    parts = name[:-1].split("/") if name.endswith("/") else name.split("/")
    if ".." in parts:
        return "contains a '..' component"
    if "." in parts:
        return "contains a '.' component"
    if "" in parts:
        return "contains an empty component"
    return ""


def common_root(names: list[str]) -> str:
    """The one top-level directory all `names` live under (archive-many-roots)."""
    roots = list(dict.fromkeys(name.split("/", 1)[0] for name in names))
    if len(roots) != 1 or any("/" not in name for name in names):
        shown = ", ".join(show_name(r) for r in roots[:5]) or "none"
        raise ArchiveFailure(
            "archive-many-roots",
            f"members must share one top-level directory; found {len(roots)}: {shown}",
        )
    return roots[0]


def show_name(name: str) -> str:
    """A member name for a message: quoted, and cut at 80 characters."""
    return repr(name if len(name) <= 80 else name[:77] + "...")


def refuse_duplicate(name: str, previous: str) -> None:
    """archive-duplicate-name for `name`, the same as `previous` or equal to it but for case."""
    if name == previous:
        raise ArchiveFailure("archive-duplicate-name", f"member {show_name(name)} repeats")
    raise ArchiveFailure(
        "archive-duplicate-name",
        f"members {show_name(previous)} and {show_name(name)} differ only in case, which "
        "torch's zip reader does not tell apart",
    )


def refuse_spellings(name: str, first: bytes, second: bytes) -> None:
    """archive-duplicate-name for two members whose different bytes read as the same `name`."""
    raise ArchiveFailure(
        "archive-duplicate-name",
        f"two members read as {show_name(name)} but are spelled differently ({first[:40]!r} "
        f"and {second[:40]!r}): torch's zip reader tells them apart, this reader could not",
    )
