"""`rms update`, `rms delete`, `rms erase`, `rms compact` on a real store, with one-line errors."""

from __future__ import annotations

from uuid import UUID

import pytest

from rms_retrieval.dataflows.cli import main
from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.models import MemoryObject


@pytest.fixture
def store_path(tmp_path, encoder):
    path = tmp_path / "store"
    with MemoryStore.open(path, encoder) as store:
        store.add([MemoryObject(id=UUID(int=1), namespace="ns", node_type="FACT", content="the boat is blue"),
                   MemoryObject(id=UUID(int=2), namespace="ns", owner="eve", node_type="FACT", content="eve owns a kayak"),
                   MemoryObject(id=UUID(int=3), namespace="other", node_type="FACT", content="a private fact")])
    return path


def _objects(path):
    with MemoryStore.open(path, create=False, read_only=True) as store:
        ids = [UUID(int=number) for number in (1, 2, 3)]
        return {**store.snapshot().get_objects(ids, ["ns"]), **store.snapshot().get_objects(ids, ["other"])}


def test_update_delete_erase_and_compact(store_path, capsys):
    store = str(store_path)
    assert main(["update", "--store", store, "--namespace", "ns", "--id", str(UUID(int=1)),
                 "--set", "lifecycle_state=ARCHIVED", "--set", 'metadata={"checked": true}']) == 0
    updated = _objects(store_path)[UUID(int=1)]
    assert updated.lifecycle_state == "ARCHIVED" and updated.metadata == {"checked": True}
    assert main(["erase", "--store", store, "--namespace", "ns", "--owner", "eve"]) == 0
    assert "erased 1 objects" in capsys.readouterr().out
    assert main(["delete", "--store", store, "--namespace", "ns", str(UUID(int=1))]) == 0
    assert main(["compact", "--store", store]) == 0
    assert set(_objects(store_path)) == {UUID(int=3)}


@pytest.mark.parametrize("arguments, message", [
    (["delete", "--namespace", "ns", str(UUID(int=3))], f"no object {UUID(int=3)} in namespace 'ns'"),
    (["delete", "--namespace", "ns", str(UUID(int=9))], f"no object {UUID(int=9)} in namespace 'ns'"),
    (["delete", "--namespace", "nowhere", str(UUID(int=1))], "namespace 'nowhere' holds no objects"),
    (["update", "--namespace", "ns", "--id", str(UUID(int=1)), "--set", "owner=x"], "cannot update 'owner'"),
    (["erase", "--namespace", "ns", "--where", "colour=red"], "cannot erase by 'colour'"),
    (["erase"], "erase needs a namespace, an owner or a filter"),
])
def test_errors_are_one_line_and_change_nothing(store_path, capsys, arguments, message):
    before = _objects(store_path)
    assert main([arguments[0], "--store", str(store_path), *arguments[1:]]) != 0
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1
    assert _objects(store_path) == before
