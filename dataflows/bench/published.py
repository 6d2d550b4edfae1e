"""`rms bench plot`: BENCHMARKS.md's quality picture, drawn from its committed data file.

The figures are BENCHMARKS.md's own (docs/bench/quality_by_budget.json); the picture records
the SHA-256 of the data it was drawn from, so a test can tell when the two part.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

DEFAULT_DATA = Path("docs/bench/quality_by_budget.json")
DEFAULT_FIGURE = Path("docs/bench/quality_by_budget.png")
DATA_HASH_KEY = "rms-data-sha256"
# One look per kind of series, so ours, the published mark, the peer and the baselines read apart.
_STYLE = {
    "ours": {"linewidth": 2.2, "marker": "o"},
    "published": {"linewidth": 1.6, "marker": "D", "color": "black"},
    "peer": {"linewidth": 1.4, "marker": "s"},
    "baseline": {"linewidth": 1.0, "marker": ".", "linestyle": "--"},
}


class Series(BaseModel):
    """One line of the picture: a share of questions per budget (None where not measured)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(min_length=1)
    kind: Literal["ours", "published", "peer", "baseline"]
    values: tuple[float | None, ...]

    @model_validator(mode="after")
    def _shares(self) -> Series:
        if any(v is not None and not 0.0 <= v <= 1.0 for v in self.values):
            raise ValueError(f"series {self.name!r}: every value must be a share between 0 and 1")
        if all(v is None for v in self.values):
            raise ValueError(f"series {self.name!r}: has no value at any budget")
        return self


class QualityByBudget(BaseModel):
    """The data file: budgets, the series measured at them and the targets per budget."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    what: str = Field(min_length=1)
    source: str = Field(min_length=1)
    budgets: tuple[int, ...] = Field(min_length=1)
    series: tuple[Series, ...] = Field(min_length=1)
    targets: tuple[float, ...]

    @model_validator(mode="after")
    def _aligned(self) -> QualityByBudget:
        width = len(self.budgets)
        for series in self.series:
            if len(series.values) != width:
                raise ValueError(f"series {series.name!r} has {len(series.values)} values for {width} budgets; "
                                 "give one per budget (null where not measured)")
        if len(self.targets) != width:
            raise ValueError(f"targets has {len(self.targets)} values for {width} budgets; give one per budget")
        names = [s.name for s in self.series]
        if len(set(names)) != len(names):
            raise ValueError("series names must be unique")
        return self

    def values_of(self, name: str) -> tuple[float | None, ...]:
        """The values of the series called `name`."""
        for series in self.series:
            if series.name == name:
                return series.values
        raise KeyError(f"no series {name!r}; the data file holds {', '.join(s.name for s in self.series)}")


def load_quality_by_budget(path: str | Path) -> QualityByBudget:
    """The validated data file at `path`."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not JSON ({error.msg} at line {error.lineno}); fix the file") from None
    return QualityByBudget.model_validate(raw)


def data_sha256(path: str | Path) -> str:
    """SHA-256 of the data file's bytes: what the picture records it was drawn from."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def quality_by_budget_figure(data_path: str | Path, figure_path: str | Path) -> Path:
    """Draw the data file at `data_path` as a PNG at `figure_path`, recording the data's SHA-256."""
    from rms_retrieval.dataflows.bench.plots import plt, save_figure

    figures = load_quality_by_budget(data_path)
    figure, axes = plt.subplots(figsize=(9.0, 4.8))
    budgets = list(figures.budgets)
    for series in figures.series:
        points = [(b, v) for b, v in zip(budgets, series.values) if v is not None]
        xs, ys = zip(*points)
        (line,) = axes.plot(xs, ys, label=series.name, **_STYLE[series.kind])
        for x, y in points if series.kind != "baseline" else ():  # the baselines' values sit too close to label
            axes.annotate(f"{y:.3f}", (x, y), textcoords="offset points", xytext=(6, -3), fontsize=7,
                          color=line.get_color())
    axes.plot(budgets, figures.targets, color="grey", linestyle=":", linewidth=1.0, label="target")
    axes.set_xticks(budgets, [f"{b:,}" for b in budgets])
    margin = 0.25 * (budgets[-1] - budgets[0] or 4000)
    axes.set_xlim(budgets[0] - margin, budgets[-1] + margin)
    axes.set_ylim(0.65, 1.0)
    axes.set_xlabel("token budget (cl100k tokens)")
    axes.set_ylabel("questions with all evidence packed")
    axes.set_title("LoCoMo categories 1-4: all evidence in the bundle", fontsize=10)
    axes.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=7)
    axes.grid(True, linewidth=0.3)
    figure.tight_layout()
    return save_figure(figure, figure_path, metadata={DATA_HASH_KEY: data_sha256(data_path)})


def register(commands: argparse._SubParsersAction) -> None:
    """Add `bench plot` under `rms bench`."""
    parser = commands.add_parser("plot", help="draw BENCHMARKS.md's quality picture from its data file")
    parser.add_argument("--data", default=str(DEFAULT_DATA), help=f"the data file (default {DEFAULT_DATA})")
    parser.add_argument("--out", default=str(DEFAULT_FIGURE), help=f"the PNG to write (default {DEFAULT_FIGURE})")
    parser.set_defaults(run=_cmd_plot)


def _cmd_plot(args: argparse.Namespace) -> int:
    path = quality_by_budget_figure(args.data, args.out)
    print(f"wrote {path}")
    return 0
