"""The rules of each torch release, read from the generated files in `data/` (no torch here).

One file per release, `data/torch-<release>.json.gz`, written by `app.releases.generate`
(`make releases-rules`): what that release registers (operators, higher-order operators, the
Python targets it writes, attribute names on `torch.ops`), its `weights_only` allowlist, the schema
version it writes and how its reader treats keys, union arms and enum values it does not know.
Releases whose venv could not run the dump (none today, but the format allows it) hold their
reader policy and schema version only, read from their source; `Rules.opset_known` says which.
"""

from __future__ import annotations

import functools
import gzip
import importlib.metadata
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal

import orjson

from app.releases.ops import OpArgument, OpReturn, OpSchema
from schema.errors import SchemaError

#: The layout of the rules files this module reads (`app/bridge/release_dump.py` FORMAT).
FORMAT = 2
#: The layout of the operator registry inside a rules file (`app/bridge/opset_dump.py` FORMAT).
OPSET_FORMAT = 1
#: The torch release our workers run by default (the Makefile's and CI's wheel).
INSTALLED = "2.13.0"
_FILE = re.compile(r"torch-(\d+)\.(\d+)\.(\d+)\.json\.gz")
_RELEASE = re.compile(r"(\d+)\.(\d+)\.(\d+)")

Policy = Literal["fatal", "skip"]


class UnknownRelease(SchemaError):
    """A torch release we ship no rules for."""

    code = "unknown-torch-release"


@dataclass(frozen=True)
class Rules:
    """What one torch release registers, writes and reads (generated from that release)."""

    release: str
    #: torch's own version string where the rules were dumped (`2.14.1+cu130`)
    torch: str
    schema_version: tuple[int, int]
    #: its reader on keys it does not know: `cls(**data)` is a TypeError up to 2.8, skipped after
    unknown_keys: Policy
    unknown_arms: Policy
    unknown_enum_values: Policy
    #: its reader on a higher-order op's one result written as a list with no
    #: `is_hop_single_tensor_return` (as torch 2.6 writes cond): read up to 2.7, fatal after
    hop_list_output: Policy
    #: the archive its `torch.export.save` writes: one serialized_exported_program.json
    #: ("legacy", up to 2.7) or <root>/models/ with data/ and archive_format ("pt2", from 2.8);
    #: a release reads the layout it writes, and the legacy one where `reads_legacy_archive`
    archive_layout: Literal["legacy", "pt2"]
    reads_legacy_archive: bool
    #: how the file was made (release venv and probe, or source read)
    source: str
    #: whether the operator registry was dumped (else only the reader policy is known)
    opset_known: bool
    _operators: dict[str, dict[str, dict[str, Any]]] = field(repr=False, compare=False)
    _higher_order: frozenset[str] = field(repr=False, compare=False)
    _python_targets: frozenset[str] = field(repr=False, compare=False)
    _attributes: dict[str, frozenset[str]] = field(repr=False, compare=False)
    _weights_only: dict[str, Any] | None = field(repr=False, compare=False)
    _pytree_types: frozenset[str] = field(repr=False, compare=False)

    def lookup(self, namespace: str, name: str, overload: str) -> OpSchema | None:
        """The schema of `torch.ops.<namespace>.<name>.<overload>`, or None if it has none."""
        return _lookup(self.release, namespace, name, overload)

    def overloads(self, namespace: str, name: str) -> tuple[str, ...]:
        """The overload names of an operator (empty if the release has no such operator)."""
        return tuple(sorted(self._operators.get(namespace, {}).get(name, {})))

    def has_operator(self, namespace: str, name: str) -> bool:
        """Whether the release registers an operator of that name (in any overload)."""
        return name in self._operators.get(namespace, {})

    def has_overload(self, namespace: str, name: str, overload: str) -> bool:
        """Whether `torch.ops.<namespace>.<name>.<overload>` resolves to an operator."""
        entry = self._operators.get(namespace, {}).get(name, {}).get(overload)
        return entry is not None and not entry.get("unreachable", False)

    def is_builtin_namespace(self, namespace: str) -> bool:
        """Whether a fresh process of the release that loads programs registered the namespace."""
        return namespace in self._operators

    def builtin_namespaces(self) -> frozenset[str]:
        """Every operator namespace the release registers by itself."""
        return frozenset(self._operators)

    def is_higher_order(self, name: str) -> bool:
        """Whether `torch.ops.higher_order.<name>` is one of its higher-order operators."""
        return name in self._higher_order

    def higher_order_names(self) -> frozenset[str]:
        """Every higher-order operator of the release."""
        return self._higher_order

    def python_targets(self) -> frozenset[str]:
        """The Python callables the release writes as node targets and reads back."""
        return self._python_targets

    def attribute_names(self, level: str) -> frozenset[str]:
        """Names that reach an attribute, not an operator, at `level` ("ops", "namespace",
        "packet", "higher_order")."""
        return self._attributes.get(level, frozenset())

    def pytree_types(self) -> frozenset[str]:
        """The type names its treespec reader knows (`torch.return_types.linalg_polar`)."""
        return self._pytree_types

    def weights_only(self) -> dict[str, Any] | None:
        """Its `weights_only` unpickler's rules as dumped (`app.archive.pickles` reads them)."""
        return self._weights_only

    def schemas(self) -> Iterator[OpSchema]:
        """Every overload, by namespace, operator and overload name."""
        for namespace in sorted(self._operators):
            for name in sorted(self._operators[namespace]):
                for overload in sorted(self._operators[namespace][name]):
                    op = self.lookup(namespace, name, overload)
                    if op is not None:
                        yield op


