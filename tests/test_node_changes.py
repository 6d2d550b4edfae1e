"""Node values compared by content, and the changes of one node between two runs."""

from __future__ import annotations

import numpy as np

from rms_retrieval.dataflows.node_changes import compare_node, same_value
from rms_retrieval.nodes.pools import ChannelHit, ChannelResult, PathType
from tests.factories import oid


def test_values_compare_by_content():
    assert same_value({"a": np.array([1.0, np.nan])}, {"a": np.array([1.0, np.nan])})
    assert not same_value((np.array([1, 2]),), (np.array([1, 3]),)) and not same_value(1, 1.0)


def _lexical(*names: str) -> ChannelResult:
    return ChannelResult(path=PathType.LEXICAL,
                         hits=tuple(ChannelHit(oid(name), PathType.LEXICAL, rank, 1.0, 1.0)
                                    for rank, name in enumerate(names, start=1)))


def test_a_changed_channel_names_the_objects_that_entered_and_left():
    same = compare_node("lexical_candidates", "candidate_generation", _lexical("a", "b"), _lexical("a", "b"))
    assert not same.changed and same.entered == same.left == ()
    moved = compare_node("lexical_candidates", "candidate_generation", _lexical("a", "b"), _lexical("b", "c"))
    assert moved.changed and moved.entered == (str(oid("c")),) and moved.left == (str(oid("a")),)
    assert moved.moves == () and moved.items == ()
