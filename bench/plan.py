"""How much to run: repeat counts, the time budget, and torch runs skipped when they cannot fit.

torch's side costs milliseconds per node (its parse of 50k nodes takes minutes), so each torch
measurement is estimated first from the largest program it was already measured on (cost per
node times nodes) and skipped, with the estimate shown, when it would not fit in the time left.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from app.settings import Settings
from bench.measure import Timing, timed
from bench.progress import elapsed

T = TypeVar("T")
#: What a measurement cost: the program's nodes and the seconds it took.
Cost = tuple[int, float]

#: Smallest program whose cost per node is trusted for estimates (tiny programs are all
#: fixed overhead).
_ESTIMATE_FROM = 500


@dataclass
class Plan:
    """Repeat counts, limits and the time budget of one run."""

    smoke: bool
    settings: Settings
    #: seconds since the start after which no torch measurement starts.
    deadline: float
    #: seconds kept free for the phases still to come.
    reserve: float = 0.0
    #: the longest single torch measurement (estimated) that is started at all.
    cap: float = 240.0
    #: torch runs stop repeating past this many seconds of one measurement.
    repeat_budget: float = 20.0
    #: off for the tiled programs past 5k nodes: torch's side is only estimated there.
    torch_enabled: bool = True
    _costs: dict[str, Cost] = field(default_factory=dict)

    def repeats(self, nodes: int) -> int:
        """Runs of our side (and of cheap floors)."""
        if self.smoke:
            return 1
        return 7 if nodes <= 2000 else 5 if nodes <= 6000 else 2 if nodes <= 25_000 else 1

    def torch_repeats(self, key: str, nodes: int) -> int:
        """Runs of a torch measurement (bounded by `repeat_budget` as well)."""
        if self.smoke or key in ("load", "save"):
            return 1
        if key == "dump":
            return self.repeats(nodes)
        return 2 if nodes <= 2000 else 1

    def deserialize(self, nodes: int) -> bool:
        """Whether to measure deserialize (torch's graph deserializer makes both sides slow)."""
        return self.smoke or nodes <= 6000

    def deserialize_repeats(self, nodes: int) -> int:
        """Runs of our deserialize."""
        return 3 if not self.smoke and nodes <= 500 else 1

    @property
    def hash_repeats(self) -> int:
        """Runs of the hashing benchmark."""
        return 1 if self.smoke else 3

    def estimate(self, key: str, nodes: int) -> float:
        """Estimated seconds of a torch measurement (nan when nothing is known yet)."""
        known = self._costs.get(key)
        if known is None:
            return math.nan
        ref_nodes, seconds = known
        return seconds * nodes / ref_nodes

    def observe(self, key: str, nodes: int, seconds: float) -> None:
        """Remember a measurement's cost for estimates on larger programs."""
        if nodes >= _ESTIMATE_FROM and nodes >= self._costs.get(key, (0, 0.0))[0]:
            self._costs[key] = (nodes, seconds)

    def learned(self) -> dict[str, Cost]:
        """The costs observed so far (a measuring child sends them back to the run)."""
        return dict(self._costs)

    def learn(self, costs: dict[str, Cost]) -> None:
        """Take the costs a measuring child observed."""
        for key, (nodes, seconds) in costs.items():
            self.observe(key, nodes, seconds)

    def fits(self, seconds: float) -> bool:
        """Whether a measurement of about `seconds` fits in the budget."""
        if math.isnan(seconds):
            return True
        return seconds <= self.cap and elapsed() + seconds + self.reserve <= self.deadline

    def torch(
        self, key: str, nodes: int, fn: Callable[[], T], repeats: int | None = None
    ) -> tuple[Timing | None, T | None, str]:
        """Time a torch call if it fits; (timing, result, "") or (None, None, why not)."""
        estimate = self.estimate(key, nodes)
        if not self.torch_enabled:
            return None, None, f"not run, estimated from its cost per node: {estimate:.0f} s"
        if not self.fits(estimate):
            return None, None, f"not run: est. {estimate:.0f} s does not fit the time budget"
        try:
            timing, result = timed(
                fn,
                repeats=repeats or self.torch_repeats(key, nodes),
                budget=self.repeat_budget,
            )
        except Exception as exc:
            return None, None, f"torch raised {type(exc).__name__}: {str(exc)[:160]}"
        self.observe(key, nodes, timing.best)
        return timing, result, ""
