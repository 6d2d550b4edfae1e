"""RmsStore with the real langgraph: the BaseStore operations sync and async, checked against
LangGraph's own InMemoryStore where the two must agree, and a small LangGraph graph that writes
memories in one thread and recalls them in another."""

from __future__ import annotations

import asyncio
import re
from typing import TypedDict

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore, Item, SearchItem
from langgraph.store.memory import InMemoryStore

from rms_retrieval.dataflows.retrieval import retrieve
from rms_retrieval.langgraph import RmsStore, item_id, labels_of, namespace_of
from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.memory_store import MemoryStore

MEMORIES = [
    (("users", "alice", "memories"), "m1", {"text": "Alice is allergic to peanuts.", "kind": "health", "n": 1}),
    (("users", "alice", "memories"), "m2", {"text": "Alice moved to Lisbon in March.", "kind": "life", "n": 2}),
    (("users", "alice", "prefs"), "p1", {"text": "Alice prefers short answers.", "kind": "style", "n": 3}),
    (("users", "bob smith", "memories"), "m1", {"text": "Bob repairs old bicycles.", "kind": "life", "n": 4}),
]
_NAMESPACE_RULE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:\-]*$")
labels = st.text(st.characters(blacklist_characters=".\x00", blacklist_categories=("Cs",)), min_size=1, max_size=8)


@given(st.lists(labels, min_size=1, max_size=4))
def test_namespace_tuples_map_onto_ours_and_back(parts):
    try:
        name = namespace_of(tuple(parts))
    except StoreError as error:  # too long as one of ours: refused in one line, never cut
        assert "at most 200 fit" in str(error) and "\n" not in str(error)
        return
    assert _NAMESPACE_RULE.match(name) and len(name) <= 200 and labels_of(name) == tuple(parts)


def test_only_langgraph_namespaces_are_read_back():
    assert namespace_of(("users", "bob smith")) == "lg.users.bob:20smith"
    assert namespace_of(("ü", "a:b")) == "lg.:C3:BC.a:3Ab"
    assert labels_of("demo-priya-tomas") is None and labels_of("lg") is None and labels_of("lgx.a") is None
    with pytest.raises(StoreError, match="at most 200 fit"):
        namespace_of(("x" * 300,))


@pytest.fixture
def stores(tmp_path, encoder):
    ours = RmsStore(MemoryStore.open(tmp_path / "store", encoder=encoder), index_fields=["text"])
    reference = InMemoryStore()
    for namespace, key, value in MEMORIES:
        reference.put(namespace, key, value)
    ours.batch([_put(*memory) for memory in MEMORIES])  # one add for all four
    yield ours, reference
    ours.close()


def _put(namespace, key, value):
    from langgraph.store.base import PutOp

    return PutOp(namespace, key, value)


def _plain(items):
    return [(item.namespace, item.key, item.value) for item in items]


def test_get_and_list_namespaces_agree_with_the_in_memory_store(stores):
    ours, reference = stores
    for namespace, key, value in MEMORIES:
        got = ours.get(namespace, key)
        assert isinstance(got, Item) and (got.namespace, got.key, got.value) == (namespace, key, value)
    assert ours.get(("users", "alice", "memories"), "nope") is None and ours.get(("nobody",), "m1") is None
    for arguments in [{}, {"prefix": ("users", "alice")}, {"suffix": ("memories",)}, {"max_depth": 2},
                      {"prefix": ("users", "*", "memories")}, {"limit": 1, "offset": 1}]:
        assert ours.list_namespaces(**arguments) == reference.list_namespaces(**arguments), arguments


def test_search_without_a_query_filters_like_the_in_memory_store(stores):
    ours, reference = stores
    for prefix, filter_ in [(("users",), None), (("users", "alice"), {"kind": "life"}), (("users",), {"n": {"$gte": 2}}),
                            (("users",), {"kind": {"$ne": "life"}}), (("nobody",), None)]:
        mine = ours.search(prefix, filter=filter_, limit=10)
        assert sorted(_plain(mine)) == sorted(_plain(reference.search(prefix, filter=filter_, limit=10))), filter_
    newest_first = ours.search(("users",), limit=2, offset=1)
    assert len(newest_first) == 2 and all(isinstance(item, SearchItem) and item.score is None for item in newest_first)


