"""Score lineage on the demo store: the numbers match the nodes, and each way out has its reason."""

from __future__ import annotations

import sys
import types
from uuid import UUID

import pandas as pd
import pytest
from hamilton import driver

from rms_retrieval.dataflows.explain import Outcome, explain
from rms_retrieval.dataflows.frames import scored_frame
from rms_retrieval.dataflows.pipeline import FINAL_NODE, build_driver, pipeline_lineage
from rms_retrieval.dataflows.retrieval import retrieve
from rms_retrieval.nodes.pools import PathType
from rms_retrieval.nodes.settings import RetrievalSettings, ScoringSettings
from rms_retrieval.stores.memory_store import MemoryStore

QUESTION = "Where does Tomas work now?"
NODES = ["fused_scores", "ranked_candidates", "selected_candidates", "merged_candidates", "filtered_candidates"]


@pytest.fixture(scope="module")
def store(demo_store):
    with MemoryStore.open(demo_store.path, create=False) as opened:
        yield opened


def _run(store, demo_store, **options):
    return retrieve(store, QUESTION, namespaces=[demo_store.namespace], reference_time=demo_store.reference_time,
                    extra_nodes=NODES, log=False, **options)


def _explain(store, demo_store, object_id, **options):
    return explain(store, QUESTION, object_id, namespaces=[demo_store.namespace],
                   reference_time=demo_store.reference_time, **options)


def test_lineage_comes_from_the_driver_and_names_every_stage():
    dr = build_driver()
    lineage = pipeline_lineage(dr)
    upstream = {v.name for v in dr.what_is_upstream_of(FINAL_NODE) if not v.is_external_input}
    assert set(lineage.computed) == upstream
    assert lineage.named("bundle") == [FINAL_NODE]
    assert lineage.named("scores") == ["fused_scores"]
    assert {"vector_candidates", "lexical_candidates", "graph_candidates", "pinned_candidates"} <= set(
        lineage.named("channel"))
    order = [n.name for n in lineage.nodes]
    for node in lineage.nodes:  # topological: every node comes after what it reads
        assert all(order.index(up) < order.index(node.name) for up in node.upstream)


def test_lineage_follows_renamed_nodes_in_another_dag():
    module = types.ModuleType("renamed_stages")
    exec(
        "from rms_retrieval.nodes.bundle import MemoryBundle\n"
        "from rms_retrieval.nodes.pools import ChannelResult, PathType\n"
        "from rms_retrieval.nodes.scored_pool import ScoredPool\n"
        "def hits_by_meaning(question: str) -> ChannelResult:\n    return ChannelResult(path=PathType.VECTOR)\n"
        "def score_table(hits_by_meaning: ChannelResult) -> ScoredPool:\n    raise NotImplementedError\n"
        "def final_bundle(score_table: ScoredPool) -> MemoryBundle:\n    raise NotImplementedError\n",
        module.__dict__,
    )
    sys.modules[module.__name__] = module
    try:
        dr = driver.Builder().with_modules(module).build()
        lineage = pipeline_lineage(dr, "final_bundle")
    finally:
        del sys.modules[module.__name__]
    assert lineage.named("channel") == ["hits_by_meaning"]
    assert lineage.named("scores") == ["score_table"]
    assert lineage.named("bundle") == ["final_bundle"]
    assert lineage.computed == ("hits_by_meaning", "score_table", "final_bundle")


def test_an_included_object_is_explained_with_the_numbers_of_the_nodes(store, demo_store, monkeypatch):
    from rms_retrieval.nodes.bundle import MemoryBundle

    result = _run(store, demo_store, token_budget=300)
    item = next(i for i in result.bundle.items if len(i.paths) >= 2)
    serialised = []  # explain reads the result's request: it never builds the log record (which serialises the bundle)
    to_json = MemoryBundle.to_json
    monkeypatch.setattr(MemoryBundle, "to_json", lambda self: serialised.append(self) or to_json(self))
    explanation = _explain(store, demo_store, item.id, token_budget=300)
    assert serialised == []

    assert explanation.outcome is Outcome.INCLUDED
    assert explanation.decided_by == FINAL_NODE
    bundle_step = explanation.step("bundle")
    assert (bundle_step.node, bundle_step.facts["tier"], bundle_step.facts["tokens"], bundle_step.facts["score"]) == (
        FINAL_NODE, item.tier, item.tokens, item.score)

    frame: pd.DataFrame = scored_frame(result.nodes["fused_scores"])
    row = frame[frame["object_id"] == str(item.id)].iloc[0]
    scores = explanation.step("scores")
    assert scores.node == "fused_scores"
    assert scores.facts["rank"] == frame.index[frame["object_id"] == str(item.id)][0] + 1
    for column in ("score", "base_score", "semantic", "semantic_rank", "lexical", "lexical_bm25", "lexical_rank",
                   "graph_proximity", "epistemic_factor", "node_type_factor", "temporal_factor"):
        expected = row[column]
        assert scores.facts["row"][column] == (None if pd.isna(expected) else expected), column

    candidate = result.nodes["merged_candidates"].by_id[item.id]
    assert explanation.step("merge").facts["paths"] == [str(p) for p in candidate.paths]
    for step in explanation.steps_for("channel"):
        hit = candidate.hits.get(PathType(step.facts["path"]))
        assert step.facts["found"] is (hit is not None)
        if hit is not None:
            assert (step.facts["rank"], step.facts["raw_score"], step.facts["score"]) == (
                hit.rank, hit.raw_score, hit.score)
    analysis = explanation.step("analysis")
    assert analysis.node == "query_analysis"
    assert analysis.facts["intent"] == result.bundle.retrieval_metadata.intent
    assert [e["name"] for e in analysis.facts["entities"]] == list(result.bundle.retrieval_metadata.entities)
    assert "outcome: INCLUDED at packed_bundle" in explanation.to_text()


