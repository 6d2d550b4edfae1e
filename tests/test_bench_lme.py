"""LongMemEval-S as a benchmark (`rms bench lme`) on a small folder in its format, written by the test."""

from __future__ import annotations

import gzip
import json
from datetime import datetime, timezone

import pytest

from rms_retrieval.dataflows.bench import lme_bench
from rms_retrieval.dataflows.cli import main
from rms_retrieval.stores.models import NodeType

SESSIONS = {
    "s1": [{"role": "user", "content": "I adopted a grey cat called Miso last week."},
           {"role": "assistant", "content": "Congratulations on adopting Miso!", "has_answer": False}],
    "s2": [{"role": "user", "content": "My sister lives in Lisbon now.", "has_answer": True},
           {"role": "assistant", "content": "Lisbon is lovely in spring."}],
    "s3": [{"role": "user", "content": "Can you suggest a pasta recipe?"},
           {"role": "assistant", "content": "Try cacio e pepe: pasta, pecorino and black pepper."}],
}
QUESTIONS = [
    {"question_id": "q-sister", "question_type": "single-session-user", "question": "Where does my sister live?",
     "question_date": "2023/05/30 (Tue) 23:40", "answer": "Lisbon", "answer_session_ids": ["s2"],
     "haystack_session_ids": ["s1", "s2", "s3", "s1"],
     "haystack_dates": ["2023/05/01 (Mon) 10:00", "2023/05/10 (Wed) 11:30", "2023/05/20 (Sat) 09:15",
                        "2023/05/01 (Mon) 10:00"]},
    {"question_id": "q-cat_abs", "question_type": "single-session-user", "question": "What is my dog's name?",
     "question_date": "2023/05/30 (Tue) 23:40", "answer": "", "answer_session_ids": [],
     "haystack_session_ids": ["s1", "s3"], "haystack_dates": ["2023/05/01 (Mon) 10:00", "2023/05/20 (Sat) 09:15"]},
]


def write_folder(root):
    """A small LongMemEval-S folder in its own format at `root`."""
    root.mkdir()
    (root / lme_bench.QUESTIONS_FILE).write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    with gzip.open(root / lme_bench.SESSIONS_FILE, "wt") as out:
        for session_id, turns in SESSIONS.items():
            out.write(json.dumps({"session_id": session_id, "turns": turns}) + "\n")
    return root


@pytest.fixture
def folder(tmp_path):
    return write_folder(tmp_path / "longmemeval_s")


def test_questions_read_with_their_dated_haystacks(folder):
    sister, cat = lme_bench.load_questions(folder)
    assert sister.question_date == datetime(2023, 5, 30, 23, 40, tzinfo=timezone.utc)
    assert sister.haystack[1] == ("s2", datetime(2023, 5, 10, 11, 30, tzinfo=timezone.utc))
    assert sister.answerable and not cat.answerable and sister.sample_id == "lme-q-sister"
    assert sister.split in ("tune", "confirm") and lme_bench.load_questions(folder)[0].split == sister.split


def test_the_split_is_a_fixed_hash_of_the_id():
    made = {qid: lme_bench.LmeQuestion(qid, "t", "q", datetime.now(timezone.utc), ()).split
            for qid in ("001be529", "0a995998", "gpt4_2655b836", "6ade9755")}
    assert made == {"001be529": "confirm", "0a995998": "confirm", "gpt4_2655b836": "tune", "6ade9755": "confirm"}


def test_a_haystack_becomes_plain_dated_turns_a_repeated_session_once(folder):
    sister = lme_bench.load_questions(folder)[0]
    sessions = lme_bench.load_sessions(folder, ["s1", "s2", "s3"])
    objects = lme_bench.question_objects(sister, sessions)
    assert [o.content for o in objects[:2]] == ["user: I adopted a grey cat called Miso last week.",
                                                "assistant: Congratulations on adopting Miso!"]
    assert len(objects) == 6 and {o.node_type for o in objects} == {NodeType.TURN}
    assert objects[2].event_time == datetime(2023, 5, 10, 11, 30, tzinfo=timezone.utc) and objects[2].session_seq == 0
    assert lme_bench.answer_ids(sister, sessions) == (objects[2].id,)


