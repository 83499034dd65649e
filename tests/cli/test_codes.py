"""The CLI's own codes: listed in app/cli/codes.py, not in the server's problem catalogue."""

from __future__ import annotations

import ast

from app.cli.codes import CODES
from app.http.problems import CATALOGUE
from tests.api.codescan import CLIENT_SIDE, ROOT, raised_codes


def _client_strings() -> set[str]:
    """Every string constant in the client side's source, but for the table itself."""
    found: set[str] = set()
    for path in [*ROOT.glob("app/cli/**/*.py"), ROOT / "app/client.py"]:
        rel = path.relative_to(ROOT).as_posix()
        assert rel.startswith(CLIENT_SIDE)
        if rel == "app/cli/codes.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.add(node.value)
    return found


def test_every_code_the_client_side_raises_is_listed() -> None:
    raised = raised_codes(client=True)
    assert {"server-unreachable", "download-corrupt"} <= set(raised)
    unlisted = {c: sorted(f) for c, f in raised.items() if c not in CODES and c not in CATALOGUE}
    assert unlisted == {}


def test_every_listed_code_is_used_by_the_client_side() -> None:
    strings = _client_strings()
    # io-error is a literal; missing-extra is written inside its one-line message
    unused = [c for c in CODES if c not in strings and not any(f" {c}: " in s for s in strings)]
    assert unused == []


def test_the_server_catalogue_lists_no_client_code() -> None:
    assert sorted(set(CODES) & set(CATALOGUE)) == []
