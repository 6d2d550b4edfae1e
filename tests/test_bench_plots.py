"""The benchmark figures are written as PNG files from results-shaped dictionaries."""

from __future__ import annotations

import pytest

from rms_retrieval.dataflows.bench import plots

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _relevance(arms):
    return {"arms": {arm: {"main_summary": {"all": {"all_packed@4000": 0.5 + i / 10, "all_packed@8000": 0.6 + i / 10}}}
                     for i, arm in enumerate(arms)}}


def test_all_packed_by_budget(tmp_path):
    targets = {"all_packed@4000": {"target": 0.9, "best_published": 0.841}}
    path = plots.all_packed_by_budget(_relevance(["pipeline", "vector_only"]), [4000, 8000],
                                      tmp_path / "figs" / "packed.png", targets)
    assert path.read_bytes()[:8] == PNG_MAGIC


def test_latency_by_store_size(tmp_path):
    rows = [{"size": size, "latency": {"pipeline_ms": {"p50": size / 100, "p95": size / 50},
                                       "floor_ms": {"p50": size / 1000}}} for size in (1000, 10000)]
    path = plots.latency_by_store_size({"sizes": rows}, tmp_path / "scale.png")
    assert path.read_bytes()[:8] == PNG_MAGIC


def test_empty_inputs_are_rejected(tmp_path):
    with pytest.raises(ValueError):
        plots.all_packed_by_budget({"arms": {}}, [4000], tmp_path / "a.png")
    with pytest.raises(ValueError):
        plots.latency_by_store_size({"sizes": []}, tmp_path / "b.png")