def test_the_steps_run_from_the_bundle_back_to_the_query_analysis(store, demo_store):
    first = _run(store, demo_store).bundle.items[0].id
    explanation = _explain(store, demo_store, first)
    nodes = [step.node for step in explanation.steps]
    assert nodes[0] == FINAL_NODE
    assert nodes.index("fused_scores") < nodes.index("filtered_candidates") < nodes.index("merged_candidates")
    assert nodes.index("merged_candidates") < nodes.index("vector_candidates")
    assert nodes.index("graph_candidates") < nodes.index("query_analysis")
    assert explanation.step("scores").upstream == ("filtered_candidates", "query_analysis", "settings", "spoken_by_query_entities",
                                                   "text_path_score_inputs")
    assert explanation.to_dict()["outcome"] == "INCLUDED"


def test_a_graph_hit_names_its_hops_and_edge_path(store, demo_store):
    result = _run(store, demo_store)
    graph_hit = next(c for c in result.nodes["merged_candidates"].candidates if PathType.GRAPH in c.hits)
    step = next(s for s in _explain(store, demo_store, graph_hit.object_id).steps_for("channel")
                if s.facts["path"] == "GRAPH")
    detail = graph_hit.hits[PathType.GRAPH].detail
    assert step.facts["detail"]["hops"] == detail["hops"]
    assert step.facts["detail"]["edge_path"] == list(detail["edge_path"])
    assert f"{detail['hops']} hop" in step.summary and "MENTIONS" in step.summary


def test_an_object_of_another_namespace_reads_exactly_like_a_missing_id(store, demo_store):
    explained = {oid: _explain(store, demo_store, oid) for oid in (UUID(int=7), demo_store.other_namespace_id)}
    for oid, explanation in explained.items():
        assert explanation.outcome is Outcome.NEVER_A_CANDIDATE
        assert explanation.decided_by == "merged_candidates"
        assert explanation.reason == f"object {oid} not found in namespaces [{demo_store.namespace}]"
        assert explanation.object is None
        assert not explanation.step("merge").facts["candidate"]
    missing, other = (e.to_text().replace(str(e.object_id), "ID") for e in explained.values())
    assert missing == other
    assert "carpenter" not in other and "demo-other-conversation" not in other


def test_explain_takes_a_whole_request(store, demo_store):
    from rms_retrieval.dataflows.retrieval import as_request

    request = as_request(QUESTION, namespaces=demo_store.namespace, reference_time=demo_store.reference_time,
                         token_budget=300)
    item = _run(store, demo_store, token_budget=300).bundle.items[0]
    assert explain(store, request, item.id) == _explain(store, demo_store, item.id, token_budget=300)


def test_a_deprecated_object_is_excluded_by_the_filter(store, demo_store):
    deprecated = next(o for o in demo_store.corpus.objects if o.epistemic_type == "DEPRECATED")
    explanation = _explain(store, demo_store, deprecated.id)
    assert explanation.outcome is Outcome.EXCLUDED
    assert (explanation.decided_by, explanation.reason) == ("filtered_candidates", "DEPRECATED")
    assert explanation.step("merge").facts["candidate"]
    assert explanation.step("filter").facts == {"kept": False, "reason": "DEPRECATED"}


def test_an_object_below_the_limit_scored_too_low(store, demo_store):
    result = _run(store, demo_store, limit=1)
    selection = result.nodes["selected_candidates"]
    cut = next(oid for oid, reason in selection.excluded.items() if reason == "limit")
    ranked = scored_frame(result.nodes["ranked_candidates"])
    rank = int(ranked.index[ranked["object_id"] == str(cut)][0]) + 1
    explanation = _explain(store, demo_store, cut, limit=1)
    assert explanation.outcome is Outcome.SCORED_TOO_LOW
    assert explanation.decided_by == "selected_candidates"
    assert explanation.reason.startswith(f"rank {rank} of {len(ranked)}")
    assert "left out: limit (limit 1)" in explanation.reason


def test_a_selected_object_that_did_not_fit_was_cut_by_the_budget(store, demo_store):
    result = _run(store, demo_store, token_budget=40)
    packed = {item.id for item in result.bundle.items}
    selected = list(result.nodes["selected_candidates"].pool.object_ids)
    cut = next(oid for oid in selected if oid not in packed)
    explanation = _explain(store, demo_store, cut, token_budget=40)
    assert explanation.outcome is Outcome.CUT_BY_BUDGET
    assert explanation.decided_by == FINAL_NODE
    assert "of the 40-token budget" in explanation.reason
    assert explanation.step("selection").facts["selected"] is True
    assert explanation.step("bundle").facts["included"] is False


def test_the_weighted_formula_is_explained_too(store, demo_store):
    weighted = RetrievalSettings(scoring=ScoringSettings(fusion="weighted"))
    result = retrieve(store, QUESTION, namespaces=[demo_store.namespace], reference_time=demo_store.reference_time,
                      settings=weighted, extra_nodes=["fused_scores"], log=False)
    item = result.bundle.items[0]
    explanation = _explain(store, demo_store, item.id, settings=weighted)
    assert explanation.outcome is Outcome.INCLUDED
    assert explanation.step("scores").facts["row"]["formula_version"] == 1
    assert "weighted sum" in explanation.step("scores").summary
    assert explanation.step("scores").facts["row"]["score"] == item.score