def test_search_with_a_query_is_answered_by_the_pipeline(stores):
    ours, _ = stores
    found = ours.search(("users", "alice"), query="What is Alice allergic to?", limit=3)
    assert found[0].key == "m1" and found[0].value["text"] == "Alice is allergic to peanuts."
    bundle = retrieve(ours.store, "What is Alice allergic to?", log=False, token_budget=ours.token_budget,
                      namespaces=[namespace_of(("users", "alice", "memories")), namespace_of(("users", "alice", "prefs"))]).bundle
    in_bundle = [item.id for item in bundle.items if item.node_type == "FACT"]
    assert [item_id(item.namespace, item.key) for item in found] == in_bundle[:3]
    assert [item.score for item in found] == [item.score for item in bundle.items if item.node_type == "FACT"][:3]
    assert {item.namespace for item in found} <= {("users", "alice", "memories"), ("users", "alice", "prefs")}
    assert ours.search(("users", "alice"), query="What is Alice allergic to?", filter={"kind": "style"})[0].key == "p1"


def test_async_operations_give_the_same_answers(stores):
    ours, _ = stores

    async def run():
        await ours.aput(("users", "carol"), "c1", {"text": "Carol keeps bees."})
        return (await ours.aget(("users", "carol"), "c1"), await ours.asearch(("users", "carol"), query="bees"),
                await ours.alist_namespaces(prefix=("users",), max_depth=2))

    got, found, namespaces = asyncio.run(run())
    assert got.value == {"text": "Carol keeps bees."} and found[0].key == "c1"
    assert namespaces == ours.list_namespaces(prefix=("users",), max_depth=2)
    assert ("users", "carol") in namespaces


def test_a_put_on_a_key_replaces_its_value_and_a_delete_removes_it(stores):
    ours, _ = stores
    ours.put(("users", "alice", "memories"), "m1", {"text": "Alice is allergic to shellfish."})
    assert ours.get(("users", "alice", "memories"), "m1").value == {"text": "Alice is allergic to shellfish."}
    assert ours.search(("users", "alice"), query="What is Alice allergic to?")[0].value["text"] == \
        "Alice is allergic to shellfish."
    ours.delete(("users", "alice", "memories"), "m1")
    assert ours.get(("users", "alice", "memories"), "m1") is None
    assert all(item.key != "m1" for item in ours.search(("users", "alice"), query="allergic"))


class _Chat(TypedDict):
    user: str
    message: str
    recalled: list[str]


def _remember(state: _Chat, runtime: Runtime) -> dict:
    if state["message"].startswith("remember: "):
        text = state["message"].removeprefix("remember: ")
        runtime.store.put(("users", state["user"], "memories"), f"note-{len(text)}", {"text": text})
    return {}


def _recall(state: _Chat, runtime: Runtime) -> dict:
    found = runtime.store.search(("users", state["user"]), query=state["message"], limit=2)
    return {"recalled": [item.value["text"] for item in found]}


def test_a_langgraph_graph_writes_and_recalls_memories(tmp_path, encoder):
    graph = StateGraph(_Chat)
    graph.add_node("remember", _remember)
    graph.add_node("recall", _recall)
    graph.add_edge(START, "remember")
    graph.add_edge("remember", "recall")
    graph.add_edge("recall", END)
    store = RmsStore(MemoryStore.open(tmp_path / "store", encoder=encoder), index_fields=["text"])
    assert isinstance(store, BaseStore)
    app = graph.compile(store=store)
    app.invoke({"user": "dana", "message": "remember: Dana's sister Mira lives in Oslo.", "recalled": []})
    app.invoke({"user": "dana", "message": "remember: Dana plays the cello on Sundays.", "recalled": []})
    app.invoke({"user": "erik", "message": "remember: Erik's sister lives in Rome.", "recalled": []})
    answer = app.invoke({"user": "dana", "message": "Where does my sister live?", "recalled": []})
    assert answer["recalled"][0] == "Dana's sister Mira lives in Oslo."
    assert all("Erik" not in text for text in answer["recalled"])
    other = asyncio.run(app.ainvoke({"user": "erik", "message": "Where does my sister live?", "recalled": []}))
    assert other["recalled"] == ["Erik's sister lives in Rome."]
    store.close()
