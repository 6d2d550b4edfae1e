import json

import pytest

from rms_retrieval.dataflows.ingest import IngestError, locomo_objects, read_jsonl, read_message_lines
from rms_retrieval.dataflows.demo import load_demo


def test_read_jsonl_reads_every_valid_line(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"namespace": "n", "content": "one"}\n\n{"namespace": "n", "content": "two"}\n')
    assert [o.content for o in read_jsonl(path)] == ["one", "two"]


@pytest.mark.parametrize("reader, text, message", [
    (read_jsonl, "", "no objects found"),
    (read_jsonl, '{"namespace": "n"}\n', "line 1, content: Field required"),
    (read_jsonl, '{"namespace": "n", "content": "x", "mystery": 1}\n', "line 1, mystery: Extra inputs are not permitted"),
    (read_jsonl, '{"namespace": "n", "content": "ok"}\n{"namespace": "n", "content": "\\u0000 "}\n',
     "line 2, content: .*blank"),
    (read_message_lines, "", "no messages found"),
    (read_message_lines, '{"session_id": "s1", "role": "user", "content": "hi"}\n',
     'line 1: a message line is an object with "namespace"'),
    (read_message_lines, '{"namespace": "c", "session_id": "s1", "role": "bot", "content": "hi"}\n',
     "line 1, role: Input should be"),
    (read_message_lines, '{"namespace": "c", "session_id": "s1", "role": "user", "content": "hi", "x": 1}\n',
     "line 1: unknown message field"),
    (read_message_lines, "{oops\n", "line 1: invalid JSON"),
])
def test_a_reader_refuses_the_whole_file(tmp_path, reader, text, message):
    path = tmp_path / "m.jsonl"
    path.write_text(text)
    with pytest.raises(IngestError, match=message):
        reader(path)


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


def test_read_message_lines_reads_messages_in_file_order(tmp_path):
    path = tmp_path / "chat.jsonl"
    path.write_text('{"namespace": "chat", "session_id": "s1", "role": "user", "name": "Caroline", "content": "hi"}\n'
                    '\n{"namespace": "chat", "session_id": "s1", "role_type": "assistant", "role": "Mel", '
                    '"content": "hello", "created_at": "2023-05-08T13:56:00Z"}\n')
    first, second = read_message_lines(path)
    assert (first.content, first.metadata, first.session_id) == ("hi", {"role": "user", "speaker": "Caroline"}, "s1")
    assert second.metadata["speaker"] == "Mel" and second.event_time.year == 2023


def test_plain_chat_turns_carry_exactly_what_a_new_user_writes():
    from rms_retrieval.dataflows.ingest import plain_chat_turns
    from rms_retrieval.dataflows.locomo import turn_object_id

    dataset = load_demo().dataset
    turns = plain_chat_turns(dataset)
    conversation = dataset.conversations[0]
    assert len(turns) == len(conversation.turns)
    first = turns[0]
    assert first.content == f"Priya: {conversation.turns[0].text}" and first.source_ref == "D1:1"
    assert first.id == turn_object_id(conversation.sample_id, "D1:1")
    assert first.created_at == first.updated_at == first.event_time == conversation.session(1).date_time
    assert first.session_id == "session_1"
    assert all(t.session_seq is None and t.metadata == {} and t.node_type == "TURN" for t in turns)
    set_fields = {name for t in turns for name in t.model_fields_set}
    assert set_fields == {"id", "namespace", "session_id", "content", "created_at", "updated_at", "event_time",
                          "source_ref"}


def test_plain_chat_turns_show_a_shared_image(tmp_path):
    from rms_retrieval.dataflows.ingest import _chat_line
    from rms_retrieval.dataflows.locomo import LocomoTurn

    turn = LocomoTurn(dia_id="D1:1", speaker="Mel", text="Look!", session=1, session_seq=0, image_caption="a lake")
    assert _chat_line(turn) == "Look! [shares image: a lake]"


def test_chat_sessions_are_messages_of_each_session():
    from rms_retrieval.dataflows.ingest import chat_sessions
    from rms_retrieval.stores.analysis.messages import chat_message

    conversation = load_demo().dataset.conversations[0]
    sessions = chat_sessions(conversation)
    assert [session_id for session_id, _ in sessions] == [f"session_{s.number}" for s in conversation.sessions]
    first = chat_message(sessions[0][1][0])
    assert (first.role, first.name, first.content, first.source_ref) == ("user", "Priya", conversation.turns[0].text,
                                                                         "D1:1")
    assert {chat_message(m).role for _, messages in sessions for m in messages} == {"user", "assistant"}
