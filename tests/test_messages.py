"""Chat messages in every accepted shape, their errors, and `MemoryStore.add_messages`."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from langchain_core.messages import AIMessage, ChatMessage as LangChainChatMessage, HumanMessage, SystemMessage, \
    ToolMessage

from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.analysis.messages import ChatMessage, chat_message, message_turns
from factories import FakeEncoder

T = datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)


@pytest.mark.parametrize(("message", "role", "name", "content"), [
    ({"role": "user", "content": "I went to the support group", "name": "Caroline"},
     "user", "Caroline", "I went to the support group"),                                  # OpenAI / mem0
    ({"role": "assistant", "content": "How was it?"}, "assistant", None, "How was it?"),
    ({"role_type": "user", "role": "Caroline", "content": "It was great"}, "user", "Caroline", "It was great"),  # Zep
    ({"role_type": "tool", "content": "42"}, "tool", None, "42"),
    (HumanMessage("Hi", name="Caroline"), "user", "Caroline", "Hi"),                      # LangChain
    (AIMessage("Hello!"), "assistant", None, "Hello!"),
    (SystemMessage("Be brief."), "system", None, "Be brief."),
    (ToolMessage("sunny", tool_call_id="call-1"), "tool", None, "sunny"),
    (LangChainChatMessage(content="Hey", role="user"), "user", None, "Hey"),
    (HumanMessage(content=[{"type": "text", "text": "a list of blocks"}]), "user", None, "a list of blocks"),
    (ChatMessage(role="user", content="mine", name="Mel"), "user", "Mel", "mine"),
])
def test_every_accepted_shape(message, role, name, content):
    parsed = chat_message(message)
    assert (parsed.role, parsed.name, parsed.content) == (role, name, content)


@pytest.mark.parametrize(("messages", "error"), [
    ([{"role": "user", "content": "ok"}, {"role": "robot", "content": "x"}], "message 1, role: Input should be"),
    ([{"role": "user", "content": ""}], "message 0, content: String should have at least 1 character"),
    ([{"role": "user", "content": "   "}], "message 0, content: .*blank"),
    ([{"role": "user", "content": "x", "tool_calls": []}], "message 0: unknown message field 'tool_calls'"),
    ([{"role": "user", "content": "x", "created_at": "2023-05-08T13:56:00"}], "message 0, created_at: .*timezone"),
    ([{"role_type": "user", "role": "Caroline", "name": "Mel", "content": "x"}], "names its speaker twice"),
    ([["user", "hi"]], "message 0: a message is a dict"),
    ({"role": "user", "content": "hi"}, "messages must be a list"),
    ("hi", "messages must be a list"),
])
def test_bad_messages_are_one_line_errors(messages, error):
    with pytest.raises(StoreError, match=error) as raised:
        message_turns("chat", "s1", messages)
    assert "\n" not in str(raised.value)


def test_a_message_is_a_turn_with_its_content_as_given():
    [turn] = message_turns("chat", "s1", [{"role": "user", "name": "Caroline", "content": "  I went!  ",
                                            "created_at": "2023-05-08T13:56:00+00:00", "metadata": {"mood": "happy"},
                                            "source_ref": "D1:1"}], owner="u1", scope="work")
    assert turn.content == "  I went!  " and turn.node_type == "TURN" and turn.session_seq is None
    assert turn.metadata == {"mood": "happy", "role": "user", "speaker": "Caroline"}
    assert turn.created_at == turn.updated_at == turn.event_time == T
    assert (turn.namespace, turn.session_id, turn.owner, turn.scope, turn.source_ref) == ("chat", "s1", "u1", "work",
                                                                                           "D1:1")
    [untimed] = message_turns("chat", "s1", [{"role": "user", "content": "x"}], time=T)
    assert untimed.event_time == T


def test_add_messages_continues_the_session_and_records_each_speaker_once(tmp_path):
    with MemoryStore.open(tmp_path / "store", encoder=FakeEncoder()) as store:
        store.add_messages("chat", "s1", [{"role": "user", "name": "Caroline", "content": "I went to the group"},
                                          {"role_type": "assistant", "role": "Melanie", "content": "How was it?"}],
                           time=T)
        report = store.add_messages("chat", "s1", [HumanMessage("It was great", name="Caroline"), AIMessage("Good")],
                                    time=T)
        assert report.entities_added == 0  # Caroline's ENTITY exists already
        store.add_messages("other", "s1", [{"role": "user", "name": "Caroline", "content": "it is me again"}], time=T)
        with pytest.raises(StoreError, match="message 1"):
            store.add_messages("chat", "s1", [{"role": "user", "content": "fine"}, {"role": "user", "content": ""}])
        objects = [o for segment in store.snapshot().segments for o in segment.objects()]
        edges = [stored.edge for segment in store.snapshot().segments for stored in segment.edges]
    turns = sorted((o for o in objects if o.node_type == "TURN" and o.namespace == "chat"), key=lambda o: o.session_seq)
    assert [(t.session_seq, t.content) for t in turns] == [(0, "I went to the group"), (1, "How was it?"),
                                                            (2, "It was great"), (3, "Good")]
    speakers = sorted((o.namespace, o.content) for o in objects if o.node_type == "ENTITY")
    assert speakers == [("chat", "Caroline"), ("chat", "Melanie"), ("other", "Caroline")]
    spoken = {edge.source for edge in edges if edge.edge_type == "SPOKEN_BY"}
    assert spoken == {t.id for t in turns if "speaker" in t.metadata} | {o.id for o in objects if o.namespace == "other"
                                                                          and o.node_type == "TURN"}
