from __future__ import annotations

from datetime import datetime, timedelta, timezone
from uuid import UUID

from rms_retrieval.stores.indexes.entity_graph import (
    CO_MENTION_WINDOW,
    CO_MENTIONED,
    MENTIONS,
    SPOKEN_BY,
    GraphEdge,
    co_mention_confidence,
    entity_entries,
    co_mentioned_pairs,
    KnownNames,
    entity_graph,
    entity_id,
    known_names,
)
from rms_retrieval.stores.models import MemoryObject, NodeType

T0 = datetime(2024, 5, 1, tzinfo=timezone.utc)
ANCHOR = UUID(int=7)
ANCHORS = {"a": ANCHOR, "b": ANCHOR}


def _turn(number: int, content: str, namespace: str = "a", **extra) -> MemoryObject:
    return MemoryObject(
        id=UUID(int=number), namespace=namespace, content=content, created_at=T0 + timedelta(minutes=number), **extra
    )


def _entity(number: int, name: str, namespace: str = "a", aliases=()) -> MemoryObject:
    return MemoryObject(
        id=UUID(int=number), namespace=namespace, node_type=NodeType.ENTITY, content=name,
        entity_canonical_name=name, metadata={"aliases": list(aliases)}, created_at=T0,
    )


def test_co_mention_confidence_schedule():
    assert [co_mention_confidence(n) for n in (1, 2, 6, 7, 50)] == [0.45, 0.55, 0.95, 0.95, 0.95]


def test_declared_entities_aliases_speaker_and_extraction():
    mel = _entity(100, "Melanie", aliases=["Mel"])
    first = _turn(2, "I went hiking with mel and Caroline", metadata={"speaker": "Melanie"})
    second = _turn(1, "Caroline's painting is lovely")
    update = entity_graph([first, second, mel], {}, {}, ANCHORS)

    caroline = entity_id("a", "Caroline", ANCHOR)
    assert caroline == entity_id("a", "caroline", ANCHOR) != entity_id("b", "Caroline", ANCHOR)
    assert caroline != entity_id("a", "Caroline", UUID(int=99))  # another anchor, another id
    [created] = update.entities
    assert created.id == caroline and created.content == "Caroline" and created.entity_canonical_name == "Caroline"
    assert created.metadata == {"entity_type": "OTHER", "extracted": True}
    assert created.confidence == 0.7 and created.created_at == second.created_at  # earliest mention
    pair = tuple(sorted((caroline, mel.id)))
    assert update.edges == tuple(sorted([
        GraphEdge("a", MENTIONS, first.id, mel.id, 0.9),
        GraphEdge("a", MENTIONS, first.id, caroline, 0.7),
        GraphEdge("a", MENTIONS, second.id, caroline, 0.7),
        GraphEdge("a", SPOKEN_BY, first.id, mel.id, 1.0),
        GraphEdge("a", CO_MENTIONED, pair[0], pair[1], 0.45),
    ]))
    assert update.reweighted == ()


def test_known_entities_in_the_store_are_reused_and_co_mentions_reweighted():
    mel, caroline = _entity(100, "Melanie", aliases=["Mel"]), _entity(101, "Caroline")
    pair = tuple(sorted((mel.id, caroline.id)))
    turn = _turn(3, "Mel met Caroline again")
    update = entity_graph([turn], known_names([mel, caroline]), {("a", pair[0], pair[1]): 2}, ANCHORS)
    assert update.entities == ()
    assert update.reweighted == (GraphEdge("a", CO_MENTIONED, pair[0], pair[1], 0.65),)
    assert [(edge.edge_type, edge.target) for edge in update.edges] == sorted(
        [(MENTIONS, mel.id), (MENTIONS, caroline.id)], key=lambda pair_: pair_[1]
    )


def test_whole_words_only_and_namespaces_stay_apart():
    art = _entity(100, "Art")
    update = entity_graph([_turn(4, "an artist at the party"), _turn(5, "art class", namespace="b")], known_names([art]), {}, ANCHORS)
    assert update.edges == () and update.entities == ()


