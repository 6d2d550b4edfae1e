"""The segment store's files: codec round trip, manifest switch and checksum, segment write/load."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from datetime import datetime, timezone
from uuid import UUID

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
import pyarrow.parquet as pq
import pytest

from tests import store_workers
from rms_retrieval.stores.analysis.claims import Assertion, Quantity
from rms_retrieval.stores.engine.codec import OBJECT_FIELDS, memory_object, object_record, record_fields, row_values
from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.engine.manifest import MANIFEST_FILE, Manifest, SegmentEntry, read_manifest, write_manifest
from rms_retrieval.stores.models import LifecycleState, MemoryObject, NodeType
from rms_retrieval.stores.indexes.entity_graph import co_mention_confidence
from rms_retrieval.stores.protocols import Edge, EmbeddingIdentity
from rms_retrieval.stores.engine import segment_parquet
from rms_retrieval.stores.engine.segment_parquet import MappedRecords, Records, objects_table, parquet_bytes
from rms_retrieval.stores.engine.segments import LoadedSegment, StoredEdge
from rms_retrieval.stores.engine.segment_writing import write_deletions, write_segment
from rms_retrieval.stores.engine.segment_vectors import SegmentVectors

RICH = MemoryObject(
    id=UUID(int=7), namespace="a", content="Ann paid 4.50 for coffee", node_type=NodeType.FACT, session_id="s",
    session_seq=3, created_at=datetime(2024, 1, 1, tzinfo=timezone.utc), evidence_refs=("D1:2",),
    event_time=datetime(2023, 12, 31, 23, 0, tzinfo=timezone.utc), metadata={"speaker": "Ann", "n": [1, 2.5]},
    lifecycle_state=LifecycleState.TENTATIVE, salience=1.0,
    assertion=Assertion(subject="Ann", predicate="paid for", object="coffee"),
    quantity=Quantity(value="4.50", unit="$", source_text="paid $4.50"),
)


def test_a_record_round_trips_to_an_equal_object_in_utc():
    back = memory_object(object_record(RICH), RICH.id, RICH.namespace)
    assert back == RICH and back.created_at.tzinfo is timezone.utc
    assert row_values(RICH)["assertion_predicate_norm"] == "paid_for" and json.loads(row_values(RICH)["metadata"]) == RICH.metadata


@pytest.mark.parametrize("memory", [RICH, MemoryObject(namespace="a", content="plain")], ids=["rich", "plain"])
def test_a_decoded_object_is_what_model_construct_makes_of_its_record(memory):
    record = object_record(memory)
    decoded, given_id = memory_object(record, UUID(int=memory.id.int), memory.namespace), memory_object(record, memory.id, memory.namespace)
    constructed = MemoryObject.model_construct(**{**vars(decoded)})  # pydantic's own way, the same values
    for made in (decoded, given_id):
        assert made == memory == constructed and type(made) is MemoryObject
        assert list(vars(made)) == list(vars(constructed)) == list(MemoryObject.model_fields)
        assert vars(made) == vars(constructed) and made.model_dump() == constructed.model_dump()
        assert made.__pydantic_extra__ == constructed.__pydantic_extra__
        assert made.__pydantic_private__ == constructed.__pydantic_private__
        assert made.__pydantic_fields_set__ == constructed.__pydantic_fields_set__ == set(OBJECT_FIELDS)
        assert repr(made) == repr(constructed)
    assert given_id.id is memory.id


def test_a_record_leaves_out_the_common_values_and_one_holding_every_field_reads_the_same():
    spotted = MemoryObject(namespace="a", node_type=NodeType.ENTITY, content="Consider", entity_canonical_name="Consider",
                           epistemic_type="INFERRED", confidence=0.7, metadata={"extracted": True},
                           created_at=datetime(2023, 1, 2, tzinfo=timezone.utc), updated_at=datetime(2023, 1, 2, tzinfo=timezone.utc))
    record = json.loads(object_record(spotted))
    assert set(record) == {"node_type", "content", "epistemic_type", "confidence", "metadata",
                           "created_at"}  # the id, namespace and entity name are its row's columns
    every = {**vars(spotted), "id": str(spotted.id), "created_at": spotted.created_at.isoformat(),
             "updated_at": spotted.updated_at.isoformat(), "evidence_refs": []}
    assert memory_object(json.dumps(every, default=str)) == spotted == memory_object(object_record(spotted), spotted.id, "a", "Consider")
    plain = MemoryObject(namespace="a", content="plain")
    first, second = (memory_object(object_record(plain), plain.id, "a") for _ in range(2))
    assert first.metadata == {} and first.metadata is not second.metadata  # never one shared dictionary
    later = spotted.model_copy(update={"updated_at": datetime(2023, 5, 1, tzinfo=timezone.utc)})
    assert "updated_at" in json.loads(object_record(later)) and memory_object(object_record(later), later.id, "a", "Consider") == later


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(1 << 80), max_value=1 << 80) | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(value=_JSON, ensure_ascii=st.booleans())
def test_a_record_is_read_as_json_reads_it_whatever_orjson_refuses(value, ensure_ascii):
    # NaN and infinities, integers beyond 64 bits and lone surrogates are what orjson refuses.
    text = json.dumps({"v": value}, ensure_ascii=ensure_ascii)
    read, expected = record_fields(text), json.loads(text)
    assert json.dumps(read) == json.dumps(expected) and repr(read) == repr(expected)


def test_records_orjson_refuses_are_read_by_json():
    for text in ('{"v": NaN}', '{"v": -Infinity}', '{"v": %d}' % (1 << 70), '{"v": "\\ud800"}'):
        assert repr(record_fields(text)) == repr(json.loads(text))


def test_decoded_objects_share_one_set_of_field_names_and_a_copy_gets_its_own():
    first, second = (memory_object(object_record(memory), RICH.id, "a") for memory in (RICH, RICH.model_copy(update={"content": "y"})))
    assert first.__pydantic_fields_set__ is second.__pydantic_fields_set__
    changed = first.model_copy(update={"content": "z"})
    assert changed.content == "z" and first.content == RICH.content and second == RICH.model_copy(update={"content": "y"})
    assert changed.__pydantic_fields_set__ is not first.__pydantic_fields_set__
    assert first.__pydantic_fields_set__ == set(OBJECT_FIELDS)


def test_metadata_that_is_not_json_is_refused_before_it_reaches_a_segment():
    with pytest.raises(ValueError, match="metadata holds JSON values only"):
        MemoryObject(namespace="a", content="x", metadata={"when": datetime(2024, 1, 1)})


def test_the_manifest_switches_whole_and_detects_its_own_damage(tmp_path):
    identity = EmbeddingIdentity("m", "h", 4)
    entry = SegmentEntry("g1", 2, {"objects.parquet": "ab" * 32}, ("g0a", "g0b"))
    write_manifest(tmp_path, Manifest(3, identity, (entry,), ("g0a",)))
    assert read_manifest(tmp_path) == Manifest(3, identity, (entry,), ("g0a",))
    assert not (tmp_path / (MANIFEST_FILE + ".tmp")).exists()
    text = (tmp_path / MANIFEST_FILE).read_text()
    (tmp_path / MANIFEST_FILE).write_text(text.replace('"rows": 2', '"rows": 3'))
    with pytest.raises(StoreError, match="manifest.json .*sha256 does not match"):
        read_manifest(tmp_path)


def test_a_segment_holds_rows_vectors_edges_and_postings_grouped_by_namespace(tmp_path):
    rows = [store_workers.turn(0), RICH, store_workers.turn(1)]
    vectors = np.eye(3, 16, dtype=np.float32)
    edge = StoredEdge(Edge(1, RICH.id, UUID(int=9), "MENTIONS", 0.9), "a")
    written = write_segment(tmp_path, "g1-x", rows, SegmentVectors.dense(vectors), [edge])
    segment = LoadedSegment(tmp_path, written.entry)
    assert (written.ids, written.namespace_slices, written.pinned_rows, written.edges) == (
        segment.ids, segment.namespace_slices, segment.pinned_rows, segment.edges)
    assert segment.ids == [RICH.id, UUID(int=1), UUID(int=2)]  # namespace a before live
    assert segment.namespace_slices == {"a": (0, 1), "live": (1, 3)}
    assert segment.vectors.of(0).tolist() == vectors[1].tolist() and segment.postings.num_rows == 3
    assert segment.object_at(0) == RICH and segment.pinned_rows == [0]
    owned = StoredEdge(edge.edge, edge.namespace, 0)  # an edge given without its owner is owned by its source's row
    assert segment.edges == (owned,) and segment.sessions[("live", "default", "default", "s")] == [(0, 1), (1, 2)]
    assert sorted(path.name for path in (tmp_path / "segments").iterdir()) == ["g1-x"]


def test_a_segment_written_before_edge_owners_finds_each_edge_s_owner_by_its_source(tmp_path):
    edges = [StoredEdge(Edge(1, RICH.id, UUID(int=9), "MENTIONS", 0.9), "a", 0),
             StoredEdge(Edge(2, UUID(int=8), UUID(int=9), "CO_MENTIONED", 0.45), "a", -1)]
    written = write_segment(tmp_path, "g1-x", [RICH, store_workers.turn(0)], SegmentVectors.dense(np.eye(2, 8, dtype=np.float32)), edges)
    index = written.directory / "index.npz"
    with np.load(index) as arrays:
        older = {name: arrays[name] for name in arrays.files if name != "edge_rows"}
    np.savez(index, **older)
    entry = SegmentEntry("g1-x", 2, {**written.entry.files, "index.npz": hashlib.sha256(index.read_bytes()).hexdigest()})
    assert LoadedSegment(tmp_path, entry).edges == written.edges and [stored.row for stored in written.edges] == [0, -1]
    # the CO_MENTIONED edge weighs the segment's own rows mentioning both its ends: none here
    assert written.edges[1].edge.confidence == co_mention_confidence(0) and written.edges[0] == edges[0]


def test_a_segment_file_that_differs_from_its_checksum_is_named(tmp_path):
    entry = write_segment(tmp_path, "g1-x", [RICH], SegmentVectors.dense(np.ones((1, 4), dtype=np.float32)), []).entry
    damaged = SegmentEntry(entry.id, entry.rows, {**entry.files, "index.npz": "0" * 64})
    segment = LoadedSegment(tmp_path, damaged)  # mapped: an open reads no array
    with pytest.raises(StoreError, match=r"index\.npz is damaged"):
        segment.vectors
    with pytest.raises(StoreError, match=r"index\.npz is damaged"):
        segment.checked()
    assert LoadedSegment(tmp_path, entry).checked().vectors.matrix.tolist() == [[1.0] * 4]


def test_a_segment_of_separate_files_loads_as_its_one_index_file_form(tmp_path):
    """Format-3 segments kept vectors, edges and postings in files of their own."""
    rows = [RICH, store_workers.turn(0)]
    edges = [StoredEdge(Edge(1, RICH.id, UUID(int=9), "MENTIONS", 0.9), "a")]
    written = write_segment(tmp_path, "g1-x", rows, SegmentVectors.dense(np.eye(2, 8, dtype=np.float32)), edges)
    directory = written.directory
    np.save(directory / "vectors.npy", written.vectors.matrix)
    np.savez(directory / "postings.npz", **written.postings.to_arrays())
    edge_columns = {"edge_id": [1], "source": [RICH.id.bytes], "target": [UUID(int=9).bytes], "edge_type": ["MENTIONS"],
                    "confidence": [0.9], "namespace": ["a"]}
    types = {"source": pa.uuid(), "target": pa.uuid()}
    pq.write_table(pa.table({name: pa.array(values, type=types.get(name)) for name, values in edge_columns.items()}),
                   directory / "edges.parquet")
    (directory / "index.npz").unlink()
    pq.write_table(written.objects_table(), directory / "objects.parquet")  # records in the objects file, as then
    files = {name: hashlib.sha256((directory / name).read_bytes()).hexdigest()
             for name in ("objects.parquet", "vectors.npy", "edges.parquet", "postings.npz")}
    separate = LoadedSegment(tmp_path, SegmentEntry("g1-x", 2, files))
    assert (separate.ids, separate.edges, separate.namespace_slices) == (written.ids, written.edges, written.namespace_slices)
    assert separate.vectors.matrix.tobytes() == written.vectors.matrix.tobytes() and separate.object_at(0) == RICH
    assert separate.postings.to_arrays().keys() == written.postings.to_arrays().keys()
    assert all(np.array_equal(separate.postings.to_arrays()[key], value) for key, value in written.postings.to_arrays().items())


def test_an_open_reads_ids_sessions_and_records_only_as_they_are_asked_for(tmp_path):
    rows = [store_workers.turn(number) for number in range(4)] + [RICH]
    written = write_segment(tmp_path, "g1-x", rows, SegmentVectors.dense(np.eye(5, 8, dtype=np.float32)), [])
    segment = LoadedSegment(tmp_path, written.entry)
    assert isinstance(segment._columns.records, MappedRecords) and segment._index._check is not None  # nothing read
    assert {"ids", "namespace_of_row"}.isdisjoint(segment.__dict__)
    columns = segment.columns  # the few-valued texts as codes, read as such, and the same as written
    for name in ("node_types", "owners", "scopes", "session_ids"):
        assert pa.types.is_dictionary(getattr(columns, name).type)
        assert getattr(columns, name).to_pylist() == getattr(written.columns, name).to_pylist()
    assert columns.node_types.to_pylist() == ["FACT", "TURN", "TURN", "TURN", "TURN"]
    assert segment.live_row("live", UUID(int=2)) == 2 and segment.live_row("a", UUID(int=2)) is None
    assert segment.holds("a", RICH.id) and not segment.holds("live", RICH.id) and not segment.holds("b", RICH.id)
    assert (segment.id_at(0), segment.namespace_at(0)) == (RICH.id, "a")
    assert segment.sessions.get(("live", "default", "default", "s")) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert segment.sessions.get(("a", "default", "default", "s"), ()) == [(3, 0)] and len(segment.sessions) == 2
    assert segment.object_at(4) == rows[3] and segment._index._check is None  # a record is read once the file is checked
    assert segment.keys() == {(memory.namespace, memory.id) for memory in rows}
    entry = replace(written.entry, deletions=write_deletions(tmp_path, "g1-x", 2, [2]))
    later = segment.with_deletions(entry)
    assert later.live_row("live", UUID(int=2)) is None and later.holds("live", UUID(int=2))
    assert later.object_at(4) is segment.object_at(4)  # what was decoded is not decoded again
    assert later.object_at(1) is segment.object_at(1) == rows[0]  # nor what either decodes next
    assert later.sessions.get(("live", "default", "default", "s")) == [(0, 1), (2, 3), (3, 4)]
    assert segment.sessions.get(("live", "default", "default", "s")) == [(0, 1), (1, 2), (2, 3), (3, 4)]


def test_records_live_in_the_index_file_and_the_objects_file_holds_neither_them_nor_content(tmp_path):
    rows = [RICH, store_workers.turn(0), store_workers.turn(1)]
    written = write_segment(tmp_path, "g1-x", rows, SegmentVectors.dense(np.eye(3, 8, dtype=np.float32)), [])
    on_disk = pq.read_table(written.directory / "objects.parquet")
    assert on_disk.column("record").null_count == on_disk.column("content").null_count == 3  # the records hold content
    assert on_disk.column("namespace").null_count == 0
    with np.load(written.directory / "index.npz") as arrays:
        offsets, data = arrays["record_offsets"], arrays["record_bytes"]
        ordered = written.objects()
        assert [data[offsets[row]:offsets[row + 1]].tobytes().decode() for row in range(3)] == [object_record(memory) for memory in ordered]
    loaded = LoadedSegment(tmp_path, written.entry)
    assert loaded.objects() == ordered
    assert loaded.objects_table().column("record").to_pylist() == [object_record(memory) for memory in ordered]
    assert loaded.objects_table().equals(written.objects_table())


def test_a_segment_with_its_records_in_the_objects_file_loads_the_same(tmp_path):
    """Format-4 segments kept each row's record in objects.parquet and none in index.npz."""
    rows = [RICH, store_workers.turn(0), store_workers.turn(1)]
    written = write_segment(tmp_path, "g1-x", rows, SegmentVectors.dense(np.eye(3, 8, dtype=np.float32)), [])
    directory, table, objects = written.directory, written.objects_table(), written.objects()
    with np.load(directory / "index.npz") as arrays:
        kept = {name: arrays[name] for name in arrays.files if not name.startswith("record_")}
    np.savez(directory / "index.npz", **kept)
    pq.write_table(table, directory / "objects.parquet")
    files = {name: hashlib.sha256((directory / name).read_bytes()).hexdigest() for name in ("objects.parquet", "index.npz")}
    older = LoadedSegment(tmp_path, SegmentEntry("g1-x", 3, files))
    assert isinstance(older._columns.records, Records)
    assert older.objects() == objects and older.objects_table().equals(table)


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(st.text(alphabet='ab"{é', max_size=6), min_size=1, max_size=12), needle=st.text(alphabet='ab"é', min_size=1, max_size=3),
       picks=st.lists(st.integers(0, 23), max_size=8), wide=st.booleans())
