"""A scope's entity names as columns: catalog order, each ref once, the refs a question's words open."""

from __future__ import annotations

import copy
import pickle
from uuid import UUID

import numpy as np
import pyarrow as pa
import pytest

from rms_retrieval.stores.analysis.entities import first_name_word
from rms_retrieval.stores.analysis.entity_catalog import EntityCatalog, EntityNames, first_words
from rms_retrieval.stores.protocols import EntityRef

MEL = EntityRef(UUID(int=1), "ns", "Melanie Brown", "Mel")
MELANIE = EntityRef(UUID(int=1), "ns", "Melanie Brown", "Melanie Brown")
ANN = EntityRef(UUID(int=2), "ns", "Ann", "Ann")
ZOE = EntityRef(UUID(int=3), "ns", "Zoë Ånd", "Zoë Ånd")


def test_a_catalog_is_a_read_only_sequence_in_catalog_order_each_ref_once():
    catalog = EntityCatalog([MEL, MELANIE, ANN, ZOE, ANN])
    ordered = [ANN, MEL, MELANIE, ZOE]  # namespace, alias lower-cased, alias, id
    assert catalog == ordered and list(catalog) == ordered and catalog[-1] == ZOE and catalog[1:3] == [MEL, MELANIE]
    assert len(catalog) == 4 and catalog != ordered[:3] and catalog != "refs"
    for change in (lambda c: c.append(MEL), lambda c: c.__setitem__(0, ANN), lambda c: c.sort(), lambda c: c.clear()):
        with pytest.raises((TypeError, AttributeError)):
            change(catalog)
    with pytest.raises(IndexError):
        catalog[4]
    for copied in (pickle.loads(pickle.dumps(catalog)), copy.deepcopy(catalog), copy.copy(catalog)):
        assert isinstance(copied, EntityCatalog) and copied == ordered and copied.refs_for(["ann"]) == [ANN]
    assert [bytes(key) for key in catalog.id_keys] == [UUID(int=n).bytes for n in (1, 2, 3)]  # distinct, sorted
    changed = list(catalog)
    changed.append(MEL)  # a copy is a plain list
    assert len(changed) == 5 and len(catalog) == 4


def test_the_refs_a_word_opens_are_those_whose_canonical_name_or_alias_starts_with_it():
    catalog = EntityCatalog([MEL, MELANIE, ANN, ZOE])
    assert catalog.refs_for(["melanie"]) == [MEL, MELANIE] and catalog.refs_for(["mel", "ann", "ann"]) == [ANN, MEL]
    assert catalog.refs_for(["zoë"]) == [ZOE] and catalog.refs_for(["brown", "nobody"]) == [] and catalog.refs_for([]) == []
    assert EntityCatalog().refs_for(["ann"]) == [] and len(EntityCatalog()) == 0 and len(EntityCatalog().id_keys) == 0
    assert catalog.refs_for(["mel"])[0] is catalog.refs_for(["mel"])[0]  # each ref made once


NAMES = ["Caroline", "new york", "O'Brien", "Zoë", "  Ann Lee", "Dr. Who", "ÅSA", "x", "", "San\tJosé", "A1 b2", "--", None,
         "İstanbul", "\x1cHidden"]


def test_first_words_are_first_name_word_by_arrow_or_by_python():
    assert first_words(pa.array(NAMES, pa.string())).to_pylist() == [None if name is None else first_name_word(name)
                                                                     for name in NAMES]


def test_a_catalog_of_segment_rows_has_each_name_of_each_entity_once():
    ids = np.frombuffer(b"".join(UUID(int=n).bytes for n in range(1, 7)), dtype="V16")
    canonicals = pa.array(["Melanie Brown", None, "   ", "Ann", "Zoë Ånd", " \u3000 "], pa.string())
    aliases = {0: ["Mel", "Melanie Brown", "", 7], 1: ["Nameless"], 3: "not a list"}
    catalog = EntityCatalog.of_parts([EntityNames("ns", ids, canonicals, aliases), EntityNames("a", ids[:1], canonicals[:1], {})])
    assert [(ref.namespace, ref.object_id.int, ref.canonical_name, ref.alias) for ref in catalog] == [
        ("a", 1, "Melanie Brown", "Melanie Brown"),
        ("ns", 4, "Ann", "Ann"), ("ns", 1, "Melanie Brown", "Mel"), ("ns", 1, "Melanie Brown", "Melanie Brown"),
        ("ns", 2, "", "Nameless"), ("ns", 5, "Zoë Ånd", "Zoë Ånd")]  # blank names (ASCII or not) name nothing
    assert catalog.refs_for(["nameless", "zoë"]) == [EntityRef(UUID(int=2), "ns", "", "Nameless"),
                                                     EntityRef(UUID(int=5), "ns", "Zoë Ånd", "Zoë Ånd")]
