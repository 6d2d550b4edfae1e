"""Memories that change, seen from the entity graph: after a delete, an update or a supersede the
graph side of retrieval (entity catalog, MENTIONS / SPOKEN_BY / CO_MENTIONED edges and weights,
the graph path, the speaker lift) is the graph of a store that never held the old objects."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from uuid import UUID

from rms_retrieval.dataflows.retrieval import retrieve
from rms_retrieval.stores.analysis.messages import message_turns
from rms_retrieval.stores.engine.check import check_store
from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.models import MemoryObject
from tests.factories import RandomEncoder

NAMESPACE = "chat"
T0 = datetime(2025, 3, 1, tzinfo=timezone.utc)
SPEAKERS = ("Caroline", "Melanie", "Gina")
PEOPLE = ("John", "Lisa", "Emma", "Oscar")
PLACES = ("Paris", "Denver", "Berlin", "Lisbon", "Kyoto")
ACTIVITIES = ("went hiking", "had dinner", "saw a concert", "visited a museum", "took a cooking class")
QUESTIONS = ("What did Caroline do with John?", "Where did Melanie go with Lisa?", "Who was in Paris?",
             "What did Gina do in Kyoto?", "When did Emma visit Berlin?", "What did Oscar and Caroline do?")
# Turns 1 and 2 are Melanie's and Gina's first (their speaker entities are dated by them), 1 and 3
# first name Oscar, Emma and Denver; every turn naming Oscar goes, so his entity must go too.
DELETED = (1, 2, 3, 5, 8, 17, 18)


def _encoder() -> RandomEncoder:
    return RandomEncoder(16)


def _open(path) -> MemoryStore:
    return MemoryStore.open(path, _encoder(), retired_grace=0)


def _turns(count: int) -> list[MemoryObject]:
    """Plain chat turns with speakers (as `add_messages` makes them) that name people and places.
    Positions are given, so that session neighbours (which count positions) are the same in both
    stores and only the graph is on trial."""
    turns = []
    for number in range(count):
        text = f"I {ACTIVITIES[number % 5]} with {PEOPLE[(number * 3) % 4]} in {PLACES[(number * 7) % 5]}"
        if number % 2:
            text += f" and {PEOPLE[(number + 1) % 4]} joined us"
        message = {"role": "user", "name": SPEAKERS[number % 3], "content": text, "id": str(UUID(int=number + 1)),
                   "created_at": (T0 + timedelta(minutes=number)).isoformat()}
        turn = message_turns(NAMESPACE, "s1", [message])[0]
        turns.append(turn.model_copy(update={"session_seq": number}))
    return turns


def _answers(store: MemoryStore) -> tuple[list[str], int]:
    """Each question's bundle JSON, and how many questions used both the graph path and the speaker lift."""
    bundles, both = [], 0
    for question in QUESTIONS:
        result = retrieve(store, question, namespaces=[NAMESPACE], encoder=_encoder(), reference_time=T0 + timedelta(days=2),
                          log=False, extra_nodes=("graph_candidates", "spoken_by_query_entities"))
        both += bool(result.nodes["graph_candidates"].hits) and bool(result.nodes["spoken_by_query_entities"])
        bundles.append(result.bundle.to_json())
    return bundles, both


def _undecoded(store: MemoryStore) -> list[str]:
    """The segments holding edges none of which is decoded into an object (`LoadedSegment.edges`:
    a merge's segment decodes them on first use); there must be some."""
    found = [segment.entry.id for segment in store.snapshot().segments
             if len(segment.edge_columns) and "edges" not in segment.__dict__]
    assert found
    return found


def _graph(store: MemoryStore) -> dict:
    """The graph side of a store as a user could tell it: entities, edges (ids aside), co-mention counts."""
    snapshot = store.snapshot()
    return {
        "entities": sorted(entity.model_dump_json() for entity in snapshot.stored_entities([NAMESPACE])),
        "catalog": [(ref.alias, ref.object_id) for ref in snapshot.entity_catalog([NAMESPACE])],
        "edges": sorted((edge.edge_type, edge.source, edge.target, edge.confidence)
                        for edge in snapshot.adjacency([NAMESPACE]).edges if edge.edge_type != "SUPERSEDES"),
        "co_mentions": dict(snapshot.co_mention_counts([NAMESPACE])),
    }


def _graph_answers(store: MemoryStore) -> list:
    """Per question: the graph path's hits (edge ids aside) and the speaker lift."""
    found = []
    for question in QUESTIONS:
        nodes = retrieve(store, question, namespaces=[NAMESPACE], encoder=_encoder(), reference_time=T0 + timedelta(days=2),
                         log=False, extra_nodes=("graph_candidates", "spoken_by_query_entities")).nodes
        hits = [(hit.object_id, hit.rank, hit.raw_score, hit.detail["hops"], hit.detail["support"], hit.detail["edge_types"])
                for hit in nodes["graph_candidates"].hits]
        found.append((hits, sorted(nodes["spoken_by_query_entities"])))
    return found


