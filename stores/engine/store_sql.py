"""The SQL of the segment store, in one place: the read-only queries aggregation and enumeration
run over every live segment's Parquet file (stores/engine/segment_parquet.py writes them).

Every query over segments reads `segment_rows`, the snapshot's rows as one Arrow table built from
segment files whose bytes were checked against their sha256 (never the files read again unchecked),
registered on a private cursor; no lock is needed because a snapshot never changes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from uuid import UUID

import duckdb
import pyarrow as pa

from rms_retrieval.stores.engine.codec import memory_object
from rms_retrieval.stores.engine.duckdb_process import ProcessDatabase
from rms_retrieval.stores.models import MemoryObject
from rms_retrieval.stores.protocols import AssertionGroupRow, ClaimSelection, QuantityRow, RecordReader, ScanSelection

_DATABASE = ProcessDatabase(lambda connection: connection.execute("SET GLOBAL TimeZone = 'UTC'"))


def connect() -> duckdb.DuckDBPyConnection:
    """A private cursor on this process's database (stores/engine/duckdb_process.py): a cursor per call,
    never shared across threads (a new database costs tens of milliseconds, a cursor tens of
    microseconds)."""
    return _DATABASE.connection().cursor()


# ----- enumeration (stores/exact/enumeration.py) -----------------------------------------------------

# One row beyond the limit tells whether another page follows.
SCAN_PAGE = """
SELECT record, id, namespace, entity_canonical_name FROM segment_rows
WHERE namespace = $namespace
  AND ($scope IS NULL OR scope = $scope)
  AND node_type = ANY($node_types)
  AND lifecycle_state = ANY($lifecycles)
  AND ($after_id IS NULL OR id > $after_id)
ORDER BY id
LIMIT $limit_plus_one
"""

# ----- aggregation (stores/exact/aggregation.py) -----------------------------------------------------

# Every record of the namespace/scope and node types that has no claim or whose claim matches
# the selectors, with the first reason (in filtering.py's order) it is excluded, or NULL.
_SELECTED = """
SELECT *, coalesce(event_time, created_at) AS stated_time,
    CASE
        WHEN assertion_predicate_norm IS NULL THEN 'no_assertion'
        WHEN epistemic_type = ANY($dropped_epistemic_types) THEN epistemic_type
        WHEN $drop_low_unverified AND epistemic_type = 'UNVERIFIED' AND confidence < $unverified_min_confidence
            THEN 'UNVERIFIED_BELOW_THRESHOLD'
        WHEN NOT lifecycle_state = ANY($lifecycles) THEN 'lifecycle:' || lifecycle_state
        WHEN coalesce(event_time, created_at) < $event_time_from THEN 'event_before_event_time_from'
        WHEN coalesce(event_time, created_at) > $event_time_to THEN 'event_after_event_time_to'
        WHEN valid_from > $valid_at THEN 'valid_after_valid_at'
        WHEN valid_to < $valid_at THEN 'valid_before_valid_at'
        WHEN created_at > $knowledge_at THEN 'ingested_after_knowledge_at'
        WHEN $require_quantity AND quantity IS NULL THEN 'quantity_missing'
    END AS exclusion
FROM segment_rows
WHERE namespace = $namespace
  AND ($scope IS NULL OR scope = $scope)
  AND node_type = ANY($node_types)
  AND ($after_id IS NULL OR id > $after_id)
  AND (assertion_predicate_norm IS NULL OR (
        (len($subjects) = 0 OR assertion_subject_norm = ANY($subjects))
    AND (len($objects) = 0 OR assertion_object_norm = ANY($objects))
    AND (len($polarities) = 0 OR assertion_polarity = ANY($polarities))
    AND ((len($predicates) = 0 AND len($predicate_prefixes) = 0)
         OR assertion_predicate_norm = ANY($predicates)
         OR EXISTS (SELECT 1 FROM unnest($predicate_prefixes) AS prefix(value)
                    WHERE assertion_predicate_norm = prefix.value
                       OR starts_with(assertion_predicate_norm, prefix.value || '_')))
  ))
