"""What-if: logged requests run again under changed settings, compared node by node, with honest limits."""

from __future__ import annotations

import copy
import shutil
from datetime import datetime, timezone


import pytest

from rms_retrieval.dataflows.pipeline import build_driver, pipeline_lineage
from rms_retrieval.dataflows.replay import find_record
from rms_retrieval.dataflows.retrieval import retrieve
from rms_retrieval.dataflows.whatif import logged_records, whatif, whatif_graph, whatif_many, whatif_record
from rms_retrieval.dataflows.setting_changes import WhatIfError
from rms_retrieval.nodes.pools import PathType
from rms_retrieval.nodes.candidate_settings import CandidateSettings
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.models import MemoryObject

QUESTIONS = ["Where does Tomas work now?", "What is wrong with Tomas's knee?", "When did Priya move into her flat in Leeds?"]
BEFORE_PACKING = ("query_analysis", "candidate_generation", "merging", "filtering", "scoring", "session_context")


@pytest.fixture(scope="module")
def store(demo_store, tmp_path_factory):
    """A private copy of the demo store with three logged requests (the newest last)."""
    path = shutil.copytree(demo_store.path, tmp_path_factory.mktemp("whatif") / "store")
    with MemoryStore.open(path, create=False) as opened:
        opened.logged_ids = [str(retrieve(opened, question, namespaces=[demo_store.namespace],
                                          reference_time=demo_store.reference_time, token_budget=300).request_id)
                             for question in QUESTIONS]
        yield opened


def test_a_packing_change_shows_no_difference_before_packing(store):
    report = whatif(store, store.logged_ids[0], {"packing.tier_path_depth": None})
    assert report.replayable and report.first_difference in ("selected_candidates", "packed_bundle")
    assert all(not node.changed for node in report.nodes if node.stage in BEFORE_PACKING)
    assert {node.stage for node in report.nodes if node.changed} == {"packing"}
    assert report.nodes[-1].node == "packed_bundle" and "first difference" in report.to_text()


def test_a_candidate_limit_shows_its_first_difference_in_the_candidate_nodes(store):
    report = whatif(store, store.logged_ids[0], {"candidates.vector_k": 3, "scoring.speaker_boost": 0})
    assert report.first_difference == "candidate_limits"
    nodes = {node.node: node for node in report.nodes}
    assert nodes["candidate_limits"].stage == "candidate_generation"
    vector = nodes["vector_candidates"]
    assert vector.changed and not vector.entered and len(vector.left) > 0 and "3 hits" in vector.after
    assert not nodes["lexical_candidates"].changed and not nodes["query_analysis"].changed
    # Scoring: ranks and scores moved; the bundle: items in and out with their tiers and tokens.
    assert nodes["fused_scores"].moves and all(m.rank_before != m.rank_after or m.score_before != m.score_after
                                               for m in nodes["fused_scores"].moves)
    bundle = nodes["packed_bundle"]
    assert report.bundle_changed and report.items_entered + report.items_left > 0
    entered = [item for item in bundle.items if item.position_before is None]
    assert all(item.tier_after in (1, 2, 3) and item.tokens_after > 0 and item.tier_before is None for item in entered)
    assert set(bundle.entered) == {item.object_id for item in entered}
    assert report.to_dict()["first_difference"] == "candidate_limits"


def test_no_change_compares_every_node_equal_and_logs_nothing(store):
    before = len(store.retrieval_log())
    report = whatif(store, store.logged_ids[1], {"scoring.speaker_boost": 2.0})
    assert report.replayable and report.first_difference is None and not report.bundle_changed
    computed = pipeline_lineage(build_driver(RetrievalSettings())).computed
    assert [change.node for change in report.nodes] == list(computed) and "no node changes" in report.to_text()
    assert len(store.retrieval_log()) == before


def test_the_other_formula_runs_the_other_dag(store):
    report = whatif(store, store.logged_ids[2], {"scoring.fusion": "weighted"})
    assert report.replayable and report.first_difference == "fused_scores"
    assert "fused_scores" in report.changed_nodes and report.settings.scoring.fusion == "weighted"


def test_a_request_on_a_generation_the_store_no_longer_has_is_not_replayable(demo_store, demo_copy):
    with MemoryStore.open(demo_copy, create=False) as store:
        request_id = retrieve(store, QUESTIONS[0], namespaces=[demo_store.namespace],
                              reference_time=demo_store.reference_time).request_id
        logged_state = store.snapshot().state_fingerprint()
        store.add([MemoryObject(namespace=demo_store.namespace, node_type="FACT", content="Tomas moved to Leeds.")])
        report = whatif(store, request_id, {"scoring.speaker_boost": 0})
    assert not report.replayable and report.nodes == () and report.first_difference is None
    assert report.limits == (f"the store generation it read ({logged_state}) is gone: the store is at "
                             f"{store.snapshot().state_fingerprint()}, and a replay reads only the live generation",)
    assert "NOT REPLAYABLE exactly, so no what-if is reported" in report.to_text()


