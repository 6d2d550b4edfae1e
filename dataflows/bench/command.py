"""`rms bench locomo` and `rms bench scale`: run the benchmarks, write results.json and the plots."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rms_retrieval.dataflows.bench.machine import machine_info

EXIT_FAILED_CHECK = 1
RESULTS_FILE = "results.json"
SCALE_RESULTS_FILE = "scale_results.json"
INGEST_PATHS = ("locomo", "jsonl", "plain", "messages")
JSONL_FILE = "locomo-turns.jsonl"


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add `bench locomo` and `bench scale` to the `rms` parser."""
    from rms_retrieval.dataflows.bench import compare, identical, latency_bench, policies_command, published
    from rms_retrieval.dataflows.bench.batch_bench import add_parser as add_batch
    from rms_retrieval.dataflows.bench.locomo_bench import DEFAULT_BUDGETS, SPLITS
    from rms_retrieval.dataflows.bench.arms import ARMS, DEFAULT_ARMS
    from rms_retrieval.dataflows.bench.store_command import register as register_store_benches

    bench = sub.add_parser("bench", help="benchmarks: LoCoMo relevance and operations, scaling")
    commands = bench.add_subparsers(dest="bench_command", required=True)

    locomo = commands.add_parser(
        "locomo", help="relevance (all arms), latency, node times, isolation and determinism on LoCoMo")
    locomo.add_argument("--data", required=True, help="the LoCoMo JSON file (locomo10.json)")
    locomo.add_argument("--store", required=True, help="store directory; built from --data when it is empty")
    locomo.add_argument("--out", required=True, help="directory for results.json and the plots")
    locomo.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(DEFAULT_ARMS), metavar="ARM",
                        help=f"arms to run (default all but the reranking ones: {', '.join(DEFAULT_ARMS)})")
    locomo.add_argument("--budgets", nargs="+", type=int, default=list(DEFAULT_BUDGETS), metavar="TOKENS")
    locomo.add_argument("--limit-questions", type=int, help="evaluate N evenly spaced questions per question set")
    locomo.add_argument("--ingest", choices=INGEST_PATHS, default="locomo",
                        help="how an empty --store is built: locomo (ingest-locomo: speaker entities and turns), "
                             "jsonl (TURN objects with positions and speakers, written as JSON Lines and read back as "
                             "rms ingest does), plain (MemoryStore.add of turns with content, session id, time and "
                             "source_ref only) or messages (MemoryStore.add_messages, one call per session)")
    locomo.add_argument("--no-leading-name", action="store_true",
                        help="build an empty --store with SpeakerRules(leading_name=False): a plain turn's "
                             "\"Name: \" does not name its speaker (stores/analysis/speakers.py)")
    locomo.add_argument("--expansion", metavar="NAME",
                        help="ingest-time expansion an empty --store is built with, a preset of "
                             "stores/analysis/expansion.py (off, previous, ...; default: the store default); "
                             "a store that holds objects keeps its own")
    locomo.add_argument("--share-pools", action="store_true",
                        help="arms equal in candidate, filtering and intent settings reuse a question's filtered pool "
                             "(checked against full runs in shared_pool_check); faster, more memory")
    locomo.add_argument("--skip-adversarial", action="store_true",
                        help="leave out category 5 (it is never part of the headline), to save time when tuning")
    locomo.add_argument("--split", choices=SPLITS, default="all",
                        help="conversations to ask: tune (choose settings here), confirm (prove them here) or all")
    locomo.add_argument("--latency-queries", type=int, default=200, help="queries per bundle size (default 200)")
    locomo.add_argument("--node-time-queries", type=int, default=50)
    locomo.add_argument("--isolation-queries", type=int, default=10_000)
    locomo.add_argument("--determinism-queries", type=int, default=10)
    locomo.add_argument("--determinism-repeats", type=int, default=100)
    locomo.add_argument("--no-progress", action="store_true", help="no progress bars")
    _threads_option(locomo)
    locomo.set_defaults(run=_cmd_locomo)

    scale = commands.add_parser("scale", help="latency against store size on synthetic stores")
    scale.add_argument("--out", required=True, help="directory for scale_results.json, the plot and the stores")
    scale.add_argument("--sizes", nargs="+", type=int, default=[10_000, 100_000], metavar="N",
                       help="store sizes (default 10000 100000; add 1000000 to opt in to the slow one)")
    scale.add_argument("--queries", type=int, default=50, help="queries per size (default 50)")
    scale.add_argument("--readers", type=int, default=4,
                       help="reader processes whose memory together is weighed against one reader's (default 4)")
    scale.add_argument("--no-progress", action="store_true")
    _threads_option(scale)
    scale.set_defaults(run=_cmd_scale)
    register_store_benches(commands)
    identical.register(commands)
    latency_bench.register(commands)
    add_batch(commands)
    compare.register(commands)
    published.register(commands)
    policies_command.register(commands)

    export = commands.add_parser(
        "locomo-jsonl", help="write LoCoMo's turns as plain TURN MemoryObjects in JSON Lines, for rms ingest")
    export.add_argument("--data", required=True, help="the LoCoMo JSON file (locomo10.json)")
    export.add_argument("--out", required=True, help="the JSON Lines file to write")
    export.set_defaults(run=_cmd_locomo_jsonl)


