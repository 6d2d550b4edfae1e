"""The DAG as a whole, on the in-memory store: every configuration builds and runs, and the
result is byte-identical across repeats and across the order candidates arrive in (RFC 11)."""

from __future__ import annotations

import gc
import os
import random
import threading
import time

import numpy as np
import pytest
from hamilton import node as hamilton_node
from hamilton.execution import graph_functions

from rms_retrieval.dataflows.frames import scored_frame
from rms_retrieval.dataflows import pipeline
from rms_retrieval.dataflows.pipeline import FINAL_NODE, PrefetchedEncoder, build_driver, pipeline_inputs
from rms_retrieval.dataflows.retrieval import retrieve
from rms_retrieval.nodes.pools import PRIMARY_PATHS, PathType
from rms_retrieval.nodes.candidate_settings import CandidateSettings
from rms_retrieval.nodes.settings import (
    PackingSettings,
    RankFusionScoring,
    RetrievalSettings,
    ScoringSettings,
)
from rms_retrieval.stores.indexes.adjacency import Adjacency
from rms_retrieval.stores.errors import EmbeddingMismatchError
from rms_retrieval.stores.models import NodeType
from rms_retrieval.stores.protocols import (PLAIN_FIELDS, Edge, EmbeddingIdentity, GraphIndex, LexicalIndex, ObjectStore, RetrievalLog,
                                            VectorIndex)
from tests.factories import FakeEncoder, FakeStore, conversation_store, make_object, make_request, oid

OTHER_MODEL = EmbeddingIdentity("other-model", "f" * 16, 4)


def _run(settings: RetrievalSettings, store=None, query="What did Caroline do at the support group?"):
    store = store or conversation_store()
    request = make_request(query)
    return build_driver(settings).execute(
        [FINAL_NODE, "fused_scores"], inputs=pipeline_inputs(store, request, settings, FakeEncoder())
    )


CONFIGURATIONS = {
    "defaults": RetrievalSettings(),
    "weighted": RetrievalSettings(scoring=ScoringSettings(fusion="weighted")),
    "graph_ranked_list": RetrievalSettings(scoring=ScoringSettings(rank_fusion=RankFusionScoring(graph_as_ranked_list=True))),
    "no_recency_no_tie_break": RetrievalSettings(
        scoring=ScoringSettings(rank_fusion=RankFusionScoring(rrf_recency_boost=None, rrf_tie_break=None))),
    "plain": RetrievalSettings(packing=PackingSettings(item_format="plain")),
    "temporal_first": RetrievalSettings(query_intent_order="temporal_first"),
    "lexical_only": RetrievalSettings(candidates=CandidateSettings(enabled_paths={PathType.LEXICAL})),
    "vector_only": RetrievalSettings(candidates=CandidateSettings(enabled_paths={PathType.VECTOR})),
    "strict_mismatch": RetrievalSettings(candidates=CandidateSettings(on_embedding_mismatch="error")),
}


@pytest.mark.parametrize("name", sorted(CONFIGURATIONS))
def test_every_configuration_builds_and_executes(name):
    settings = CONFIGURATIONS[name]
    result = _run(settings)
    bundle = result[FINAL_NODE]
    assert bundle.items, name
    assert bundle.tokens_used <= bundle.token_budget
    assert bundle.retrieval_metadata.configuration_fingerprint == settings.fingerprint()
    assert bundle.retrieval_metadata.formula_version == (1 if settings.scoring.fusion == "weighted" else 2)
    assert set(scored_frame(result["fused_scores"])["formula_version"]) == {bundle.retrieval_metadata.formula_version}
    assert oid("old") not in {i.id for i in bundle.items}
    assert bundle.retrieval_metadata.excluded[oid("old")] == "DEPRECATED"
    if PathType.PINNED in settings.candidates.enabled_paths:
        assert bundle.items[0].id == oid("pin")  # pinned first
    # A path switched off reaches no item.
    assert {path for item in bundle.items for path in item.paths} & PRIMARY_PATHS <= settings.candidates.enabled_paths


