"""The LoCoMo relevance harness on the demo corpus: arms, metrics, re-packing, summaries."""

from __future__ import annotations

import shutil

import pytest

from rms_retrieval.dataflows.bench import locomo_bench
from rms_retrieval.dataflows.demo import load_demo
from rms_retrieval.stores.providers.onnx_encoder import default_encoder
from rms_retrieval.dataflows.bench import arms
from rms_retrieval.stores.memory_store import MemoryStore

BUDGETS = (150, 400)


@pytest.fixture(scope="module")
def corpus():
    return load_demo()


@pytest.fixture(scope="module")
def bench(corpus, demo_store, tmp_path_factory):
    """The bench over a private copy of the session's demo store (the demo corpus, embedded once)."""
    store = MemoryStore.open(shutil.copytree(demo_store.path, tmp_path_factory.mktemp("demo") / "store"),
                             encoder=default_encoder())
    yield locomo_bench.LocomoBench(store, corpus.dataset, default_encoder(), BUDGETS)
    store.close()


def test_evenly_spaced():
    assert locomo_bench.evenly_spaced(list(range(10)), 3) == [0, 3, 6]
    assert locomo_bench.evenly_spaced([1, 2], None) == [1, 2]
    assert locomo_bench.evenly_spaced([1, 2], 5) == [1, 2]
    with pytest.raises(ValueError):
        locomo_bench.evenly_spaced([1, 2], 0)


def test_relevance_on_the_demo_corpus(bench, corpus):
    questions = locomo_bench.benchmark_questions(corpus.dataset)
    assert len(questions["main"]) == 5 and questions["adversarial"] == []
    names = ["pipeline", "vector_only", "bm25_only"]
    results = locomo_bench.run_relevance(bench, questions, names, progress=False, repack_check_questions=2)

    assert list(results["arms"]) == names
    for arm in names:
        overall = results["arms"][arm]["main_summary"]["all"]
        assert overall["n"] == 5
        for name in ("precision@5", "recall@10", "all_in_top10", "all_in_pool", *(f"all_packed@{b}" for b in BUDGETS)):
            assert 0.0 <= overall[name] <= 1.0
        for row in results["per_question"][arm]["main"]:
            # packed items and the top 10 both come from the ranked pool
            assert row["all_in_top10"] <= row["all_in_pool"]
            assert all(row[f"all_packed@{b}"] <= row["all_in_pool"] for b in BUDGETS)
            assert 0 < row["items@150"] <= row["items@400"]
    assert set(results["paired"]) == {"vector_only", "bm25_only"}
    comparison = results["paired"]["vector_only"]["400"]
    assert comparison["n"] == 5 and comparison["wins"] + comparison["losses"] + comparison["ties"] == 5
    assert comparison["low"] <= comparison["difference"] <= comparison["high"]
    assert results["repack_check"] == {"compared": 2, "identical": 2, "different": []}
    lines = locomo_bench.summary_lines(results, BUDGETS)
    assert lines[0].split()[:3] == ["arm", "n", "P@5"] and any("best published: 0.841" in line for line in lines)


def test_ranked_list_is_the_ranked_candidates_frame(bench, corpus):
    question = corpus.dataset.questions[0]
    run = bench.run(question, arms.arm_settings("pipeline"))
    assert len(run.ranked_ids) == len(set(run.ranked_ids)) >= len(run.bundles[400].items)
    assert {item.id for item in run.bundles[400].items} <= set(run.ranked_ids)
    assert set(run.bundles) == set(BUDGETS)
    assert all(bundle.tokens_used <= budget for budget, bundle in run.bundles.items())


def test_rejects_bad_budgets(bench):
    with pytest.raises(ValueError, match="budgets"):
        locomo_bench.LocomoBench(bench.store, load_demo().dataset, bench.encoder, [0])


def test_split_is_by_conversation_alternating_in_sample_id_order():
    ids = ["conv-30", "conv-26", "conv-42", "conv-41", "conv-43"]
    assert locomo_bench.split_sample_ids(ids, "tune") == ["conv-26", "conv-41", "conv-43"]
    assert locomo_bench.split_sample_ids(ids, "confirm") == ["conv-30", "conv-42"]
    assert locomo_bench.split_sample_ids(ids, "all") == sorted(ids)
    with pytest.raises(ValueError, match="unknown split 'train'"):
        locomo_bench.split_sample_ids(ids, "train")


def test_locomo_split_is_the_documented_one():
    from pathlib import Path

    from rms_retrieval.dataflows.locomo import load_locomo

    path = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo10.json"
    if not path.exists():
        pytest.skip("LoCoMo is not at ../shared/data/locomo10.json")
    dataset = load_locomo(path)
    tune = locomo_bench.benchmark_questions(dataset, split="tune")
    confirm = locomo_bench.benchmark_questions(dataset, split="confirm")
    assert sorted({q.sample_id for q in tune["main"]}) == ["conv-26", "conv-41", "conv-43", "conv-47", "conv-49"]
    assert sorted({q.sample_id for q in confirm["main"]}) == ["conv-30", "conv-42", "conv-44", "conv-48", "conv-50"]
    everything = locomo_bench.benchmark_questions(dataset)
    for part in ("main", "adversarial"):
        assert len(tune[part]) + len(confirm[part]) == len(everything[part])
    assert (len(tune["main"]), len(confirm["main"])) == (786, 750)


def test_benchmark_questions_keep_only_the_split(corpus):
    only = corpus.dataset.conversations[0].sample_id
    assert locomo_bench.split_sample_ids([only], "tune") == [only]
    assert len(locomo_bench.benchmark_questions(corpus.dataset, split="tune")["main"]) == 5
    assert locomo_bench.benchmark_questions(corpus.dataset, split="confirm")["main"] == []


def test_shared_pools_give_the_bundles_of_full_runs(bench, corpus):
    shared = locomo_bench.LocomoBench(bench.store, corpus.dataset, bench.encoder, BUDGETS, share_pools=True)
    questions = locomo_bench.benchmark_questions(corpus.dataset)
    names = ["pipeline", "score_order", "temporal_intent_only"]
    results = locomo_bench.run_relevance(shared, questions, names, progress=False, repack_check_questions=3)
    assert results["shared_pool_check"] == {"compared": 3, "identical": 3, "different": []}
    assert len(shared._pools) == len(questions["main"])  # one pool per question, shared by all three arms
    plain = locomo_bench.run_relevance(bench, questions, names, progress=False, repack_check_questions=0)
    assert plain["per_question"] == results["per_question"]
    assert locomo_bench.pool_fingerprint(arms.arm_settings("no_graph")) != locomo_bench.pool_fingerprint(
        arms.arm_settings("score_order"))
