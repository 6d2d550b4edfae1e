"""LongMemEval-S beside LoCoMo (`rms bench lme`): one namespace per question holding its haystack,
every user and assistant turn one plain TURN memory ("user: ..." / "assistant: ...") dated by its
session, the question asked at its question date.

The measures are LoCoMo's (`locomo_bench.question_metrics`): all answer turns (`has_answer`)
packed at each budget, precision@5 and recall@10 of the ranked pool, by question type.
Abstention questions (ids ending in `_abs`) have no answer turns and are left out, as published
evidence figures do. The tune/confirm split is fixed by a hash of the question id, chosen before
anything was tuned: settings are chosen on tune and proven on confirm.

Stores are written through the public API (`MemoryStore.add`) with precomputed vectors from the
benchmark's vector cache (`caches.VectorCache`), so a re-run embeds nothing it embedded before.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from uuid import UUID, uuid5

from rms_retrieval.dataflows.bench.locomo_bench import LocomoBench
from rms_retrieval.dataflows.bench.arms import ARMS, arm_settings, settings_changes
from rms_retrieval.dataflows.bench.metrics import QuestionOutcome, latency_percentiles, paired_comparison, summarise
from rms_retrieval.stores.analysis.messages import message_turns
from rms_retrieval.stores.models import EpistemicType, MemoryObject, NodeType, is_blank
from rms_retrieval.stores.protocols import CrossEncoder, QueryEncoder

QUESTIONS_FILE = "questions.jsonl"
SESSIONS_FILE = "sessions.jsonl.gz"
LME_SPLITS = ("tune", "confirm", "all")
TARGETS = {"all_packed@4000": {"target": 0.96, "best_published": 0.947},
           "all_packed@8000": {"target": 0.98, "best_published": 0.972}}
_IDS = UUID("0d8f0c52-3a4b-4a51-9b1e-6c0e5f2b7a10")


class LmeFormatError(ValueError):
    """The LongMemEval-S folder is not in the format its README describes."""


@dataclass(frozen=True)
class LmeQuestion:
    """One LongMemEval-S question, shaped as the LoCoMo bench reads a question: its namespace
    (`sample_id`), text, key and category (the question type)."""

    question_id: str
    category: str
    question: str
    question_date: datetime
    haystack: tuple[tuple[str, datetime], ...]

    @property
    def sample_id(self) -> str:
        return f"lme-{self.question_id}"

    @property
    def key(self) -> str:
        return self.question_id

    @property
    def answerable(self) -> bool:
        return not self.question_id.endswith("_abs")

    @property
    def split(self) -> str:
        """tune or confirm, by the first hex digit of sha256(question id): fixed, and about half each."""
        return "tune" if int(hashlib.sha256(self.question_id.encode()).hexdigest()[0], 16) % 2 == 0 else "confirm"


def parse_lme_date(text: str) -> datetime:
    """ "2023/05/30 (Tue) 23:40" as a UTC time."""
    try:
        return datetime.strptime(text.split(" (")[0] + " " + text.rsplit(") ", 1)[1], "%Y/%m/%d %H:%M").replace(
            tzinfo=timezone.utc)
    except (ValueError, IndexError):
        raise LmeFormatError(f"a date must read like '2023/05/30 (Tue) 23:40', got {text!r}") from None


def load_questions(folder: str | Path) -> list[LmeQuestion]:
    """Every question of `folder`/questions.jsonl, in file order."""
    path = Path(folder) / QUESTIONS_FILE
    if not path.is_file():
        raise LmeFormatError(f"{path} does not exist; --data names the longmemeval_s folder (its README explains it)")
    questions = []
    with path.open() as lines:
        for number, line in enumerate(lines, start=1):
            try:
                raw = json.loads(line)
                sessions, dates = raw["haystack_session_ids"], raw["haystack_dates"]
                if len(sessions) != len(dates):
                    raise LmeFormatError(f"{len(sessions)} haystack sessions but {len(dates)} dates")
                questions.append(LmeQuestion(
                    raw["question_id"], raw["question_type"], raw["question"], parse_lme_date(raw["question_date"]),
                    tuple((s, parse_lme_date(d)) for s, d in zip(sessions, dates))))
            except (json.JSONDecodeError, KeyError, TypeError, LmeFormatError) as error:
                raise LmeFormatError(f"{path} line {number}: {error}") from None
    return questions


def load_sessions(folder: str | Path, wanted: Iterable[str]) -> dict[str, list[Mapping]]:
    """The turns of the sessions `wanted`, read from the gzipped sessions file in one pass."""
    needed = set(wanted)
    found: dict[str, list[Mapping]] = {}
    with gzip.open(Path(folder) / SESSIONS_FILE, "rt") as lines:
        for line in lines:
            raw = json.loads(line)
            if raw["session_id"] in needed:
                found[raw["session_id"]] = raw["turns"]
    missing = needed - found.keys()
    if missing:
        raise LmeFormatError(f"{len(missing)} haystack sessions are not in {SESSIONS_FILE} (first {sorted(missing)[0]})")
    return found


def turn_id(question: LmeQuestion, session_id: str, position: int) -> UUID:
    return uuid5(_IDS, f"{question.question_id}/{session_id}/{position}")


# How a haystack is written: `positions` as plain TURNs with their session positions and the role
# in the text ("user: ..."); `plain` the same without positions (placed by arrival); `messages`
# through the message API's write path (`message_turns`, what `add_messages` adds): role in the
# metadata, content exactly as given.
LME_INGEST = ("positions", "plain", "messages")


def question_objects(question: LmeQuestion, sessions: Mapping[str, list[Mapping]],
                     mode: str = "positions") -> list[MemoryObject]:
    """The question's haystack as TURN memories written as `mode` says, a session once even where
    the haystack repeats it."""
    if mode not in LME_INGEST:
        raise ValueError(f"unknown ingest {mode!r}; choose from {', '.join(LME_INGEST)}")
    objects, seen = [], set()
    for session_id, date in question.haystack:
        if session_id in seen:
            continue
        seen.add(session_id)
        turns = [(position, turn) for position, turn in enumerate(sessions[session_id]) if turn["content"].strip()]
        if mode == "messages":
            # The message API refuses a blank message (27 of the data's turns are a zero-width space
            # alone), so an application leaves those out; the other modes keep them behind the role.
            objects += message_turns(question.sample_id, session_id, [
                {"role": turn["role"], "content": turn["content"], "id": turn_id(question, session_id, position),
                 "created_at": date, "source_ref": f"{session_id}:{position}"}
                for position, turn in turns if not is_blank(turn["content"])])
            continue
        objects += [MemoryObject(
            id=turn_id(question, session_id, position), namespace=question.sample_id, node_type=NodeType.TURN,
            content=f"{turn['role']}: {turn['content']}", session_id=session_id,
            session_seq=position if mode == "positions" else None, epistemic_type=EpistemicType.OBSERVED,
            created_at=date, updated_at=date, event_time=date, source_ref=f"{session_id}:{position}",
        ) for position, turn in turns]
    return objects


def answer_ids(question: LmeQuestion, sessions: Mapping[str, list[Mapping]]) -> tuple[UUID, ...]:
    """The turns marked `has_answer` in the question's haystack."""
    ids = {turn_id(question, session_id, position)
           for session_id, _ in question.haystack
           for position, turn in enumerate(sessions[session_id]) if turn.get("has_answer") and turn["content"].strip()}
    return tuple(sorted(ids, key=lambda u: u.int))