@pytest.mark.parametrize("fusion", ["rrf", "weighted"])
def test_the_formula_switch_picks_the_scoring_node_and_no_node_reads_it(fusion):
    dr = build_driver(RetrievalSettings(scoring=ScoringSettings(fusion=fusion)))
    readers = [v.name for v in dr.list_available_variables()
               if "fusion" in v.required_dependencies | v.optional_dependencies]
    assert readers == []


@pytest.mark.parametrize("name", sorted(CONFIGURATIONS))
def test_a_store_embedded_by_another_model_is_refused_or_answered_without_vectors(name):
    settings = CONFIGURATIONS[name]
    store = conversation_store(identity=OTHER_MODEL)
    if settings.candidates.on_embedding_mismatch == "error":
        with pytest.raises(EmbeddingMismatchError, match="EMBEDDING_VERSION_MISMATCH"):
            _run(settings, store)
        return
    bundle = _run(settings, store)[FINAL_NODE]
    vector_on = PathType.VECTOR in settings.candidates.enabled_paths
    assert bundle.retrieval_metadata.embedding_mismatch is vector_on
    assert all(PathType.VECTOR not in item.paths for item in bundle.items)


def test_all_four_candidate_paths_run_and_reach_the_bundle():
    bundle = _run(RetrievalSettings())[FINAL_NODE]
    paths = {p for item in bundle.items for p in item.paths}
    assert {PathType.VECTOR, PathType.LEXICAL, PathType.GRAPH, PathType.PINNED} <= paths


def test_one_hundred_repeats_give_byte_identical_bundles():
    store = conversation_store()
    first = _run(RetrievalSettings(), store)[FINAL_NODE].to_json()
    assert all(_run(RetrievalSettings(), store)[FINAL_NODE].to_json() == first for _ in range(100))


class _ShuffledStore(FakeStore):
    """Returns the same hits and objects in a different order each call."""

    def __init__(self, *args, seed: int, **kwargs):
        super().__init__(*args, **kwargs)
        self._random = random.Random(seed)

    def get_objects(self, ids, namespaces):
        items = list(super().get_objects(ids, namespaces).items())
        self._random.shuffle(items)
        return dict(items)

    def pinned_objects(self, namespaces):
        found = super().pinned_objects(namespaces)
        self._random.shuffle(found)
        return found

    def adjacency(self, namespaces):
        edges = list(super().adjacency(namespaces).edges)
        self._random.shuffle(edges)
        return Adjacency(edges)

    def session_neighbours(self, triggers, window, namespaces):
        found = super().session_neighbours(triggers, window, namespaces)
        self._random.shuffle(found)
        return found


@pytest.mark.parametrize("name", ["defaults", "graph_ranked_list", "weighted"])
def test_the_order_candidates_arrive_in_does_not_change_the_bundle(name):
    settings = CONFIGURATIONS[name]
    base = conversation_store()
    expected = _run(settings, base)[FINAL_NODE].to_json()
    for seed in range(10):
        shuffled = _ShuffledStore(list(base.objects.values()), base.edges, seed=seed)
        assert _run(settings, shuffled)[FINAL_NODE].to_json() == expected


