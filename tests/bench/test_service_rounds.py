"""The HTTP rows' rounds (bench.service.alternating_loads): server and library windows in turn,
each side first in every other round, the best window of each side kept with every error."""

from __future__ import annotations

from typing import Any

import pytest

from app.settings import Settings
from bench import service
from bench.service import Load


def _load(rate: float, errors: list[str] | None = None, peak: int = 1, answer: Any = None) -> Load:
    return Load([0.01] * int(rate), 1.0, errors or [], peak, answer)


def test_rounds_alternate_and_keep_each_sides_best(monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []
    server_loads = iter([_load(80, answer=("first",)), _load(95, ["late"], 7), _load(90)])
    library_loads = iter([_load(120, peak=3), _load(100), _load(110)])

    def http_load(*_: Any) -> Load:
        order.append("server")
        return next(server_loads)

    def library_load(*_: Any) -> Load:
        order.append("library")
        return next(library_loads)

    monkeypatch.setattr(service, "http_load", http_load)
    monkeypatch.setattr(service, "library_load", library_load)
    taken = service.alternating_loads(None, None, b"", Settings(), 1, 1.5, 10)  # type: ignore[arg-type]
    assert order == ["server", "library", "library", "server", "server", "library"]
    assert taken.rates == [(80, 120), (95, 100), (90, 110)]
    assert (taken.server.rate, taken.library.rate) == (95, 120)
    # the answer compared is the first window's; errors and the peak are every window's
    assert taken.server.answer == ("first",)
    assert taken.server.errors == ["late"]
    assert (taken.server.peak, taken.library.peak) == (7, 3)