def benchmark_questions(questions: Sequence[LmeQuestion], split: str, per_type: int | None) -> list[LmeQuestion]:
    """The answerable questions of `split`, at most `per_type` of each type (the first by question id)."""
    if split not in LME_SPLITS:
        raise ValueError(f"unknown split {split!r}; choose from {', '.join(LME_SPLITS)}")
    chosen = sorted((q for q in questions if q.answerable and (split == "all" or q.split == split)),
                    key=lambda q: (q.category, q.question_id))
    if per_type is None:
        return chosen
    counts: dict[str, int] = {}
    kept = []
    for question in chosen:
        counts[question.category] = counts.get(question.category, 0) + 1
        if counts[question.category] <= per_type:
            kept.append(question)
    return kept


class LmeBench(LocomoBench):
    """The LoCoMo bench's runs and re-packing over LongMemEval-S questions, one namespace each."""

    def __init__(self, store, questions: Sequence[LmeQuestion], answers: Mapping[str, tuple[UUID, ...]],
                 encoder: QueryEncoder, budgets: Sequence[int], *, cross_encoder: CrossEncoder | None = None) -> None:
        super().__init__(store, _NoDataset(), encoder, budgets, cross_encoder=cross_encoder)
        self._reference = {q.sample_id: q.question_date for q in questions}
        self._answers = dict(answers)

    def evidence(self, question: LmeQuestion) -> tuple[UUID, ...]:
        return self._answers[question.question_id]


class _NoDataset:
    conversations: tuple = ()


def ingest(store, questions: Sequence[LmeQuestion], sessions: Mapping[str, list[Mapping]], vectors,
           *, mode: str = "positions", progress: bool = False) -> dict[str, float | int]:
    """Write each question's haystack not yet in `store` as its own namespace (as `mode` says), with cached vectors."""
    present = set(store.snapshot().namespaces())
    added = embedded_before = 0
    for question in questions:
        if question.sample_id in present:
            continue
        objects = question_objects(question, sessions, mode)
        before = vectors.misses
        given = vectors.encode([o.content for o in objects], progress=progress)
        embedded_before += len(objects) - (vectors.misses - before)
        store.add(objects, vectors=given, vector_identity=vectors.identity)
        added += len(objects)
    return {"turns_added": added, "turns_from_cache": embedded_before}



