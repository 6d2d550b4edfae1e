"""The LoCoMo relevance benchmark (RFC-0005 Section 13): several retrieval arms over one store.

Per question and arm the pipeline runs once, at the largest token budget. The ranked list that
precision@5, recall@10 and all-in-top-10 read is the `ranked_candidates` node's
`pool.object_ids`: the scored pool after session context, in final order, before selection
and packing. It is what the pipeline believes most relevant, independent of the budget.
"All evidence packed" asks whether every evidence turn is among `bundle.items` at a budget.

Packing is the only stage that reads the token budget, so the smaller budgets re-execute the
driver for `packed_bundle` alone, with its upstream nodes overridden by the values of the first
run: the same function on the same inputs, at a fraction of the cost (`repack_check` in the
results compares it with a full `retrieve()` on some questions). The query embedding is computed
once per question by the pipeline's own `query_embedding` node and passed to every arm that uses
the vector path, for the same reason.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any
from uuid import UUID

from tqdm import tqdm

from rms_retrieval.dataflows.bench.metrics import (
    QuestionOutcome,
    all_in_top_k,
    all_packed,
    paired_comparison,
    precision_at_k,
    recall_at_k,
    summarise,
)
from rms_retrieval.dataflows.locomo import LocomoDataset, LocomoQuestion, evidence_object_ids, questions_for, reference_time
from rms_retrieval.dataflows.bench.arms import ARMS, arm_settings, settings_changes
from rms_retrieval.dataflows.pipeline import FINAL_NODE, build_driver, pipeline_inputs
from rms_retrieval.dataflows.retrieval import retrieve
from rms_retrieval.nodes.query_analysis import query_embedding
from rms_retrieval.nodes.models import QueryEmbedding, RetrievalRequest
from rms_retrieval.nodes.bundle import MemoryBundle
from rms_retrieval.nodes.pools import PathType
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.protocols import CrossEncoder, QueryEncoder

DEFAULT_BUDGETS = (4000, 8000)
BASELINE_ARM = "pipeline"
# Packing reads these upstream nodes and the request; nothing else depends on the budget.
REPACK_NODES = ("ranked_candidates", "selected_candidates", "filtered_candidates", "merged_candidates",
                "query_analysis", "cross_scope_hints")
# The stages before scoring read only these settings (checked: no candidate, filtering or query
# analysis node reads scoring, session or packing), so arms equal in them share a question's
# pool and query analysis, computed once: the re-packing argument, one stage earlier.
POOL_SETTINGS = ("candidates", "filtering", "query_intent_order", "reformulation")
POOL_NODES = ("filtered_candidates", "merged_candidates", "query_analysis")
RANKED_LIST = (
    "ranked_candidates.pool.object_ids: the scored candidate pool after session context, in "
    "final rank order, before selection and token packing"
)
TARGETS = {
    "all_packed@4000": {"target": 0.90, "best_published": 0.841},
    "all_packed@8000": {"target": 0.95, "best_published": 0.898},
}
MAIN_CATEGORIES = (1, 2, 3, 4)
ADVERSARIAL_CATEGORIES = (5,)
SPLITS = ("tune", "confirm", "all")


def evenly_spaced(items: Sequence[Any], limit: int | None) -> list[Any]:
    """At most `limit` items spread evenly over `items` (all of them when `limit` is None)."""
    if limit is None or limit >= len(items):
        return list(items)
    if limit < 1:
        raise ValueError(f"the question limit must be at least 1, got {limit}")
    return [items[(i * len(items)) // limit] for i in range(limit)]


@dataclass(frozen=True)
class QuestionRun:
    """One question answered by one arm at every budget, and how long that took."""

    outcome: QuestionOutcome
    ranked_ids: tuple[UUID, ...]
    bundles: Mapping[int, MemoryBundle]
    seconds: float


class LocomoBench:
    """Answers LoCoMo questions against one store with any arm, re-packing for smaller budgets."""

    def __init__(
        self,
        store: Any,
        dataset: LocomoDataset,
        encoder: QueryEncoder,
        budgets: Sequence[int] = DEFAULT_BUDGETS,
        *,
        share_pools: bool = False,
        cross_encoder: CrossEncoder | None = None,
    ) -> None:
        if not budgets or any(b < 1 for b in budgets):
            raise ValueError(f"budgets must be positive token counts, got {list(budgets)}")
        self.store = store
        self.encoder = encoder
        self.budgets = tuple(sorted(set(budgets)))
        self._reference = {c.sample_id: reference_time(c) for c in dataset.conversations}
        self._embeddings: dict[str, QueryEmbedding] = {}
        self._pools: dict[tuple[str, str], dict[str, Any]] = {}
        self.share_pools = share_pools
        self.cross_encoder = cross_encoder

    def request(self, question: LocomoQuestion, budget: int) -> RetrievalRequest:
        return RetrievalRequest(
            query=question.question,
            namespaces=(question.sample_id,),
            reference_time=self._reference[question.sample_id],
            token_budget=budget,
        )

    def embedding(self, question: LocomoQuestion) -> QueryEmbedding:
        """The query embedding, made once per question text by the pipeline's own node."""
        if question.question not in self._embeddings:
            made = query_embedding(self.request(question, self.budgets[-1]), self.encoder, RetrievalSettings())
            assert made is not None  # the default settings enable the vector path
            self._embeddings[question.question] = made
        return self._embeddings[question.question]

    def run(self, question: LocomoQuestion, settings: RetrievalSettings) -> QuestionRun:
        """Retrieve once at the largest budget, re-pack for the others, and score the question."""
        started = time.perf_counter()
        largest = self.budgets[-1]
        overrides = {}
        if PathType.VECTOR in settings.candidates.enabled_paths:
            overrides["query_embedding"] = self.embedding(question)
        pool_key = (question.key, pool_fingerprint(settings))
        if self.share_pools and pool_key in self._pools:
            overrides.update(self._pools[pool_key])
        result = retrieve(
            self.store, question.question, namespaces=[question.sample_id],
            reference_time=self._reference[question.sample_id], token_budget=largest, settings=settings,
            encoder=self.encoder, cross_encoder=self.cross_encoder, extra_nodes=REPACK_NODES, overrides=overrides,
            log=False,
        )
        if self.share_pools:
            self._pools.setdefault(pool_key, {name: result.nodes[name] for name in POOL_NODES})
        bundles = {largest: result.bundle}
        upstream = {name: result.nodes[name] for name in REPACK_NODES}
        for budget in self.budgets[:-1]:
            bundles[budget] = self.repack(question, settings, budget, upstream)
        seconds = time.perf_counter() - started
        ranked = result.nodes["ranked_candidates"].pool.object_ids
        outcome = QuestionOutcome(question.key, question.category,
                                  question_metrics(self.evidence(question), ranked, bundles))
        return QuestionRun(outcome, ranked, bundles, seconds)

    def evidence(self, question: LocomoQuestion) -> tuple[UUID, ...]:
        """The objects that hold the question's evidence."""
        return evidence_object_ids(question)

    def repack(
        self, question: LocomoQuestion, settings: RetrievalSettings, budget: int, upstream: Mapping[str, Any]
    ) -> MemoryBundle:
        """`packed_bundle` at `budget`, its upstream nodes given (they do not read the budget)."""
        inputs = pipeline_inputs(self.store, self.request(question, budget), settings, self.encoder, self.cross_encoder)
        return build_driver(settings).execute([FINAL_NODE], inputs=inputs, overrides=dict(upstream))[FINAL_NODE]


