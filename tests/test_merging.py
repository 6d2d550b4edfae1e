from rms_retrieval.nodes.candidate_generation import text_path_candidates
from rms_retrieval.nodes.merging import merged_candidates__primary
from rms_retrieval.nodes.pools import ChannelHit, ChannelResult, PathType
from tests.factories import FakeStore, make_object, make_request


def merged_candidates(channels, candidate_objects):
    """The merge node after the text-path node, as the DAG runs them."""
    text = [c for c in channels if c.path is not PathType.VECTOR]
    found = text_path_candidates(text, FakeStore(candidate_objects.values()), make_request())
    return merged_candidates__primary(found, channels, candidate_objects)


def _result(path, *objects, failure=None, limit=0):
    hits = tuple(ChannelHit(o.id, path, i, 1.0 / i, 1.0 / i) for i, o in enumerate(objects, start=1))
    return ChannelResult(path=path, hits=hits, limit=limit, failure=failure)


def test_merge_dedupes_by_id_and_keeps_every_paths_hit():
    a, b, c = make_object("a"), make_object("b"), make_object("c")
    pool = merged_candidates(
        channels=[
            _result(PathType.VECTOR, a, b, limit=2),
            _result(PathType.LEXICAL, b, c),
            _result(PathType.GRAPH, b, failure=None),
            ChannelResult(path=PathType.PINNED, failure="backend_error: down"),
            ChannelResult(path=PathType.KEYWORD_SCAN),
        ],
        candidate_objects={o.id: o for o in (a, b, c)},
    )
    by_id = pool.by_id
    assert len(pool.candidates) == 3
    assert by_id[b.id].paths == (PathType.VECTOR, PathType.LEXICAL, PathType.GRAPH)
    assert by_id[b.id].path_count == 3 and by_id[a.id].path_count == 1
    assert by_id[b.id].hits[PathType.LEXICAL].rank == 1 and by_id[b.id].hits[PathType.VECTOR].rank == 2
    assert pool.backend_failures == {PathType.PINNED: "backend_error: down"}
    assert pool.paths_at_limit == (PathType.VECTOR,)
    assert [c.object_id for c in pool.candidates] == sorted((a.id, b.id, c.id), key=str)


def test_a_hit_whose_object_is_gone_is_dropped():
    a, gone = make_object("a"), make_object("gone")
    pool = merged_candidates(
        [_result(PathType.VECTOR, a, gone), ChannelResult(PathType.LEXICAL), ChannelResult(PathType.GRAPH),
         ChannelResult(PathType.PINNED), ChannelResult(PathType.KEYWORD_SCAN)], {a.id: a},
    )
    assert [c.object_id for c in pool.candidates] == [a.id]


def test_keyword_scan_hits_join_the_pool_without_counting_as_a_path():
    a = make_object("a")
    pool = merged_candidates(
        [_result(PathType.VECTOR, a), ChannelResult(PathType.LEXICAL), ChannelResult(PathType.GRAPH),
         ChannelResult(PathType.PINNED), _result(PathType.KEYWORD_SCAN, a)], {a.id: a},
    )
    assert pool.candidates[0].paths == (PathType.VECTOR, PathType.KEYWORD_SCAN)
    assert pool.candidates[0].path_count == 1


def test_the_order_the_paths_ran_in_leaves_the_pool_as_it_is():
    a, b = make_object("a"), make_object("b")
    channels = [_result(PathType.VECTOR, a, b, limit=2), _result(PathType.LEXICAL, b, a, limit=2),
                ChannelResult(path=PathType.GRAPH, failure="backend_error: down"),
                ChannelResult(path=PathType.PINNED, failure="backend_error: gone"), ChannelResult(PathType.KEYWORD_SCAN)]
    objects = {o.id: o for o in (a, b)}
    ran_first, ran_last = merged_candidates(channels, objects), merged_candidates(channels[::-1], objects)
    assert ran_first == ran_last and ran_last.paths_at_limit == (PathType.VECTOR, PathType.LEXICAL)
    assert list(ran_last.backend_failures) == [PathType.GRAPH, PathType.PINNED]
    assert [list(c.hits) for c in ran_last.candidates] == [[PathType.VECTOR, PathType.LEXICAL]] * 2


def test_a_candidate_found_by_text_paths_and_the_vector_path_has_the_vector_hit_first():
    a, b = make_object("a"), make_object("b")
    channels = [_result(PathType.LEXICAL, a, b), _result(PathType.GRAPH, a), _result(PathType.VECTOR, b, a)]
    pool = merged_candidates(channels, {o.id: o for o in (a, b)})
    assert {c.object_id: list(c.hits) for c in pool.candidates} == {
        a.id: [PathType.VECTOR, PathType.LEXICAL, PathType.GRAPH], b.id: [PathType.VECTOR, PathType.LEXICAL]}
    text = text_path_candidates(channels[:2], FakeStore([a, b]), make_request())
    assert list(text.hits[a.id.int]) == [PathType.LEXICAL, PathType.GRAPH]  # the text paths' merge is left as it was
