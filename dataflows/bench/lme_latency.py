"""The LongMemEval-S arms of `rms bench latency`: long haystacks beside LoCoMo, in one interleaved block.

On a store `rms bench lme` built (one namespace per question), each LongMemEval-S question runs:

- `lme_pipeline`: `retrieve()` for a bundle of 50, warm (every namespace answered once before timing);
- `lme_after_write`: the same on a writable copy of the store, right after an untimed one-turn add
  to the question's namespace: the first query on a namespace after a write to it, which rebuilds
  that namespace's graph and per-scope values;
- `locomo_pipeline`: the next LoCoMo question in turn, warm, so that LongMemEval-S's p50 is
  compared with LoCoMo's under the same machine load.

The ratios the issue's targets name: `lme_over_locomo_p50` (at most 1.5) and
`lme_after_write_over_quiet` (at most 2, at p50 and p99). A store holds one namespace, and so one
question, per LongMemEval-S question, so the questions are asked in turn until each arm has
`LME_SAMPLES` timings: with 14 questions once each, p99 was the single worst of 14.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rms_retrieval.dataflows.bench.first_query import first_query_line
from rms_retrieval.dataflows.bench.interleaving import (AfterWriteArm, after_change_lines, after_update_block,
                                                       collections_line, interleaved, over_quiet, pipeline_arm)
from rms_retrieval.dataflows.bench.metrics import latency_percentiles
from rms_retrieval.dataflows.bench.speed_bench import BenchQuery
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.protocols import QueryEncoder

DEFAULT_PER_TYPE = 4
LME_SAMPLES = 100


def lme_queries(folder: str | Path, namespaces: Sequence[str], per_type: int = DEFAULT_PER_TYPE,
                split: str = "all") -> list[BenchQuery]:
    """The answerable questions of `split` (at most `per_type` of each type) whose namespace the
    store holds, at their question dates."""
    from rms_retrieval.dataflows.bench.lme_bench import benchmark_questions, load_questions

    held = set(namespaces)
    chosen = [q for q in benchmark_questions(load_questions(folder), split, per_type) if q.sample_id in held]
    if not chosen:
        raise ValueError(f"the LongMemEval-S store holds none of the questions of {folder}; build it with "
                         "`rms bench lme --data ... --store ...` first")
    return [BenchQuery(q.question, (q.sample_id,), q.question_date) for q in chosen]


class _Cycling:
    """An arm that ignores the query it is given and runs the next of its own queries in turn."""

    def __init__(self, run: Callable[[BenchQuery], Any], queries: Sequence[BenchQuery]) -> None:
        self._run, self._queries, self._next = run, list(queries), 0

    def __call__(self, _: BenchQuery) -> Any:
        query = self._queries[self._next % len(self._queries)]
        self._next += 1
        return self._run(query)


def run_lme_latency(store: Any, after_write_store: Any | None, queries: Sequence[BenchQuery],
                    locomo_store: Any, locomo_queries: Sequence[BenchQuery], encoder: QueryEncoder,
                    samples: int = LME_SAMPLES) -> dict[str, Any]:
    """The three arms over `queries`, asked in turn until there are at least `samples` of them,
    every namespace warmed first; percentiles and the target ratios."""
    settings = RetrievalSettings()
    arms: dict[str, Callable[[BenchQuery], Any]] = {
        "lme_pipeline": pipeline_arm(store, encoder, settings),
        "locomo_pipeline": _Cycling(pipeline_arm(locomo_store, encoder, settings), locomo_queries),
    }
    if after_write_store is not None:
        arms["lme_after_write"] = AfterWriteArm(after_write_store, encoder)
    warmup = list({query.namespaces: query for query in queries}.values())
    timed = list(queries) * math.ceil(samples / len(queries))
    timings = interleaved(arms, timed, warmup=warmup)
    table = {name: latency_percentiles(values) for name, values in timings.seconds.items()}
    report: dict[str, Any] = {"questions": len(queries), "asked": len(timed), "namespaces": len(warmup), "arms_ms": table,
                              "full_collections_ms": timings.full_collections_ms,
                              "lme_over_locomo_p50": table["lme_pipeline"]["p50"] / table["locomo_pipeline"]["p50"]}
    if "lme_after_write" in table:
        report["lme_after_write_over_quiet"] = over_quiet(table, "lme_after_write", "lme_pipeline")
        block = report["lme_after_update_ms"] = after_update_block(arms["lme_pipeline"], after_write_store, encoder, timed)
        report["lme_after_update_over_quiet"] = over_quiet(block, "after_update", "quiet")
    return report


def lme_summary_lines(report: dict[str, Any]) -> list[str]:
    lines = [f"LongMemEval-S: {report['questions']} questions over {report['namespaces']} namespaces, "
             f"{report['asked']} timed in turn, arms interleaved"]
    for name, row in report["arms_ms"].items():
        lines.append(f"{name:<20} {row['p50']:>8.1f} {row['p95']:>8.1f} {row['p99']:>8.1f}")
    lines.append(collections_line(report["full_collections_ms"]))
    lines.append(f"LongMemEval-S p50 over LoCoMo's in the same block: {report['lme_over_locomo_p50']:.2f}x (target 1.5x)")
    lines.extend(after_change_lines(report, "lme_after_{change}_over_quiet",
                                    "LongMemEval-S, a question right after a one-turn {change} over the same warm", "2x"))
    if "first_query" in report:
        lines.append(first_query_line("LongMemEval-S", report["first_query"]))
    return lines
