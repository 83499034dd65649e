"""A document for an older torch release's `torch.export.load`, or why none can be written.

The one entry point is `for_release`: the schema part is `schema.downgrade` (fields the release's
schema lacks dropped at their default, the rest refused with rule and pointer); around it, what
the release itself decides: which schema it reads, whether its loader reads the archive layout
we write, and whether it registers every operator the program calls.
"""

from __future__ import annotations

import re
from functools import partial
from typing import Any

import schema
from app.failure import Failure
from app.programs.graph import walk_graphs
from app.releases import Rules, UnknownRelease, missing, release_key, releases, rules

#: The first release whose `torch.export.load` reads tensors as raw bytes named by
#: `data/weights/<model>_weights_config.json` (schema 8.14's PayloadConfig). torch 2.8.0's
#: `pt2_archive/_package.py` reads a pickled state dict (`data/weights/<model>.pt`), and 2.6/2.7
#: the older zip (`serialized_exported_program.json`, `serialized_state_dict.pt`): pickles this
#: service does not write.
RAW_TENSOR_ARCHIVES = "2.9.0"
_RELEASE = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?(?:\+[0-9A-Za-z.]+)?")


class ReleaseFailure(Failure):
    """A program the target release cannot be handed exactly."""


def for_release(doc: schema.ExportedProgram, release: str) -> tuple[Rules, schema.Downgraded]:
    """The document torch `release` ("2.10", "2.10.0", "2.10.0+cu128") reads as `doc`, with that
    release's rules; refused (a coded Failure or `schema.DowngradeRefused`, with the rule and
    the path) where its reader would read something else or could not load the archive."""
    target = rules(resolve(release))
    if release_key(target.release) < release_key(RAW_TENSOR_ARCHIVES):
        raise ReleaseFailure(
            "release-archive-layout",
            f"torch {target.release}'s torch.export.load reads weights as pickles (a torch.save "
            f"state dict); pt2serde writes the raw-tensor archive torch {RAW_TENSOR_ARCHIVES} "
            "and newer read",
        )
    lacking = _missing_operators(doc, target)
    if lacking:
        raise ReleaseFailure(
            "release-missing-operator",
            f"torch {target.release} cannot run the program: {lacking[0].message}"
            + (f" (and {len(lacking) - 1} more)" if len(lacking) > 1 else ""),
            lacking,
        )
    named = {"Node.name": partial(_named_alike, target)}
    return target, schema.downgrade(doc, target.schema_version, named)


def resolve(release: str) -> str:
    """The shipped release a user's spelling names: exact, or the newest patch of a minor
    ("2.10" -> "2.10.0"), a local version label ignored; UnknownRelease for others."""
    match = _RELEASE.fullmatch(release.strip())
    known = releases()
    if match is not None:
        major, minor, patch = match.groups()
        if patch is not None:
            exact = f"{major}.{minor}.{patch}"
            if exact in known:
                return exact
        else:
            same = [r for r in known if r.startswith(f"{major}.{minor}.")]
            if same:
                return same[-1]
    raise UnknownRelease(f"no rules for torch {release!r}; known releases: {', '.join(known)}")


def _missing_operators(doc: schema.ExportedProgram, target: Rules) -> list[schema.Issue]:
    """One issue per node target the release does not resolve, at its first node."""
    shipped = [rules(r) for r in releases()]
    seen: set[str] = set()
    issues: list[schema.Issue] = []
    for site in walk_graphs(doc.graph_module.graph):
        for i, node in enumerate(site.graph.nodes):
            if node.target in seen:
                continue
            seen.add(node.target)
            why = missing(target, node.target, shipped)
            if why is not None:
                issues.append(
                    schema.Issue("release-missing-operator", f"{site.pointer}/nodes/{i}", why)
                )
    return issues


def _named_alike(target: Rules, node: dict[str, Any]) -> bool:
    """Whether a reader without ``Node.name`` (torch 2.10 and older) names the node as it is
    named: it names a node after its one tensor output when the node calls an operator whose
    schema returns one Tensor, or a higher-order operator marked as returning a single tensor,
    and after its symbolic output for ``aten.item``; every other node gets a name FX makes up."""
    outputs = node.get("outputs")
    if not isinstance(outputs, list) or len(outputs) != 1 or not isinstance(outputs[0], dict):
        return False
    [(arm, value)] = outputs[0].items()
    name = node.get("name")
    parts = str(node.get("target")).split(".")
    if parts == ["torch", "ops", "aten", "item", "default"]:
        return arm.startswith("as_sym_") and bool(value == {"as_name": name})
    if arm != "as_tensor" or value.get("name") != name or parts[:2] != ["torch", "ops"]:
        return False
    if parts[2] == "higher_order":
        return len(parts) == 4 and node.get("is_hop_single_tensor_return") is True
    op = target.lookup(*parts[2:]) if len(parts) == 5 else None
    return op is not None and len(op.returns) == 1 and op.returns[0].type == "Tensor"