def test_deleted_turns_leave_the_graph_and_the_speaker_lift_as_in_a_store_that_never_held_them(tmp_path):
    turns = _turns(40)
    gone = sorted({turns[number].id for number in DELETED} | {turn.id for turn in turns if "Oscar" in turn.content})
    later = _turns(42)[40:]  # written after the delete: co-mentions counted then must be the live ones
    with _open(tmp_path / "changed") as changed, _open(tmp_path / "never") as never:
        for turn in turns:  # one add each, so deletions land in merged and in small segments
            changed.add([turn])
        changed.wait_for_merges()
        never.add([turn for turn in turns if turn.id not in gone])
        merged = _undecoded(changed)
        changed.delete(NAMESPACE, gone[:5])
        changed.delete(NAMESPACE, gone[5:])
        assert _undecoded(changed) == merged  # the entities' owners read from the edge columns
        assert "Oscar" not in [ref.alias for ref in changed.snapshot().entity_catalog([NAMESPACE])]
        assert _graph(changed) == _graph(never)
        bundles, both = _answers(changed)
        assert both >= 3 and bundles == _answers(never)[0]
        for turn in later:
            changed.add([turn])
            never.add([turn])
        assert _graph(changed) == _graph(never) and _answers(changed) == _answers(never)
        changed.compact()
        assert _graph(changed) == _graph(never) and _answers(changed) == _answers(never)
        assert check_store(tmp_path / "changed").problems == []
        # every segment a write, a merge or the compaction made counted its co-mentions
        assert all(segment.edge_columns.counted for segment in changed.snapshot().segments)


def test_an_update_leaves_the_graph_of_a_store_that_only_held_the_new_versions(tmp_path):
    turns = _turns(40)
    with _open(tmp_path / "changed") as changed, _open(tmp_path / "never") as never:
        for turn in turns:
            changed.add([turn])
        changed.wait_for_merges()
        merged = _undecoded(changed)
        changed.update(NAMESPACE, turns[7].id, content="I went sailing with Zoe in Lisbon")  # new mentions, old gone
        changed.update(NAMESPACE, turns[12].id, content="nothing much happened today")  # no mention left
        changed.update(NAMESPACE, turns[13].id, metadata={"speaker": "Priya", "role": "user"})  # a new speaker
        changed.update(NAMESPACE, turns[14].id, salience=0.8)  # the graph unchanged
        assert _undecoded(changed) == merged  # the updates read the edges of the rows they changed alone
        versions = changed.snapshot().get_objects([turns[number].id for number in (7, 12, 13, 14)], [NAMESPACE])
        never.add([versions.get(turn.id, turn) for turn in turns])
        spoken = _graph(changed)["edges"]
        assert ("SPOKEN_BY", turns[13].id) in {edge[:2] for edge in spoken} and "Zoe" in str(_graph(changed)["catalog"])
        assert ("MENTIONS", turns[12].id) not in {edge[:2] for edge in spoken}
        assert _graph(changed) == _graph(never)
        bundles, both = _answers(changed)
        assert both >= 3 and bundles == _answers(never)[0]
        changed.compact()
        assert _graph(changed) == _graph(never) and _answers(changed) == _answers(never)
        assert check_store(tmp_path / "changed").problems == []


def test_a_superseded_turn_leaves_the_graph_of_a_store_that_only_held_its_successor(tmp_path):
    """The old turn stays (SUPERSEDED, for AUDIT), so lexical statistics still count it and whole
    bundles differ; its place in the graph passes to the successor."""
    turns = _turns(40)
    old = turns[9]
    successor = old.model_copy(update={"id": UUID(int=999), "content": "I moved to Kyoto with Lisa",
                                       "created_at": old.created_at + timedelta(seconds=1),
                                       "updated_at": old.created_at + timedelta(seconds=1)})
    with _open(tmp_path / "changed") as changed, _open(tmp_path / "never") as never:
        for turn in turns:
            changed.add([turn])
        changed.wait_for_merges()
        changed.supersede(NAMESPACE, old.id, successor)
        never.add([successor if turn.id == old.id else turn for turn in turns])
        assert _graph(changed) == _graph(never)
        assert _graph_answers(changed) == _graph_answers(never)
        changed.compact()
        assert _graph(changed) == _graph(never)


def test_erasing_an_owner_across_namespaces_removes_and_re_dates_the_entities_as_if_never_stored(tmp_path):
    namespaces = (NAMESPACE, "chat-2")
    turns = [turn.model_copy(update={"namespace": namespace, "owner": "carol" if turn.session_seq in (1, 3) else "default"})
             for namespace in namespaces for turn in _turns(12)]
    with _open(tmp_path / "changed") as changed, _open(tmp_path / "never") as never:
        for turn in turns:
            changed.add([turn])
        never.add([turn for turn in turns if turn.owner != "carol"])
        changed.erase(owner="carol")
        entities = [sorted(entity.model_dump_json() for entity in store.snapshot().stored_entities(namespaces))
                    for store in (changed, never)]
        assert entities[0] == entities[1] and any('"owner":"default"' in entity for entity in entities[0])
        assert [store.snapshot().adjacency([namespace]).edges.__len__() for store in (changed, never) for namespace in namespaces] \
            == [len(never.snapshot().adjacency([namespace]).edges) for _ in (0, 1) for namespace in namespaces]


