"""Node values as DataFrames, on tiny hand-made values with exact assertions, plus every node of one run."""

from __future__ import annotations

import pandas as pd

from rms_retrieval.dataflows.frames import bundle_frame, channel_frame, filtered_frame, pool_frame
from rms_retrieval.dataflows.node_types import node_frame
from rms_retrieval.dataflows.pipeline import FINAL_NODE, build_driver, pipeline_inputs
from rms_retrieval.nodes.pools import CandidatePool, ChannelHit, ChannelResult, FilteredPool, PathType
from rms_retrieval.nodes.settings import RetrievalSettings
from tests.factories import FakeEncoder, FakeStore, make_candidate, make_object, make_request, oid

A = make_object("a", "Priya moved to Leeds")
B = make_object("b", "Tomas hurt his knee", epistemic_type="DEPRECATED")


def test_channel_frame_has_one_row_per_hit_with_detail_columns_and_content():
    result = ChannelResult(
        path=PathType.GRAPH,
        hits=(ChannelHit(A.id, PathType.GRAPH, 1, 0.7, 1.0, {"hops": 1, "edge_path": [4]}),
              ChannelHit(B.id, PathType.GRAPH, 2, 0.2, 0.5, {"hops": 2, "edge_path": [4, 9]})),
        limit=50,
    )
    frame = channel_frame(result, {A.id: A})
    assert list(frame.columns) == ["object_id", "path", "rank", "raw_score", "score", "edge_path", "hops",
                                   "node_type", "namespace", "content"]
    assert frame["rank"].tolist() == [1, 2]
    assert frame["raw_score"].tolist() == [0.7, 0.2]
    assert frame["hops"].tolist() == [1, 2]
    assert frame["content"].iloc[0] == "Priya moved to Leeds" and pd.isna(frame["content"].iloc[1])
    assert list(channel_frame(ChannelResult(path=PathType.VECTOR)).columns) == [
        "object_id", "path", "rank", "raw_score", "score"]


def test_pool_frame_spreads_each_path_into_rank_raw_and_score_columns():
    pool = CandidatePool(candidates=(make_candidate(A, VECTOR=(1, 0.8), LEXICAL=(3, 0.4)),
                                     make_candidate(B, GRAPH=(2, 0.5))))
    frame = pool_frame(pool)
    row = frame.set_index("object_id").loc[str(A.id)]
    assert (row["vector_rank"], row["vector_raw"], row["lexical_rank"], row["lexical_score"]) == (1, 0.8, 3, 0.4)
    assert pd.isna(row["graph_rank"])
    assert row["paths"] == ("VECTOR", "LEXICAL") and row["path_count"] == 2
    assert frame["content"].tolist() == ["Priya moved to Leeds", "Tomas hurt his knee"]
    assert {f"{p.value.lower()}_rank" for p in PathType} <= set(frame.columns)


def test_filtered_frame_marks_kept_and_excluded_candidates_with_the_reason():
    pool = CandidatePool(candidates=(make_candidate(A, VECTOR=(1, 0.8)), make_candidate(B, VECTOR=(2, 0.6))))
    filtered = FilteredPool(candidates=pool.candidates[:1], excluded={B.id: "DEPRECATED"}, removed=pool.candidates[1:])
    frame = filtered_frame(filtered).set_index("object_id")
    assert frame.loc[str(A.id), "kept"] and pd.isna(frame.loc[str(A.id), "excluded_reason"])
    assert not frame.loc[str(B.id), "kept"] and frame.loc[str(B.id), "excluded_reason"] == "DEPRECATED"
    assert node_frame(filtered).equals(filtered_frame(filtered))


def test_every_node_of_one_run_becomes_a_frame():
    objects = [make_object(f"t{i}", text, days=i, session_id="s", session_seq=i) for i, text in
               enumerate(["Priya moved to Leeds", "Tomas hurt his knee", "Priya painted her flat"])]
    store = FakeStore([*objects, make_object("old", "Priya lived in York", epistemic_type="DEPRECATED")])
    dr = build_driver()
    names = [v.name for v in dr.what_is_upstream_of(FINAL_NODE) if not v.is_external_input]
    request = make_request("Where did Priya move?", token_budget=20)
    values = dr.execute(names, inputs=pipeline_inputs(store, request, RetrievalSettings(), FakeEncoder()))
    frames = {name: node_frame(values[name]) for name in names}
    assert all(isinstance(frame, pd.DataFrame) for frame in frames.values())
    bundle = values[FINAL_NODE]
    assert frames[FINAL_NODE]["object_id"].tolist() == [str(item.id) for item in bundle.items]
    assert bundle_frame(bundle)["tokens"].tolist() == [item.tokens for item in bundle.items]
    assert frames["filtered_candidates"].set_index("object_id").loc[str(oid("old")), "excluded_reason"] == "DEPRECATED"
    selection = frames["selected_candidates"]
    assert selection["rank"].tolist()[: len(values["selected_candidates"].pool)] == list(
        range(1, len(values["selected_candidates"].pool) + 1))
    analysis = frames["query_analysis"].set_index("field")["value"]
    assert analysis["intent"] == str(values["query_analysis"].intent)
    assert frames["query_embedding"].set_index("field").loc["dimension", "value"] == 4