def test_other_code_or_a_bundle_replay_cannot_reproduce_is_not_replayable(store):
    record = copy.deepcopy(find_record(store, store.logged_ids[0]))
    record["payload"]["dag_fingerprint"] = "f" * 64
    report = whatif_record(store, record, {"scoring.speaker_boost": 0})
    assert not report.replayable and report.limits[0].startswith(f"its code fingerprint differs: it was answered by {'f' * 64}")
    record = copy.deepcopy(find_record(store, store.logged_ids[0]))
    record["payload"]["bundle_sha256"] = "0" * 64
    report = whatif_record(store, record, {"scoring.speaker_boost": 0})
    assert not report.replayable and "no longer gives the logged bundle" in report.limits[0] and report.nodes == ()


def test_a_request_that_embedded_nothing_cannot_say_what_the_vector_path_would_do(store, demo_store):
    lexical_only = RetrievalSettings(candidates=CandidateSettings(enabled_paths=frozenset({PathType.LEXICAL})))
    request_id = retrieve(store, QUESTIONS[0], namespaces=[demo_store.namespace], settings=lexical_only,
                          reference_time=demo_store.reference_time).request_id
    report = whatif(store, request_id, {"candidates.enabled_paths": ["LEXICAL", "VECTOR"]})
    assert not report.replayable and "replay never runs the embedding model" in report.limits[0]
    # A change that still needs no vector is replayed.
    assert whatif(store, request_id, {"candidates.lexical_k": 5}).first_difference == "candidate_limits"


def test_many_requests_say_how_many_bundles_change_and_which_change_most(store):
    newest = [r["request_id"] for r in store.retrieval_log() if r["payload"]["status"] == "ok"][-2:]
    assert [r["request_id"] for r in logged_records(store, last=2)] == newest
    records = [find_record(store, request_id) for request_id in store.logged_ids]
    summary = whatif_many(store, records, {"candidates.vector_k": 3})
    data = summary.to_dict(top=2)
    assert data["requests"] == data["replayed"] == 3 and data["not_replayable"] == {}
    assert data["bundles_changed"] == sum(r.bundle_changed for r in summary.reports) >= 1
    assert data["first_difference"] == {"candidate_limits": 3} and data["nodes_changed"]["vector_candidates"] == 3
    moved = [r.items_entered + r.items_left for r in summary.reports]
    assert data["mean_items_entered"] == sum(r.items_entered for r in summary.reports) / 3
    assert [r["items_entered"] + r["items_left"] for r in data["most_changed"]] == sorted(moved, reverse=True)[:2]
    assert "bundles change" in summary.to_text() and "the requests that change most" in summary.to_text()
    with pytest.raises(WhatIfError, match="no such setting"):
        whatif_many(store, records, {"candidates.vector_kk": 3})


def test_requests_since_a_time(store):
    assert len(logged_records(store, since=datetime(2000, 1, 1, tzinfo=timezone.utc))) >= 3
    assert logged_records(store, since=datetime(2999, 1, 1, tzinfo=timezone.utc)) == []
    with pytest.raises(WhatIfError, match="--last N or with --since"):
        logged_records(store)


def test_the_picture_marks_the_changed_nodes(store):
    report = whatif(store, store.logged_ids[0], {"packing.tier_path_depth": None})
    source = whatif_graph(report).source
    marked = [line for line in source.splitlines() if "#c62828" in line]
    assert len(marked) == len(report.changed_nodes) and all(
        any(f"\t{name} " in line or f"\t{name} [" in line for line in marked) for name in report.changed_nodes)
    assert "what if packing.tier_path_depth=null" in source


def test_a_request_outside_the_given_namespaces_is_as_if_never_logged(store, demo_store):
    with pytest.raises(WhatIfError, match=f"no retrieval record {store.logged_ids[0]}"):
        whatif(store, store.logged_ids[0], {"scoring.speaker_boost": 0}, namespaces=["demo-other-conversation"])
    assert logged_records(store, last=5, namespaces=["demo-other-conversation"]) == []
    assert whatif(store, store.logged_ids[0], {"scoring.speaker_boost": 2.0},
                  namespaces=[demo_store.namespace]).replayable
