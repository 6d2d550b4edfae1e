import json

import pytest

from rms_retrieval.dataflows.ingest import IngestError, locomo_objects, read_jsonl
from rms_retrieval.dataflows.demo import load_demo


def test_read_jsonl_reads_every_valid_line(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"namespace": "n", "content": "one"}\n\n{"namespace": "n", "content": "two"}\n')
    assert [o.content for o in read_jsonl(path)] == ["one", "two"]


@pytest.mark.parametrize("text, message", [
    ("", "no objects found"),
    ('{"namespace": "n"}\n', "line 1, content: Field required"),
    ('{"namespace": "n", "content": "x", "mystery": 1}\n', "line 1, mystery: Extra inputs are not permitted"),
    ('{"namespace": "n", "content": "ok"}\n{"namespace": "n", "content": "\\u0000 "}\n', "line 2, content: .*blank"),
])
def test_read_jsonl_refuses_the_whole_file(tmp_path, text, message):
    path = tmp_path / "m.jsonl"
    path.write_text(text)
    with pytest.raises(IngestError, match=message):
        read_jsonl(path)


def test_read_jsonl_names_an_unreadable_file(tmp_path):
    with pytest.raises(IngestError, match="cannot be read"):
        read_jsonl(tmp_path / "missing.jsonl")


def test_locomo_objects_keep_speakers_then_turns_per_conversation():
    corpus = load_demo()
    objects = locomo_objects(corpus.dataset)
    assert [o.node_type for o in objects[:2]] == ["ENTITY", "ENTITY"]
    assert objects[2].source_ref == "D1:1" and objects[2].content.startswith("Priya: ")
    assert len(objects) == 2 + sum(len(c.turns) for c in corpus.dataset.conversations)
    assert json.loads(objects[2].model_dump_json())["session_id"] == "session_1"


def test_plain_turns_round_trip_through_jsonl_without_entities(tmp_path):
    from rms_retrieval.dataflows.ingest import plain_turns, write_jsonl

    dataset = load_demo().dataset
    turns = plain_turns(dataset)
    assert len(turns) == sum(len(c.turns) for c in dataset.conversations)
    assert {o.node_type for o in turns} == {"TURN"}
    first = turns[0]
    assert first.content.startswith("Priya: ") and first.metadata["speaker"] == "Priya"
    assert first.session_id == "session_1" and first.session_seq == 0 and first.event_time is not None
    path = tmp_path / "turns.jsonl"
    assert write_jsonl(turns, path) == len(turns)
    assert read_jsonl(path) == turns
    assert not (tmp_path / "turns.jsonl.tmp").exists()
