"""The problem catalogue lists exactly the codes the code base can raise."""

from __future__ import annotations

from typing import get_args

from app.cli.codes import CODES as CLIENT_CODES
from app.failure import ProblemCode
from app.http.problems import CATALOGUE
from tests.api.codescan import raised_codes


def test_every_raised_code_is_catalogued() -> None:
    missing = {
        code: sorted(files) for code, files in raised_codes().items() if code not in CATALOGUE
    }
    assert missing == {}


def test_every_catalogued_code_is_raised() -> None:
    assert sorted(set(CATALOGUE) - set(raised_codes())) == []


def test_statuses_are_client_or_service_errors() -> None:
    statuses = {400, 401, 403, 404, 405, 408, 409, 413, 415, 416, 422, 429, 431, 500, 503}
    assert {p.status for p in CATALOGUE.values()} <= statuses
    assert [c for c, p in CATALOGUE.items() if p.status == 500] == [
        "internal-error",
        "worker-bad-job",
    ]


def test_problem_code_is_the_catalogue_and_the_client_codes() -> None:
    """`ProblemCode`, which mypy checks every raised code against, lists exactly the documented
    codes: the catalogue the service answers with and the CLI's own."""
    members = get_args(ProblemCode)
    assert len(members) == len(set(members))
    assert set(members) == set(CATALOGUE) | set(CLIENT_CODES)
    assert set(CATALOGUE).isdisjoint(CLIENT_CODES)
