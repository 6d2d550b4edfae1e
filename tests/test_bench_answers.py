"""Answer-level evaluation (`rms bench answers`): LoCoMo's F1, and the demo corpus answered by a
reader served on 127.0.0.1, with retrieval, packing and the answer kept apart in each record."""

from __future__ import annotations

import hashlib
import json
import shutil
from importlib import resources

import pytest

from rms_retrieval.dataflows.bench import answers_bench, locomo_bench
from rms_retrieval.dataflows.cli import main
from rms_retrieval.dataflows.demo import DEMO_RESOURCE, load_demo
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.providers.chat_completions import ChatCompletionsModel
from rms_retrieval.stores.providers.onnx_encoder import default_encoder
from tests.chat_server import running_chat_server

BUDGET = 300


@pytest.mark.parametrize(("prediction", "gold", "f1"), [
    ("The cat sat", "cat sat down", 0.8),          # articles go; P 2/2, R 2/3
    ("Matching mugs!", "matching mugs", 1.0),
    ("unknown", "Woodworking", 0.0),
    ("7 May, 2023", "7 May 2023", 1.0),
])
def test_token_f1_after_locomo_normalisation(prediction, gold, f1):
    assert answers_bench.token_f1(prediction, gold) == pytest.approx(f1)


def test_exact_match_is_equality_after_normalisation():
    assert answers_bench.exact_match("The Woodworking.", "woodworking")
    assert not answers_bench.exact_match("woodworking class", "woodworking")


@pytest.fixture(scope="module")
def corpus():
    return load_demo()


@pytest.fixture(scope="module")
def bench(corpus, demo_store, tmp_path_factory):
    store = MemoryStore.open(shutil.copytree(demo_store.path, tmp_path_factory.mktemp("answers") / "store"),
                             read_only=True)
    yield locomo_bench.LocomoBench(store, corpus.dataset, default_encoder(), [BUDGET])
    store.close()


def _reader(corpus):
    """Gold for the first question, "unknown" for the second, a reply of another shape (an error) for the third."""
    questions = locomo_bench.benchmark_questions(corpus.dataset)["main"]
    answers = {questions[0].question: questions[0].answer, questions[1].question: "unknown", questions[2].question: None}

    def reply(body: dict) -> str | None:
        asked = body["messages"][1]["content"].rsplit("Question: ", 1)[1]
        return answers.get(asked, "unknown")
    return questions[:3], reply


def test_each_record_keeps_retrieval_packing_and_the_answer_apart(corpus, bench):
    questions, reply = _reader(corpus)
    with running_chat_server() as chat:
        chat.reply = reply
        reader = ChatCompletionsModel(chat.url, "reader", timeout_seconds=5)
        arms = answers_bench.run_answers(bench, questions, ["pipeline"], reader, BUDGET)
        sent = chat.requests[0][2]["messages"]
    row = arms["pipeline"]
    first, second, third = row["per_question"]
    assert (first["f1"], first["exact"], first["error"]) == (1.0, True, None)
    assert (second["f1"], second["answer"]) == (0.0, "unknown")
    assert third["f1"] is None and third["error"].startswith("ValueError: the chat-completions reply's content")
    assert (row["questions"], row["answered"], row["errors"], row["f1"]) == (3, 2, 1, 0.5)
    packed = [bench.run(q, RetrievalSettings()).outcome.metrics[f"all_packed@{BUDGET}"] for q in questions]
    assert [r["all_evidence_packed"] for r in row["per_question"]] == packed
    assert row["f1_evidence_packed"]["n"] + row["f1_evidence_missing"]["n"] == 2
    bundle = bench.run(questions[0], RetrievalSettings()).bundles[BUDGET]
    assert sent[0]["content"] == answers_bench.READER_PROMPT
    assert sent[1]["content"] == answers_bench.reader_message(bundle, questions[0].question)
    assert bundle.context in sent[1]["content"] and first["tokens_used"] == bundle.tokens_used <= BUDGET
    assert row["configuration_fingerprint"] == RetrievalSettings().fingerprint()


def test_the_command_writes_the_figures_with_their_provenance(capsys, corpus, demo_store, tmp_path):
    data = tmp_path / "demo-locomo.json"
    raw = json.loads(resources.files("rms_retrieval.dataflows").joinpath("data", DEMO_RESOURCE).read_text())
    data.write_text(json.dumps(raw["samples"]))
    _, reply = _reader(corpus)
    with running_chat_server() as chat:
        chat.reply = reply
        code = main(["bench", "answers", "--data", str(data), "--store", str(demo_store.path), "--split", "all",
                     "--out", str(tmp_path / "out"), "--budget", str(BUDGET), "--url", chat.url, "--model", "reader",
                     "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["dataset_sha256"] == hashlib.sha256(data.read_bytes()).hexdigest()
    assert results["split"] == "all" and results["token_budget"] == BUDGET and results["categories"] == [1, 2, 4]
    assert results["reader"] == f"openai_chat:reader@{chat.url}/chat/completions"
    assert results["prompt_sha256"] == hashlib.sha256(answers_bench.READER_PROMPT.encode()).hexdigest()
    assert results["arms"]["pipeline"]["questions"] == 5 and results["arms"]["pipeline"]["errors"] == 1
    assert "pipeline: F1 0.250, answered 4/5, errors 1" in out
