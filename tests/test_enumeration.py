from __future__ import annotations

from uuid import NAMESPACE_OID, UUID, uuid5

import pytest

from rms_retrieval.stores.analysis.claims import Assertion, Quantity
from rms_retrieval.stores.exact.enumeration import iter_objects, scan_objects
from rms_retrieval.stores.errors import StoreError
from rms_retrieval.stores.engine.manifest import FORMAT_VERSION, MANIFEST_FILE
from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.models import LifecycleState, MemoryObject, NodeType
from tests.factories import FakeEncoder

SIZE = 2_000
PAGE = 97
_TYPES = (NodeType.TURN, NodeType.FACT, NodeType.EVENT)


def _big_object(number: int, namespace: str = "big") -> MemoryObject:
    """Ids in no relation to insertion order; lower-case contents, so no entities are extracted."""
    return MemoryObject(
        id=uuid5(NAMESPACE_OID, f"{namespace}-{number}"),
        namespace=namespace,
        scope="work" if number % 4 == 0 else "home",
        content=f"note {number} about item {number % 37}",
        node_type=_TYPES[number % 3],
        lifecycle_state=LifecycleState.ARCHIVED if number % 10 == 0 else LifecycleState.ACTIVE,
    )


BIG = [_big_object(number) for number in range(SIZE)]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    with MemoryStore.open(tmp_path_factory.mktemp("enumeration") / "store", FakeEncoder()) as opened:
        report = opened.add([*BIG, *(_big_object(number, "other") for number in range(300))])
        assert report.entities_added == 0
        yield opened


def _expected(*, node_types=tuple(NodeType), lifecycles=(LifecycleState.ACTIVE,), scope=None) -> list[UUID]:
    return sorted(
        memory.id for memory in BIG
        if memory.node_type in node_types and memory.lifecycle_state in lifecycles and scope in (None, memory.scope)
    )


def test_pages_of_97_cover_the_2000_objects_once_in_id_order(store, monkeypatch):
    largest_read = 0
    snapshot = store.snapshot()
    read = snapshot.scan_page

    def counting_read(selection):
        nonlocal largest_read
        rows = read(selection)
        largest_read = max(largest_read, len(rows))
        return rows

    monkeypatch.setattr(snapshot, "scan_page", counting_read)
    lifecycles = tuple(LifecycleState)
    seen, after_id, pages = [], None, 0
    while True:
        page = scan_objects(snapshot, namespace="big", lifecycle=lifecycles, after_id=after_id, limit=PAGE)
        pages += 1
        seen.extend(memory.id for memory in page.objects)
        if not page.has_more:
            assert page.next_cursor is None and len(page.objects) == SIZE - (pages - 1) * PAGE
            break
        assert len(page.objects) == PAGE and page.next_cursor == page.objects[-1].id
        after_id = page.next_cursor
    assert seen == sorted(memory.id for memory in BIG)
    assert pages == -(-SIZE // PAGE)
    assert largest_read == PAGE + 1  # memory bounded by the page, never the store


def test_iter_objects_applies_filters_before_each_page(store):
    facts = list(iter_objects(store, namespace="big", node_type=NodeType.FACT, batch_size=PAGE))
    assert [memory.id for memory in facts] == _expected(node_types=(NodeType.FACT,))
    assert all(memory.namespace == "big" and memory.lifecycle_state is LifecycleState.ACTIVE for memory in facts)
    first = scan_objects(store, namespace="big", node_type=[NodeType.FACT], limit=PAGE)
    assert len(first.objects) == PAGE and all(memory.node_type is NodeType.FACT for memory in first.objects)


def test_scope_and_several_types_and_states(store):
    found = iter_objects(
        store, namespace="big", scope="work", node_type=[NodeType.TURN, NodeType.EVENT],
        lifecycle=[LifecycleState.ARCHIVED], batch_size=500,
    )
    expected = _expected(node_types=(NodeType.TURN, NodeType.EVENT), lifecycles=(LifecycleState.ARCHIVED,), scope="work")
    assert [memory.id for memory in found] == expected and expected


def test_default_lifecycle_is_active_and_an_empty_set_matches_nothing(store):
    assert sum(1 for _ in iter_objects(store, namespace="big", batch_size=1000)) == len(_expected())
    empty = scan_objects(store, namespace="big", lifecycle=())
    assert empty.objects == () and not empty.has_more and empty.next_cursor is None
    assert list(iter_objects(store, namespace="big", lifecycle=[])) == []


def test_namespace_isolation_and_unknown_namespace(store):
    other = list(iter_objects(store, namespace="other", lifecycle=tuple(LifecycleState), batch_size=1000))
    assert len(other) == 300 and {memory.namespace for memory in other} == {"other"}
    assert scan_objects(store, namespace="nowhere").objects == ()


def test_objects_round_trip_with_their_fields(store):
    [first] = scan_objects(store, namespace="big", limit=1).objects
    assert first == next(memory for memory in BIG if memory.id == first.id)


def test_cursor_after_the_last_id_and_exact_fit(store):
    last = _expected()[-1]
    assert scan_objects(store, namespace="big", after_id=last).objects == ()
    second_last = _expected()[-3]
    page = scan_objects(store, namespace="big", after_id=second_last, limit=2)
    assert [memory.id for memory in page.objects] == _expected()[-2:] and not page.has_more


@pytest.mark.parametrize("limit", [0, -1, 10_001])
def test_page_size_is_bounded(store, limit):
    with pytest.raises(ValueError, match="limit must be between 1 and 10000"):
        scan_objects(store, namespace="big", limit=limit)


def test_unknown_filter_values_are_rejected(store):
    with pytest.raises(ValueError):
        scan_objects(store, namespace="big", node_type="NOT_A_TYPE")
    with pytest.raises(ValueError):
        scan_objects(store, namespace="big", lifecycle=["GONE"])


def test_claims_round_trip_through_a_scan(tmp_path):
    memory = MemoryObject(
        namespace="a", content="spent a bit on coffee", node_type=NodeType.FACT,
        assertion=Assertion(subject="I", predicate="spent on", object="coffee", polarity="negative"),
        quantity=Quantity(value="4.50", unit="$", source_text="spent $4.50 on coffee"),
    )
    with MemoryStore.open(tmp_path / "store", FakeEncoder()) as opened:
        opened.add([memory])
        [found] = scan_objects(opened, namespace="a").objects
        assert found == memory and opened.snapshot().get_objects([memory.id], ["a"])[memory.id] == memory


def test_a_store_of_another_format_version_is_named(tmp_path):
    MemoryStore.open(tmp_path / "other").close()
    manifest = tmp_path / "other" / MANIFEST_FILE
    text = manifest.read_text()
    assert f'"format_version": {FORMAT_VERSION}' in text
    manifest.write_text(text.replace(f'"format_version": {FORMAT_VERSION}', '"format_version": 99'))
    with pytest.raises(StoreError, match="format version 99, this version reads 3, 4, 5 and 6; upgrade"):
        MemoryStore.open(tmp_path / "other")


def test_a_lone_type_or_state_is_a_one_element_set(store):
    archived = list(iter_objects(store, namespace="big", node_type="FACT", lifecycle=LifecycleState.ARCHIVED))
    assert [memory.id for memory in archived] == _expected(node_types=(NodeType.FACT,), lifecycles=(LifecycleState.ARCHIVED,))
