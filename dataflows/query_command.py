"""`rms query` and `rms demo`: answer a question from a store, or from the embedded demo store."""

from __future__ import annotations

import argparse

from rms_retrieval.dataflows.cli_support import check_budget, check_namespaces, check_question, open_store, parse_time, request_arguments


def _cmd_query(args: argparse.Namespace) -> int:
    from rms_retrieval.dataflows.presenter import format_bundle
    from rms_retrieval.dataflows.retrieval import retrieve

    check_question(args.question)
    check_budget(args.budget)
    with open_store(args.store) as store:
        check_namespaces(store, args.store, args.namespace)
        result = retrieve(store, args.question, namespaces=args.namespace, reference_time=parse_time(args.reference_time),
                          token_budget=args.budget)
    print(result.bundle.model_dump_json(indent=2) if args.json else format_bundle(result.bundle))
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from rms_retrieval.dataflows.demo import run_demo

    run_demo(args.store, print_fn=print)
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add `query` and `demo` to the `rms` parser."""
    query = sub.add_parser("query", help="answer a question with a Memory Bundle")
    request_arguments(query)
    query.add_argument("--json", action="store_true", help="print the bundle's JSON")
    query.add_argument("question")
    query.set_defaults(run=_cmd_query)

    demo = sub.add_parser("demo", help="build the embedded demo store and answer sample questions")
    demo.add_argument("--store", default=".rms/demo-store")
    demo.set_defaults(run=_cmd_demo)
