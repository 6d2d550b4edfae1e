"""`rms dag`, `rms explain` and `rms replay`: pictures of the DAG, score lineage, replay of logged requests.

None of them writes to the retrieval log: an audit leaves the store as it found it.
"""

from __future__ import annotations

import argparse
import json
from uuid import UUID

from rms_retrieval.dataflows.cli import CliError, _open_store, _parse_time

EXIT_DIFFERENT = 1


def _settings(fusion: str):
    from rms_retrieval.nodes.settings import RetrievalSettings, ScoringSettings

    return RetrievalSettings(scoring=ScoringSettings(fusion=fusion))


def _request_options(args: argparse.Namespace) -> dict:
    if args.budget < 1:
        raise CliError(f"--budget must be at least 1 token, got {args.budget}")
    options = {"token_budget": args.budget, "reference_time": _parse_time(args.reference_time)}
    if args.limit is not None:
        options["limit"] = args.limit
    return options


def _check_namespaces(store, path: str, namespaces: list[str]) -> None:
    known = set(store.namespaces())
    unknown = [ns for ns in namespaces if ns not in known]
    if unknown:
        raise CliError(f"namespace {', '.join(unknown)} has no memories in {path}; known: {', '.join(sorted(known)) or 'none'}")


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
        if not args.question.strip():
            raise CliError("the question is empty; pass it in quotes")
        with _open_store(args.store) as store:
            _check_namespaces(store, args.store, args.namespace)
            graph, result = execution_graph(store, args.question, namespaces=args.namespace, config=settings,
                                            **_request_options(args))
            path = render(graph, args.out)
    except GraphvizMissingError as error:
        raise CliError(str(error)) from error
    bundle = result.bundle
    print(f"wrote the execution of {args.question!r} ({len(bundle.items)} items, "
          f"{bundle.tokens_used}/{bundle.token_budget} tokens) to {path}")
    return 0


def _cmd_explain(args: argparse.Namespace) -> int:
    from rms_retrieval.dataflows.explain import explain

    if not args.question.strip():
        raise CliError("the question is empty; pass it in quotes")
    try:
        object_id = UUID(args.id.strip())
    except ValueError as error:
        raise CliError(f"--id {args.id!r} is not an object id (a UUID)") from error
    with _open_store(args.store) as store:
        _check_namespaces(store, args.store, args.namespace)
        explanation = explain(store, args.question, object_id, namespaces=args.namespace,
                              config=_settings(args.fusion), **_request_options(args))
    print(json.dumps(explanation.to_dict(), indent=2) if args.json else explanation.to_text())
    return 0


def _cmd_replay(args: argparse.Namespace) -> int:
    from rms_retrieval.dataflows.replay import find_record, replay_record

    if not args.request_id and not args.last:
        raise CliError("name a REQUEST_ID to replay, or --last N for the latest N logged requests")
    with _open_store(args.store) as store:
        if args.last:
            records = [r for r in store.retrieval_log() if (r.get("payload") or {}).get("status") == "ok"][-args.last:]
        else:
            records = [find_record(store, request_id) for request_id in args.request_id]
        reports = [replay_record(store, record) for record in records]
    for report in reports:
        print(report.to_text())
    same = sum(report.identical for report in reports)
    print(f"{same} of {len(reports)} replayed bundles are identical to the logged ones")
    return 0 if same == len(reports) else EXIT_DIFFERENT


def _request_arguments(parser: argparse.ArgumentParser, *, required: bool) -> None:
    parser.add_argument("--store", required=required, help="store directory")
    parser.add_argument("--namespace", action="append", required=required, help="repeat for several")
    parser.add_argument("--reference-time", help="ISO 8601 with timezone; default now")
    parser.add_argument("--budget", type=int, default=4096, help="token budget in cl100k_base tokens")
    parser.add_argument("--limit", type=int, help="the request's item limit")
    parser.add_argument("--fusion", choices=["rrf", "weighted"], default="rrf", help="the score formula (Hamilton config)")


def register(sub: argparse._SubParsersAction) -> None:
    """Add `dag`, `explain` and `replay` to the `rms` parser."""
    dag = sub.add_parser("dag", help="draw the retrieval DAG, or one request's execution (needs Graphviz)")
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
    replay.add_argument("request_id", nargs="*", help="request ids from the retrieval log")
    replay.set_defaults(run=_cmd_replay)
