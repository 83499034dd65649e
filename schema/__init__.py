"""The wire contract of torch exported programs (schema 8.x): models, history, I/O.

Pure Pydantic v2; imports neither torch nor fastapi.
"""

from schema._base import Arm, OneOf, Struct, Version, Wire
from schema._wire import NonFinite
from schema.compat import Compat, Mode, UnknownMode, Verdict, compat, compatibility
from schema.description import describe, parse_type
from schema.diff import (
    RULES,
    Change,
    Rule,
    SchemaDiff,
    changelog,
    describe_with_ids,
    diff,
    load_description,
)
from schema.downgrade import Downgraded, DowngradeRefused, downgrade
from schema.errors import (
    DescriptionInvalid,
    DocumentInvalid,
    Issue,
    SchemaError,
    UnknownVersion,
    UnsupportedMajor,
)
from schema.history import CURRENT, RELEASES, format_version, parse_version, versions
from schema.io import Read, dump, load, read, unknown_fields
from schema.jsonschema import json_schema
from schema.models import *  # noqa: F403
from schema.upgrade import Upgraded, upgrade

__all__ = [
    "CURRENT",
    "RELEASES",
    "Arm",
    "DescriptionInvalid",
    "DocumentInvalid",
    "Issue",
    "NonFinite",
    "OneOf",
    "Read",
    "SchemaError",
    "Struct",
    "UnknownVersion",
    "Version",
    "Wire",
    "changelog",
    "describe",
    "downgrade",
    "Downgraded",
    "DowngradeRefused",
    "dump",
    "format_version",
    "json_schema",
    "load",
    "parse_type",
    "parse_version",
    "read",
    "unknown_fields",
    "versions",
    "RULES",
    "Change",
    "Compat",
    "Mode",
    "Rule",
    "SchemaDiff",
    "UnknownMode",
    "UnsupportedMajor",
    "Upgraded",
    "Verdict",
    "compat",
    "compatibility",
    "describe_with_ids",
    "diff",
    "load_description",
    "upgrade",
]