def test_output_does_not_depend_on_input_order():
    batch = [_turn(i, f"Caroline met Melanie and Jon at Club {i % 2}") for i in range(6)]
    assert entity_graph(batch, {}, {}, ANCHORS) == entity_graph(list(reversed(batch)), {}, {}, ANCHORS)


def test_one_id_in_two_namespaces_of_one_batch_gets_each_namespace_s_own_entities_and_edges():
    turns = [_turn(1, "Caroline met John in Paris", "a", metadata={"speaker": "Gina"}),
             _turn(1, "Melanie saw Oscar in Berlin", "b", metadata={"speaker": "Priya"})]
    update = entity_graph(turns, {}, {}, ANCHORS)
    names = {(entity.namespace, entity.content) for entity in update.entities}
    assert names == {("a", "Caroline"), ("a", "John"), ("a", "Paris"), ("a", "Gina"),
                     ("b", "Melanie"), ("b", "Oscar"), ("b", "Berlin"), ("b", "Priya")}
    namespace_of = {entity.id: entity.namespace for entity in update.entities}
    assert all(namespace_of[edge.target] == edge.namespace for edge in update.edges)


def test_an_object_joins_each_entity_to_the_next_window_in_order_of_first_mention():
    ids = [UUID(int=n) for n in (9, 3, 7, 1, 5)]
    assert co_mentioned_pairs(ids, window=2) == {(UUID(int=3), UUID(int=9)), (UUID(int=7), UUID(int=9)),
                                                 (UUID(int=3), UUID(int=7)), (UUID(int=1), UUID(int=3)),
                                                 (UUID(int=1), UUID(int=7)), (UUID(int=5), UUID(int=7)),
                                                 (UUID(int=1), UUID(int=5))}
    assert len(co_mentioned_pairs(ids, window=4)) == 10  # window + 1 entities or fewer: every pair


def test_a_long_turn_adds_co_mentions_linear_in_the_names_it_mentions_not_quadratic():
    names = [f"Name{chr(65 + i // 26)}{chr(65 + i % 26)}" for i in range(60)]
    known = [_entity(1000 + i, name) for i, name in enumerate(names)]
    prose = _turn(1, " and ".join(f"we met {name}" for name in names) + ".")
    edges = entity_graph([prose], known_names(known), {}, ANCHORS).edges
    co = [(e.source, e.target) for e in edges if e.edge_type == CO_MENTIONED]
    assert sum(e.edge_type == MENTIONS for e in edges) == 60
    assert len(co) == sum(min(CO_MENTION_WINDOW, 59 - i) for i in range(60)) < 60 * 59 // 2
    first, near, far = UUID(int=1000), UUID(int=1000 + CO_MENTION_WINDOW), UUID(int=1000 + CO_MENTION_WINDOW + 1)
    assert (first, near) in co and (first, far) not in co  # neighbours in the text, not every pair


def test_known_names_are_never_changed_by_a_graph_and_grow_by_copies():
    mel = _entity(1, "Melanie", aliases=["Mel"])
    known = known_names([mel])
    turn = _turn(2, "Mel met Caroline at the park")
    update = entity_graph([turn], known, {}, ANCHORS)
    caroline = next(entity for entity in update.entities if entity.entity_canonical_name == "Caroline")
    assert {edge.target for edge in update.edges if edge.edge_type == MENTIONS} == {mel.id, caroline.id}
    assert known["a"].named("Caroline") == set() and known["a"].named("mel") == {mel.id}  # the batch's names went to a copy
    grown = known["a"].with_entries(entity_entries([caroline, turn]))  # a turn is no entity: left out
    assert grown.named("Caroline") == {caroline.id} and known["a"].named("Caroline") == set()
    assert grown.extracted == {caroline.id.int} and known["a"].extracted == set()
    assert grown.is_extracted(caroline.id) and not grown.is_extracted(mel.id)
    again = entity_graph([_turn(3, "Caroline again")], {"a": grown}, {}, ANCHORS)
    assert again == entity_graph([_turn(3, "Caroline again")], known_names([mel, caroline]), {}, ANCHORS)
    assert not again.entities and KnownNames.of([turn]).named("Mel met Caroline at the park") == set()
