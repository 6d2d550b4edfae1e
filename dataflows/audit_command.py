"""`rms dag`, `rms explain` and `rms replay`: pictures of the DAG, score lineage, replay of logged requests.

Each opens the store read-only and none writes to the retrieval log: an audit leaves the store
as it found it.
"""

from __future__ import annotations

import argparse
import json
from uuid import UUID

from rms_retrieval.dataflows.cli_support import (
    CliError,
    check_budget,
    check_namespaces,
    check_question,
    open_store,
    parse_time,
    request_arguments,
)

EXIT_DIFFERENT = 1


def _settings(fusion: str):
    from rms_retrieval.nodes.settings import RetrievalSettings, ScoringSettings

    return RetrievalSettings(scoring=ScoringSettings(fusion=fusion))


def _request(args: argparse.Namespace):
    """The RetrievalRequest the options describe."""
    from rms_retrieval.dataflows.retrieval import as_request

    return as_request(check_question(args.question), namespaces=args.namespace,
                      reference_time=parse_time(args.reference_time), token_budget=check_budget(args.budget),
                      limit=args.limit)


def _cmd_dag(args: argparse.Namespace) -> int:
    from rms_retrieval.dataflows.audit import GraphvizMissingError, dag_graph, execution_graph, render, require_dot

    settings = _settings(args.fusion)
    try:
        require_dot()
        if args.question is None:
            path = render(dag_graph(settings), args.out)
            print(f"wrote the retrieval DAG (fusion={args.fusion}) to {path}")
            return 0
        if not args.store or not args.namespace:
            raise CliError("drawing one request's execution needs --store and --namespace")
        request = _request(args)
        with open_store(args.store, read_only=True) as store:
            check_namespaces(store, args.store, args.namespace)
            graph, result = execution_graph(store, request, settings=settings)
            path = render(graph, args.out)
    except GraphvizMissingError as error:
        raise CliError(str(error)) from error
    bundle = result.bundle
    print(f"wrote the execution of {args.question!r} ({len(bundle.items)} items, "
          f"{bundle.tokens_used}/{bundle.token_budget} tokens) to {path}")
    return 0


def _cmd_explain(args: argparse.Namespace) -> int:
    from rms_retrieval.dataflows.explain import explain

    request = _request(args)
    try:
        object_id = UUID(args.id.strip())
    except ValueError as error:
        raise CliError(f"--id {args.id!r} is not an object id (a UUID)") from error
    with open_store(args.store, read_only=True) as store:
        check_namespaces(store, args.store, args.namespace)
        explanation = explain(store, request, object_id, settings=_settings(args.fusion))
    print(json.dumps(explanation.to_dict(), indent=2) if args.json else explanation.to_text())
    return 0


def _cmd_replay(args: argparse.Namespace) -> int:
    from rms_retrieval.dataflows.replay import ReplayError, find_record, replay_record
    from rms_retrieval.stores.retrieval_log import within_namespaces

    if not args.request_id and not args.last:
        raise CliError("name a REQUEST_ID to replay, or --last N for the latest N logged requests")
    with open_store(args.store, read_only=True) as store:
        if args.last:
            records = [r for r in store.retrieval_log(namespaces=args.namespace)
                       if (r.get("payload") or {}).get("status") == "ok"][-args.last:]
        else:
            records = [find_record(store, request_id) for request_id in args.request_id]
            for request_id, record in zip(args.request_id, records):
                if not within_namespaces(record, args.namespace):  # exactly as if it were not logged
                    raise ReplayError(f"no retrieval record {request_id} in {args.store}; "
                                      "`rms replay --store DIR --last 5` replays the latest ones")
        reports = [replay_record(store, record) for record in records]
    for report in reports:
        print(report.to_text())
    same = sum(report.identical for report in reports)
    print(f"{same} of {len(reports)} replayed bundles are identical to the logged ones")
    return 0 if same == len(reports) else EXIT_DIFFERENT


def _request_arguments(parser: argparse.ArgumentParser, *, required: bool) -> None:
    request_arguments(parser, required=required)
    parser.add_argument("--limit", type=int, help="the request's item limit")
    parser.add_argument("--fusion", choices=["rrf", "weighted"], default="rrf", help="the score formula (Hamilton config)")


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add `dag`, `explain` and `replay` to the `rms` parser."""
    dag = sub.add_parser("dag", help="draw the retrieval DAG, or one request's execution (needs Graphviz and the [viz] extra)")
    dag.add_argument("--out", required=True, help="the picture: FILE.svg, FILE.png or FILE.pdf")
    _request_arguments(dag, required=False)
    dag.add_argument("question", nargs="?", help="draw the execution of this question (with --store, --namespace)")
    dag.set_defaults(run=_cmd_dag)

    explain = sub.add_parser("explain", help="how one object's place in the bundle was decided, node by node")
    _request_arguments(explain, required=True)
    explain.add_argument("--id", required=True, help="the object id to explain")
    explain.add_argument("--json", action="store_true", help="print the explanation as JSON")
    explain.add_argument("question")
    explain.set_defaults(run=_cmd_explain)

    replay = sub.add_parser("replay", help="replay logged requests without the embedding model; compare bundles")
    replay.add_argument("--store", required=True)
    replay.add_argument("--last", type=int, help="replay the latest N successful requests")
    replay.add_argument("--namespace", action="append",
                        help="only requests that read nothing but these namespaces (repeat for several)")
    replay.add_argument("request_id", nargs="*", help="request ids from the retrieval log")
    replay.set_defaults(run=_cmd_replay)