"""
EXCLUSION_COUNTS = f"""
WITH selected AS ({_SELECTED})
SELECT exclusion, count(*) FROM selected WHERE exclusion IS NOT NULL GROUP BY exclusion ORDER BY exclusion
"""
# Groups by count, then key; the window totals are computed before the group limit.
ASSERTION_GROUPS = f"""
WITH selected AS ({_SELECTED}),
ranked AS (
    SELECT *, row_number() OVER (
        PARTITION BY assertion_subject_norm, assertion_predicate_norm, assertion_object_norm, assertion_polarity
        ORDER BY id) AS sample_rank
    FROM selected WHERE exclusion IS NULL
),
grouped AS (
    SELECT assertion_subject_norm, assertion_predicate_norm, assertion_object_norm, assertion_polarity,
           count(*) AS occurrences,
           list({{'object_id': id, 'evidence_refs': evidence_refs, 'stated_time': stated_time, 'assertion': assertion}}
                ORDER BY id) FILTER (WHERE sample_rank <= $max_samples) AS samples
    FROM ranked GROUP BY ALL
)
SELECT *, count(*) OVER () AS group_count, sum(occurrences) OVER () AS occurrence_total
FROM grouped
ORDER BY occurrences DESC, assertion_subject_norm, assertion_predicate_norm, assertion_object_norm, assertion_polarity
LIMIT $max_groups
"""

# The admitted claims with a quantity, one keyset page at a time: read-time validation, unit
# normalisation (NFKC and case-folding, which DuckDB lacks) and the exact sum run in Python.
QUANTITY_PAGE = f"""
WITH selected AS ({_SELECTED})
SELECT id, evidence_refs, stated_time, assertion, quantity,
       assertion_subject_norm, assertion_predicate_norm, assertion_object_norm, assertion_polarity
FROM selected WHERE exclusion IS NULL
ORDER BY id
LIMIT $batch_size
"""


class ParquetRecords(RecordReader):
    """The RecordReader queries over one snapshot's rows: `rows()` gives them as one Arrow table
    (None for a snapshot without rows), built from checked bytes."""

    def __init__(self, rows: Callable[[], pa.Table | None], fingerprint: str) -> None:
        self._table = rows
        self._fingerprint = fingerprint

    def _rows(self, query: str, parameters: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        table = self._table()
        if table is None:
            return []
        connection = connect()
        try:
            connection.register("segment_rows", table)
            return connection.execute(query, dict(parameters)).fetchall()
        finally:
            connection.close()

    def scan_page(self, selection: ScanSelection) -> list[MemoryObject]:
        parameters = _bound(selection)
        parameters["limit_plus_one"] = parameters.pop("limit") + 1  # one row more tells that a page follows
        return [memory_object(*row) for row in self._rows(SCAN_PAGE, parameters)]

    def exclusion_counts(self, selection: ClaimSelection) -> dict[str, int]:
        return {reason: count for reason, count in self._rows(EXCLUSION_COUNTS, _claim_parameters(selection, None))}

    def assertion_groups(self, selection: ClaimSelection, max_groups: int, max_samples: int) -> list[AssertionGroupRow]:
        parameters = {**_claim_parameters(selection, None), "max_groups": max_groups, "max_samples": max_samples}
        return [AssertionGroupRow(subject, predicate, object_, polarity, occurrences, tuple(samples or ()), group_count,
                                  int(total))
                for subject, predicate, object_, polarity, occurrences, samples, group_count, total
                in self._rows(ASSERTION_GROUPS, parameters)]

    def quantity_page(self, selection: ClaimSelection, after_id: UUID | None, limit: int) -> list[QuantityRow]:
        parameters = {**_claim_parameters(selection, after_id), "batch_size": limit}
        return [QuantityRow(*row) for row in self._rows(QUANTITY_PAGE, parameters)]

    def state_fingerprint(self) -> str:
        return self._fingerprint


def _bound(selection: ScanSelection | ClaimSelection) -> dict[str, Any]:
    """A selection's fields as bound values (DuckDB binds a list to `= ANY($name)`)."""
    return {name: list(value) if isinstance(value, tuple) else value for name, value in vars(selection).items()}


def _claim_parameters(selection: ClaimSelection, after_id: UUID | None) -> dict[str, Any]:
    return {**_bound(selection), "after_id": after_id}


# ----- format 2 (store.duckdb), read once by stores/engine/migrate.py ----------------------------------

LEGACY_META = "SELECT key, value FROM meta"
LEGACY_OBJECTS = "SELECT vec_id, * EXCLUDE (vec_id) FROM objects ORDER BY vec_id"
LEGACY_EDGES = "SELECT edge_id, source, target, edge_type, confidence, namespace FROM edges ORDER BY edge_id"
LEGACY_LOG = "SELECT record FROM retrieval_log ORDER BY logged_at, rowid"
