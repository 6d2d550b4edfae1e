"""`rms bench lme` (LongMemEval-S) and `rms bench policies` (LoCoMo): arms run question by
question, interleaved, with all evidence packed by budget and type, P@5, R@10 and latency.
`rms bench answers` (LoCoMo): the same questions answered by a reader model from each arm's
bundle, scored by token F1 (`answers_bench.py`).

Each writes results.json in --out and print the table. Reranking arms share one cross-encoder
whose scores are remembered per (question, record) for the run (`caches.ScoreCache`), so only the
first reranking arm of a question runs the model: its added latency is the model's cost.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

DEFAULT_LME_ARMS = ("pipeline", "first_person_score_order", "pronouns_score_order", "first_person_score_order_balanced",
                    "rerank_anchored_50", "rerank_envelope_50", "rerank_legacy_50", "speaker_off", "lists_150",
                    "tier_depth_off")
DEFAULT_LOCOMO_ARMS = ("pipeline", "rerank_anchored_50", "rerank_envelope_50", "rerank_legacy_50",
                       "rerank_envelope_50_w0", "rerank_anchored_50_w0")


def register(commands: argparse._SubParsersAction) -> None:
    """Add `bench lme` and `bench policies` under `rms bench`."""
    from rms_retrieval.dataflows.bench.lme_bench import LME_INGEST, LME_SPLITS
    from rms_retrieval.dataflows.bench.locomo_bench import SPLITS
    from rms_retrieval.dataflows.bench.arms import ARMS

    lme = commands.add_parser("lme", help="LongMemEval-S: one namespace per question, arms interleaved")
    lme.add_argument("--data", required=True, help="the longmemeval_s folder (questions.jsonl, sessions.jsonl.gz)")
    lme.add_argument("--store", required=True, help="store directory; questions not in it yet are added")
    lme.add_argument("--vector-cache", required=True, help="directory of the vector cache (keyed by model and text)")
    lme.add_argument("--split", choices=LME_SPLITS, default="tune")
    lme.add_argument("--per-type", type=int, help="at most N questions of each type (the first by question id)")
    lme.add_argument("--ingest", choices=LME_INGEST, default="positions",
                     help="how an empty --store is written: positions (plain TURNs with session positions, the "
                          "role in the text), plain (the same without positions) or messages (the message API's "
                          "path: role in the metadata, content as given)")
    _common(lme, ARMS, DEFAULT_LME_ARMS)
    lme.set_defaults(run=_cmd_lme)

    policies = commands.add_parser("policies", help="LoCoMo: arms interleaved question by question, with latency")
    policies.add_argument("--data", required=True, help="the LoCoMo JSON file (locomo10.json)")
    policies.add_argument("--store", required=True, help="a LoCoMo store built by `rms ingest-locomo`")
    policies.add_argument("--split", choices=SPLITS, default="tune")
    policies.add_argument("--limit-questions", type=int, help="N evenly spaced questions of categories 1-4")
    _common(policies, ARMS, DEFAULT_LOCOMO_ARMS)
    policies.set_defaults(run=_cmd_policies)

    answers = commands.add_parser("answers", help="LoCoMo: a reader model answers from each arm's bundle; token F1")
    answers.add_argument("--data", required=True, help="the LoCoMo JSON file (locomo10.json)")
    answers.add_argument("--store", required=True, help="a LoCoMo store built by `rms ingest-locomo`")
    answers.add_argument("--split", choices=SPLITS, default="tune")
    answers.add_argument("--limit-questions", type=int, help="N evenly spaced questions of categories 1-4")
    answers.add_argument("--out", required=True, help="directory for results.json")
    answers.add_argument("--arms", nargs="+", choices=list(ARMS), default=["pipeline"], metavar="ARM",
                         help="arms, interleaved question by question (default pipeline)")
    answers.add_argument("--budget", type=int, default=4000, metavar="TOKENS", help="the bundle's token budget (4000)")
    answers.add_argument("--url", help="the reader's chat-completions endpoint (default $RMS_READER_URL)")
    answers.add_argument("--model", help="the reader model (default $RMS_READER_MODEL; key from $RMS_READER_API_KEY)")
    answers.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for one answer (60)")
    answers.add_argument("--score-cache", help="directory keeping the cross-encoder's scores (as for bench lme)")
    answers.add_argument("--no-progress", action="store_true")
    answers.set_defaults(run=_cmd_answers)


def _common(parser: argparse.ArgumentParser, arms: Any, default: tuple[str, ...]) -> None:
    parser.add_argument("--out", required=True, help="directory for results.json")
    parser.add_argument("--score-cache", help="directory keeping the cross-encoder's scores by model, question and "
                                              "text, so a later run of reranking arms reuses them")
    parser.add_argument("--arms", nargs="+", choices=list(arms), default=list(default), metavar="ARM",
                        help=f"arms, the first is the baseline (default {' '.join(default)})")
    parser.add_argument("--budgets", nargs="+", type=int, default=[4000, 8000], metavar="TOKENS")
    parser.add_argument("--no-progress", action="store_true")


def _cross_encoder(arms: list[str], directory: str | None = None):
    from rms_retrieval.dataflows.bench.caches import ScoreCache
    from rms_retrieval.dataflows.bench.arms import arm_settings
    from rms_retrieval.stores.providers.cross_encoder import default_cross_encoder

    return ScoreCache(default_cross_encoder(), directory) if any(arm_settings(a).rerank.enabled for a in arms) else None


def _write(args: argparse.Namespace, results: dict[str, Any]) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str), encoding="utf-8")


def _checkpoint(args: argparse.Namespace, results: dict[str, Any]):
    """Writes results.json with the questions done so far, marked partial: a long run keeps what it did."""
    def write(relevance: dict[str, Any]) -> None:
        _write(args, {**results, "status": "partial", "relevance": relevance})

    return write


def _finish(args: argparse.Namespace, results: dict[str, Any], budgets: list[int]) -> int:
    from rms_retrieval.dataflows.bench.machine import machine_info
    from rms_retrieval.dataflows.bench.lme_bench import interleaved_lines

    results["machine"] = machine_info()
    results["status"] = "complete"
    _write(args, results)
    out = Path(args.out)
    for line in interleaved_lines(results["relevance"], budgets):
        print(line)
    print(f"wrote {out / 'results.json'}")
    return 0


def _cmd_lme(args: argparse.Namespace) -> int:
    from rms_retrieval.dataflows.bench import lme_bench
    from rms_retrieval.dataflows.bench.caches import VectorCache
    from rms_retrieval.stores.memory_store import MemoryStore
    from rms_retrieval.stores.providers.onnx_encoder import default_encoder

    started = time.perf_counter()
    questions = lme_bench.benchmark_questions(lme_bench.load_questions(args.data), args.split, args.per_type)
    sessions = lme_bench.load_sessions(args.data, {s for q in questions for s, _ in q.haystack})
    answers = {q.question_id: lme_bench.answer_ids(q, sessions) for q in questions}
    questions = [q for q in questions if answers[q.question_id]]
    # The ONNX runtime over the same weights carries the same embedding identity (stores/providers/onnx_encoder.py)
    # and embeds one text per run, without padding: several times faster than a batch here.
    vectors = VectorCache(args.vector_cache, default_encoder())
    with MemoryStore.open(args.store, encoder=vectors) as store:
        ingest = lme_bench.ingest(store, questions, sessions, vectors, mode=args.ingest, progress=not args.no_progress)
    budgets = sorted(set(args.budgets))
    with MemoryStore.open(args.store, read_only=True) as store:
        bench = lme_bench.LmeBench(store, questions, answers, default_encoder(), budgets,
                                   cross_encoder=_cross_encoder(args.arms, args.score_cache))
        results = {"benchmark": "LongMemEval-S (rms bench lme)", "split": args.split, "per_type": args.per_type,
                   "ingest_mode": args.ingest,
                   "questions": [q.question_id for q in questions], "ingest": ingest, "vector_cache_size": len(vectors),
                   "targets": lme_bench.TARGETS}
        results["relevance"] = lme_bench.run_interleaved(bench, questions, args.arms, progress=not args.no_progress,
                                                         checkpoint=_checkpoint(args, results))
    results["seconds"] = time.perf_counter() - started
    return _finish(args, results, budgets)


def _cmd_policies(args: argparse.Namespace) -> int:
    from rms_retrieval.dataflows.bench import lme_bench, locomo_bench
    from rms_retrieval.dataflows.locomo import load_locomo
    from rms_retrieval.stores.memory_store import MemoryStore
    from rms_retrieval.stores.providers.onnx_encoder import default_encoder

    started = time.perf_counter()
    dataset = load_locomo(args.data)
    questions = locomo_bench.benchmark_questions(dataset, args.limit_questions, args.split)["main"]
    budgets = sorted(set(args.budgets))
    with MemoryStore.open(args.store, read_only=True) as store:
        bench = locomo_bench.LocomoBench(store, dataset, default_encoder(), budgets,
                                         cross_encoder=_cross_encoder(args.arms, args.score_cache))
        results = {"benchmark": "LoCoMo, arms interleaved (rms bench policies)", "split": args.split,
                   "limit_questions": args.limit_questions, "targets": locomo_bench.TARGETS}
        results["relevance"] = lme_bench.run_interleaved(bench, questions, args.arms, progress=not args.no_progress,
                                                         checkpoint=_checkpoint(args, results))
    results["seconds"] = time.perf_counter() - started
    return _finish(args, results, budgets)


def _cmd_answers(args: argparse.Namespace) -> int:
    from rms_retrieval.dataflows.bench import answers_bench, locomo_bench
    from rms_retrieval.dataflows.bench.machine import machine_info
    from rms_retrieval.dataflows.locomo import load_locomo
    from rms_retrieval.stores.memory_store import MemoryStore
    from rms_retrieval.stores.providers.chat_completions import ChatCompletionsModel
    from rms_retrieval.stores.providers.onnx_encoder import default_encoder

    if args.budget < 1:
        raise ValueError(f"--budget must be a positive token count, got {args.budget}")
    reader = ChatCompletionsModel.from_environment("RMS_READER", url=args.url, model=args.model,
                                                   timeout_seconds=args.timeout)
    started = time.perf_counter()
    dataset = load_locomo(args.data)
    questions = locomo_bench.benchmark_questions(dataset, args.limit_questions, args.split)["main"]
    with MemoryStore.open(args.store, read_only=True) as store:
        bench = locomo_bench.LocomoBench(store, dataset, default_encoder(), [args.budget],
                                         cross_encoder=_cross_encoder(args.arms, args.score_cache))
        progress = None if args.no_progress else (lambda done: print(f"{done}/{len(questions)}", flush=True))
        results = answers_bench.provenance(args.data, args.split, questions, reader, args.budget)
        results["arms"] = answers_bench.run_answers(bench, questions, args.arms, reader, args.budget, progress)
    results["seconds"] = time.perf_counter() - started
    results["machine"] = machine_info()
    _write(args, results)
    for line in answers_bench.summary_lines(results):
        print(line)
    print(f"wrote {Path(args.out) / 'results.json'}")
    return 0