def test_plain_and_message_haystacks_keep_the_ids_and_differ_only_where_they_say(folder):
    sister = lme_bench.load_questions(folder)[0]
    sessions = lme_bench.load_sessions(folder, ["s1", "s2", "s3"])
    positioned = lme_bench.question_objects(sister, sessions)
    plain = lme_bench.question_objects(sister, sessions, "plain")
    messages = lme_bench.question_objects(sister, sessions, "messages")
    assert [o.id for o in plain] == [o.id for o in messages] == [o.id for o in positioned]
    assert [o.content for o in plain] == [o.content for o in positioned] and {o.session_seq for o in plain} == {None}
    assert messages[0].content == "I adopted a grey cat called Miso last week." and messages[0].metadata["role"] == "user"
    assert messages[2].created_at == positioned[2].created_at and messages[2].source_ref == "s2:0"
    with pytest.raises(ValueError, match="unknown ingest 'loaded'"):
        lme_bench.question_objects(sister, sessions, "loaded")


def test_the_message_path_leaves_out_a_message_of_invisible_characters_that_the_api_refuses(folder):
    sister = lme_bench.load_questions(folder)[0]
    sessions = {key: list(turns) for key, turns in lme_bench.load_sessions(folder, ["s1", "s2", "s3"]).items()}
    first = sister.haystack[0][0]
    sessions[first].append({"role": "user", "content": "\u200b"})  # as 27 turns of LongMemEval-S are
    positioned = lme_bench.question_objects(sister, sessions)
    messages = lme_bench.question_objects(sister, sessions, "messages")
    assert "user: \u200b" in [o.content for o in positioned] and len(messages) == len(positioned) - 1


def test_bad_folders_get_one_line_errors(tmp_path, folder):
    with pytest.raises(lme_bench.LmeFormatError, match="does not exist"):
        lme_bench.load_questions(tmp_path / "nowhere")
    with pytest.raises(lme_bench.LmeFormatError, match="not in sessions.jsonl.gz"):
        lme_bench.load_sessions(folder, ["s1", "missing"])
    with pytest.raises(lme_bench.LmeFormatError, match="2023/05/30"):
        lme_bench.parse_lme_date("yesterday")


def test_benchmark_questions_leave_out_abstentions_and_cap_each_type(folder):
    questions = lme_bench.load_questions(folder)
    assert [q.question_id for q in lme_bench.benchmark_questions(questions, "all", None)] == ["q-sister"]
    assert lme_bench.benchmark_questions(questions, "all", 0) == []


def test_rms_bench_lme_packs_the_answer_and_a_rerun_embeds_nothing(folder, tmp_path, capsys):
    args = ["bench", "lme", "--data", str(folder), "--store", str(tmp_path / "store"),
            "--vector-cache", str(tmp_path / "cache"), "--out", str(tmp_path / "out"), "--split", "all",
            "--arms", "pipeline", "rerank_envelope_50", "--budgets", "100", "4000", "--no-progress",
            "--score-cache", str(tmp_path / "scores")]
    assert main(args) == 0
    kept = [json.loads(line) for f in (tmp_path / "scores").glob("*/scores.jsonl") for line in f.read_text().splitlines()]
    assert len(kept) == 1 and len(kept[0]) == 6  # the model's score of each of the 6 turns, kept for the rerun
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    pipeline = results["relevance"]["arms"]["pipeline"]["summary"]
    assert pipeline["all"]["n"] == 1 and pipeline["all"]["all_packed@4000"] == 1.0
    assert "single-session-user" in pipeline and results["ingest"]["turns_added"] == 6
    assert results["relevance"]["arms"]["rerank_envelope_50"]["latency_ms"]["n"] == 1
    assert "rerank_envelope_50 vs pipeline packed@4000" in capsys.readouterr().out
    assert main(args) == 0
    again = json.loads((tmp_path / "out" / "results.json").read_text())
    assert again["ingest"]["turns_added"] == 0 and again["vector_cache_size"] == results["vector_cache_size"]
    assert again["relevance"]["arms"]["rerank_envelope_50"]["summary"] == results["relevance"]["arms"]["rerank_envelope_50"]["summary"]
    messages = ["bench", "lme", "--data", str(folder), "--store", str(tmp_path / "messages"), "--vector-cache",
                str(tmp_path / "cache"), "--out", str(tmp_path / "out-messages"), "--split", "all", "--arms", "pipeline",
                "--ingest", "messages", "--budgets", "4000", "--no-progress"]
    assert main(messages) == 0
    written = json.loads((tmp_path / "out-messages" / "results.json").read_text())
    assert written["ingest_mode"] == "messages" and written["relevance"]["arms"]["pipeline"]["summary"]["all"]["all_packed@4000"] == 1.0