def test_mapped_records_tell_which_contain_a_text_as_python_does(texts, needle, picks, wide):
    # Any positions (unsorted, repeated), matches across records' boundaries and overlapping
    # ones; with `wide`, a 512 KB record after each, so that far-apart positions span too many
    # bytes to be searched whole (Arrow answers for them).
    filler = "x" * (1 << 19) if wide else ""
    texts = [record for text in texts for record in (text, filler)]
    positions = [pick % len(texts) for pick in picks]
    arrays = segment_parquet.record_arrays(pa.array(texts))
    records = MappedRecords(arrays["record_offsets"], arrays["record_bytes"], lambda: None)
    assert records.containing(positions, needle).tolist() == [needle in texts[row] for row in positions]


def test_mapped_records_read_one_record_after_the_check_and_refuse_bad_arrays():
    records = [object_record(RICH), "{}", ""]
    arrays = segment_parquet.record_arrays(pa.chunked_array([records[:1], records[1:]]))
    checks = []
    mapped = MappedRecords(arrays["record_offsets"], arrays["record_bytes"], lambda: checks.append(1))
    assert len(mapped) == 3 and [mapped.at(row) for row in range(3)] == records and len(checks) == 3
    assert mapped.array().to_pylist() == records
    assert mapped.containing([2, 0, 1], '"content"').tolist() == [False, True, False]
    assert mapped.containing([1, 2], '"content"').tolist() == [False, False]  # a run of rows, read in place
    assert mapped.containing([0, 1], '"content"').tolist() == [True, False] and mapped.containing([], "{").tolist() == []
    with pytest.raises(IndexError, match="row 3 of 3"):
        mapped.at(3)
    texts = ["{ab", "cd}", "{bc}", "bcbc"]  # "bc" across the first two records' boundary is no match
    joined = segment_parquet.record_arrays(pa.array(texts))
    plain = MappedRecords(joined["record_offsets"], joined["record_bytes"], lambda: None)
    for positions in ([0, 1], [0, 1, 2, 3], [1, 2], [3], [2, 0, 3]):  # runs by bytes.find, the rest by Arrow
        assert plain.containing(positions, "bc").tolist() == ["bc" in texts[row] for row in positions]
    with pytest.raises(ValueError, match="no record"):
        segment_parquet.record_arrays(pa.array(["{}", None]))
    with pytest.raises(ValueError, match="int64 offsets"):
        MappedRecords(arrays["record_offsets"].astype(np.int32), arrays["record_bytes"], lambda: None)
    broken = MappedRecords(np.array([0, 9, 4], dtype=np.int64), arrays["record_bytes"][:4], lambda: None)
    for read in (broken.array, lambda: broken.containing([1], "{")):
        with pytest.raises(ValueError, match="do not run through"):
            read()


