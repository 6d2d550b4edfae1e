"""`rms query` and `rms demo`: answer a question from a store, or from the embedded demo store."""

from __future__ import annotations

import argparse
from typing import Any

from rms_retrieval.dataflows.cli_support import (check_budget, check_namespaces, check_question, open_store, parse_time,
                                                 policy_arguments, request_arguments, settings_from)
from rms_retrieval.stores.visibility import RetrievalMode


def _start_encoder() -> None:
    """The query encoder's load, on the other core while Hamilton, the pipeline and the store
    import and the store opens (`rms` runs it before those imports: cli.py)."""
    from rms_retrieval.stores.providers.onnx_encoder import default_encoder

    default_encoder().load_in_background()


def _cmd_query(args: argparse.Namespace) -> int:
    from rms_retrieval.dataflows.presenter import format_bundle
    from rms_retrieval.dataflows.retrieval import retrieve

    check_question(args.question)
    check_budget(args.budget)
    with open_store(args.store) as store:
        check_namespaces(store, args.store, args.namespace)
        result = retrieve(store, args.question, namespaces=args.namespace, reference_time=parse_time(args.reference_time),
                          token_budget=args.budget, settings=settings_from(args), **_selection_options(args))
    print(result.bundle.model_dump_json(indent=2) if args.json else format_bundle(result.bundle))
    return 0


_TIME_FILTERS = ("time_from", "time_to", "event_time_from", "event_time_to")
_TIME_FILTER_HELP = ("leave out memories whose validity ended before this",
                     "leave out memories valid only from after this",
                     "leave out memories stated (event time) before this",
                     "leave out memories stated (event time) after this")


def _selection_options(args: argparse.Namespace) -> dict[str, Any]:
    """The request fields given on the command line; the request checks their values."""
    options = {"retrieval_mode": args.mode, "limit": args.limit, "min_score": args.min_score,
               "max_per_source": args.max_per_source, "max_per_evidence": args.max_per_evidence}
    for name in _TIME_FILTERS:
        options[name] = parse_time(getattr(args, name), "--" + name.replace("_", "-"))
    return {name: value for name, value in options.items() if value is not None}


def _cmd_demo(args: argparse.Namespace) -> int:
    from rms_retrieval.dataflows.demo import run_demo

    run_demo(args.store, print_fn=print)
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add `query` and `demo` to the `rms` parser."""
    query = sub.add_parser("query", help="answer a question with a Memory Bundle")
    request_arguments(query)
    query.add_argument("--mode", choices=[str(mode) for mode in RetrievalMode],
                       help="DEFAULT; EXPLICIT: include uncertain memories; AUDIT: all but deleted")
    query.add_argument("--limit", type=int, help="at most this many memories, pinned ones included")
    query.add_argument("--min-score", type=float, help="leave out memories below this score (under rank "
                       "fusion, their cosine similarity to the question)")
    query.add_argument("--max-per-source", type=int, help="at most this many memories with the same evidence and text")
    query.add_argument("--max-per-evidence", type=int, help="at most this many memories with the same evidence, whatever the text")
    for name, what in zip(_TIME_FILTERS, _TIME_FILTER_HELP):
        query.add_argument("--" + name.replace("_", "-"), help=f"{what} (ISO 8601 with timezone)")
    policy_arguments(query)
    query.add_argument("--json", action="store_true", help="print the bundle's JSON")
    query.add_argument("question")
    query.set_defaults(run=_cmd_query, start=_start_encoder)

    demo = sub.add_parser("demo", help="build the embedded demo store and answer sample questions")
    demo.add_argument("--store", default=".rms/demo-store")
    demo.set_defaults(run=_cmd_demo)
