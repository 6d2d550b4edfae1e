"""docs/rfc-coverage.md stays true: its counts match its rows, and every test it names exists."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).parents[1]
COVERAGE = (ROOT / "docs" / "rfc-coverage.md").read_text()
STATUSES = ("implemented+tested", "implemented untested", "partial", "missing", "N/A")

_NAMED_TESTS = re.compile(r"(test_\w+\.py): ((?:test_\w+(?:, )?)+)")


def _rows() -> list[list[str]]:
    """The table's rows as cells: number, spec item, status, implementation, tests, notes."""
    return [[cell.strip() for cell in line.strip().strip("|").split(" | ")]
            for line in COVERAGE.splitlines() if re.match(r"^\| \d+ \|", line)]


def test_every_row_has_a_status_and_the_counts_match_the_rows():
    rows = _rows()
    assert [int(row[0]) for row in rows] == list(range(1, len(rows) + 1))
    assert all(len(row) == 6 and row[2] in STATUSES for row in rows), [row[0] for row in rows if row[2] not in STATUSES]
    counted = Counter(row[2] for row in rows)
    for status in STATUSES:
        assert f"| {status} | {counted[status]} |" in COVERAGE, status
    assert f"| **total** | **{len(rows)}** |" in COVERAGE


def test_every_test_named_in_the_table_exists():
    named = [(module, name) for module, names in _NAMED_TESTS.findall(COVERAGE) for name in names.split(", ")]
    assert named
    missing = [f"{module}::{name}" for module, name in named
               if not re.search(rf"^(async )?def {name}\(", (ROOT / "tests" / module).read_text(), re.MULTILINE)]
    assert missing == []
