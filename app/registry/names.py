"""The registry's names and references: model names, aliases, tag keys, version numbers, texts."""

from __future__ import annotations

import re

from app.registry.errors import RegistryFailure

_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_ALIAS = re.compile(r"[A-Za-z][A-Za-z0-9._-]{0,63}")
_TAG_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}")
#: a version reference naming the newest version not deleted (never an alias).
LATEST = "latest"
MAX_TAG_VALUE = 4096
MAX_DESCRIPTION = 4096
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


def check_tag_key(key: str) -> str:
    """`key` if it is a valid tag key."""
    return _check(_TAG_KEY, key, "tag key")


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
