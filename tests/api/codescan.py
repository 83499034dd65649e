"""Every problem code the code base can raise, found by reading its source (not by running it)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Calls whose first argument is a problem code.
_RAISERS = ("Failure", "ServiceError", "UnsafeProgram", "UnsafeExpression")
#: The client's side: the CLI and its HTTP client, whose own codes app/cli/codes.py lists.
CLIENT_SIDE = ("app/cli/", "app/client.py")
#: Modules whose findings are raised as problems, with the call that makes one there
#: (the screen refuses what it adds; every bound of the raw bytes refuses).
_REFUSING_FINDINGS = {"app/programs/screen.py": "add", "app/programs/bounds.py": "_bound"}


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _strings(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _strings(node.body) + _strings(node.orelse)
    return []


def _targets(node: ast.Assign | ast.AnnAssign) -> list[ast.expr]:
    return node.targets if isinstance(node, ast.Assign) else [node.target]


def _advisory(call: ast.Call) -> bool:
    """A finding added as info or warning is reported, never raised."""
    return len(call.args) > 1 and _strings(call.args[1]) in (["info"], ["warning"])


def raised_codes(client: bool = False) -> dict[str, set[str]]:
    """code -> the files that raise it, on the server's side (or with `client`, the client's)."""
    found: dict[str, set[str]] = {}
    for path in sorted([*ROOT.glob("app/**/*.py"), *ROOT.glob("schema/**/*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(CLIENT_SIDE) != client:
            continue
        tree = ast.parse(path.read_text(), rel)
        for node in ast.walk(tree):
            codes: list[str] = []
            if isinstance(node, ast.Call) and node.args:
                name = _name(node.func)
                if name.endswith(_RAISERS) or name.lower().endswith(("_failure", "_fail")):
                    codes = _strings(node.args[0])
                elif name == "problem":
                    codes = _strings(node.args[0])
                elif name == _REFUSING_FINDINGS.get(rel) and not _advisory(node):
                    codes = _strings(node.args[0])
            elif isinstance(node, ast.ClassDef):
                codes = [
                    code
                    for stmt in node.body
                    if isinstance(stmt, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "code" for t in stmt.targets)
                    for code in _strings(stmt.value)
                ]
            elif isinstance(node, ast.Assign | ast.AnnAssign) and any(
                isinstance(t, ast.Name) and t.id.endswith("_CODES") for t in _targets(node)
            ):
                elts = node.value.elts if isinstance(node.value, ast.Tuple) else []
                codes = [c for e in elts for c in _strings(e)]
            elif isinstance(node, ast.Dict) and rel == "app/archive/errors.py":
                codes = [k.value for k in node.keys if isinstance(k, ast.Constant)]
            elif isinstance(node, ast.Dict) and rel == "app/http/problems.py":
                codes = [v.value for v in node.values if isinstance(v, ast.Constant)]
            for code in codes:
                if code and code[0].isalpha() and code == code.lower() and " " not in code:
                    found.setdefault(code, set()).add(rel)
    return found