def test_the_order_edges_arrive_in_does_not_change_the_graph_path():
    from rms_retrieval.nodes import candidate_generation, query_analysis
    from rms_retrieval.nodes.models import QueryAnalysis, QueryEntity
    from rms_retrieval.nodes.pools import CandidateLimits

    ann, bo = (make_object(n, n, node_type=NodeType.ENTITY, entity_canonical_name=n) for n in ("Ann", "Bo"))
    turns = [make_object(f"t{i}", f"turn {i}") for i in range(4)]
    # Every turn is one hop from both entities: which edge reaches it first is the edge-id order.
    edges = [Edge(2 * i + k + 1, turn.id, entity.id, "MENTIONS", 0.9)
             for i, turn in enumerate(turns) for k, entity in enumerate((bo, ann))]
    entities = tuple(QueryEntity(name=e.content, confidence=0.9, matched_ids=(e.id,)) for e in (ann, bo))
    analysis = QueryAnalysis(raw_query="q", entities=entities, namespace_scope=("ns",), reference_time=make_request().reference_time)
    request = make_request()

    def found(store):
        result = candidate_generation.graph_candidates(
            analysis, query_analysis.entity_catalog(store, request), store, CandidateLimits(5, 5, 50), request,
            RetrievalSettings())
        return [(hit.object_id, hit.detail["edge_path"]) for hit in result.hits]

    expected = found(FakeStore([ann, bo, *turns], edges))
    assert [path for _, path in expected] == [[1], [3], [5], [7]]
    for seed in range(5):
        assert found(_ShuffledStore([ann, bo, *turns], edges, seed=seed)) == expected


class _ThreadRecordingSnapshot(LexicalIndex, VectorIndex, GraphIndex, ObjectStore, RetrievalLog):
    """A real store snapshot that notes which thread ran each search (a delegate, not a fake)."""

    def __init__(self, snapshot):
        self._snapshot = snapshot
        self.threads: dict[str, int] = {}

    def _noted(self, name: str):
        self.threads[name] = threading.get_ident()
        time.sleep(0.05)  # long enough that a parallel path starts meanwhile
        return getattr(self._snapshot, name)

    @property
    def embedding_identity(self):
        return self._snapshot.embedding_identity

    def search_lexical(self, text, namespaces, limit, fields=PLAIN_FIELDS):
        return self._noted("search_lexical")(text, namespaces, limit, fields)

    def search_vector(self, vector, namespaces, limit):
        return self._noted("search_vector")(vector, namespaces, limit)

    def entity_catalog(self, namespaces):
        return self._snapshot.entity_catalog(namespaces)

    def adjacency(self, namespaces):
        return self._snapshot.adjacency(namespaces)

    def get_objects(self, ids, namespaces):
        return self._snapshot.get_objects(ids, namespaces)

    def pinned_objects(self, namespaces):
        return self._noted("pinned_objects")(namespaces)

    def session_neighbours(self, triggers, window, namespaces):
        return self._snapshot.session_neighbours(triggers, window, namespaces)

    def state_fingerprint(self):
        return self._snapshot.state_fingerprint()

    def log_retrieval(self, record):
        return None


def test_execution_threads_runs_the_candidate_paths_in_parallel_for_the_same_bundle(demo_store, demo_copy):
    """RFC 4: the paths run in parallel; `execution="threads"` does, and gives the sequential bundle."""
    from rms_retrieval.dataflows.retrieval import retrieve
    from rms_retrieval.stores.memory_store import MemoryStore

    bundles, threads = {}, {}
    with MemoryStore.open(demo_copy, create=False) as store:
        for execution in ("sequential", "threads"):
            snapshot = _ThreadRecordingSnapshot(store.snapshot())
            result = retrieve(snapshot, "Where does Tomas work now?", namespaces=[demo_store.namespace],
                              reference_time=demo_store.reference_time, log=False,
                              settings=RetrievalSettings(execution=execution))
            bundles[execution], threads[execution] = result.bundle.to_json(), snapshot.threads
    assert bundles["threads"] == bundles["sequential"]
    assert set(threads["sequential"]) == set(threads["threads"]) == {"search_lexical", "search_vector", "pinned_objects"}
    assert len(set(threads["sequential"].values())) == 1
    assert len(set(threads["threads"].values())) > 1
    assert RetrievalSettings(execution="threads").fingerprint() == RetrievalSettings().fingerprint()


@pytest.mark.parametrize("execution", ["sequential", "threads"])
def test_a_request_leaves_no_node_value_to_the_cyclic_collector(execution):
    # Hamilton's walk is a closure over its memo, in a reference cycle; EmptiedMemoExecutor empties
    # the memo, so what the nodes made goes when the request's last reference does.
    settings = RetrievalSettings(execution=execution)
    store = conversation_store()
    _run(settings, store)
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        bundle = _run(settings, store)[FINAL_NODE]
        gc.collect()
        ours = [type(obj).__qualname__ for obj in gc.garbage if type(obj).__module__.startswith("rms_retrieval")]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert bundle.items
    assert ours == []


