"""`rms bench latency`: the pipeline beside its floor and a LangChain peer, questions interleaved.

One run over the same LoCoMo questions; for each question every arm runs once, in an order
shuffled from question to question (`interleaving.interleaved`), so all arms see the same
machine load and none always follows the same arm:

- `pipeline`: `retrieve()` for a bundle of 50 (`limit=50`, a budget large enough not to bind),
  without the retrieval log (`log=False`);
- `pipeline_logged`: the same with the retrieval log on, as an application runs it: the record is
  queued and written by the store's log thread (stores/log/buffer.py), into the store's `log/`;
- `pipeline_threads`: the same DAG with `execution="threads"` (Hamilton's `FutureAdapter`), the
  candidate paths on a thread pool;
- `no_<channel>`: the pipeline with one channel switched off (vector, lexical, graph, pinned,
  session context);
- `pipeline_after_write`: `pipeline` on a writable copy of the store, each question asked right
  after a one-turn add to its namespace (the add is not timed): what a reader pays for the
  per-namespace structures a write makes stale; `after_write_over_quiet` is its p50 and p99
  over `pipeline`'s;
- `floor`: the query embedding and an exact top-50 vector search, what any vector-backed
  retrieval pays at least;
- `peer_k30`, `peer_k200`: LangChain's EnsembleRetriever (BM25Retriever + FAISS over the same
  turns, the same MiniLM model through a LangChain `Embeddings` wrapper around our encoder, RRF)
  with k = 30 and k = 200 per retriever. Its packages are the optional `[peers]` extra; without
  them those arms are skipped with a message.

With `--lme-data` and `--lme-store`, a second block times LongMemEval-S beside LoCoMo, warm and
right after a write (`lme_latency.py`). Each block starts with the first query on each of its
namespaces after a fresh open, against the same questions warm (`first_query.py`).

Before timing, every arm answers the first questions and one question of each conversation:
"warm" means the per-namespace structures a store builds on first use (the adjacency lists, the
BM25 statistics of the scope, decoded objects) exist, as they do in a process that has served
that namespace once. The per-node table comes from the same questions through a driver with a
`NodeTimer`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rms_retrieval.dataflows.bench.interleaving import (BUNDLE, AfterWriteArm, after_change_lines, after_update_block,
                                                       collections_line, frozen_collector, interleaved, over_quiet, pipeline_arm,
                                                       warming_queries, without_collections, without_collections_line)
from rms_retrieval.dataflows.bench.first_query import first_query_line, first_query_report
from rms_retrieval.dataflows.bench.lme_latency import LME_SAMPLES
from rms_retrieval.dataflows.bench.locomo_bench import benchmark_questions, evenly_spaced
from rms_retrieval.dataflows.bench.arms import arm_settings
from rms_retrieval.dataflows.bench.metrics import latency_percentiles
from rms_retrieval.dataflows.bench.speed_bench import (
    BenchQuery,
    locomo_bench_queries,
    node_times,
)
from rms_retrieval.nodes.pools import PathType
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.protocols import QueryEncoder

PEER_KS = (30, 200)
DEFAULT_QUESTIONS = 300
PEER_MISSING = ("the LangChain peer arms are skipped: install the optional extra with "
                "`pip install 'rms-retrieval[peers]'` (langchain-community, langchain-classic, rank-bm25)")


def channel_off(channel: PathType) -> RetrievalSettings:
    """The default settings with one channel switched off."""
    base = RetrievalSettings()
    if channel is PathType.SESSION_CONTEXT:
        return base.model_copy(update={"session": base.session.model_copy(update={"window": 0})})
    paths = base.candidates.enabled_paths - {channel}
    return base.model_copy(update={"candidates": base.candidates.model_copy(update={"enabled_paths": paths})})


CHANNELS = (PathType.VECTOR, PathType.LEXICAL, PathType.GRAPH, PathType.PINNED, PathType.SESSION_CONTEXT)


def floor_arm(store: Any, encoder: QueryEncoder) -> Callable[[BenchQuery], Any]:
    def run(query: BenchQuery) -> Any:
        return store.snapshot().search_vector(encoder.encode([query.text])[0], query.namespaces, BUNDLE)

    return run


def peer_arms(dataset: Any, encoder: QueryEncoder, namespaces: Sequence[str]) -> dict[str, Callable[[BenchQuery], Any]]:
    """EnsembleRetriever arms, one retriever per conversation and k; raises ImportError without `[peers]`."""
    from langchain_classic.retrievers import EnsembleRetriever
    from langchain_community.retrievers import BM25Retriever
    from langchain_community.vectorstores import FAISS
    from langchain_core.embeddings import Embeddings

    from rms_retrieval.dataflows.locomo import conversation_objects
    from rms_retrieval.stores.models import NodeType

    class EncoderEmbeddings(Embeddings):
        """Our MiniLM encoder as LangChain embeddings."""

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return encoder.encode(list(texts)).tolist()

        def embed_query(self, text: str) -> list[float]:
            return encoder.encode([text])[0].tolist()

    embeddings = EncoderEmbeddings()
    retrievers: dict[tuple[int, str], Any] = {}
    for conversation in dataset.conversations:
        if conversation.sample_id not in namespaces:
            continue
        turns = [o for o in conversation_objects(conversation) if o.node_type is NodeType.TURN]
        texts = [o.content for o in turns]
        metadata = [{"id": str(o.id)} for o in turns]
        vectors = FAISS.from_texts(texts, embeddings, metadatas=metadata)
        for k in PEER_KS:
            lexical = BM25Retriever.from_texts(texts, metadatas=metadata, k=k)
            dense = vectors.as_retriever(search_kwargs={"k": k})
            retrievers[(k, conversation.sample_id)] = EnsembleRetriever(retrievers=[lexical, dense], weights=[0.5, 0.5])

    def arm(k: int) -> Callable[[BenchQuery], Any]:
        def run(query: BenchQuery) -> Any:
            return retrievers[(k, query.namespaces[0])].invoke(query.text)

        return run

    return {f"peer_k{k}": arm(k) for k in PEER_KS}


def latency_questions(dataset: Any, questions: int) -> list[BenchQuery]:
    """The `questions` LoCoMo questions every block of the benchmark asks, evenly spaced."""
    return locomo_bench_queries(dataset, evenly_spaced(benchmark_questions(dataset)["main"], questions))


def run_latency(
    store: Any, dataset: Any, encoder: QueryEncoder, *, questions: int = DEFAULT_QUESTIONS, peers: bool = True,
    node_queries: int = 50, after_write_store: Any | None = None,
) -> dict[str, Any]:
    """Every arm over the same evenly spaced questions, percentiles and ratios, and the node table;
    with `after_write_store` (a writable store holding what `store` holds) the after-write arm too."""
    queries = latency_questions(dataset, questions)
    arms: dict[str, Callable[[BenchQuery], Any]] = {
        "pipeline": pipeline_arm(store, encoder, RetrievalSettings()),
        "pipeline_logged": pipeline_arm(store, encoder, RetrievalSettings(), log=True),
        "pipeline_threads": pipeline_arm(store, encoder, RetrievalSettings(execution="threads")),
        **{f"no_{channel.value.lower()}": pipeline_arm(store, encoder, channel_off(channel)) for channel in CHANNELS},
        # the defaults before issue 15's third round (a shallower pool, no speaker lift), for its cost
        "round3_off": pipeline_arm(store, encoder, arm_settings("round3_off")),
        "floor": floor_arm(store, encoder),
    }
    if after_write_store is not None:
        arms["pipeline_after_write"] = AfterWriteArm(after_write_store, encoder)
    notes = []
    if peers:
        try:
            arms.update(peer_arms(dataset, encoder, sorted({q.namespaces[0] for q in queries})))
        except ImportError:
            notes.append(PEER_MISSING)
    timings = interleaved(arms, queries, warmup=warming_queries(queries))
    table = {name: latency_percentiles(values) for name, values in timings.seconds.items()}
    report: dict[str, Any] = {"questions": len(queries), "bundle": BUNDLE, "arms_ms": table, "notes": notes,
                              "full_collections_ms": timings.full_collections_ms,
                              "pipeline_without_collections": without_collections(timings.seconds["pipeline"],
                                                                                  timings.met_collection["pipeline"])}
    floor = table["floor"]["p50"]
    report["p50_over_floor"] = {name: row["p50"] / floor for name, row in table.items()}
    if "pipeline_after_write" in table:
        report["after_write_over_quiet"] = over_quiet(table, "pipeline_after_write", "pipeline")
        block = report["after_update_ms"] = after_update_block(arms["pipeline"], after_write_store, encoder, queries)
        report["after_update_over_quiet"] = over_quiet(block, "after_update", "quiet")
    if "peer_k200" in table:
        report["p50_over_peer_k200"] = {name: row["p50"] / table["peer_k200"]["p50"] for name, row in table.items()}
    with frozen_collector():  # as the arms were timed
        report["node_times_ms"] = node_times(store, evenly_spaced(queries, node_queries), encoder, limit=BUNDLE)
    return report


def summary_lines(report: Mapping[str, Any]) -> list[str]:
    """The printed table: p50/p95/p99 per arm, ratios to the floor and the peer, then the nodes."""
    lines = [f"{report['questions']} LoCoMo questions, bundle of {report['bundle']}, arms interleaved"]
    lines.append(f"{'arm':<20} {'p50':>8} {'p95':>8} {'p99':>8} {'/floor':>8} {'/peer200':>9}")
    peer = report.get("p50_over_peer_k200", {})
    for name, row in report["arms_ms"].items():
        ratio = f"{peer[name]:>9.2f}" if name in peer else f"{'-':>9}"
        lines.append(f"{name:<20} {row['p50']:>8.1f} {row['p95']:>8.1f} {row['p99']:>8.1f} "
                     f"{report['p50_over_floor'][name]:>8.2f} {ratio}")
    pipeline = report["arms_ms"]["pipeline"]
    lines.append(f"pipeline p99 over its p50: {pipeline['p99'] / pipeline['p50']:.2f}x (target 2x); "
                 + collections_line(report["full_collections_ms"]) + "; "
                 + without_collections_line(report["pipeline_without_collections"]))
    lines.extend(after_change_lines(report, "after_{change}_over_quiet",
                                    "a question right after a one-turn {change} over the same on a quiet store", "1.2x"))
    if "after_update_ms" in report:
        block = report["after_update_ms"]
        lines.append(f"(the update block, after the others: quiet p50 {block['quiet']['p50']:.1f} ms, "
                     f"after an update {block['after_update']['p50']:.1f} ms)")
    lines.extend(report["notes"])
    lines.append(f"{'node':<28} {'mean ms':>8} {'p50':>8} {'p99':>8}")
    for name, row in report["node_times_ms"].items():
        lines.append(f"{name:<28} {row['mean_ms']:>8.2f} {row['p50']:>8.2f} {row['p99']:>8.2f}")
    return lines


def register(commands: argparse._SubParsersAction) -> None:
    """Add `bench latency` under `rms bench`."""
    parser = commands.add_parser("latency", help="pipeline, floor, channels off and the LangChain peer, interleaved")
    parser.add_argument("--data", required=True, help="the LoCoMo JSON file (locomo10.json)")
    parser.add_argument("--store", required=True, help="a LoCoMo store built by `rms ingest-locomo`")
    parser.add_argument("--questions", type=int, default=DEFAULT_QUESTIONS,
                        help=f"evenly spaced questions of categories 1-4 (default {DEFAULT_QUESTIONS})")
    parser.add_argument("--node-queries", type=int, default=50, help="questions for the per-node table (default 50)")
    parser.add_argument("--no-peers", action="store_true", help="skip the LangChain peer arms")
    parser.add_argument("--no-after-write", action="store_true",
                        help="skip the after-write arm and the update block (they write to a temporary copy of --store)")
    parser.add_argument("--lme-data", help="also time LongMemEval-S: its folder (dataflows/bench/lme_latency.py)")
    parser.add_argument("--lme-store", help="the LongMemEval-S store `rms bench lme` built (with --lme-data)")
    parser.add_argument("--lme-per-type", type=int, default=4, help="LongMemEval-S questions of each type (default 4)")
    parser.add_argument("--lme-samples", type=int, default=LME_SAMPLES,
                        help=f"timed LongMemEval-S questions per arm, the questions asked in turn as often as that "
                             f"takes (default {LME_SAMPLES}, so that p99 is not one question's worst)")
    parser.add_argument("--out", help="also write the report as JSON to this file")
    parser.set_defaults(run=_cmd_latency)


def _cmd_latency(args: argparse.Namespace) -> int:
    import contextlib
    import json
    import shutil
    import tempfile
    from pathlib import Path

    from rms_retrieval.dataflows.locomo import load_locomo
    from rms_retrieval.stores.providers.onnx_encoder import default_encoder
    from rms_retrieval.stores.memory_store import MemoryStore

    for name in ("questions", "node_queries", "lme_per_type", "lme_samples"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if (args.lme_data is None) != (args.lme_store is None):
        raise ValueError("--lme-data and --lme-store go together: the folder and the store `rms bench lme` built from it")
    dataset = load_locomo(args.data)
    with MemoryStore.open(args.store, read_only=True) as store, tempfile.TemporaryDirectory() as scratch, \
            contextlib.ExitStack() as stack:
        after_write = None
        if not args.no_after_write:
            copied = shutil.copytree(args.store, Path(scratch) / "store", ignore=shutil.ignore_patterns("log", "*.lock"))
            after_write = stack.enter_context(MemoryStore.open(copied, create=False))
        asked = latency_questions(dataset, args.questions)
        first = first_query_report(args.store, asked, default_encoder())  # before any arm asks these questions
        report = run_latency(store, dataset, default_encoder(), questions=args.questions, peers=not args.no_peers,
                             node_queries=args.node_queries, after_write_store=after_write)
        report["first_query"] = first
        if args.lme_data is not None:
            report["lme"] = _lme_block(args, store, asked, stack, Path(scratch))
    for line in summary_lines(report):
        print(line)
    print(first_query_line("LoCoMo", report["first_query"]))
    if "lme" in report:
        from rms_retrieval.dataflows.bench.lme_latency import lme_summary_lines

        for line in lme_summary_lines(report["lme"]):
            print(line)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


def _lme_block(args: argparse.Namespace, locomo_store: Any, locomo: Sequence[BenchQuery], stack: Any, scratch: Any
               ) -> dict[str, Any]:
    """The LongMemEval-S arms (lme_latency.py) on --lme-store, its after-write arm on a copy in
    `scratch`, the LoCoMo questions `locomo` asked in turn beside them."""
    import shutil

    from rms_retrieval.dataflows.bench.lme_latency import lme_queries, run_lme_latency
    from rms_retrieval.stores.memory_store import MemoryStore
    from rms_retrieval.stores.providers.onnx_encoder import default_encoder

    store = stack.enter_context(MemoryStore.open(args.lme_store, create=False, read_only=True))
    queries = lme_queries(args.lme_data, store.snapshot().namespaces(), args.lme_per_type)
    after_write = None
    if not args.no_after_write:
        copied = shutil.copytree(args.lme_store, scratch / "lme-store", ignore=shutil.ignore_patterns("log", "*.lock"))
        after_write = stack.enter_context(MemoryStore.open(copied, create=False))
    first = first_query_report(args.lme_store, queries, default_encoder())  # before any arm asks these questions
    report = run_lme_latency(store, after_write, queries, locomo_store, locomo, default_encoder(), samples=args.lme_samples)
    return {**report, "first_query": first}
