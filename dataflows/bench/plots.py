"""Benchmark figures as PNG files (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

PACKED_FIGURE = "all_evidence_packed_by_budget.png"
SCALE_FIGURE = "latency_by_store_size.png"


def all_packed_by_budget(
    relevance: Mapping[str, Any], budgets: Sequence[int], path: str | Path,
    targets: Mapping[str, Mapping[str, float]] | None = None,
) -> Path:
    """Grouped bars: share of questions with all evidence packed, per arm and budget."""
    arms = list(relevance["arms"])
    if not arms:
        raise ValueError("no arms to plot")
    width = 0.8 / len(budgets)
    figure, axes = plt.subplots(figsize=(max(6.0, 1.3 * len(arms) + 2), 4.5))
    for position, budget in enumerate(budgets):
        values = [relevance["arms"][arm]["main_summary"]["all"][f"all_packed@{budget}"] for arm in arms]
        offsets = [i + (position - (len(budgets) - 1) / 2) * width for i in range(len(arms))]
        bars = axes.bar(offsets, values, width, label=f"{budget} tokens")
        axes.bar_label(bars, fmt="%.2f", fontsize=7, padding=1)
    for metric, target in (targets or {}).items():
        budget = metric.split("@")[-1]
        style = "--" if budget == str(budgets[0]) else ":"
        axes.axhline(target["target"], linestyle=style, linewidth=0.9, color="grey",
                     label=f"target @{budget}: {target['target']:.2f}")
    axes.set_xticks(range(len(arms)), arms, rotation=20, ha="right")
    axes.set_ylim(0, 1.1)
    axes.set_ylabel("questions with all evidence packed")
    axes.set_title("LoCoMo categories 1-4: all evidence in the bundle")
    axes.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    return save_figure(figure, path)


def latency_by_store_size(scale: Mapping[str, Any], path: str | Path) -> Path:
    """p50 and p95 of retrieve() (bundle of 50) and the floor's p50, against store size (log-log)."""
    rows = scale["sizes"]
    if not rows:
        raise ValueError("no store sizes to plot")
    sizes = [row["size"] for row in rows]
    figure, axes = plt.subplots(figsize=(6, 4.5))
    axes.plot(sizes, [r["latency"]["pipeline_ms"]["p50"] for r in rows], marker="o", label="retrieve() p50")
    axes.plot(sizes, [r["latency"]["pipeline_ms"]["p95"] for r in rows], marker="o", linestyle="--",
              label="retrieve() p95")
    axes.plot(sizes, [r["latency"]["floor_ms"]["p50"] for r in rows], marker="s",
              label="floor p50 (query vector + exact vector search)")
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("objects in the store")
    axes.set_ylabel("latency (ms)")
    axes.set_title("Latency by store size (bundle of 50 objects)")
    axes.legend(fontsize=8)
    axes.grid(True, which="both", linewidth=0.3)
    figure.tight_layout()
    return save_figure(figure, path)


def save_figure(figure: Any, path: str | Path, metadata: Mapping[str, str] | None = None) -> Path:
    """Write `figure` as a PNG at `path` with `metadata` as text chunks (no version stamp), then close it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120, metadata={"Software": None, **(metadata or {})})
    plt.close(figure)
    return path