def pool_fingerprint(settings: RetrievalSettings) -> str:
    """What the stages before scoring read of `settings`: equal strings, equal filtered pools. Only
    fields off their defaults count, so an arm's settings class with extra fields at their
    defaults shares the product's pools."""
    dumped = settings.model_dump(mode="json", exclude_defaults=True)
    return json.dumps({name: dumped.get(name) for name in POOL_SETTINGS}, sort_keys=True)


def shared_pool_check(bench: LocomoBench, questions: Sequence[LocomoQuestion], settings: RetrievalSettings) -> dict:
    """Bundles built on a shared pool against full `retrieve()` calls at the largest budget."""
    compared, different = 0, []
    for question in questions:
        shared = bench.run(question, settings).bundles[bench.budgets[-1]]
        direct = retrieve(
            bench.store, question.question, namespaces=[question.sample_id],
            reference_time=bench.request(question, bench.budgets[-1]).reference_time,
            token_budget=bench.budgets[-1], settings=settings, encoder=bench.encoder,
            cross_encoder=bench.cross_encoder, log=False,
        ).bundle
        compared += 1
        if direct.to_json() != shared.to_json():
            different.append(question.key)
    return {"compared": compared, "identical": compared - len(different), "different": different}


def question_metrics(
    evidence: Sequence[UUID], ranked_ids: Sequence[UUID], bundles: Mapping[int, MemoryBundle]
) -> dict[str, float | bool]:
    """precision@5, recall@10, all-in-top-10, evidence anywhere in the pool, and per budget packed."""
    metrics: dict[str, float | bool] = {
        "precision@5": precision_at_k(ranked_ids, evidence, 5),
        "recall@10": recall_at_k(ranked_ids, evidence, 10),
        "all_in_top10": all_in_top_k(ranked_ids, evidence, 10),
        "all_in_pool": all_packed(ranked_ids, evidence),
    }
    for budget in sorted(bundles):
        metrics[f"all_packed@{budget}"] = all_packed((item.id for item in bundles[budget].items), evidence)
    for budget in sorted(bundles):
        metrics[f"items@{budget}"] = float(len(bundles[budget].items))
    return metrics


