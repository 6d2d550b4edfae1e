"""`rms bench answers`: answer-level evaluation on LoCoMo (RFC-0005 Section 9), apart from
retrieval and packing.

For each question of categories 1-4 of the split, each arm retrieves a bundle at the budget, and
a reader model (any OpenAI-compatible chat-completions endpoint) answers from the bundle's
context alone. An answer is scored against LoCoMo's gold answer by token F1 and exact match after
LoCoMo's normalisation (lower case, no punctuation, no articles). The three levels stay apart in
every record: whether all evidence was packed (retrieval and packing), and the answer's F1
(generation), so the F1 of questions whose evidence was packed is reported beside the F1 of those
whose evidence was not. A reader failure is an error, counted and listed, never a zero score.

results.json records the data set (file name, sha256, split, questions), each arm's settings
fingerprint, the reader's identity, the prompt's version and sha256, the budget, the tokens each
bundle used, the categories covered and the errors.
"""

from __future__ import annotations

import hashlib
import re
import string
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rms_retrieval.dataflows.bench.arms import arm_settings
from rms_retrieval.dataflows.bench.locomo_bench import LocomoBench
from rms_retrieval.dataflows.locomo import LocomoQuestion
from rms_retrieval.nodes.bundle import MemoryBundle
from rms_retrieval.stores.protocols import ChatModel

PROMPT_VERSION = "reader-prompt-1"
READER_PROMPT = (
    "You answer a question about past conversations using only the memories given, each dated by the day it "
    "was said. Reply with the answer alone, as short as it can be (a name, a date, a few words). If the "
    "memories do not say, reply: unknown"
)
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalised_tokens(text: str) -> list[str]:
    """LoCoMo's answer normalisation: lower case, punctuation and articles removed, split on space."""
    return _ARTICLES.sub(" ", text.lower().replace(",", "").translate(_PUNCTUATION)).split()


def token_f1(prediction: str, gold: str) -> float:
    """Token-overlap F1 of the normalised answer against the normalised gold answer."""
    predicted, expected = normalised_tokens(prediction), normalised_tokens(gold)
    common = sum((Counter(predicted) & Counter(expected)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(expected)
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str, gold: str) -> bool:
    return normalised_tokens(prediction) == normalised_tokens(gold)


def reader_message(bundle: MemoryBundle, question: str) -> str:
    """The reader's user message: the packed context, the day the question is asked, the question."""
    return (f"Memories:\n{bundle.context}\n\nToday is {bundle.reference_time:%Y-%m-%d}.\n"
            f"Question: {question}")


@dataclass(frozen=True)
class AnswerRecord:
    """One question answered by one arm: the three levels side by side."""

    key: str
    category: int
    gold: str
    answer: str | None
    f1: float | None
    exact: bool | None
    all_evidence_packed: bool
    tokens_used: int
    error: str | None


def answer_question(bench: LocomoBench, question: LocomoQuestion, settings: Any, reader: ChatModel,
                    budget: int) -> AnswerRecord:
    """Retrieve at `budget`, ask the reader, score the answer; a reader failure becomes the record's error."""
    run = bench.run(question, settings)
    bundle = run.bundles[budget]
    packed = bool(run.outcome.metrics[f"all_packed@{budget}"])
    gold = question.answer or ""
    try:
        answer = " ".join(reader.reply(READER_PROMPT, reader_message(bundle, question.question)).split())
    except Exception as exc:  # noqa: BLE001 - any reader failure is recorded as an error, never scored
        return AnswerRecord(question.key, question.category, gold, None, None, None, packed, bundle.tokens_used,
                            f"{type(exc).__name__}: {exc}"[:300])
    return AnswerRecord(question.key, question.category, gold, answer, token_f1(answer, gold),
                        exact_match(answer, gold), packed, bundle.tokens_used, None)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def arm_summary(records: Sequence[AnswerRecord]) -> dict[str, Any]:
    """F1 and exact match over the answered questions, by category and by whether evidence was packed."""
    answered = [r for r in records if r.error is None]

    def f1_of(chosen: Sequence[AnswerRecord]) -> dict[str, Any]:
        return {"n": len(chosen), "f1": _mean([r.f1 for r in chosen])}

    return {
        "questions": len(records), "answered": len(answered), "errors": len(records) - len(answered),
        "f1": _mean([r.f1 for r in answered]), "exact_match": _mean([float(r.exact) for r in answered]),
        "all_evidence_packed": _mean([float(r.all_evidence_packed) for r in records]),
        "f1_evidence_packed": f1_of([r for r in answered if r.all_evidence_packed]),
        "f1_evidence_missing": f1_of([r for r in answered if not r.all_evidence_packed]),
        "by_category": {str(c): f1_of([r for r in answered if r.category == c])
                        for c in sorted({r.category for r in records})},
        "mean_tokens_used": _mean([float(r.tokens_used) for r in records]),
    }


def run_answers(bench: LocomoBench, questions: Sequence[LocomoQuestion], arms: Sequence[str], reader: ChatModel,
                budget: int, progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Every arm on every question, interleaved question by question."""
    settings = {arm: arm_settings(arm) for arm in arms}
    records: dict[str, list[AnswerRecord]] = {arm: [] for arm in arms}
    for done, question in enumerate(questions, start=1):
        for arm in arms:
            records[arm].append(answer_question(bench, question, settings[arm], reader, budget))
        if progress is not None:
            progress(done)
    return {arm: {"configuration_fingerprint": settings[arm].fingerprint(), **arm_summary(records[arm]),
                  "per_question": [asdict(r) for r in records[arm]]} for arm in arms}


def provenance(data: str | Path, split: str, questions: Sequence[LocomoQuestion], reader: ChatModel,
               budget: int) -> dict[str, Any]:
    """What the figures were measured on and with."""
    raw = Path(data).read_bytes()
    return {"benchmark": "LoCoMo answers (rms bench answers)", "dataset": Path(data).name,
            "dataset_sha256": hashlib.sha256(raw).hexdigest(), "split": split,
            "questions": [q.key for q in questions], "categories": sorted({q.category for q in questions}),
            "reader": reader.identity, "prompt_version": PROMPT_VERSION,
            "prompt_sha256": hashlib.sha256(READER_PROMPT.encode()).hexdigest(), "token_budget": budget}


def summary_lines(results: Mapping[str, Any]) -> list[str]:
    """One line per arm."""
    lines = [f"reader {results['reader']}, budget {results['token_budget']}, {len(results['questions'])} questions"]
    for arm, row in results["arms"].items():
        f1 = "n/a" if row["f1"] is None else f"{row['f1']:.3f}"
        lines.append(f"{arm}: F1 {f1}, answered {row['answered']}/{row['questions']}, errors {row['errors']}, "
                     f"all evidence packed {row['all_evidence_packed']:.3f}")
    return lines