def test_a_consecutive_run_of_positions_is_a_slice_and_nothing_else_is():
    assert segment_parquet.consecutive_run(np.arange(3, 7), 7) == slice(3, 7)
    assert segment_parquet.consecutive_run(np.asarray([5]), 6) == slice(5, 6)
    for positions, size in (([], 5), ([1, 3], 5), ([2, 1], 5), ([4, 5], 5), ([-1, 0], 5), ([1, 1], 5)):
        assert segment_parquet.consecutive_run(np.asarray(positions, dtype=np.int64), size) is None


def test_records_are_read_one_row_group_at_a_time(monkeypatch):
    monkeypatch.setattr(segment_parquet, "ROW_GROUP_ROWS", 4)
    rows = [store_workers.turn(number) for number in range(10)]
    records = Records(data=parquet_bytes(objects_table(rows)))
    assert json.loads(records.at(9))["content"] == rows[9].content and list(records._groups) == [2]
    assert [memory_object(records.at(row), rows[row].id, rows[row].namespace) for row in range(10)] == rows and sorted(records._groups) == [0, 1, 2]
    with pytest.raises(ValueError, match="not both"):
        Records(array=pa.array(["{}"]), data=b"")
    with pytest.raises(ValueError, match="in its record column"):
        records.array()
    assert Records(array=pa.array(["{}"])).array().to_pylist() == ["{}"]
    named = rows[7].content
    assert records.containing([9, 7, 0], named).tolist() == [False, True, False]
    assert Records(array=pa.array(['{"a": 1}', "{}"])).containing([1, 0], '"a"').tolist() == [False, True]
    assert Records(array=pa.array(['{"a": 1}', "{}", '{"a": 2}'])).containing([1, 2], '"a"').tolist() == [False, True]
