"""Two LoCoMo runs, or two arms of one run, compared on the same questions.

`rms bench locomo` compares every arm with `pipeline` inside one run; this compares arms across
runs, e.g. one store built by `ingest-locomo` and one by `rms ingest` of plain turns, or a lever
that needs its own store. Questions are paired by their key ("conv-26#37"), so both runs must
have asked the same questions.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rms_retrieval.dataflows.bench.locomo_bench import SPLITS, split_sample_ids
from rms_retrieval.dataflows.bench.metrics import paired_comparison
from rms_retrieval.dataflows.locomo import CATEGORY_NAMES


def _rows(results: Mapping[str, Any], arm: str, part: str, where: str) -> dict[str, Mapping[str, Any]]:
    per_question = results.get("relevance", {}).get("per_question", {})
    if arm not in per_question:
        raise ValueError(f"{where} has no arm {arm!r}; it has {', '.join(per_question) or 'none'}")
    return {row["question"]: row for row in per_question[arm].get(part, [])}


def budgets_of(rows: Mapping[str, Mapping[str, Any]]) -> list[int]:
    first = next(iter(rows.values()))
    return sorted(int(name.split("@")[1]) for name in first if name.startswith("all_packed@"))


def _in_split(results: Mapping[str, Any], rows: dict[str, Mapping[str, Any]], split: str,
              where: str) -> dict[str, Mapping[str, Any]]:
    """The rows of the split's conversations; a key is "sample_id#index". A run that asked one
    split already holds only its questions; a run over all conversations is split here."""
    asked = results.get("dataset", {}).get("split", {}).get("name", "all")
    if split == "all" or asked == split:
        return rows
    if asked != "all":
        raise ValueError(f"{where} asked the {asked} split only; it has no {split} questions")
    chosen = set(split_sample_ids({key.split("#")[0] for key in rows}, split))
    return {key: row for key, row in rows.items() if key.split("#")[0] in chosen}


def compare_runs(
    a: Mapping[str, Any], arm_a: str, b: Mapping[str, Any], arm_b: str, part: str = "main", split: str = "all"
) -> dict[str, Any]:
    """a minus b on all-evidence-packed per budget (paired bootstrap), overall and per category,
    on the questions of `split` (of the conversations both runs asked)."""
    rows_a, rows_b = _rows(a, arm_a, part, "run a"), _rows(b, arm_b, part, "run b")
    rows_a, rows_b = _in_split(a, rows_a, split, "run a"), _in_split(b, rows_b, split, "run b")
    if not rows_a:
        raise ValueError(f"run a has no {part} questions for arm {arm_a!r}")
    if set(rows_a) != set(rows_b):
        only = sorted(set(rows_a) ^ set(rows_b))
        raise ValueError(f"the runs asked different questions ({len(only)} unpaired, e.g. {only[0]}); "
                         "run both with the same --split and --limit-questions")
    keys = sorted(rows_a)
    budgets = [budget for budget in budgets_of(rows_a) if budget in budgets_of(rows_b)]
    categories = sorted({int(rows_a[key]["category"]) for key in keys})
    compared: dict[str, Any] = {"n": len(keys), "budgets": {}}
    for budget in budgets:
        metric = f"all_packed@{budget}"
        overall = paired_comparison([rows_a[k][metric] for k in keys], [rows_b[k][metric] for k in keys])
        by_category = {}
        for category in categories:
            chosen = [k for k in keys if int(rows_a[k]["category"]) == category]
            by_category[str(category)] = {
                "n": len(chosen),
                "a": sum(bool(rows_a[k][metric]) for k in chosen) / len(chosen),
                "b": sum(bool(rows_b[k][metric]) for k in chosen) / len(chosen),
            }
        compared["budgets"][str(budget)] = {"overall": asdict(overall), "by_category": by_category}
    return compared


def summary_lines(compared: Mapping[str, Any], label_a: str, label_b: str) -> list[str]:
    lines = [f"{label_a} minus {label_b}, all evidence packed, {compared['n']} questions"]
    for budget, figures in compared["budgets"].items():
        c = figures["overall"]
        lines.append(f"@{budget}: {c['mean_a']:.3f} vs {c['mean_b']:.3f}  {c['difference']:+.3f} "
                     f"[{c['low']:+.3f}, {c['high']:+.3f}]  wins {c['wins']}  losses {c['losses']}  ties {c['ties']}")
        for category, row in figures["by_category"].items():
            name = CATEGORY_NAMES.get(int(category), category)
            lines.append(f"    {category} {name:<12} n={row['n']:<4} {row['a']:.3f} vs {row['b']:.3f}")
    return lines


def register(commands: argparse._SubParsersAction) -> None:
    """Add `bench compare` to the `rms bench` parser."""
    compare = commands.add_parser("compare", help="two results.json files (or two arms) on the same questions")
    compare.add_argument("a", help="results.json of run a")
    compare.add_argument("b", help="results.json of run b")
    compare.add_argument("--arm-a", default="pipeline")
    compare.add_argument("--arm-b", default="pipeline")
    compare.add_argument("--part", choices=("main", "adversarial"), default="main")
    compare.add_argument("--split", choices=SPLITS, default="all",
                         help="compare on the questions of this split only (both runs may have asked more)")
    compare.set_defaults(run=_cmd_compare)


def _load(path: str) -> Mapping[str, Any]:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ValueError(f"{path}: file not found") from exc
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not a results.json ({exc})") from exc


def _cmd_compare(args: argparse.Namespace) -> int:
    compared = compare_runs(_load(args.a), args.arm_a, _load(args.b), args.arm_b, args.part, args.split)
    for line in summary_lines(compared, f"{args.a}:{args.arm_a}", f"{args.b}:{args.arm_b}"):
        print(line)
    return 0