def test_one_pair_is_counted_as_the_full_listing_counts_it_with_deleted_rows_left_out(tmp_path):
    turns = _turns(30)
    with _open(tmp_path / "store") as store:
        for turn in turns:
            store.add([turn])
        store.delete(NAMESPACE, [turns[number].id for number in DELETED])
        snapshot = store.snapshot()
        counts = snapshot.co_mention_counts([NAMESPACE])
        listed: dict = {}
        for segment in snapshot.segments:  # every pair of every live object, as a deletion subtracts them
            for key, count in segment.co_mentions.items():
                listed[key] = listed.get(key, 0) + count
        assert any(segment.dead_rows for segment in snapshot.segments) and listed
        assert {key: counts.count(key) for key in listed} == listed
        assert all(counts.count((namespace, second, first)) == 0 for namespace, first, second in listed)  # (smaller, larger)
        assert counts.count(("another-namespace", *sorted(turn.id for turn in turns[:2]))) == 0


def test_a_pair_first_joined_after_objects_named_it_far_apart_is_a_new_edge_weighed_by_all_of_them(tmp_path):
    """A long turn names Alice and Kiri further apart than the co-mention window: they are counted
    as co-mentioned but not joined. A later turn that names them together makes their first edge,
    weighed by both turns, as if both had been written at once."""
    from rms_retrieval.stores.indexes.entity_graph import CO_MENTION_WINDOW, co_mention_confidence

    names = ["Alice", "Bruno", "Chen", "Dara", "Elif", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Kiri"]
    assert len(names) > CO_MENTION_WINDOW + 1
    long_turn = MemoryObject(id=UUID(int=1), namespace=NAMESPACE, content=" met ".join(names) + ".", created_at=T0)
    short_turn = MemoryObject(id=UUID(int=2), namespace=NAMESPACE, content="Alice met Kiri.",
                              created_at=T0 + timedelta(minutes=1))
    with _open(tmp_path / "apart") as apart, _open(tmp_path / "together") as together:
        apart.add([long_turn])
        catalog = {ref.alias: ref.object_id for ref in apart.snapshot().entity_catalog([NAMESPACE])}
        pair = tuple(sorted((catalog["Alice"], catalog["Kiri"])))
        assert not [e for e in apart.snapshot().adjacency([NAMESPACE]).edges if (e.source, e.target) == pair]
        apart.add([short_turn])
        together.add([long_turn, short_turn])
        joined = [e for e in apart.snapshot().adjacency([NAMESPACE]).edges
                  if e.edge_type == "CO_MENTIONED" and (e.source, e.target) == pair]
        assert [e.confidence for e in joined] == [co_mention_confidence(2)]
        assert _graph(apart)["edges"] == _graph(together)["edges"]
        assert check_store(tmp_path / "apart").problems == []


def _names_of(known, entities) -> dict[str, set[UUID]]:
    """What `known` (KnownNames) answers for every name of `entities`, and which it marks extracted."""
    from rms_retrieval.stores.indexes.entity_graph import entity_names

    answers = {name: known.named(name) for entity in entities for name in entity_names(entity)}
    return {**answers, "extracted": known.extracted}


def test_a_namespaces_known_names_are_kept_across_writes_extended_by_new_entities_and_rebuilt_after_a_delete(tmp_path):
    from rms_retrieval.stores.indexes.entity_graph import KnownNames

    turns = _turns(12)
    with _open(tmp_path / "store") as store:
        store.add(turns[:6])
        first = store.snapshot().known_names([NAMESPACE])[NAMESPACE]
        assert store.snapshot().known_names([NAMESPACE])[NAMESPACE] is first  # made once per generation's scope
        store.add([MemoryObject(namespace="elsewhere", content="Oscar went to Paris")])
        assert store.snapshot().known_names([NAMESPACE])[NAMESPACE] is first  # a write elsewhere keeps it
        news = [turn.model_copy(update={"content": f"{turn.content} and met Zelda{number} in Oslo{number}"})
                for number, turn in enumerate(turns[6:])]
        for later in news:
            store.add([later])  # one turn a write, naming new people: its segment's entities extend a copy
            snapshot = store.snapshot()
            kept = snapshot.known_names([NAMESPACE])[NAMESPACE]
            entities = snapshot.stored_entities([NAMESPACE])
            assert _names_of(kept, entities) == _names_of(KnownNames.of(entities), entities)
        assert kept is not first and first.named("Zelda0") == set() and len(kept.named("Zelda5")) == 1
        turns = [*turns[:6], *news]
        oscar = next(entity for entity in entities if entity.entity_canonical_name == "Oscar")
        store.delete(NAMESPACE, [turn.id for turn in turns if "Oscar" in turn.content])
        snapshot = store.snapshot()
        after = snapshot.known_names([NAMESPACE])[NAMESPACE]
        assert after.named("Oscar") == set() and oscar.id in kept.named("Oscar")  # rebuilt without the deleted entity
        assert _names_of(after, entities) == _names_of(KnownNames.of(snapshot.stored_entities([NAMESPACE])), entities)
