"""README's headline, BENCHMARKS.md's headline table, its detail tables and the plot's data agree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rms_retrieval.dataflows.bench import published

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
BENCHMARKS = (REPO / "BENCHMARKS.md").read_text(encoding="utf-8")
# Words that name when a section was written rather than what it holds.
WHEN_WORDS = re.compile(r"\b(round|session|merged main|first|second|third|today)\b|\d{4}-\d{2}-\d{2}", re.I)


def _table_after(text: str, heading: str) -> list[list[str]]:
    """The rows (cells stripped) of the first Markdown table after the line `heading`."""
    lines = text.splitlines()
    if heading not in lines:
        raise AssertionError(f"no heading {heading!r}")
    rows: list[list[str]] = []
    for line in lines[lines.index(heading) + 1:]:
        if line.startswith("|"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if not all(set(cell) <= set(":-") for cell in cells):
                rows.append(cells)
        elif rows:
            break
    if not rows:
        raise AssertionError(f"no table after {heading!r}")
    return rows


def _row(table: list[list[str]], first_cell: str) -> list[str]:
    matches = [row for row in table if row[0] == first_cell]
    assert len(matches) == 1, f"{len(matches)} rows start with {first_cell!r}"
    return matches[0]


def _numbers(cell: str) -> list[float]:
    return [float(n.replace(",", "")) for n in re.findall(r"\d[\d,]*\.?\d*", cell)]


HEADLINE = _table_after(BENCHMARKS, "## Headline")
README_HEADLINE = _table_after(README, "## How well it works ([BENCHMARKS.md](BENCHMARKS.md))")
QUALITY = _table_after(BENCHMARKS, "## Quality on LoCoMo")
LATENCY = _table_after(BENCHMARKS, "## Latency")


def _headline(figure: str) -> list[float]:
    return _numbers(_row(HEADLINE, figure)[1])


def test_every_readme_headline_row_is_a_row_of_the_benchmarks_headline_table():
    assert README_HEADLINE[0] == HEADLINE[0]
    missing = [row for row in README_HEADLINE[1:] if row not in HEADLINE[1:]]
    assert not missing, f"README rows not in BENCHMARKS.md's Headline table: {missing}"
    figures = {row[0] for row in README_HEADLINE}
    assert {"all evidence packed at 4,000 tokens", "all evidence packed at 8,000 tokens",
            "p50 of a warm `retrieve()`, bundle of 50"} <= figures


def test_the_headline_quality_is_the_quality_tables_defaults():
    defaults = _row(QUALITY, "**rms-retrieval, defaults**")
    assert _headline("all evidence packed at 4,000 tokens") == _numbers(defaults[4])
    assert _headline("all evidence packed at 8,000 tokens") == _numbers(defaults[5])
    best = _row(QUALITY, "best published result")
    assert _headline("best published result at 4,000 / 8,000 tokens") == _numbers(best[4]) + _numbers(best[5])


def test_the_headline_latency_is_the_latency_tables():
    defaults = _row(LATENCY, "**rms-retrieval, defaults**")
    assert _headline("p50 of a warm `retrieve()`, bundle of 50") == _numbers(defaults[1])
    assert _headline("p99 of a warm `retrieve()`, bundle of 50") == _numbers(defaults[3])
    assert _headline("floor p50") == _numbers(_row(LATENCY, "floor")[1])
    assert _headline("LangChain EnsembleRetriever p50, k=200") == _numbers(
        _row(LATENCY, "LangChain EnsembleRetriever, k=200")[1])


@pytest.mark.parametrize(("series", "row"), [
    ("rms-retrieval, defaults", "**rms-retrieval, defaults**"),
    ("rms-retrieval, lists of 200, speaker boost 1.0",
     "rms-retrieval, lists of 200, speaker boost 1.0 (`round3_first_step`)"),
    ("best published result", "best published result"),
    ("RRF of vector and BM25 (commit c93db62)", "RRF of vector and BM25 (arm `rrf_vector_bm25`, commit c93db62)"),
    ("vector only (commit c93db62)", "vector only (arm `vector_only`, commit c93db62)"),
    ("BM25 only (commit c93db62)", "BM25 only (arm `bm25_only`, commit c93db62)"),
])
def test_the_plots_data_is_the_quality_table(series, row):
    figures = published.load_quality_by_budget(REPO / published.DEFAULT_DATA)
    cells = _row(QUALITY, row)
    assert list(figures.values_of(series)) == _numbers(cells[4]) + _numbers(cells[5])


def test_the_peers_quality_in_the_plot_is_the_quality_tables():
    figures = published.load_quality_by_budget(REPO / published.DEFAULT_DATA)
    peer = next(row for row in QUALITY if row[0].startswith("LangChain EnsembleRetriever"))
    assert figures.values_of("LangChain EnsembleRetriever (one run, 4K only)") == (_numbers(peer[4])[0], None)


def test_no_section_of_benchmarks_is_named_after_when_it_was_written():
    headings = [line for line in BENCHMARKS.splitlines() if line.startswith("#")]
    named_for_when = [h for h in headings if WHEN_WORDS.search(h)]
    assert not named_for_when, f"sections named after when they were written: {named_for_when}"


def test_the_parser_reads_a_table_and_refuses_a_missing_one():
    text = "## A\n\n| x | y |\n|---|---:|\n| a | 1.5 |\n| b | 2,000 |\n\nafter\n"
    assert _table_after(text, "## A") == [["x", "y"], ["a", "1.5"], ["b", "2,000"]]
    assert _numbers("2,000 / 0.5 ms") == [2000.0, 0.5]
    with pytest.raises(AssertionError, match="no heading"):
        _table_after(text, "## B")