def _threads_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--torch-threads", type=int, default=0,
        help="torch intra-op threads for the whole process (default 0: torch's default; the encoder "
             "already uses one thread for query-sized batches)")


def _set_torch_threads(threads: int) -> int:
    import torch

    _positive("--torch-threads", threads, zero_ok=True)
    if threads:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def _positive(name: str, value: int | None, *, zero_ok: bool = False) -> None:
    if value is not None and (value < 0 or (value == 0 and not zero_ok)):
        raise ValueError(f"{name} must be {'non-negative' if zero_ok else 'positive'}, got {value}")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    staged = path.with_suffix(".json.tmp")
    staged.write_text(json.dumps(payload, indent=1, sort_keys=False, default=str) + "\n", encoding="utf-8")
    os.replace(staged, path)


def _ingest_jsonl(dataset: Any, store_path: str, out: Path, progress: bool, expansion: Any = None) -> Any:
    """The generic path: plain turns written as JSON Lines, read back and added as `rms ingest` does."""
    from rms_retrieval.dataflows.ingest import plain_turns, read_jsonl, write_jsonl
    from rms_retrieval.stores.providers.onnx_encoder import default_encoder
    from rms_retrieval.stores.memory_store import MemoryStore

    path = out / JSONL_FILE
    write_jsonl(plain_turns(dataset), path)
    with MemoryStore.open(store_path, encoder=default_encoder(), expansion=expansion) as store:
        return store.add(read_jsonl(path), progress=progress)


def _ingest_chat(dataset: Any, store_path: str, ingest_path: str, progress: bool, expansion: Any,
                 leading_name: bool) -> Any:
    """The public API as a new user calls it: plain turns in one `add`, or `add_messages` per session."""
    from rms_retrieval.dataflows.ingest import chat_sessions, plain_chat_turns
    from rms_retrieval.stores.providers.onnx_encoder import default_encoder
    from rms_retrieval.stores.memory_store import MemoryStore
    from rms_retrieval.stores.protocols import IngestReport
    from rms_retrieval.stores.analysis.speakers import SpeakerRules

    started = time.perf_counter()
    with MemoryStore.open(store_path, encoder=default_encoder(), expansion=expansion,
                          speakers=SpeakerRules(leading_name=leading_name)) as store:
        if ingest_path == "plain":
            return store.add(plain_chat_turns(dataset), progress=progress)
        reports = [store.add_messages(conversation.sample_id, session_id, messages)
                   for conversation in dataset.conversations for session_id, messages in chat_sessions(conversation)]
    return IngestReport(sum(r.objects_added for r in reports), sum(r.entities_added for r in reports),
                        sum(r.edges_added for r in reports), time.perf_counter() - started,
                        {"adds": len(reports), **reports[-1].details})


def _prepare_store(data: Path, store_path: str, dataset: Any, progress: bool, ingest_path: str = "locomo",
                   out: Path | None = None, expansion: str | None = None, leading_name: bool = True) -> dict[str, Any]:
    """Reuse the store when it holds objects, else build it from the LoCoMo file and time that."""
    from rms_retrieval.dataflows.bench.speed_bench import directory_size_mb, peak_memory_mb
    from rms_retrieval.dataflows.ingest import ingest_locomo
    from rms_retrieval.stores.analysis.expansion import expansion_named
    from rms_retrieval.stores.engine.manifest import MANIFEST_FILE
    from rms_retrieval.stores.memory_store import MemoryStore

    existing = Path(store_path) / MANIFEST_FILE
    if existing.exists():
        with MemoryStore.open(store_path, read_only=True) as store:
            present = store.snapshot().count_objects()
            namespaces = set(store.snapshot().namespaces())
    else:
        present, namespaces = 0, set()
    ingest: dict[str, Any] | None = None
    asked = None if expansion is None else expansion_named(expansion)
    if present == 0:
        if ingest_path == "jsonl":
            report = _ingest_jsonl(dataset, store_path, out or Path(store_path), progress, asked)
        elif ingest_path in ("plain", "messages"):
            report = _ingest_chat(dataset, store_path, ingest_path, progress, asked, leading_name)
        else:
            report, _ = ingest_locomo(data, store_path, progress=progress, expansion=asked)
        turns = sum(len(c.turns) for c in dataset.conversations)
        ingest = {
            "path": ingest_path, "objects_added": report.objects_added, "entities_added": report.entities_added,
            "edges_added": report.edges_added, "turns": turns, "seconds": report.seconds,
            "turns_per_second": turns / report.seconds, "details": report.details,
            # the encoder's own throughput in this run is rows / embedding_seconds, the store's rows / seconds
            "throughput_over_embedding_only": report.details["embedding_seconds"] / report.seconds,
            "peak_memory_mb_after_ingest": peak_memory_mb(),
        }
    else:
        wanted = {c.sample_id for c in dataset.conversations}
        if not wanted <= namespaces:
            missing = ", ".join(sorted(wanted - namespaces))
            raise ValueError(f"the store at {store_path} lacks the LoCoMo namespaces {missing}; use an empty --store")
    with MemoryStore.open(store_path, read_only=True) as store:
        recorded = store.snapshot().manifest.expansion
    return {"path": str(store_path), "built_in_this_run": ingest is not None, "ingest": ingest,
            "expansion": recorded.to_json(), "size_mb": directory_size_mb(store_path)}


