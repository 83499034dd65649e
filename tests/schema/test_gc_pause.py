"""schema.io.no_cycle_collection: collection paused inside, the objects made there moved out of
the young generations, and a caller's frozen objects left frozen."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import orjson
import pytest

import schema
from schema.io import no_cycle_collection
from schema.models import TensorArgument


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No frozen objects before the test, none after it, and the pause's memory of them reset."""
    if gc.get_freeze_count():
        pytest.skip("this process already holds frozen objects")
    monkeypatch.setattr(no_cycle_collection, "caller_froze", False)
    try:
        yield
    finally:
        gc.unfreeze()


def _made() -> list[list[int]]:
    return [[i] for i in range(5000)]


def _still_frozen(objects: list[list[int]]) -> bool:
    """Frozen objects sit in the permanent generation, which gc.get_objects() does not list.

    Asked of the caller's own objects, not of gc.get_freeze_count(): in a long test process other
    frozen objects are freed by reference count at any moment, which lowers the count."""
    young = {id(o) for o in gc.get_objects()}
    return not any(id(o) in young for o in objects)


@pytest.mark.usefixtures("fresh")
def test_objects_made_inside_leave_the_young_generation() -> None:
    enabled = gc.isenabled()
    with no_cycle_collection():
        assert not gc.isenabled()
        made = _made()
    assert gc.isenabled() is enabled
    assert gc.get_count()[0] < 1000
    assert gc.get_freeze_count() == 0
    assert len(made) == 5000


@pytest.mark.usefixtures("fresh")
def test_a_callers_frozen_objects_stay_frozen() -> None:
    kept = _made()
    gc.freeze()
    assert gc.get_freeze_count() >= len(kept)
    assert _still_frozen(kept)
    with no_cycle_collection():
        made = _made()
    assert _still_frozen(kept)
    doc = schema.load(orjson.dumps({"name": "x"}), TensorArgument)
    assert _still_frozen(kept)
    assert gc.isenabled()
    assert (doc.name, len(made)) == ("x", 5000)
