"""The one table of node value types: every stage node of the DAG finds its row, roles are
unique per type, and summaries fall back to sizes and type names."""

from __future__ import annotations

from dataclasses import fields

import pandas as pd

from rms_retrieval.dataflows import frames, node_types
from rms_retrieval.dataflows.pipeline import build_driver, pipeline_lineage
from rms_retrieval.nodes.pools import CandidateLimits, ChannelResult, PathType


def test_every_stage_node_of_the_dag_has_a_role_from_the_table():
    lineage = pipeline_lineage(build_driver())
    roles = {node.name: node.role for node in lineage.nodes if not node.is_input}
    assert roles["packed_bundle"] == "bundle" and roles["fused_scores"] == "scores"
    assert roles["filtered_candidates"] == "filter" and roles["merged_candidates"] == "merge"
    assert roles["query_analysis"] == "analysis" and roles["candidate_limits"] == "limits"
    assert {name for name, role in roles.items() if role == "channel"} >= {
        "vector_candidates", "lexical_candidates", "graph_candidates", "pinned_candidates"}
    described = {row.role for row in node_types.NODE_VALUE_TYPES if row.role}
    assert set(roles.values()) - {None} == described


def test_a_subclass_finds_its_row_and_an_unknown_type_none():
    class Wider(ChannelResult):
        pass

    assert node_types.role_of(Wider) == "channel"
    assert node_types.role_of(int) is None and node_types.role_of("not a type") is None


def test_summaries_come_from_the_table_or_fall_back():
    channel = ChannelResult(path=PathType.LEXICAL, limit=5, failure="index missing")
    assert node_types.value_summary(channel) == "0 hits (limit 5)\nfailed: index missing"
    assert node_types.value_summary(CandidateLimits(10, 20, 30)) == "vector 10, lexical 20, graph 30"
    assert node_types.value_summary(pd.DataFrame({"score": [0.5, 0.0]})) == "DataFrame"
    assert node_types.value_summary([1, 2, 3]) == "3 items"
    assert node_types.value_summary(3.5) == "float"


def test_node_frame_uses_the_rows_builder_or_the_generic_one():
    channel = ChannelResult(path=PathType.LEXICAL, limit=5)
    assert node_types.node_frame(channel).equals(frames.channel_frame(channel))
    table = pd.DataFrame({"score": [0.5]})
    assert node_types.node_frame(table) is table
    assert node_types.node_frame({"a": 1}).to_dict("list") == {"field": ["a"], "value": [1]}
    assert node_types.node_frame(CandidateLimits(10, 20, 30))["field"].tolist() == [
        "vector_k", "lexical_k", "graph_max_candidates", *[f.name for f in fields(CandidateLimits)][3:]]