@pytest.mark.parametrize("name", sorted(CONFIGURATIONS))
@pytest.mark.parametrize("overridden", [False, True])
def test_the_planned_walk_runs_hamiltons_nodes_with_those_that_need_the_embedding_last_to_the_same_bundle(
        name, overridden, monkeypatch):
    settings = CONFIGURATIONS[name]
    fg = build_driver(settings).graph
    store = conversation_store()
    wanted = [FINAL_NODE, "query_embedding", "fused_scores"]
    called: list[str] = []
    call = hamilton_node.Node.__call__
    monkeypatch.setattr(hamilton_node.Node, "__call__", lambda self, **kwargs: (called.append(self.name), call(self, **kwargs))[1])

    def inputs():
        request = make_request("What did Caroline do at the support group?")
        return graph_functions.combine_config_and_inputs(fg.config, pipeline_inputs(store, request, settings, FakeEncoder()))

    overrides = {}
    if overridden:  # as replay runs: the logged embedding in place of the node
        overrides["query_embedding"] = build_driver(settings).execute(["query_embedding"], inputs=pipeline_inputs(
            store, make_request("What did Caroline do at the support group?"), settings, FakeEncoder()))["query_embedding"]
    hamilton: dict = {}
    called.clear()
    graph_functions.execute_subdag([fg.nodes[name] for name in wanted], inputs(), computed=hamilton, overrides=overrides)
    hamilton_order, called[:] = list(called), []
    planned: dict = {}
    pipeline._run_plan(pipeline._plan(fg, tuple(wanted), frozenset(overrides), frozenset(inputs())), planned, overrides,
                       inputs())
    # Hamilton's order, with what needs the question's embedding after the rest, each part in its own order.
    needs = {v.name for v in build_driver(settings).what_is_downstream_of("query_embedding")}
    assert called == [n for n in hamilton_order if n not in needs] + [n for n in hamilton_order if n in needs]
    assert FINAL_NODE in called and "text_path_score_inputs" in called and "text_path_score_inputs" not in needs
    assert planned[FINAL_NODE].model_dump_json() == hamilton[FINAL_NODE].model_dump_json()
    assert ("query_embedding" in called) is not overridden


def test_a_node_that_fails_in_the_planned_walk_is_logged_as_hamilton_logs_it_and_raised(caplog):
    class Failing(FakeEncoder):
        def encode(self, texts):
            raise RuntimeError("the encoder is down")

    request = make_request("What did Caroline do at the support group?")
    inputs = pipeline_inputs(conversation_store(), request, RetrievalSettings(), Failing())
    with caplog.at_level("ERROR", logger=graph_functions.logger.name), pytest.raises(RuntimeError, match="is down"):
        build_driver(RetrievalSettings()).execute([FINAL_NODE], inputs=inputs)
    assert [record for record in caplog.records if "query_embedding" in record.getMessage()]


class _MeetsTheLexicalPath(FakeEncoder):
    """Encodes only once the lexical path has asked the store (which waits for the encoding to
    start), each waiting at most 10 s: whether either waited in vain says whether they ran at once."""

    def __init__(self) -> None:
        self.started, self.lexical_asked = threading.Event(), threading.Event()
        self.waited_in_vain: list[str] = []

    def encode(self, texts):
        self.started.set()
        if not self.lexical_asked.wait(10):
            self.waited_in_vain.append("encoder")
        return super().encode(texts)

    def lexical(self, search):
        def searched(*args, **kwargs):
            if not self.started.wait(10):
                self.waited_in_vain.append("lexical path")
            self.lexical_asked.set()
            return search(*args, **kwargs)
        return searched


