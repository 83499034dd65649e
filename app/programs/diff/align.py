"""The pairing of two prepared graphs' nodes, in the rounds `app.programs.diff.nodes`
describes."""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable, Iterable

from app.programs.diff.arguments import operator_name
from app.programs.diff.prepared import PreparedGraph, PreparedNode, Ref

#: How many values a look through added/removed nodes may visit.
_FRONTIER_STEPS = 32
#: How many candidates below what a node reads are scored.
_CANDIDATES = 16
#: How many unpaired old nodes after the same paired node are scored as "changed" partners.
_GAP_CANDIDATES = 4
#: How many unpaired nodes deep candidates are looked for below what a node reads.
_REACH = 4
#: Rounds of propagation and change pairing.
_ROUNDS = 4


class Aligner:
    """Pairs the nodes of two graphs (positions are canonical positions)."""

    def __init__(self, old: PreparedGraph, new: PreparedGraph) -> None:
        self.old = old
        self.new = new
        self.o2n: dict[int, int] = {}
        self.n2o: dict[int, int] = {}
        self.old_refs = [tuple(self.old_ref(v) for v in n.values) for n in old.nodes]
        self.old_users: dict[Ref, list[int]] = defaultdict(list)
        for i in range(len(old.nodes)):
            for ref in dict.fromkeys(self.old_refs[i]):
                self.old_users[ref].append(i)
        self.consumers_old = self._consumers(old)
        self.consumers_new = self._consumers(new)
        self._frontiers: dict[tuple[str, str], frozenset[Ref]] = {}

    @staticmethod
    def _consumers(graph: PreparedGraph) -> list[list[int]]:
        found: list[list[int]] = [[] for _ in graph.nodes]
        for pos, node in enumerate(graph.nodes):
            for producer in dict.fromkeys(
                graph.producer[v][0] for v in node.values if v in graph.producer
            ):
                found[producer].append(pos)
        return found

    def pair(self, i: int, j: int) -> None:
        """Record old node i and new node j as the same node."""
        self.o2n[i] = j
        self.n2o[j] = i

    # ------------------------------------------------ references

    def old_ref(self, value: str) -> Ref:
        """An old value's identity in old positions."""
        known = self.old.inputs.get(value)
        if known is not None:
            return known
        made = self.old.producer.get(value)
        return ("?", "old", value) if made is None else ("node", made[0], made[1])

    def new_ref(self, value: str) -> Ref | None:
        """A new value's identity in old positions; None while its producer is unpaired."""
        known = self.new.inputs.get(value)
        if known is not None:
            return known
        made = self.new.producer.get(value)
        if made is None:
            return ("?", "new", value)
        partner = self.n2o.get(made[0])
        return None if partner is None else ("node", partner, made[1])

    def _frontier(
        self, graph: PreparedGraph, value: str, partner: Callable[[int], int | None]
    ) -> frozenset[Ref]:
        """What a value reads, looking through unpaired nodes up to paired ones and inputs."""
        found: set[Ref] = set()
        stack = [value]
        seen: set[str] = set()
        while stack and len(seen) < _FRONTIER_STEPS:
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            known = graph.inputs.get(current)
            if known is not None:
                found.add(known)
                continue
            made = graph.producer.get(current)
            if made is None:
                continue
            other = partner(made[0])
            if other is not None:
                found.add(("node", other, made[1]))
            else:
                stack.extend(graph.nodes[made[0]].values)
        return frozenset(found)

    def frontier_old(self, value: str) -> frozenset[Ref]:
        """The old value's frontier, in old positions."""
        return self._memo(
            ("old", value),
            lambda: self._frontier(self.old, value, lambda i: i if i in self.o2n else None),
        )

    def frontier_new(self, value: str) -> frozenset[Ref]:
        """The new value's frontier, in old positions."""
        return self._memo(("new", value), lambda: self._frontier(self.new, value, self.n2o.get))

    def _memo(self, key: tuple[str, str], compute: Callable[[], frozenset[Ref]]) -> frozenset[Ref]:
        # Kept for one round. New-side frontiers stay exact: a round visits new nodes in
        # topological order and pairs only the one it visits, never an ancestor of a value
        # already looked at. An old-side frontier may miss a pair made later in the round;
        # that can only lose a match, which the next round (with a fresh cache) finds.
        found = self._frontiers.get(key)
        if found is None:
            found = self._frontiers[key] = compute()
        return found

    def similarity(self, old_value: str, new_value: str, strict: bool) -> float | None:
        """How well the new value stands where the old one did: 1.0 for the same value,
        less when added or removed nodes lie between; None when it does not.

        Strictly, what one side reads through unpaired nodes must contain what the other
        reads (an insertion or a removal); loosely, they need only overlap.
        """
        ref = self.new_ref(new_value)
        if ref is not None and ref == self.old_ref(old_value):
            return 1.0
        a = self.old.producer.get(old_value)
        b = self.new.producer.get(new_value)
        if a is not None and b is not None and a[1] == b[1]:
            if self.old.nodes[a[0]].merkle == self.new.nodes[b[0]].merkle:
                return 1.0
        old_free = a is not None and a[0] not in self.o2n
        new_free = b is not None and b[0] not in self.n2o
        if not (old_free or new_free):
            return None
        before, after = self.frontier_old(old_value), self.frontier_new(new_value)
        common = before & after
        if not common or (strict and not (before <= after or after <= before)):
            return None
        return len(common) / len(before | after)

    def corresponds(self, old_value: str, new_value: str) -> bool:
        """Whether the new value stands where the old one did (added/removed nodes aside)."""
        return self.similarity(old_value, new_value, strict=False) is not None

    # ------------------------------------------------ rounds

    def align(self) -> None:
        """Pair what can be paired, round after round (see the module docstring)."""
        self._equal_hashes()
        for _ in range(_ROUNDS):
            self._propagate()
            self._propagate(through=True)
            if not self._changed():
                break

    def _equal_hashes(self) -> None:
        waiting: dict[str, deque[int]] = defaultdict(deque)
        for i, node in enumerate(self.old.nodes):
            waiting[node.merkle].append(i)
        for j, node in enumerate(self.new.nodes):
            queue = waiting.get(node.merkle)
            if queue:
                self.pair(queue.popleft(), j)

    def _propagate(self, through: bool = False) -> None:
        self._frontiers.clear()
        for j, node in enumerate(self.new.nodes):
            if j in self.n2o:
                continue
            found = self._exact(node)
            if found is None and through:
                found = self._through(node)
            if found is not None:
                self.pair(found, j)

    def _exact(self, node: PreparedNode) -> int | None:
        refs: list[Ref] = []
        for value in node.values:
            ref = self.new_ref(value)
            if ref is None:
                return None
            refs.append(ref)
        if not refs:
            return None
        wanted = tuple(refs)
        for i in self.old_users.get(refs[0], []):
            if (
                i not in self.o2n
                and self.old.nodes[i].local == node.local
                and self.old_refs[i] == wanted
            ):
                return i
        return None

    def _readers(self, refs: Iterable[Ref]) -> list[int]:
        """Unpaired old nodes that read `refs`, directly or through a few unpaired old nodes."""
        found: dict[int, None] = {}
        level = [i for ref in refs for i in self.old_users.get(ref, ())]
        for _ in range(_REACH):
            following: list[int] = []
            for i in level:
                if i in found or i in self.o2n:
                    continue
                found[i] = None
                following.extend(self.consumers_old[i])
            if not following or len(found) >= _CANDIDATES:
                break
            level = following
        return list(found)[:_CANDIDATES]

    def _reads(self, node: PreparedNode) -> frozenset[Ref]:
        return frozenset(ref for v in node.values for ref in self.frontier_new(v))

    def _through(self, node: PreparedNode) -> int | None:
        best: tuple[tuple[int, float], int] | None = None
        for i in self._readers(self._reads(node)):
            candidate = self.old.nodes[i]
            if candidate.local != node.local:
                continue
            score = self._score(candidate, node)
            if score is not None and (best is None or score > best[0]):
                best = (score, i)
        return None if best is None else best[1]

    def _score(self, old: PreparedNode, new: PreparedNode) -> tuple[int, float] | None:
        exact = 0
        total = 0.0
        for a, b in zip(old.values, new.values, strict=True):
            found = self.similarity(a, b, strict=True)
            if found is None:
                return None
            exact += found == 1.0
            total += found
        return exact, total

    def _changed(self) -> bool:
        """Pair leftovers with the same operator in the same neighbourhood; True if any."""
        self._frontiers.clear()
        anchor_old = self._anchors(len(self.old.nodes), lambda i: i if i in self.o2n else None)
        anchor_new = self._anchors(len(self.new.nodes), self.n2o.get)
        gaps: dict[tuple[int, str], list[int]] = defaultdict(list)
        for i, node in enumerate(self.old.nodes):
            if i not in self.o2n:
                gaps[(anchor_old[i], operator_name(node.source.target))].append(i)
        paired = False
        for j, node in enumerate(self.new.nodes):
            if j in self.n2o:
                continue
            target = operator_name(node.source.target)
            candidates = dict.fromkeys(
                [
                    *self._readers(self._reads(node)),
                    *self._feeders(j),
                    *[i for i in gaps.get((anchor_new[j], target), ()) if i not in self.o2n][
                        :_GAP_CANDIDATES
                    ],
                ]
            )
            best: tuple[int, int] | None = None
            for i in candidates:
                if i in self.o2n or operator_name(self.old.nodes[i].source.target) != target:
                    continue
                score = self._neighbourhood(i, j) + (anchor_old[i] == anchor_new[j])
                if score and (best is None or score > best[0]):
                    best = (score, i)
            if best is not None:
                self.pair(best[1], j)
                paired = True
        return paired

    def _feeders(self, j: int) -> list[int]:
        """Unpaired old nodes feeding the partners of new node j's users."""
        found: list[int] = []
        for user in self.consumers_new[j]:
            partner = self.n2o.get(user)
            if partner is None:
                continue
            for value in self.old.nodes[partner].values:
                made = self.old.producer.get(value)
                if made is not None and made[0] not in self.o2n:
                    found.append(made[0])
        return found

    @staticmethod
    def _anchors(count: int, partner: Callable[[int], int | None]) -> list[int]:
        """For each position, the old position of the nearest paired node before it (-1)."""
        found: list[int] = []
        last = -1
        for pos in range(count):
            found.append(last)
            other = partner(pos)
            if other is not None:
                last = other
        return found

    def _neighbourhood(self, i: int, j: int) -> int:
        old, new = self.old.nodes[i], self.new.nodes[j]
        inputs = sum(self.corresponds(a, b) for a, b in zip(old.values, new.values, strict=False))
        new_users = set(self.consumers_new[j])
        users = sum(self.o2n.get(u) in new_users for u in self.consumers_old[i])
        return inputs + users
