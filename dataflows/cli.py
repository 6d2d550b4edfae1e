"""The `rms` command line: ingest, query, demo, and the audit and benchmark commands."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path

from pydantic import ValidationError

from rms_retrieval.nodes.models import MemoryBundle
from rms_retrieval.stores.errors import StoreError

EXIT_USAGE = 2


class CliError(Exception):
    """A user mistake: printed as one line, exit code 2."""


def _parse_time(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError as error:
        raise CliError(f"--reference-time {text!r} is not an ISO 8601 time (e.g. 2023-08-20T12:00:00+00:00)") from error
    if value.tzinfo is None:
        raise CliError(f"--reference-time {text!r} has no timezone; add one, e.g. {text}+00:00")
    return value


def _open_store(path: str, *, create: bool = False):
    from rms_retrieval.stores.memory_store import MemoryStore

    if not create and not Path(path).exists():
        raise CliError(f"no store at {path}; build one with `rms ingest` or `rms ingest-locomo`")
    encoder = None
    if create:
        from rms_retrieval.dataflows.retrieval import default_encoder

        encoder = default_encoder()
    return MemoryStore.open(path, encoder=encoder, create=create)


def format_bundle(bundle: MemoryBundle) -> str:
    """The human-readable form of a bundle: what `rms query` prints without --json."""
    meta = bundle.retrieval_metadata
    lines = [
        f"question: {bundle.query}",
        f"namespaces: {', '.join(bundle.namespaces)}   intent: {meta['intent']}   "
        f"tokens: {bundle.tokens_used}/{bundle.token_budget}   items: {len(bundle.items)}",
    ]
    if meta.get("embedding_mismatch"):
        lines.append("warning: embedding model mismatch, the vector path was not used")
    for path, reason in meta.get("backend_failures", {}).items():
        lines.append(f"warning: {path} path failed: {reason}")
    for rank, item in enumerate(bundle.items, start=1):
        paths = "+".join(str(p) for p in item.paths)
        when = f"{item.event_time:%Y-%m-%d}" if item.event_time else "undated   "
        lines.append(f"{rank:3d}. tier {item.tier}  {item.score:.6f}  {paths:<36} {when}  {item.text}")
    excluded = meta.get("excluded", {})
    if excluded:
        reasons: dict[str, int] = {}
        for reason in excluded.values():
            reasons[reason] = reasons.get(reason, 0) + 1
        lines.append("excluded: " + ", ".join(f"{n} {r}" for r, n in sorted(reasons.items())))
    return "\n".join(lines)


def _cmd_query(args: argparse.Namespace) -> int:
    from rms_retrieval.dataflows.retrieval import retrieve

    if not args.question.strip():
        raise CliError("the question is empty; pass it in quotes, e.g. rms query --store DIR --namespace NS \"Who moved?\"")
    if args.budget < 1:
        raise CliError(f"--budget must be at least 1 token, got {args.budget}")
    with _open_store(args.store) as store:
        known = set(store.namespaces())
        unknown = [ns for ns in args.namespace if ns not in known]
        if unknown:
            raise CliError(f"namespace {', '.join(unknown)} has no memories in {args.store}; known: {', '.join(sorted(known)) or 'none'}")
        result = retrieve(
            store, args.question, namespaces=args.namespace, reference_time=_parse_time(args.reference_time),
            token_budget=args.budget,
        )
    print(result.bundle.model_dump_json(indent=2) if args.json else format_bundle(result.bundle))
    return 0


def _cmd_ingest(args: argparse.Namespace) -> int:
    from rms_retrieval.dataflows.ingest import read_jsonl

    objects = read_jsonl(Path(args.path))
    if args.engine != "local" or args.address is not None or args.workers is not None:
        from rms_retrieval.dataflows.batch import ingest_with_workers

        report = ingest_with_workers(objects, args.store, engine=args.engine, address=args.address,
                                     workers=args.workers, progress=True)
    else:
        with _open_store(args.store, create=True) as store:
            report = store.add(objects, progress=True)
    print(f"added {report.objects_added} objects, {report.entities_added} entities, "
          f"{report.edges_added} edges to {args.store} in {report.seconds:.1f} s")
    return 0


def _cmd_ingest_locomo(args: argparse.Namespace) -> int:
    from rms_retrieval.dataflows.ingest import ingest_locomo

    report, dataset = ingest_locomo(Path(args.path), args.store)
    issues = dataset.evidence_report()
    print(f"added {report.objects_added} objects, {report.entities_added} entities, {report.edges_added} edges "
          f"from {len(dataset.conversations)} conversations in {report.seconds:.1f} s "
          f"({report.objects_added / max(report.seconds, 1e-9):.0f} objects/s)")
    print(f"{len(issues)} questions have malformed or missing evidence ids (normalised, not dropped):")
    for question in issues:
        print(f"  {question.sample_id} #{question.index}: {'; '.join(question.evidence_issues)}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from rms_retrieval.dataflows.demo import run_demo

    run_demo(args.store, print_fn=print)
    return 0


def build_parser() -> argparse.ArgumentParser:
    from rms_retrieval.dataflows.batch_command import add_engine_options

    parser = argparse.ArgumentParser(prog="rms", description="rms-retrieval: hybrid retrieval for conversational memory")
    sub = parser.add_subparsers(dest="command", required=True)

    query = sub.add_parser("query", help="answer a question with a Memory Bundle")
    query.add_argument("--store", required=True)
    query.add_argument("--namespace", action="append", required=True, help="repeat for several")
    query.add_argument("--budget", type=int, default=4096, help="token budget in cl100k_base tokens")
    query.add_argument("--reference-time", help="ISO 8601 with timezone; default now")
    query.add_argument("--json", action="store_true", help="print the bundle's JSON")
    query.add_argument("question")
    query.set_defaults(run=_cmd_query)

    ingest = sub.add_parser("ingest", help="add MemoryObjects from a JSON Lines file (all or nothing)")
    ingest.add_argument("path")
    ingest.add_argument("--store", required=True)
    add_engine_options(ingest)
    ingest.set_defaults(run=_cmd_ingest)

    locomo = sub.add_parser("ingest-locomo", help="build a store from LoCoMo (one namespace per conversation)")
    locomo.add_argument("path")
    locomo.add_argument("--store", required=True)
    locomo.set_defaults(run=_cmd_ingest_locomo)

    demo = sub.add_parser("demo", help="build the embedded demo store and answer sample questions")
    demo.add_argument("--store", default=".rms/demo-store")
    demo.set_defaults(run=_cmd_demo)
    for register in _command_modules():
        register(sub)
    return parser


def _command_modules() -> list[Callable[[argparse._SubParsersAction], None]]:
    """Commands that live beside the code they drive (benchmarks, audit, aggregation)."""
    from rms_retrieval.dataflows.aggregate_command import register as register_aggregate
    from rms_retrieval.dataflows.audit_command import register as register_audit
    from rms_retrieval.dataflows.batch_command import add_parser as register_batch
    from rms_retrieval.dataflows.bench.command import register as register_bench

    return [register_bench, register_audit, register_aggregate, register_batch]


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (CliError, StoreError, ValidationError, ValueError, OSError) as error:
        print(f"error: {_one_line(error)}", file=sys.stderr)
        return EXIT_USAGE


def _one_line(error: BaseException) -> str:
    if isinstance(error, ValidationError):
        parts = [f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}" for e in error.errors()]
        return "; ".join(parts)
    return str(error)


if __name__ == "__main__":
    sys.exit(main())