def test_the_question_is_embedded_while_the_other_paths_search():
    question = "What did Caroline do at the support group?"
    store, encoder = conversation_store(), _MeetsTheLexicalPath()
    store.search_lexical = encoder.lexical(store.search_lexical)
    request = make_request(question)
    result = retrieve(store, question, namespaces=request.namespaces, reference_time=request.reference_time,
                      token_budget=request.token_budget, encoder=encoder, log=False)
    assert encoder.waited_in_vain == []
    inline = _run(RetrievalSettings(), conversation_store(), question)[FINAL_NODE]  # the plain encoder, in turn
    assert result.bundle.items == inline.items and result.bundle.context == inline.context


def test_a_prefetched_encoder_encodes_other_texts_inline_and_the_question_inline_when_the_worker_is_busy():
    encoder = FakeEncoder()
    prefetched = PrefetchedEncoder(encoder, "the question")
    assert np.array_equal(prefetched.encode(["another text"]), encoder.encode(["another text"]))
    assert np.array_equal(prefetched.encode(["the question"]), encoder.encode(["the question"]))
    assert prefetched.identity == encoder.identity
    release = threading.Event()
    busy = pipeline._PREFETCH.submit(release.wait, 10)
    try:
        waiting = PrefetchedEncoder(encoder, "the question")  # queued behind the busy worker
        assert np.array_equal(waiting.encode(["the question"]), encoder.encode(["the question"]))
        assert waiting._pending.cancelled()
    finally:
        release.set()
        busy.result()


def test_a_prefetched_encoder_waits_for_its_encoding_to_start_unless_another_question_is_in_line(monkeypatch):
    monkeypatch.setattr(pipeline, "START_WAIT_SECONDS", 60)

    class Gated(FakeEncoder):
        def __init__(self) -> None:
            self.began, self.release = threading.Event(), threading.Event()

        def encode(self, texts):
            self.began.set()
            self.release.wait(60)
            return super().encode(texts)

    first = Gated()
    pipeline._PREFETCH.submit(time.sleep, 0.2)  # the worker starts on the question only after this
    prefetched = PrefetchedEncoder(first, "the question")
    assert first.began.is_set()  # the worker had started on it when the request went on
    second, behind = Gated(), []
    made = threading.Thread(target=lambda: behind.append(PrefetchedEncoder(second, "another question")))
    made.start()
    made.join(10)  # the first is in line: no wait for the second to start
    alive = made.is_alive()
    first.release.set()
    second.release.set()
    made.join()
    assert not alive
    assert np.array_equal(prefetched.encode(["the question"]), FakeEncoder().encode(["the question"]))
    behind[0]._pending.result(10)
    for _ in range(1000):  # each leaves the line once done (a future's callbacks follow its result)
        if pipeline._in_line == 0:
            break
        time.sleep(0.01)
    assert pipeline._in_line == 0


def test_a_failure_of_the_background_encoding_is_raised_where_the_embedding_is_asked_for():
    class Broken(FakeEncoder):
        def encode(self, texts):
            raise RuntimeError("the model file is unreadable")

    prefetched = PrefetchedEncoder(Broken(), "the question")
    with pytest.raises(RuntimeError, match="unreadable"):
        prefetched.encode(["the question"])


def test_a_forked_child_encodes_on_a_worker_of_its_own():
    class Recording(FakeEncoder):
        def __init__(self) -> None:
            self.threads: list[str] = []

        def encode(self, texts):
            self.threads.append(threading.current_thread().name)
            return super().encode(texts)

    warmed = PrefetchedEncoder(FakeEncoder(), "the parent's question")
    warmed.encode(["the parent's question"])  # the parent's worker thread exists now
    child = os.fork()
    if child == 0:  # exits 0 only if the child's question ran on a worker thread within 10 s
        code = 1
        try:
            encoder = Recording()
            PrefetchedEncoder(encoder, "the child's question")._pending.result(timeout=10)
            code = 0 if encoder.threads[0].startswith("rms-query-embedding") else 2
        except BaseException:
            code = 3
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
