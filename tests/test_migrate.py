"""A store of the previous format (store.duckdb + vectors-N.faiss, schema 2) is named, then migrated."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from uuid import UUID

import duckdb
import numpy as np
import pandas as pd
import pytest

from factories import FakeEncoder
from rms_retrieval.dataflows.cli import main
from rms_retrieval.stores.indexes import vector_index
from rms_retrieval.stores.analysis.claims import Assertion
from rms_retrieval.stores.engine.codec import OBJECT_FIELDS, row_values
from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.models import MemoryObject, NodeType

T0 = datetime(2024, 5, 1, tzinfo=timezone.utc)
# The format-2 schema, as stores/memory_store.py wrote it up to commit fa071ad.
OLD_SCHEMA = """
CREATE TABLE objects (id UUID PRIMARY KEY, vec_id BIGINT NOT NULL, namespace VARCHAR NOT NULL, owner VARCHAR NOT NULL,
    scope VARCHAR NOT NULL, session_id VARCHAR, session_seq BIGINT, node_type VARCHAR NOT NULL, content VARCHAR NOT NULL,
    entity_canonical_name VARCHAR, epistemic_type VARCHAR NOT NULL, confidence DOUBLE NOT NULL, salience DOUBLE NOT NULL,
    lifecycle_state VARCHAR NOT NULL, created_at TIMESTAMPTZ NOT NULL, updated_at TIMESTAMPTZ NOT NULL,
    event_time TIMESTAMPTZ, valid_from TIMESTAMPTZ, valid_to TIMESTAMPTZ, evidence_refs JSON NOT NULL, source_ref VARCHAR,
    metadata JSON NOT NULL, assertion JSON, quantity JSON, assertion_subject_norm VARCHAR, assertion_predicate_norm VARCHAR,
    assertion_object_norm VARCHAR, assertion_polarity VARCHAR);
CREATE TABLE edges (edge_id BIGINT NOT NULL, source UUID NOT NULL, target UUID NOT NULL, edge_type VARCHAR NOT NULL,
    confidence DOUBLE NOT NULL, namespace VARCHAR NOT NULL);
CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL);
CREATE TABLE retrieval_log (request_id UUID NOT NULL, logged_at TIMESTAMPTZ NOT NULL, record JSON NOT NULL);
"""
OBJECTS = [
    MemoryObject(id=UUID(int=1), namespace="a", content="the cat sat on the mat", created_at=T0, updated_at=T0,
                 session_id="s", session_seq=0, metadata={"speaker": "Ann"}),
    MemoryObject(id=UUID(int=2), namespace="a", content="Ann likes tea", node_type=NodeType.FACT,
                 created_at=T0 + timedelta(minutes=1), updated_at=T0, evidence_refs=("D1:2",),
                 assertion=Assertion(subject="Ann", predicate="likes", object="tea")),
    MemoryObject(id=UUID(int=3), namespace="a", content="Ann", node_type=NodeType.ENTITY, entity_canonical_name="Ann",
                 created_at=T0, updated_at=T0),
]
EDGES = [(1, UUID(int=1), UUID(int=3), "SPOKEN_BY", 1.0, "a")]


def write_old_store(path) -> None:
    """A format-2 store holding OBJECTS, EDGES, one log record and FakeEncoder vectors."""
    path.mkdir()
    encoder = FakeEncoder()
    with duckdb.connect(str(path / "store.duckdb")) as connection:
        connection.execute(OLD_SCHEMA)
        columns = [*OBJECT_FIELDS, "assertion_subject_norm", "assertion_predicate_norm", "assertion_object_norm",
                   "assertion_polarity"]
        frame = pd.DataFrame([{name: row_values(memory)[name] for name in columns} for memory in OBJECTS], dtype=object)
        frame.insert(1, "vec_id", np.arange(len(OBJECTS)))
        connection.register("incoming", frame)
        connection.execute("INSERT INTO objects SELECT id::UUID, vec_id, namespace, owner, scope, session_id, "
                           "session_seq::BIGINT, node_type, content, entity_canonical_name, epistemic_type, confidence, "
                           "salience, lifecycle_state, created_at::TIMESTAMPTZ, updated_at::TIMESTAMPTZ, "
                           "event_time::TIMESTAMPTZ, valid_from::TIMESTAMPTZ, valid_to::TIMESTAMPTZ, evidence_refs::JSON, "
                           "source_ref, metadata::JSON, assertion::JSON, quantity::JSON, assertion_subject_norm, "
                           "assertion_predicate_norm, assertion_object_norm, assertion_polarity FROM incoming")
        connection.executemany("INSERT INTO edges VALUES (?, ?, ?, ?, ?, ?)", [list(edge) for edge in EDGES])
        identity = encoder.identity
        connection.executemany("INSERT INTO meta VALUES (?, ?)", [
            ["schema_version", "2"], ["generation", "1"], ["embedding_model_name", identity.model_name],
            ["embedding_model_hash", identity.model_hash], ["embedding_dimension", str(identity.dimension)]])
        record = {"request_id": str(UUID(int=99)), "payload": {"status": "ok"}}
        connection.execute("INSERT INTO retrieval_log VALUES (?, ?, ?)", [UUID(int=99), T0, json.dumps(record)])
    index = vector_index.with_vectors(vector_index.new_index(identity.dimension),
                                      encoder.encode([memory.content for memory in OBJECTS]), np.arange(len(OBJECTS)))
    vector_index.save_index(index, path / "vectors-1.faiss")


def test_an_old_store_gets_one_line_naming_rms_migrate(tmp_path):
    write_old_store(tmp_path / "old")
    with pytest.raises(StoreError, match=r"old single-database format; upgrade it with `rms migrate --store .*old`"):
        MemoryStore.open(tmp_path / "old")
    assert not (tmp_path / "old" / "manifest.json").exists()  # opening it wrote nothing


def test_rms_migrate_keeps_objects_vectors_edges_and_log(tmp_path, capsys):
    write_old_store(tmp_path / "old")
    assert main(["migrate", "--store", str(tmp_path / "old")]) == 0
    assert "migrated 3 objects, 1 edges and 1 log records" in capsys.readouterr().out
    with MemoryStore.open(tmp_path / "old", FakeEncoder()) as store:
        assert store.snapshot().get_objects([memory.id for memory in OBJECTS], sorted({memory.namespace for memory in OBJECTS})) == {memory.id: memory for memory in OBJECTS}
        assert store.snapshot().state_fingerprint() == "g1-o3-e1" and store.snapshot().embedding_identity == FakeEncoder().identity
        hits = store.snapshot().search_vector(FakeEncoder().encode(["Ann likes tea"])[0], ["a"], 5)
        assert hits[0].object_id == UUID(int=2) and hits[0].cosine == pytest.approx(1.0)
        assert UUID(int=3) not in {hit.object_id for hit in hits}  # the bare entity keeps no vector
        assert [hit.object_id for hit in store.snapshot().search_lexical("cat", ["a"], 5)] == [UUID(int=1)]
        assert [edge.edge_type for edge in store.snapshot().adjacency(["a"]).touching([UUID(int=1)], 0.0)] == ["SPOKEN_BY"]
        assert store.retrieval_log() == [{"request_id": str(UUID(int=99)), "payload": {"status": "ok"}}]
        store.add([MemoryObject(namespace="a", content="a new turn")])
        assert store.snapshot().count_objects() == 4
    assert main(["migrate", "--store", str(tmp_path / "old")]) == 2
    assert "already a segment store" in capsys.readouterr().err
