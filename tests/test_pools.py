"""The candidate pool's columns (`PoolRows`): read as candidates, taken apart and filtered as the
candidates made one by one are."""

from __future__ import annotations

import pytest

from rms_retrieval.nodes.candidate_generation import text_path_candidates
from rms_retrieval.nodes.filtering import filtered_candidates
from rms_retrieval.nodes.merging import merged_candidates__primary
from rms_retrieval.nodes.pools import Candidate, ChannelHit, ChannelResult, PathType, PoolRows
from rms_retrieval.nodes.settings import RetrievalSettings
from tests.factories import FakeStore, make_candidate, make_object, make_request


def _channel(path, *objects):
    return ChannelResult(path=path, hits=tuple(ChannelHit(o.id, path, rank, 1.0 / rank, 1.0 / rank)
                                               for rank, o in enumerate(objects, start=1)))


@pytest.fixture
def merged():
    a, b, c, d = (make_object(name) for name in "abcd")
    store, request = FakeStore([a, b, c, d]), make_request()
    text = [_channel(PathType.LEXICAL, a, b), _channel(PathType.GRAPH, b, c)]
    channels = [*text, _channel(PathType.VECTOR, d, b)]
    found = text_path_candidates(text, store, request)
    return merged_candidates__primary(found, channels, {o.id: o for o in (a, b, c, d)})


def test_merged_columns_read_as_candidates_in_id_order_with_the_vector_hit_first(merged):
    rows = merged.candidates
    assert isinstance(rows, PoolRows) and len(rows) == 4
    assert rows.keys == sorted(rows.keys) and [c.object.id.int for c in rows] == rows.keys
    by_id = {c.object_id: c for c in rows}
    b = next(c for c in rows if c.path_count == 3)
    assert list(b.hits) == [PathType.VECTOR, PathType.LEXICAL, PathType.GRAPH]
    assert rows.hits_at(rows.keys.index(b.object.id.int)) == b.hits
    only_vector = [c for c in rows if c.paths == (PathType.VECTOR,)]
    assert len(only_vector) == 1 and dict(only_vector[0].hits) == {PathType.VECTOR: only_vector[0].hits[PathType.VECTOR]}
    assert rows[0] is rows[0] and rows[1:3] == tuple(rows)[1:3] and by_id == merged.by_id


def test_columns_of_candidates_keep_each_candidate(merged):
    made = tuple(merged.candidates)
    rows = PoolRows.of(made)
    assert PoolRows.of(rows) is rows
    assert rows == made and made == tuple(rows) and all(x is y for x, y in zip(rows, made))
    assert rows.keys == merged.candidates.keys and rows.objects == merged.candidates.objects
    assert [rows.hits_at(i) for i in range(len(rows))] == [c.hits for c in made]
    taken = rows.taking([3, 1])
    assert taken == (made[3], made[1]) and taken[0] is made[3] and taken.keys == [rows.keys[3], rows.keys[1]]
    assert rows.taking([]) == () and len(rows.taking([])) == 0
    assert rows + () == made and () + rows == made and rows != list(made)


def test_taken_columns_make_their_candidates_when_read(merged):
    rows = merged.candidates
    taken = rows.taking([2, 0])
    assert [c.object for c in taken] == [rows.objects[2], rows.objects[0]]
    assert [c.hits for c in taken] == [rows.hits_at(2), rows.hits_at(0)]


def test_the_filter_keeps_and_removes_the_same_candidates_from_columns_as_from_a_tuple():
    kept, stale = make_object("kept"), make_object("stale", epistemic_type="DEPRECATED")
    fresh = make_object("fresh")
    candidates = tuple(make_candidate(o, VECTOR=(i, 0.5)) for i, o in enumerate((kept, stale, fresh), start=1))
    store = FakeStore([kept, stale, fresh])
    found = text_path_candidates([], store, make_request())
    vector = ChannelResult(PathType.VECTOR, hits=tuple(c.hits[PathType.VECTOR] for c in candidates))
    merged = merged_candidates__primary(found, [vector], {o.id: o for o in (kept, stale, fresh)})
    from_rows = filtered_candidates(merged, make_request(), RetrievalSettings())
    from_tuple = filtered_candidates(type(merged)(candidates=tuple(merged.candidates)), make_request(),
                                     RetrievalSettings())
    assert from_rows.excluded == from_tuple.excluded and set(from_rows.excluded) == {stale.id}
    assert from_rows.candidates == from_tuple.candidates and from_rows.removed == from_tuple.removed
    assert [c.object for c in from_rows.removed] == [stale]
    assert all(isinstance(c, Candidate) for c in from_rows.candidates)
