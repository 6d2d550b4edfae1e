"""A segment's mentioners, looked up one entity at a time, are the rows of its MENTIONS edges."""

from __future__ import annotations

import random
from uuid import UUID

import numpy as np
import pytest

from rms_retrieval.stores.engine.mentioners import Mentioners


def _targets(ids: list[UUID]) -> np.ndarray:
    return np.frombuffer(b"".join(entity.bytes for entity in ids), dtype=np.uint8).reshape(len(ids), 16)


def test_each_entity_maps_to_the_rows_of_the_edges_into_it() -> None:
    chooser = random.Random(3)
    # Entities that share their first 64 bits, and ones that differ only there: both halves count.
    entities = [UUID(int=(7 << 64) + n) for n in (5, 1, 9)] + [UUID(int=(n << 64) + 5) for n in (3, 8)] + \
        [UUID(int=chooser.getrandbits(128)) for _ in range(20)]
    edges = [(chooser.choice(entities), chooser.randrange(50)) for _ in range(300)]
    mentioners = Mentioners(_targets([entity for entity, _ in edges]), np.asarray([row for _, row in edges]))
    expected: dict[int, set[int]] = {}
    for entity, row in edges:
        expected.setdefault(entity.int, set()).add(row)
    assert mentioners == {entity: frozenset(rows) for entity, rows in expected.items()}
    assert sorted(mentioners) == sorted(expected) and len(mentioners) == len(expected)
    for entity in entities:
        assert mentioners.get(entity.int, frozenset()) == frozenset(expected.get(entity.int, ()))
    assert mentioners[entities[0].int] is mentioners[entities[0].int]  # made once, then kept


@pytest.mark.parametrize("absent", [UUID(int=(7 << 64) + 6).int, UUID(int=(6 << 64) + 5).int, 0, (1 << 128) - 1,
                                    -1, 1 << 128, "7"])
def test_an_entity_no_edge_targets_is_no_key(absent) -> None:
    mentioners = Mentioners(_targets([UUID(int=(7 << 64) + 5), UUID(int=(7 << 64) + 9)]), np.asarray([2, 4]))
    assert absent not in mentioners and mentioners.get(absent) is None
    with pytest.raises(KeyError):
        mentioners[absent]


def test_no_edges_mention_no_entity() -> None:
    mentioners = Mentioners(np.zeros((0, 16), dtype=np.uint8), np.zeros(0, dtype=np.int64))
    assert mentioners == {} and len(mentioners) == 0 and mentioners.get(UUID(int=1).int) is None


@pytest.mark.parametrize("shared_prefix", [False, True])  # ids told apart by their first 8 bytes, or not
@pytest.mark.parametrize("sorted_keys", [True, False])
def test_pair_edges_give_the_last_stored_edge_of_each_pair(shared_prefix, sorted_keys) -> None:
    from rms_retrieval.stores.engine.mentioners import PairEdges

    chooser = random.Random(5)
    ids = [UUID(int=((9 << 64) if shared_prefix else (chooser.getrandbits(64) << 64)) + chooser.getrandbits(64))
           for _ in range(12)]
    keys = sorted(ids, key=lambda entity: entity.int) if sorted_keys else ids
    ends = [(chooser.randrange(12), chooser.randrange(12)) for _ in range(80)]  # some pairs stored several times
    expected: dict[tuple[UUID, UUID], int] = {}
    for edge_id, (first, second) in enumerate(ends, start=100):
        expected[(keys[first], keys[second])] = edge_id
    pairs = PairEdges(np.asarray(ends), np.arange(100, 180), np.frombuffer(b"".join(k.bytes for k in keys), dtype="V16"))
    for first in ids:
        for second in ids:
            assert pairs.get(first.bytes, second.bytes) == expected.get((first, second))
    assert pairs.get(UUID(int=3).bytes, ids[0].bytes) is None and pairs.get(ids[0].bytes, UUID(int=3).bytes) is None
    empty = PairEdges(np.zeros((0, 2), dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype="V16"))
    assert empty.get(ids[0].bytes, ids[1].bytes) is None


@pytest.mark.parametrize("shared_prefix", [False, True])  # searched by the first 8 bytes, or by the bytes
def test_sorted_ids_find_many_ids_at_once_as_one_at_a_time(shared_prefix) -> None:
    from rms_retrieval.stores.engine.mentioners import SortedIds

    chooser = random.Random(11)
    held = sorted(UUID(int=((9 << 64) if shared_prefix else (chooser.getrandbits(64) << 64)) + chooser.getrandbits(64))
                  for _ in range(40))
    ids = SortedIds(np.frombuffer(b"".join(entity.bytes for entity in held), dtype="V16"))
    asked = held[::3] + [UUID(int=0), UUID(int=(1 << 128) - 1), UUID(int=(9 << 64) + 1)] + held[1::5]
    wanted = np.frombuffer(b"".join(entity.bytes for entity in asked), dtype="V16")
    expected = [held.index(entity) if entity in held else -1 for entity in asked]
    assert ids.positions(wanted).tolist() == expected == [ids.position(entity.bytes) for entity in asked]
    assert ids.positions(wanted[::2]).tolist() == expected[::2]  # a strided column too
    assert SortedIds(np.zeros(0, dtype="V16")).positions(wanted).tolist() == [-1] * len(asked)


@pytest.mark.parametrize("shared_prefix", [False, True])
def test_pair_edges_find_many_pairs_at_once_as_one_at_a_time(shared_prefix) -> None:
    from rms_retrieval.stores.engine.mentioners import PairEdges

    chooser = random.Random(8)
    ids = sorted((UUID(int=((9 << 64) if shared_prefix else (chooser.getrandbits(64) << 64)) + chooser.getrandbits(64))
                  for _ in range(10)), key=lambda entity: entity.int)
    ends = [(chooser.randrange(10), chooser.randrange(10)) for _ in range(60)]
    keys = np.frombuffer(b"".join(entity.bytes for entity in ids), dtype="V16")
    pairs = PairEdges(np.asarray(ends), np.arange(190, 250, dtype=np.uint8), keys)  # ids in the smallest type
    asked = [(first, second) for first in [*ids, UUID(int=3)] for second in [*ids, UUID(int=3)]]
    sources = np.frombuffer(b"".join(first.bytes for first, _ in asked), dtype="V16")
    targets = np.frombuffer(b"".join(second.bytes for _, second in asked), dtype="V16")
    expected = [pairs.get(first.bytes, second.bytes) for first, second in asked]
    assert pairs.get_each(sources, targets).tolist() == [-1 if found is None else found for found in expected]
    assert any(found is None for found in expected) and any(found is not None for found in expected)
    empty = PairEdges(np.zeros((0, 2), dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype="V16"))
    assert empty.get_each(sources[:3], targets[:3]).tolist() == [-1, -1, -1]


def test_mentioners_ends_are_the_edges_they_were_made_from() -> None:
    chooser = random.Random(4)
    entities = [UUID(int=chooser.getrandbits(128)) for _ in range(15)]
    edges = [(chooser.choice(entities), chooser.randrange(40)) for _ in range(100)]
    targets, rows = Mentioners(_targets([entity for entity, _ in edges]), np.asarray([row for _, row in edges])).ends()
    assert sorted((UUID(bytes=target.tobytes()), row) for target, row in zip(targets, rows.tolist())) == sorted(edges)