def _cmd_locomo(args: argparse.Namespace) -> int:
    from rms_retrieval.dataflows.bench import arms, locomo_bench, plots, speed_bench
    from rms_retrieval.dataflows.locomo import load_locomo
    from rms_retrieval.stores.memory_store import MemoryStore
    from rms_retrieval.stores.providers.onnx_encoder import default_encoder

    for name in ("latency_queries", "node_time_queries", "isolation_queries", "determinism_queries",
                 "determinism_repeats"):
        _positive(f"--{name.replace('_', '-')}", getattr(args, name), zero_ok=True)
    _positive("--limit-questions", args.limit_questions)
    for budget in args.budgets:
        _positive("--budgets", budget)
    progress = not args.no_progress
    threads = _set_torch_threads(args.torch_threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = Path(args.data)
    dataset = load_locomo(data)
    started = time.perf_counter()
    results: dict[str, Any] = {
        "benchmark": "rms-retrieval LoCoMo (RFC-0005 Section 13)",
        "status": "running",
        "started": datetime.now(timezone.utc).isoformat(),
        "command": shlex.join(["rms", *sys.argv[1:]]) if sys.argv and sys.argv[0] else None,
        "machine": {**machine_info(), "torch_threads": threads},
        "dataset": {"path": str(data), "sha256": _sha256(data), "conversations": len(dataset.conversations),
                    "questions_in_file": len(dataset.questions),
                    "questions_with_evidence_issues": len(dataset.evidence_report())},
        "ranked_list": locomo_bench.RANKED_LIST,
        "budgets": sorted(set(args.budgets)),
        "targets": locomo_bench.TARGETS,
        "configuration_fingerprint": arms.arm_settings("pipeline").fingerprint(),
    }
    results["store"] = _prepare_store(data, args.store, dataset, progress, args.ingest, out, args.expansion,
                                      not args.no_leading_name)
    results_path = out / RESULTS_FILE
    encoder = default_encoder()
    questions = locomo_bench.benchmark_questions(dataset, args.limit_questions, args.split)
    if args.skip_adversarial:
        questions["adversarial"] = []
    results["dataset"]["evaluated"] = {part: len(qs) for part, qs in questions.items()}
    results["dataset"]["split"] = {"name": args.split, "conversations": locomo_bench.split_sample_ids(
        (c.sample_id for c in dataset.conversations), args.split)}
    with MemoryStore.open(args.store, read_only=True) as store:
        results["store"].update(objects=store.snapshot().count_objects(), namespaces=store.snapshot().namespaces(),
                                state_fingerprint=store.snapshot().state_fingerprint())
        bench = locomo_bench.LocomoBench(store, dataset, encoder, args.budgets, share_pools=args.share_pools)

        def partial_relevance(relevance: dict[str, Any]) -> None:
            results["relevance"] = relevance
            _write_json(results_path, results)

        results["relevance"] = locomo_bench.run_relevance(bench, questions, args.arms, progress=progress,
                                                          checkpoint=partial_relevance)
        _write_json(results_path, results)
        results["speed"] = _speed(store, dataset, encoder, args, progress, results_path, results)
    results["peak_memory_mb"] = speed_bench.peak_memory_mb()
    results["seconds"] = time.perf_counter() - started
    results["machine"]["load_average_at_end"] = list(os.getloadavg())
    results["status"] = "complete"
    figure = plots.all_packed_by_budget(results["relevance"], bench.budgets, out / plots.PACKED_FIGURE,
                                        locomo_bench.TARGETS)
    results["figures"] = [figure.name]
    _write_json(results_path, results)
    for line in locomo_bench.summary_lines(results["relevance"], bench.budgets):
        print(line)
    for line in speed_bench.summary_lines(results["speed"]):
        print(line)
    ingest = results["store"]["ingest"]
    if ingest:
        print(f"ingest: {ingest['turns']} turns in {ingest['seconds']:.1f} s ({ingest['turns_per_second']:.0f} turns/s), "
              f"{ingest['throughput_over_embedding_only']:.2f}x the encoder's own throughput in the same run (target 0.8x)")
    print(f"store: {results['store']['size_mb']:.1f} MB on disk; peak memory {results['peak_memory_mb']:.0f} MB; "
          f"total {results['seconds'] / 60:.1f} min")
    print(f"wrote {results_path} and {figure}")
    return _exit_code(results["speed"])


def _speed(store: Any, dataset: Any, encoder: Any, args: argparse.Namespace, progress: bool,
           results_path: Path, results: dict[str, Any]) -> dict[str, Any]:
    """Latency by bundle size, node times, determinism and isolation; results saved after each."""
    from rms_retrieval.dataflows.bench import locomo_bench, speed_bench
    from rms_retrieval.dataflows.locomo import reference_time

    speed: dict[str, Any] = {}
    results["speed"] = speed
    # Drawn from every evaluable question: --limit-questions thins the relevance run only.
    pool = speed_bench.locomo_bench_queries(dataset, locomo_bench.benchmark_questions(dataset)["main"])
    stages: list[tuple[str, Callable[[], Any]]] = []
    if args.latency_queries:
        sampled = locomo_bench.evenly_spaced(pool, args.latency_queries)
        stages.append(("latency", lambda: speed_bench.latency_by_bundle_size(store, sampled, encoder, progress=progress)))
    if args.node_time_queries:
        timed = locomo_bench.evenly_spaced(pool, args.node_time_queries)
        stages.append(("node_times_ms", lambda: speed_bench.node_times(store, timed, encoder)))
    if args.determinism_queries and args.determinism_repeats:
        repeated = locomo_bench.evenly_spaced(pool, args.determinism_queries)
        stages.append(("determinism", lambda: speed_bench.determinism(
            store, repeated, encoder, repeats=args.determinism_repeats, progress=progress)))
    if args.isolation_queries:
        texts = sorted({q.question for q in dataset.questions})
        when = max(reference_time(c) for c in dataset.conversations)
        sampled_isolation = speed_bench.isolation_queries(texts, store.snapshot().namespaces(), when, args.isolation_queries)

        def partial_isolation(report: dict[str, Any]) -> None:
            speed["isolation"] = {**report, "partial": True}
            _write_json(results_path, results)

        stages.append(("isolation", lambda: speed_bench.namespace_isolation(
            store, sampled_isolation, encoder, progress=progress, checkpoint=partial_isolation)))
    for name, stage in stages:
        started = time.perf_counter()
        speed[name] = stage()
        speed.setdefault("seconds", {})[name] = time.perf_counter() - started
        _write_json(results_path, results)
    return speed


def _exit_code(speed: dict[str, Any]) -> int:
    failed = []
    if speed.get("isolation", {}).get("leaks", 0) or speed.get("isolation", {}).get("pool_leaks", 0):
        failed.append("namespace isolation leaked")
    if not speed.get("determinism", {}).get("identical", True):
        failed.append("repeated queries gave different bundles")
    for problem in failed:
        print(f"FAILED: {problem}", file=sys.stderr)
    return EXIT_FAILED_CHECK if failed else 0


def _cmd_locomo_jsonl(args: argparse.Namespace) -> int:
    from rms_retrieval.dataflows.ingest import plain_turns, write_jsonl
    from rms_retrieval.dataflows.locomo import load_locomo

    written = write_jsonl(plain_turns(load_locomo(Path(args.data))), Path(args.out))
    print(f"wrote {written} TURN objects to {args.out}; add them with: rms ingest {args.out} --store DIR")
    return 0


def _cmd_scale(args: argparse.Namespace) -> int:
    from rms_retrieval.dataflows.bench import plots, speed_bench

    for size in args.sizes:
        _positive("--sizes", size)
    _positive("--queries", args.queries)
    threads = _set_torch_threads(args.torch_threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    if args.readers < 2:
        raise ValueError(f"--readers must be 2 or more to compare with one reader, got {args.readers}")
    scale = speed_bench.run_scale(out, sorted(set(args.sizes)), queries=args.queries, progress=not args.no_progress,
                                  readers=args.readers)
    results = {"benchmark": "rms-retrieval latency by store size", "command": shlex.join(["rms", *sys.argv[1:]]),
               "machine": {**machine_info(), "torch_threads": threads}, **scale, "seconds": time.perf_counter() - started}
    figure = plots.latency_by_store_size(scale, out / plots.SCALE_FIGURE)
    results["figures"] = [figure.name]
    _write_json(out / SCALE_RESULTS_FILE, results)
    print(f"wrote {out / SCALE_RESULTS_FILE} and {figure}")
    return 0
