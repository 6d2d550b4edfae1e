"""Ingest-time expansion: the texts a turn is embedded and indexed by, and the setting a store records."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import pytest

from factories import FakeEncoder, make_object
from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.analysis.expansion import (DEFAULT_EXPANSION, OFF, PRESETS, TurnExpansion, expansion_from_json,
                                                     expansion_named, indexed_texts, resolved_expansion)
from rms_retrieval.stores.engine.manifest import read_manifest
from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.models import NodeType


def _turn(name: str, seq: int, content: str, session: str = "s1", **fields):
    return make_object(name, content, session_id=session, session_seq=seq, **fields)


def _session() -> list:
    return [_turn("t0", 0, "Ann: shall we meet?"), _turn("t1", 1, "Bob: yes, at the lighthouse"),
            _turn("t2", 2, "Ann: great")]


class RecordingEncoder(FakeEncoder):
    """FakeEncoder that remembers every text it embedded."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.texts.extend(texts)
        return super().encode(texts)


def test_off_indexes_the_content_itself():
    rows = _session()
    texts = indexed_texts(rows, [], OFF)
    assert texts.vector == [row.content for row in rows]
    assert texts.lexical == [(row.content, None) for row in rows]


def test_previous_joins_the_turn_before_in_its_session_and_nothing_else():
    rows = [*_session(), _turn("u0", 0, "Cy: other session", session="s2"), make_object("fact", "a fact"),
            make_object("Ann", "Ann", node_type=NodeType.ENTITY, entity_canonical_name="Ann")]
    texts = indexed_texts(rows, [], expansion_named("previous"))
    assert texts.vector[:4] == ["Ann: shall we meet?", "Ann: shall we meet?\nBob: yes, at the lighthouse",
                                "Bob: yes, at the lighthouse\nAnn: great", "Cy: other session"]
    assert texts.vector[4:] == ["a fact", "Ann"]
    assert texts.lexical == [(row.content, row.entity_canonical_name) for row in rows]  # vector only


def test_lexical_only_and_both_and_next():
    rows = _session()
    lexical = indexed_texts(rows, [], expansion_named("previous-lexical"))
    assert lexical.vector == [row.content for row in rows]
    assert lexical.lexical[1] == ("Ann: shall we meet?\nBob: yes, at the lighthouse", None)
    both = indexed_texts(rows, [], expansion_named("previous-next-both"))
    assert both.vector[1] == both.lexical[1][0] == "Ann: shall we meet?\nBob: yes, at the lighthouse\nAnn: great"
    assert both.vector[2] == "Bob: yes, at the lighthouse\nAnn: great"


def test_neighbours_are_the_nearest_turns_even_across_gaps_and_out_of_order_input():
    rows = [_turn("t5", 5, "five"), _turn("t1", 1, "one"), _turn("t9", 9, "nine")]
    texts = indexed_texts(rows, [], TurnExpansion(previous=2))
    assert texts.vector == ["one\nfive", "one", "one\nfive\nnine"]


def test_a_setting_that_expands_nothing_is_off():
    assert TurnExpansion(previous=1, vector=False, lexical=False).effective() == OFF
    assert TurnExpansion(lexical=True).effective() == OFF
    assert PRESETS["previous"].effective() == PRESETS["previous"]


def test_resolved_expansion_keeps_a_stores_own_and_refuses_another():
    previous = expansion_named("previous")
    assert resolved_expansion(OFF, 0, previous) == previous
    assert resolved_expansion(OFF, 0, None) == DEFAULT_EXPANSION == PRESETS["previous-lexical"]
    assert resolved_expansion(OFF, 5, None) == OFF  # a store written before expansion existed stays off
    assert resolved_expansion(previous, 5, None) == previous
    assert resolved_expansion(previous, 5, previous) == previous
    with pytest.raises(StoreError, match="written with expansion"):
        resolved_expansion(previous, 5, OFF)


