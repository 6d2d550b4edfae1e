"""The packaged cross-encoder (stores/providers/cross_encoder.py) and the reranker through the whole
pipeline: the log's provenance, replay without the model, `rms explain`, the missing extra."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from rms_retrieval.dataflows.cli import main
from rms_retrieval.dataflows.explain import explain
from rms_retrieval.dataflows.replay import ReplayError, RefusingCrossEncoder, replay
from rms_retrieval.dataflows.retrieval import retrieve
from rms_retrieval.nodes.policy_settings import RerankSettings
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.providers.cross_encoder import (OnnxCrossEncoder, RerankerUnavailable, default_cross_encoder,
                                                          model_directory)
from rms_retrieval.stores.memory_store import MemoryStore

QUESTION = "When did Caroline go to the LGBTQ support group?"
POLICIES = ("legacy", "score_envelope", "anchored_score_envelope")


@pytest.fixture(scope="module")
def cross_encoder() -> OnnxCrossEncoder:
    return default_cross_encoder()


def test_the_model_orders_pairs_sensibly(cross_encoder):
    scores = cross_encoder.score(QUESTION, ["Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
                                            "Melanie: I love painting sunsets with my kids."])
    assert scores.dtype == np.float64 and scores[0] > 3.0 and scores[1] < -5.0
    assert cross_encoder.identity.startswith("cross-encoder/ms-marco-MiniLM-L-12-v2") and cross_encoder.score(QUESTION, []).size == 0


def test_a_long_record_is_judged_by_its_first_512_tokens(cross_encoder):
    start = "Caroline: I went to a LGBTQ support group yesterday. "
    long, longer = start + "word " * 700, start + "word " * 3000
    assert cross_encoder.score(QUESTION, [long])[0] == cross_encoder.score(QUESTION, [longer])[0]
    assert cross_encoder.score(QUESTION, [longer])[0] > 0


def test_threads_share_one_engine_and_get_the_scores_of_a_sequential_run(cross_encoder):
    texts = [f"Caroline: support group number {i}." for i in range(12)]
    expected = cross_encoder.score(QUESTION, texts)
    fresh = OnnxCrossEncoder()
    results, errors = [None] * 4, []

    def run(slot: int) -> None:
        try:
            results[slot] = fresh.score(QUESTION, texts)
        except Exception as error:  # the test fails below with it
            errors.append(error)

    threads = [threading.Thread(target=run, args=(slot,)) for slot in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and all(np.array_equal(r, expected) for r in results)


def test_without_the_rerank_extra_the_error_names_it():
    with pytest.raises(RerankerUnavailable, match=r"\[rerank\] extra: pip install 'rms-retrieval\[rerank\]'"):
        model_directory("no-such-distribution-rms")
    assert model_directory().joinpath("model.onnx").is_file()


@pytest.fixture(scope="module")
def store(demo_store):
    with MemoryStore.open(demo_store.path, create=False) as opened:
        yield opened


def _ask(store, demo_store, settings, **options):
    return retrieve(store, "Where does Tomas work now?", namespaces=[demo_store.namespace],
                    reference_time=demo_store.reference_time, token_budget=300, settings=settings, **options)


@pytest.mark.parametrize("policy", POLICIES)
def test_each_policy_logs_its_scores_and_replays_without_the_model(store, demo_store, policy):
    settings = RetrievalSettings(rerank=RerankSettings(enabled=True, policy=policy, top_k=15))
    result = _ask(store, demo_store, settings, extra_nodes=["reranked_scores", "fused_scores"])
    logged = result.log_record["payload"]["reranker"]
    reranked = result.nodes["reranked_scores"]
    assert logged["policy"] == policy and logged["model"] == default_cross_encoder().identity
    assert len(logged["scores"]) == 15 == reranked.reranked and sorted(logged["ranks"]) == list(range(1, 16))
    assert logged["object_ids"] == [str(o.id) for o in result.nodes["fused_scores"].objects[:15]]
    if policy != "legacy":  # the envelope: the prefix's scores are the scored pool's, reordered
        assert sorted(reranked.pool.score.tolist()) == sorted(result.nodes["fused_scores"].score.tolist())
    report = replay(store, result.request_id)
    assert report.identical, report.to_text()


def test_replay_refuses_to_run_the_cross_encoder():
    with pytest.raises(ReplayError, match="must use the logged reranker scores"):
        RefusingCrossEncoder("m@1").score("q", ["x"])


def test_the_reranker_off_logs_nothing_new_and_keeps_the_bundle(store, demo_store):
    plain = _ask(store, demo_store, RetrievalSettings(), log=False)
    policy_only = _ask(store, demo_store, RetrievalSettings(rerank=RerankSettings(policy="score_envelope")), log=False)
    assert "reranker" not in plain.log_record["payload"]
    assert policy_only.bundle.items == plain.bundle.items  # a policy alone does not enable reranking


def test_explain_shows_the_model_score_blend_and_place(store, demo_store):
    settings = RetrievalSettings(rerank=RerankSettings(enabled=True, policy="score_envelope", prior_weight=0.0))
    item = _ask(store, demo_store, settings, log=False).bundle.items[2]
    explanation = explain(store, "Where does Tomas work now?", item.id, namespaces=[demo_store.namespace],
                          reference_time=demo_store.reference_time, token_budget=300, settings=settings)
    step = explanation.step("rerank")
    assert step.node == "reranked_scores" and step.facts["reranked"] and step.facts["policy"] == "score_envelope"
    assert "cross-encoder score" in step.summary and "prior weight 0" in step.summary
    assert step.facts["row"]["rerank_rank"] >= 1


def test_rms_query_and_explain_take_the_reranker_options(demo_store, capsys):
    common = ["--store", str(demo_store.path), "--namespace", demo_store.namespace,
              "--reference-time", demo_store.reference_time.isoformat()]
    assert main(["query", *common, "--rerank", "anchored_score_envelope", "--json", "Where does Tomas work now?"]) == 0
    assert '"configuration_fingerprint"' in capsys.readouterr().out
    assert main(["query", *common, "--rerank", "legacy", "--rerank-prior-weight", "0", "Where does Tomas work now?"]) == 2
    assert "needs an envelope policy" in capsys.readouterr().err
