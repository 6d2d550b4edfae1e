"""`rms bench identical`: record the bundles of a fixed LoCoMo sample, or check today's against them.

A change to the hot path must not change a single byte of any bundle. The sample is every
conversation's questions, thinned evenly, answered by the default pipeline at two budgets and by
a few variants (the weighted formula, request-side selection, graph fused as a ranked list, the
plain format with score order) that reach the code paths the default leaves cold. Each answer
is one JSON line holding the question key, the variant, the budget and `bundle.to_json()`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rms_retrieval.dataflows.bench.arm_settings import ArmSettings
from rms_retrieval.dataflows.bench.locomo_bench import benchmark_questions, evenly_spaced
from rms_retrieval.dataflows.locomo import LocomoDataset, LocomoQuestion, reference_time
from rms_retrieval.dataflows.retrieval import retrieve
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.protocols import QueryEncoder

DEFAULT_QUESTIONS = 300
DEFAULT_BUDGETS = (4000, 8000)
# Every third question of the sample runs the variants: enough to reach their code, a third of the time.
VARIANT_STRIDE = 3


def _settings(kind: type[RetrievalSettings] = RetrievalSettings, **scoring: Any) -> Callable[[], RetrievalSettings]:
    def build() -> RetrievalSettings:
        base = kind().model_dump()
        for key, value in scoring.items():
            section, name = key.split("__", 1)
            target = base[section]
            *parents, leaf = name.split("__")
            for parent in parents:
                target = target[parent]
            target[leaf] = value
        return kind.model_validate(base)

    return build


@dataclass(frozen=True)
class Variant:
    """Settings and request options one variant answers with, and the budgets it runs at."""

    settings: Callable[[], RetrievalSettings]
    options: Mapping[str, Any]
    budgets: tuple[int, ...]
    every: int


SELECTION = {"min_score": 0.3, "max_per_source": 1, "limit": 25}
VARIANTS: Mapping[str, Variant] = {
    "pipeline": Variant(_settings(), {}, DEFAULT_BUDGETS, 1),
    "weighted": Variant(_settings(scoring__fusion="weighted"), {}, (4000,), VARIANT_STRIDE),
    "selection": Variant(_settings(), SELECTION, (4000,), VARIANT_STRIDE),
    "weighted_selection": Variant(_settings(scoring__fusion="weighted"), SELECTION, (4000,), VARIANT_STRIDE),
    "graph_ranked": Variant(_settings(scoring__rank_fusion__graph_as_ranked_list=True), {}, (4000,), VARIANT_STRIDE),
    "plain_score_order": Variant(
        _settings(ArmSettings, packing__item_format="plain", packing__tier_order="score"), {}, (4000,), VARIANT_STRIDE
    ),
}


def sample_questions(dataset: LocomoDataset, count: int = DEFAULT_QUESTIONS) -> list[LocomoQuestion]:
    """`count` evenly spaced questions of categories 1-4, then a sixth as many adversarial ones."""
    parts = benchmark_questions(dataset)
    return evenly_spaced(parts["main"], count) + evenly_spaced(parts["adversarial"], max(count // 6, 1))


def bundles(
    store: Any, dataset: LocomoDataset, encoder: QueryEncoder, count: int = DEFAULT_QUESTIONS
) -> Iterator[dict[str, Any]]:
    """One record per question, variant and budget, in a fixed order."""
    when = {c.sample_id: reference_time(c) for c in dataset.conversations}
    questions = sample_questions(dataset, count)
    for name, variant in VARIANTS.items():
        settings = variant.settings()
        for question in questions[::variant.every]:
            for budget in variant.budgets:
                result = retrieve(
                    store, question.question, namespaces=[question.sample_id], reference_time=when[question.sample_id],
                    token_budget=budget, settings=settings, encoder=encoder, log=False, **variant.options,
                )
                yield {"key": question.key, "variant": name, "budget": budget, "bundle": result.bundle.to_json()}


def _record_key(record: Mapping[str, Any]) -> tuple[str, str, int]:
    return record["key"], record["variant"], int(record["budget"])


def compare(baseline: Sequence[Mapping[str, Any]], current: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Which (question, variant, budget) bundles differ, are missing or are new."""
    old = {_record_key(r): r["bundle"] for r in baseline}
    new = {_record_key(r): r["bundle"] for r in current}
    different = sorted(k for k in old.keys() & new.keys() if old[k] != new[k])
    return {
        "compared": len(old.keys() & new.keys()),
        "identical": len(old.keys() & new.keys()) - len(different),
        "different": [list(k) for k in different],
        "missing": [list(k) for k in sorted(old.keys() - new.keys())],
        "new": [list(k) for k in sorted(new.keys() - old.keys())],
    }


def first_difference(old: str, new: str, context: int = 60) -> str:
    """Where two bundle JSON strings first part, with some text either side."""
    at = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
    start = max(at - context, 0)
    return f"at {at}: baseline ...{old[start:at + context]!r} / now ...{new[start:at + context]!r}"


def register(commands: argparse._SubParsersAction) -> None:
    """Add `bench identical` under `rms bench`."""
    parser = commands.add_parser("identical", help="record, or check against, the bundles of a fixed LoCoMo sample")
    parser.add_argument("--data", required=True, help="the LoCoMo JSON file (locomo10.json)")
    parser.add_argument("--store", required=True, help="a LoCoMo store built by `rms ingest-locomo`")
    parser.add_argument("--baseline", required=True, help="the JSON-lines file of recorded bundles")
    parser.add_argument("--record", action="store_true", help="write the baseline instead of checking against it")
    parser.add_argument("--questions", type=int, default=DEFAULT_QUESTIONS,
                        help=f"questions of categories 1-4 in the sample (default {DEFAULT_QUESTIONS})")
    parser.set_defaults(run=_cmd_identical)


def _cmd_identical(args: argparse.Namespace) -> int:
    from rms_retrieval.dataflows.locomo import load_locomo
    from rms_retrieval.stores.providers.onnx_encoder import default_encoder
    from rms_retrieval.stores.memory_store import MemoryStore

    if args.questions < 1:
        raise ValueError(f"--questions must be positive, got {args.questions}")
    dataset = load_locomo(args.data)
    path = Path(args.baseline)
    with MemoryStore.open(args.store, read_only=True) as store:
        current = list(bundles(store, dataset, default_encoder(), args.questions))
    if args.record:
        path.write_text("".join(json.dumps(r) + "\n" for r in current), encoding="utf-8")
        print(f"recorded {len(current)} bundles in {path}")
        return 0
    if not path.exists():
        raise ValueError(f"no baseline at {path}; record one first with --record")
    baseline = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    report = compare(baseline, current)
    print(f"{report['identical']} of {report['compared']} bundles identical; "
          f"{len(report['different'])} different, {len(report['missing'])} missing, {len(report['new'])} new")
    old = {_record_key(r): r["bundle"] for r in baseline}
    for record in current:
        key = _record_key(record)
        if list(key) in report["different"][:5]:
            print(f"  {key}: {first_difference(old[key], record['bundle'])}")
    return 0 if not report["different"] and not report["missing"] and not report["new"] else 1