def test_bad_names_and_damaged_records_say_what_to_do():
    with pytest.raises(StoreError, match="unknown expansion 'prev'; choose one of off, previous"):
        expansion_named("prev")
    with pytest.raises(StoreError, match="manifest is damaged"):
        expansion_from_json({"previous": 9})
    assert expansion_from_json(None) == OFF
    with pytest.raises(ValueError):
        TurnExpansion(previous=-1)


def test_a_store_records_its_expansion_and_later_adds_use_it(tmp_path):
    encoder = RecordingEncoder()
    rows = _session()
    with MemoryStore.open(tmp_path, encoder, expansion=expansion_named("previous-both")) as store:
        store.add(rows[:2])
    recorded = json.loads((tmp_path / "manifest.json").read_text())["expansion"]
    assert recorded == PRESETS["previous-both"].to_json()
    assert read_manifest(tmp_path).expansion == PRESETS["previous-both"]
    with MemoryStore.open(tmp_path, encoder) as store:  # no expansion asked: the store's own
        store.add(rows[2:])
        assert store.snapshot().get_objects([rows[2].id], [rows[2].namespace])[rows[2].id].content == "Ann: great"  # content unchanged
        # the third turn, added later, found its previous turn among the stored ones
        assert encoder.texts[-1] == "Bob: yes, at the lighthouse\nAnn: great"
        lighthouse = {hit.object_id for hit in store.snapshot().search_lexical("lighthouse", ["ns"], 10)}
        assert lighthouse == {rows[1].id, rows[2].id}
    with MemoryStore.open(tmp_path, encoder, expansion=OFF) as store:
        before = store.snapshot().state_fingerprint()
        with pytest.raises(StoreError, match="cannot take objects expanded as"):
            store.add([_turn("t3", 3, "Bob: bye")])
        assert store.snapshot().state_fingerprint() == before


def test_an_unexpanded_store_writes_no_expansion_and_indexes_content(tmp_path):
    with MemoryStore.open(tmp_path, RecordingEncoder(), expansion=OFF) as store:
        rows = _session()
        store.add(rows)
        assert {hit.object_id for hit in store.snapshot().search_lexical("lighthouse", ["ns"], 10)} == {rows[1].id}
    assert "expansion" not in json.loads((tmp_path / "manifest.json").read_text())
    assert read_manifest(tmp_path).expansion == OFF


def test_a_new_store_gets_the_default_expansion(tmp_path):
    encoder = RecordingEncoder()
    with MemoryStore.open(tmp_path, encoder) as store:
        rows = _session()
        store.add(rows)
        assert encoder.texts[:3] == [row.content for row in rows]  # vectors from the content alone
        assert {hit.object_id for hit in store.snapshot().search_lexical("lighthouse", ["ns"], 10)} == {rows[1].id, rows[2].id}
    assert read_manifest(tmp_path).expansion == DEFAULT_EXPANSION


def test_rms_ingest_takes_a_named_expansion_and_refuses_a_different_one(capsys, tmp_path):
    from rms_retrieval.dataflows.cli import main

    path = tmp_path / "turns.jsonl"
    path.write_text("".join(row.model_dump_json() + "\n" for row in _session()))
    store = tmp_path / "store"
    assert main(["ingest", str(path), "--store", str(store), "--expansion", "nope"]) == 2
    assert "unknown expansion 'nope'" in capsys.readouterr().err
    assert main(["ingest", str(path), "--store", str(store), "--expansion", "previous", "--engine", "dask"]) == 2
    assert "--expansion works with the local engine only" in capsys.readouterr().err
    assert main(["ingest", str(path), "--store", str(store), "--expansion", "previous"]) == 0
    assert read_manifest(store).expansion == PRESETS["previous"]
    more = tmp_path / "more.jsonl"
    more.write_text(_turn("t3", 3, "Bob: bye").model_dump_json() + "\n")
    assert main(["ingest", str(more), "--store", str(store), "--expansion", "off"]) == 2
    assert "written with expansion" in capsys.readouterr().err