def repack_check(bench: LocomoBench, questions: Sequence[LocomoQuestion], settings: RetrievalSettings) -> dict:
    """Re-packed bundles against full `retrieve()` calls at the smaller budgets: must be identical."""
    compared, different = 0, []
    for question in questions:
        run = bench.run(question, settings)
        for budget in bench.budgets[:-1]:
            direct = retrieve(
                bench.store, question.question, namespaces=[question.sample_id],
                reference_time=bench.request(question, budget).reference_time, token_budget=budget,
                settings=settings, encoder=bench.encoder, cross_encoder=bench.cross_encoder, log=False,
            ).bundle
            compared += 1
            if direct.to_json() != run.bundles[budget].to_json():
                different.append(f"{question.key}@{budget}")
    return {"compared": compared, "identical": compared - len(different), "different": different}


def split_sample_ids(sample_ids: Iterable[str], split: str) -> list[str]:
    """The conversations of `split`, by conversation: in sorted sample-id order the 1st, 3rd,
    5th, ... are "tune" and the others "confirm"; "all" is every one.

    Fixed before any setting was tuned: settings are chosen on "tune" and proven on "confirm".
    On LoCoMo, tune is conv-26, 41, 43, 47, 49 (786 questions of categories 1-4) and confirm is
    conv-30, 42, 44, 48, 50 (750).
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose from {', '.join(SPLITS)}")
    ordered = sorted(set(sample_ids))
    if split == "all":
        return ordered
    return ordered[0 if split == "tune" else 1 :: 2]


def benchmark_questions(
    dataset: LocomoDataset, limit: int | None = None, split: str = "all"
) -> dict[str, list[LocomoQuestion]]:
    """Categories 1-4 and category 5 of the split's conversations, each with resolvable
    evidence, optionally thinned evenly."""
    chosen = set(split_sample_ids((c.sample_id for c in dataset.conversations), split))

    def of(categories: Sequence[int]) -> list[LocomoQuestion]:
        return evenly_spaced([q for q in questions_for(dataset, categories) if q.sample_id in chosen], limit)

    return {"main": of(MAIN_CATEGORIES), "adversarial": of(ADVERSARIAL_CATEGORIES)}


def _table(outcomes: Sequence[QuestionOutcome]) -> dict[str, dict[str, float]]:
    frame = summarise(outcomes)
    return {str(index): {k: (int(v) if k == "n" else float(v)) for k, v in row.items()}
            for index, row in frame.to_dict("index").items()}


def run_relevance(
    bench: LocomoBench,
    questions: Mapping[str, Sequence[LocomoQuestion]],
    arms: Sequence[str],
    *,
    progress: bool = True,
    repack_check_questions: int = 10,
    checkpoint: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Every arm on every question; summaries by category, paired comparisons, timings.

    `checkpoint` receives the results so far after each arm, so a long run keeps what it finished.
    """
    unknown = [arm for arm in arms if arm not in ARMS]
    if unknown:
        raise ValueError(f"unknown arm {', '.join(unknown)}; choose from {', '.join(ARMS)}")
    if not questions["main"]:
        raise ValueError("no questions with resolvable evidence to evaluate")
    results: dict[str, Any] = {"arms": {}, "per_question": {}}
    packed_by_arm: dict[str, dict[int, list[bool]]] = {}
    for arm in arms:
        settings = arm_settings(arm)
        started = time.perf_counter()
        record: dict[str, Any] = {
            "settings_fingerprint": settings.fingerprint(),
            "settings_changes": settings_changes(settings),
        }
        for part, part_questions in questions.items():
            outcomes, seconds = [], 0.0
            for question in tqdm(part_questions, desc=f"{arm} ({part})", unit="q", disable=not progress):
                run = bench.run(question, settings)  # bundles are dropped here: thousands would fill memory
                outcomes.append(run.outcome)
                seconds += run.seconds
            if not outcomes:
                continue
            record[f"{part}_summary"] = _table(outcomes)
            record[f"{part}_seconds_per_question"] = seconds / len(outcomes)
            results["per_question"].setdefault(arm, {})[part] = [
                {"question": o.question_key, "category": o.category, **dict(o.metrics)} for o in outcomes
            ]
            if part == "main":
                packed_by_arm[arm] = {b: [bool(o.metrics[f"all_packed@{b}"]) for o in outcomes] for b in bench.budgets}
        record["seconds"] = time.perf_counter() - started
        results["arms"][arm] = record
        results["paired"] = paired_against_baseline(packed_by_arm)
        if checkpoint is not None:
            checkpoint(results)
    if repack_check_questions and len(bench.budgets) > 1:
        sample = evenly_spaced(questions["main"], repack_check_questions)
        results["repack_check"] = repack_check(bench, sample, arm_settings(arms[0]))
    if repack_check_questions and bench.share_pools:
        sample = evenly_spaced(questions["main"], repack_check_questions)
        results["shared_pool_check"] = shared_pool_check(bench, sample, arm_settings(arms[-1]))
    return results


