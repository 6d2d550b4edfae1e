from __future__ import annotations

import json

import pytest

from rms_retrieval.dataflows.cli import main
from rms_retrieval.stores.memory_store import MemoryStore
from rms_retrieval.stores.models import LifecycleState, NodeType
from tests.factories import FakeEncoder, claim, make_object, oid

OBJECTS = [
    claim("s1", "I", "spent on", "coffee", value="0.10", unit="$", days=1),
    claim("s2", "I", "spent on", "coffee", value="0.20", unit="$", days=2),
    claim("s3", "I", "raised for", "shelter", value="7", unit="USD", days=3),
    claim("gone", "I", "spent on", "coffee", value="5", unit="$", lifecycle_state=LifecycleState.ARCHIVED),
    make_object("t1", "memory t1"),
    make_object("t2", "memory t2"),
]


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "store"
    with MemoryStore.open(path, FakeEncoder()) as opened:
        opened.add(OBJECTS)
    return str(path)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_scan_pages_with_a_cursor(store_path, capsys):
    code, out, _ = run(capsys, "scan", "--store", store_path, "--namespace", "ns", "--limit", "3", "--json")
    first = json.loads(out)
    assert code == 0 and first["has_more"] and len(first["objects"]) == 3
    code, out, _ = run(capsys, "scan", "--store", store_path, "--namespace", "ns", "--after", first["next_cursor"], "--json")
    second = json.loads(out)
    assert not second["has_more"] and second["next_cursor"] is None
    ids = [memory["id"] for memory in first["objects"] + second["objects"]]
    active = [memory for memory in OBJECTS if memory.lifecycle_state is LifecycleState.ACTIVE]
    assert ids == sorted(str(memory.id) for memory in active)


def test_scan_filters_and_text_output(store_path, capsys):
    code, out, _ = run(capsys, "scan", "--store", store_path, "--namespace", "ns", "--node-type", "TURN")
    assert code == 0 and out.count("TURN") == 2 and "memory t1" in out and out.rstrip().endswith("end (2 on this page)")
    code, out, _ = run(capsys, "scan", "--store", store_path, "--namespace", "ns", "--lifecycle", "ARCHIVED", "--json")
    assert [memory["id"] for memory in json.loads(out)["objects"]] == [str(oid("gone"))]
    code, out, _ = run(capsys, "scan", "--store", store_path, "--namespace", "ns", "--lifecycle", "--json")
    assert json.loads(out)["objects"] == []
    code, out, _ = run(capsys, "scan", "--store", store_path, "--namespace", "ns", "--limit", "2")
    assert out.rstrip().splitlines()[-1].startswith("more: rms scan ... --after ")


def test_aggregate_assertions(store_path, capsys):
    code, out, _ = run(capsys, "aggregate", "assertions", "--store", store_path, "--namespace", "ns",
                       "--predicate", "Spent On", "--lifecycle", "ACTIVE", "ARCHIVED", "--max-samples", "1")
    result = json.loads(out)
    assert code == 0 and result["occurrence_count"] == 3 and result["distinct_group_count"] == 1
    assert result["groups"][0]["samples_truncated"] and result["semantic_equivalence"] == "normalized_exact_only"


def test_aggregate_quantities_prints_decimals_as_strings(store_path, capsys):
    code, out, _ = run(capsys, "aggregate", "quantities", "--store", store_path, "--namespace", "ns",
                       "--predicate-prefix", "spent", "raised", "--node-type", NodeType.FACT.value)
    result = json.loads(out)
    assert code == 0 and {group["unit"]: group["total"] for group in result["groups"]} == {"$": "0.30", "usd": "7"}
    assert result["semantic_equivalence"] == "normalized_exact_and_predicate_prefix"


def test_aggregate_text(store_path, capsys):
    code, out, _ = run(capsys, "aggregate", "text", "--store", store_path, "--namespace", "ns", "How much did I spend on coffee?")
    answer = json.loads(out)
    assert code == 0 and answer["aggregation"]["groups"][0]["total"] == "0.30"
    code, out, _ = run(capsys, "aggregate", "text", "--store", store_path, "--namespace", "ns", "How much will I spend?")
    answer = json.loads(out)
    assert answer["aggregation"] is None and answer["plan"]["unsupported_reason"] == "future_wording"


def test_mistakes_are_one_line_errors(store_path, capsys, tmp_path):
    code, _, err = run(capsys, "aggregate", "assertions", "--store", store_path, "--namespace", "ns",
                       "--event-time-from", "2024-01-01")
    assert code == 2 and err.startswith("error: event_time_from") and "timezone" in err
    code, _, err = run(capsys, "scan", "--store", str(tmp_path / "none"), "--namespace", "ns")
    assert code == 2 and "no store at" in err
    code, _, err = run(capsys, "scan", "--store", store_path, "--namespace", "ns", "--limit", "0")
    assert code == 2 and "limit must be between" in err