def run_interleaved(
    bench: LocomoBench, questions: Sequence, arms: Sequence[str], *, progress: bool = True,
    checkpoint: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Every arm on every question, question by question (the arms interleaved, so a noisy shared
    machine slows them alike): summaries by question type, paired comparisons with the first arm,
    and each arm's latency per question (p50, p95; the query embedding is made before the arms run).
    `checkpoint` receives the results over the questions done so far after each question."""
    from tqdm import tqdm

    unknown = [arm for arm in arms if arm not in ARMS]
    if unknown:
        raise ValueError(f"unknown arm {', '.join(unknown)}; choose from {', '.join(ARMS)}")
    if not questions:
        raise ValueError("no questions with answer turns to evaluate")
    settings = {arm: arm_settings(arm) for arm in arms}
    outcomes: dict[str, list[QuestionOutcome]] = {arm: [] for arm in arms}
    seconds: dict[str, list[float]] = {arm: [] for arm in arms}
    for question in tqdm(questions, desc="questions", unit="q", disable=not progress):
        bench.embedding(question)
        for arm in arms:
            run = bench.run(question, settings[arm])
            outcomes[arm].append(run.outcome)
            seconds[arm].append(run.seconds)
        if checkpoint is not None:
            checkpoint(_interleaved_results(bench, arms, settings, outcomes, seconds))
    return _interleaved_results(bench, arms, settings, outcomes, seconds)


def _interleaved_results(bench: LocomoBench, arms: Sequence[str], settings: Mapping[str, Any],
                         outcomes: Mapping[str, list[QuestionOutcome]],
                         seconds: Mapping[str, list[float]]) -> dict[str, Any]:
    first = arms[0]
    results: dict[str, Any] = {"arms": {}, "paired": {}, "per_question": {}}
    for arm in arms:
        frame = summarise(outcomes[arm])
        results["arms"][arm] = {
            "settings_fingerprint": settings[arm].fingerprint(),
            "settings_changes": settings_changes(settings[arm]),
            "summary": {str(k): {c: (int(v) if c == "n" else float(v)) for c, v in row.items()}
                        for k, row in frame.to_dict("index").items()},
            "latency_ms": latency_percentiles(seconds[arm]),
            "added_latency_ms": latency_percentiles([max(a - b, 0.0) for a, b in zip(seconds[arm], seconds[first])]),
        }
        results["per_question"][arm] = [{"question": o.question_key, "category": o.category, **dict(o.metrics),
                                         "seconds": s} for o, s in zip(outcomes[arm], seconds[arm])]
        if arm != first:
            results["paired"][arm] = {
                str(b): asdict(paired_comparison([bool(o.metrics[f"all_packed@{b}"]) for o in outcomes[arm]],
                                                 [bool(o.metrics[f"all_packed@{b}"]) for o in outcomes[first]]))
                for b in bench.budgets}
    return results


def interleaved_lines(results: Mapping[str, Any], budgets: Sequence[int]) -> list[str]:
    """The printed table: per arm the headline measures and latency; then each arm against the first."""
    arms = list(results["arms"])
    header = (f"{'arm':<22} {'n':>4} {'P@5':>6} {'R@10':>6} " + " ".join(f"{'packed@' + str(b):>12}" for b in budgets)
              + f" {'p50 ms':>8} {'p95 ms':>8} {'+p50':>7} {'+p95':>7}")
    lines = [header, "-" * len(header)]
    for arm in arms:
        record = results["arms"][arm]
        overall, latency, added = record["summary"]["all"], record["latency_ms"], record["added_latency_ms"]
        lines.append(f"{arm:<22} {overall['n']:>4} {overall['precision@5']:>6.3f} {overall['recall@10']:>6.3f} "
                     + " ".join(f"{overall[f'all_packed@{b}']:>12.3f}" for b in budgets)
                     + f" {latency['p50']:>8.1f} {latency['p95']:>8.1f} {added['p50']:>7.1f} {added['p95']:>7.1f}")
    for arm, by_budget in results["paired"].items():
        for budget, c in by_budget.items():
            lines.append(f"{arm} vs {arms[0]} packed@{budget}: {c['difference']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}]"
                         f"  wins {c['wins']}  losses {c['losses']}")
    types = sorted({k for arm in arms for k in results["arms"][arm]["summary"] if k != "all"})
    for kind in types:
        cells = "  ".join(f"{arm} " + "/".join(f"{results['arms'][arm]['summary'][kind][f'all_packed@{b}']:.3f}"
                                               for b in budgets)
                          for arm in arms if kind in results["arms"][arm]["summary"])
        lines.append(f"  {kind} (n={results['arms'][arms[0]]['summary'][kind]['n']}): {cells}")
    return lines