def paired_against_baseline(packed_by_arm: Mapping[str, Mapping[int, Sequence[bool]]]) -> dict[str, Any]:
    """`pipeline` against every other arm on all-evidence-packed, per budget (a - b = pipeline - arm)."""
    if BASELINE_ARM not in packed_by_arm:
        return {}
    baseline = packed_by_arm[BASELINE_ARM]
    return {
        arm: {str(budget): asdict(paired_comparison(baseline[budget], values[budget])) for budget in baseline}
        for arm, values in packed_by_arm.items()
        if arm != BASELINE_ARM
    }


def summary_lines(relevance: Mapping[str, Any], budgets: Sequence[int]) -> list[str]:
    """The printed table: overall metrics per arm, targets beside them, then the paired comparisons."""
    packed = [f"packed@{b}" for b in budgets]
    header = f"{'arm':<16} {'n':>5} {'P@5':>6} {'R@10':>6} {'all@10':>7} {'inpool':>7} " + " ".join(
        f"{name:>12}" for name in packed) + f" {'adv.packed@' + str(budgets[-1]):>16} {'s/q':>6}"
    lines = [header, "-" * len(header)]
    for arm, record in relevance["arms"].items():
        overall = record["main_summary"]["all"]
        adversarial = record.get("adversarial_summary", {}).get("all", {})
        cells = " ".join(f"{overall[f'all_packed@{b}']:>12.3f}" for b in budgets)
        adv = adversarial.get(f"all_packed@{budgets[-1]}")
        lines.append(
            f"{arm:<16} {overall['n']:>5} {overall['precision@5']:>6.3f} {overall['recall@10']:>6.3f} "
            f"{overall['all_in_top10']:>7.3f} {overall['all_in_pool']:>7.3f} {cells} "
            f"{(f'{adv:.3f}' if adv is not None else '-'):>16} {record['main_seconds_per_question']:>6.2f}"
        )
    for metric, target in TARGETS.items():
        lines.append(f"target {metric}: >= {target['target']:.2f}   best published: {target['best_published']:.3f}")
    for arm, by_budget in relevance.get("paired", {}).items():
        for budget, c in by_budget.items():
            lines.append(
                f"pipeline vs {arm:<16} packed@{budget:<5}: {c['difference']:+.3f} "
                f"[{c['low']:+.3f}, {c['high']:+.3f}]  wins {c['wins']}  losses {c['losses']}  ties {c['ties']}"
            )
    return lines
