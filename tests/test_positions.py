"""A plain turn's place in its session: arrival order, continued across adds, deterministic."""

from __future__ import annotations

from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.analysis.positions import placed_turns, session_key
from factories import FakeEncoder, make_object


def _session(count: int, session: str = "s1", namespace: str = "ns", **fields):
    return [make_object(f"{namespace}/{session}/{i}", f"turn {i} of {session}", session_id=session,
                        namespace=namespace, days=i / 100, **fields) for i in range(count)]


class _Segment:
    def __init__(self, ends):
        self.session_ends = ends


def test_arrival_order_within_one_add_and_after_the_stored_turns():
    turns = _session(3)
    assert [t.session_seq for t in placed_turns(turns, [])] == [0, 1, 2]
    key = session_key(turns[0])
    stored = [_Segment({key: 4}), _Segment({key: 7}), _Segment({("ns", "default", "default", "other"): 50})]
    assert [t.session_seq for t in placed_turns(turns, stored)] == [8, 9, 10]


def test_a_given_position_is_kept_and_later_turns_follow_it():
    first, second, third = _session(3)
    placed = placed_turns([first, second.model_copy(update={"session_seq": 10}), third], [])
    assert [t.session_seq for t in placed] == [0, 10, 11]


def test_sessions_are_apart_and_other_objects_untouched():
    a, b = _session(2, "a"), _session(2, "b")
    other_namespace = _session(1, "a", namespace="other")
    fact = make_object("fact", "a fact", node_type="FACT", session_id="a")
    loose = make_object("loose", "no session")
    placed = placed_turns([a[0], b[0], fact, other_namespace[0], a[1], loose, b[1]], [])
    assert [t.session_seq for t in placed] == [0, 0, None, 0, 1, None, 1]


def _positions(store: MemoryStore) -> dict[str, int | None]:
    return {o.content: o.session_seq for segment in store.snapshot().segments for o in segment.objects()
            if o.node_type == "TURN"}


def test_one_add_and_one_turn_per_add_give_the_same_positions(tmp_path):
    turns = [*_session(12, "a"), *_session(3, "b")]
    turns = [turns[i] for i in (0, 12, 1, 2, 13, 3, 4, 5, 6, 14, 7, 8, 9, 10, 11)]  # sessions interleaved
    with MemoryStore.open(tmp_path / "loaded", encoder=FakeEncoder()) as loaded:
        loaded.add(turns)
        once = _positions(loaded)
    with MemoryStore.open(tmp_path / "grown", encoder=FakeEncoder()) as grown:
        for turn in turns:
            grown.add([turn])  # twelve adds make a merge of ten segments due
        grown.wait_for_merges()
        assert len(grown.snapshot().segments) < len(turns)
        one_by_one = _positions(grown)
    assert once == one_by_one
    assert [once[f"turn {i} of a"] for i in range(12)] == list(range(12))
    assert [once[f"turn {i} of b"] for i in range(3)] == [0, 1, 2]