def release_key(release: str) -> tuple[int, int, int]:
    """`"2.14.1"` -> (2, 14, 1), for ordering releases."""
    major, minor, patch = release.split(".")
    return int(major), int(minor), int(patch)


@functools.cache
def releases() -> tuple[str, ...]:
    """Every release with shipped rules, oldest first."""
    names = [
        ".".join(m.groups())
        for f in resources.files(__package__).joinpath("data").iterdir()
        if (m := _FILE.fullmatch(f.name))
    ]
    return tuple(sorted(names, key=release_key))


def rules(release: str) -> Rules:
    """The rules of `release` (`"2.14.1"`); UnknownRelease for one we ship none for."""
    if release not in releases():
        raise UnknownRelease(
            f"no rules for torch {release}; known releases: {', '.join(releases())}"
        )
    return _read(release)


def installed() -> Rules:
    """The rules of the pinned torch (what our workers run by default)."""
    return rules(INSTALLED)


def running() -> str | None:
    """The torch installed beside us (`2.15.0+cu132`), which our torch workers import (they run
    in this environment); None without torch. Read from its metadata: torch is not imported."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def newest() -> Rules:
    """The rules of the newest release we ship."""
    return rules(releases()[-1])


def releases_with(namespace: str, name: str, overload: str | None = None) -> tuple[str, ...]:
    """The releases whose registry has the operator (that overload of it, when named)."""
    return tuple(
        r
        for r in releases()
        if (
            rules(r).has_operator(namespace, name)
            if overload is None
            else rules(r).has_overload(namespace, name, overload)
        )
    )


def judging(torch_version: str | None) -> tuple[Rules, str | None]:
    """The rules of the release that wrote a document (`ExportedProgram.torch_version`), with a
    note when they stand in for another: the newest known where absent or unknown."""
    known = releases()
    parsed = _RELEASE.match(torch_version or "")
    if parsed is None:
        best = newest()
        said = f"torch_version {torch_version!r}" if torch_version else "no torch_version"
        return best, f"the document names {said}: judged by torch {best.release}, the newest known"
    release = parsed.group()
    if release in known and rules(release).opset_known:
        return rules(release), None
    minor = release.rsplit(".", 1)[0] + "."
    same = [r for r in known if r.startswith(minor) and rules(r).opset_known]
    if same:
        return rules(same[-1]), (
            f"written by torch {release}: judged by torch {same[-1]}, the same minor release"
        )
    best = newest()
    return best, f"written by torch {release}, unknown here: judged by torch {best.release}"


@functools.cache
def _read(release: str) -> Rules:
    path = resources.files(__package__).joinpath("data", f"torch-{release}.json.gz")
    raw = orjson.loads(gzip.decompress(path.read_bytes()))
    if raw["format"] != FORMAT:
        raise RuntimeError(f"{path.name} has format {raw['format']}, this reader {FORMAT}")
    opset = raw.get("opset")
    operators: dict[str, dict[str, dict[str, Any]]] = {}
    if opset is not None:
        if opset["format"] != OPSET_FORMAT:
            raise RuntimeError(f"{path.name} holds opset format {opset['format']}")
        for qualified, entries in opset["operators"].items():
            namespace, _, name = qualified.partition("::")
            operators.setdefault(namespace, {})[name] = entries
    reader = raw["reader"]
    major, minor = raw["schema_version"]
    return Rules(
        release=raw["release"],
        torch=raw["torch"],
        schema_version=(major, minor),
        unknown_keys=_policy(reader, "unknown_key", "unknown_node_key"),
        unknown_arms=_policy(reader, "unknown_arm"),
        unknown_enum_values=_policy(reader, "unknown_enum_value"),
        hop_list_output=_policy(reader, "hop_list_output"),
        archive_layout="legacy" if raw["archive_layout"] == "legacy" else "pt2",
        reads_legacy_archive=_policy(reader, "legacy_archive") == "skip",
        source=raw["source"],
        opset_known=opset is not None,
        _operators=operators,
        _higher_order=frozenset(opset["higher_order"] if opset else ()),
        _python_targets=frozenset(opset["python_targets"] if opset else ()),
        _attributes={k: frozenset(v) for k, v in (opset["attributes"] if opset else {}).items()},
        _weights_only=raw.get("weights_only"),
        _pytree_types=frozenset(raw.get("pytree_types") or ()),
    )


def _policy(reader: dict[str, Any], *probes: str) -> Policy:
    """ "skip" only when every probe of the kind loaded."""
    skips = all(reader[p]["policy"] == "skip" for p in probes)
    return "skip" if skips else "fatal"


@functools.lru_cache(maxsize=8192)
def _lookup(release: str, namespace: str, name: str, overload: str) -> OpSchema | None:
    entry = _read(release)._operators.get(namespace, {}).get(name, {}).get(overload)
    if entry is None:
        return None
    return OpSchema(
        namespace=namespace,
        name=name,
        overload=overload,
        arguments=tuple(
            OpArgument(
                name=a["name"],
                type=a["type"],
                default=a.get("default"),
                kwarg_only=a.get("kwarg_only", False),
                alias=a.get("alias"),
            )
            for a in entry["arguments"]
        ),
        returns=tuple(
            OpReturn(name=r.get("name", ""), type=r["type"], alias=r.get("alias"))
            for r in entry["returns"]
        ),
        vararg=entry.get("vararg", False),
        varret=entry.get("varret", False),
        unreachable=entry.get("unreachable", False),
        numbers_as_tensors=entry.get("numbers_as_tensors", False),
    )
