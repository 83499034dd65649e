"""How far a version is checked: by torch itself, or short of torch when the only thing torch's
check could not do is import the custom operator namespaces the program calls.

A torch worker imports only what PT2SERDE_WORKER_IMPORTS names; a program calling
`transformers::grouped_mm_fallback` cannot be built by a worker that never imported transformers.
Everything else is checked without torch on our writer's bytes (schema, semantics, operators,
the safety screen, weights, nothing unpickled), so where the organization allows it
(PT2SERDE_ALLOW_UNVERIFIED) such a program is stored as unverified, naming those namespaces, and
verified later by a worker that imports them (`Registry.verify`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import schema
from app.operations import merge_torch_check
from app.programs.findings import Report
from app.programs.torch_check import TorchCheck
from app.registry.errors import RegistryFailure
from app.registry.records import Unverified, Verification, Verified

if TYPE_CHECKING:
    # the database layer only where rows are read: a document worker vetting a push needs none
    from sqlalchemy import Row

#: torch's finding for an operator namespace its worker has not imported (app.bridge.checks)
NAMESPACE_UNREGISTERED = "op-namespace-unregistered"

_ALLOW_HINT = (
    "; torch's check only lacked the operator namespace(s) {namespaces}, which the torch "
    "workers do not import: the operator can name their modules in PT2SERDE_WORKER_IMPORTS, or "
    "allow unverified pushes (PT2SERDE_ALLOW_UNVERIFIED=true) to store it checked short of "
    "torch and verify it later"
)


def invalid_program(report: Report, hint: str = "") -> RegistryFailure:
    """The refusal of a program not valid at level torch: its report's errors, and `hint`
    (what the operator could change)."""
    errors = [f for f in report.findings if f.severity == "error"]
    return RegistryFailure(
        "invalid-program",
        f"the program is not valid at level torch ({len(errors)} errors){hint}",
        [schema.Issue(f.code, f.path, f.message) for f in errors],
    )


def missing_namespaces(check: TorchCheck) -> list[str]:
    """The namespaces that alone kept torch from building the program: empty when torch built
    it, or when anything else is wrong with it."""
    if check.issues and all(i.code == NAMESPACE_UNREGISTERED for i in check.issues):
        return sorted(check.namespaces_to_register)
    return []


def at_push(report: Report, check: TorchCheck, allow_unverified: bool) -> Verification:
    """A pushed program's state from its report short of torch (valid) and torch's check:
    verified when torch built it, unverified when only namespaces were missing and unverified
    pushes are allowed; otherwise refused with torch's findings (invalid-program)."""
    missing = missing_namespaces(check)
    if missing and allow_unverified:
        return Unverified(namespaces=missing)
    hint = _ALLOW_HINT.format(namespaces=", ".join(missing)) if missing else ""
    return _verified(report, check, hint)


def again(report: Report, check: TorchCheck) -> Verified:
    """A stored version's state when torch's check runs again: verified, or refused with the
    state left as it was (namespace-unregistered while the workers still lack a namespace,
    invalid-program when torch finds the program wrong)."""
    missing = missing_namespaces(check)
    if missing:
        raise RegistryFailure(
            "namespace-unregistered",
            f"the torch workers still do not import the operator namespace(s) "
            f"{', '.join(missing)}: name their modules in PT2SERDE_WORKER_IMPORTS",
            [schema.Issue(i.code, i.path, i.message) for i in check.issues],
        )
    return _verified(report, check, "")


def _verified(report: Report, check: TorchCheck, hint: str) -> Verified:
    """Verified by the release that checked, or refused with the merged report's errors."""
    merged = merge_torch_check(report, check)
    if merged.valid:
        return Verified(torch=check.torch or None)
    raise invalid_program(merged, hint)


def columns(verification: Verification) -> dict[str, Any]:
    """A state as the versions table's columns hold it."""
    if isinstance(verification, Verified):
        return {"verified": True, "verified_torch": verification.torch, "unverified_namespaces": []}
    return {
        "verified": False,
        "verified_torch": None,
        "unverified_namespaces": verification.namespaces,
    }


def of_row(row: Row[Any]) -> Verification:
    """The state a versions row holds."""
    if row.verified:
        return Verified(torch=row.verified_torch)
    return Unverified(namespaces=list(row.unverified_namespaces))
