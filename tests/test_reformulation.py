"""Query reformulation (experimental policies): the chat-completions provider against a real HTTP
server on 127.0.0.1 that the test starts, the two merge policies with exact expectations, the
failure rules, and the whole pipeline with its log record and replay."""

from __future__ import annotations


import pytest

from rms_retrieval.dataflows.replay import ReplayError, RefusingReformulator, replay
from rms_retrieval.dataflows.retrieval import retrieve
from rms_retrieval.nodes.pools import AlternatePasses, CandidatePool, ChannelHit, ChannelResult, PathType
from rms_retrieval.nodes.reformulation import (ReformulationError, alternate_candidates, distinct_alternatives,
                                               merge_alternates, query_reformulations)
from rms_retrieval.nodes.policy_settings import ReformulationSettings
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.providers.chat_reformulator import ChatCompletionsReformulator
from rms_retrieval.stores.memory_store import MemoryStore
from tests.chat_server import FAILURES, broken, running_chat_server
from tests.factories import FakeEncoder, conversation_store, make_candidate, make_object, make_request


@pytest.fixture
def chat():
    with running_chat_server() as server:
        server.reply = "1. Where is Tomas employed these days?\n2. Tomas's current job\n- where does tomas work now?"
        yield server


def test_the_provider_posts_the_question_and_reads_one_alternative_per_line(chat):
    provider = ChatCompletionsReformulator(chat.url, "small-model", api_key="sk-test", timeout_seconds=5)
    found = provider.alternatives("Where does Tomas work now?", 5)
    assert found == ("Where is Tomas employed these days?", "Tomas's current job", "where does tomas work now?")
    path, headers, body = chat.requests[0]
    assert path == "/v1/chat/completions" and headers["Authorization"] == "Bearer sk-test"
    assert body["model"] == "small-model" and body["messages"][-1] == {"role": "user", "content": "Where does Tomas work now?"}
    assert provider.alternatives("q", 1) == ("Where is Tomas employed these days?",)
    assert "sk-test" not in provider.identity and chat.url in provider.identity


def test_settings_or_the_environment_name_the_endpoint_and_the_key(chat):
    env = {"RMS_REFORMULATION_URL": chat.url, "RMS_REFORMULATION_MODEL": "m", "MY_KEY": "sk-env"}
    provider = ChatCompletionsReformulator.from_settings(ReformulationSettings(api_key_env="MY_KEY"), env)
    provider.alternatives("q", 2)
    assert chat.requests[-1][1]["Authorization"] == "Bearer sk-env"
    with pytest.raises(ValueError, match="needs a chat-completions endpoint"):
        ChatCompletionsReformulator.from_settings(ReformulationSettings(), {})


@pytest.mark.parametrize("break_it", FAILURES)
def test_a_provider_failure_gives_no_alternatives_and_is_recorded(chat, break_it):
    url = broken(chat, break_it)
    provider = ChatCompletionsReformulator(url, "m", timeout_seconds=0.2)
    settings = RetrievalSettings(reformulation=ReformulationSettings(enabled=True))
    made = query_reformulations(make_request("Where does Tomas work?"), provider, FakeEncoder(), None, settings)
    assert made.alternatives == () and made.provider_failure and made.provider == provider.identity


def test_repeated_questions_are_not_more_backends():
    assert distinct_alternatives("Where does Tomas work?", ["where  does TOMAS work?", "Tomas's job", " ",
                                                            "tomas's job", "Tomas's employer"], 5) == (
        "Tomas's job", "Tomas's employer")


def _hit(obj, path, rank, raw, score=None):
    return ChannelHit(obj.id, path, rank, raw, raw if score is None else score)


def test_new_only_adds_new_objects_and_max_signals_also_merges_existing_ones():
    a, b = make_object("a"), make_object("b")
    own = CandidatePool(candidates=(make_candidate(a, VECTOR=(1, 0.5)),))
    passes = ((ChannelResult(PathType.VECTOR, hits=(_hit(a, PathType.VECTOR, 1, 0.7), _hit(b, PathType.VECTOR, 2, 0.6))),
               ChannelResult(PathType.LEXICAL, hits=(_hit(a, PathType.LEXICAL, 1, 7.5, 1.0),))),
              (ChannelResult(PathType.VECTOR, hits=(_hit(b, PathType.VECTOR, 1, 0.65),)),))
    alternates = AlternatePasses(passes, {a.id: a, b.id: b})
    new_only = merge_alternates(own, alternates, "new_only").by_id
    assert new_only[a.id].hits == own.by_id[a.id].hits
    assert new_only[b.id].paths == (PathType.VECTOR,) and new_only[b.id].hits[PathType.VECTOR].raw_score == 0.65
    merged = merge_alternates(own, alternates, "max_signals").by_id
    assert merged[a.id].paths == (PathType.VECTOR, PathType.LEXICAL) and merged[a.id].path_count == 2
    assert merged[a.id].hits[PathType.VECTOR].raw_score == 0.7 and merged[a.id].hits[PathType.LEXICAL].score == 1.0
    weaker = AlternatePasses(((ChannelResult(PathType.VECTOR, hits=(_hit(a, PathType.VECTOR, 1, 0.1),)),),), {a.id: a})
    assert merge_alternates(own, weaker, "max_signals").by_id[a.id].hits[PathType.VECTOR].raw_score == 0.5


def test_a_record_read_differently_by_another_pass_aborts_before_merging():
    a = make_object("a")
    changed = make_object("a", "memory a, edited")
    own = CandidatePool(candidates=(make_candidate(a, VECTOR=(1, 0.5)),))
    alternates = AlternatePasses(((ChannelResult(PathType.VECTOR, hits=(_hit(a, PathType.VECTOR, 1, 0.7),)),),),
                                 {a.id: changed})
    with pytest.raises(ReformulationError, match="conflicting snapshot"):
        merge_alternates(own, alternates, "max_signals")


def _alternates(store, texts, settings):
    from rms_retrieval.nodes.candidate_generation import candidate_limits
    from rms_retrieval.nodes.query_analysis import query_analysis
    from rms_retrieval.nodes.models import Reformulations, QueryEmbedding

    request = make_request("Who went to the support group?")
    catalog = store.snapshot().entity_catalog(request.namespaces)
    encoder = FakeEncoder()
    made = Reformulations(tuple(texts), tuple(QueryEmbedding(v, encoder.identity) for v in encoder.encode(texts)), "p")
    limits = candidate_limits(query_analysis(request, catalog, settings), settings)
    return alternate_candidates(made, catalog, store, limits, request, settings)


def test_an_alternative_pass_failure_aborts_after_every_pass_settles():
    settings = RetrievalSettings(reformulation=ReformulationSettings(enabled=True))
    store = conversation_store()
    found = _alternates(store, ["Caroline support group", "pottery class"], settings)
    assert len(found.passes) == 2 and found.objects
    store.fail = {"lexical"}
    with pytest.raises(ReformulationError, match="alternative 1's LEXICAL path failed.*alternative 2's LEXICAL"):
        _alternates(store, ["Caroline support group", "pottery class"], settings)


def test_an_embedding_mismatch_in_an_alternative_pass_aborts():
    from rms_retrieval.stores.protocols import EmbeddingIdentity

    store = conversation_store(identity=EmbeddingIdentity("another-model", "1" * 16, 4))
    with pytest.raises(ReformulationError, match="embedding mismatch"):
        _alternates(store, ["Caroline support group"], RetrievalSettings(reformulation=ReformulationSettings(enabled=True)))


@pytest.fixture(scope="module")
def store(demo_store):
    with MemoryStore.open(demo_store.path, create=False) as opened:
        yield opened


@pytest.mark.parametrize("policy", ["new_only", "max_signals"])
def test_the_pipeline_logs_the_alternatives_and_replays_without_the_provider(store, demo_store, chat, policy):
    settings = RetrievalSettings(reformulation=ReformulationSettings(enabled=True, merge_policy=policy, url=chat.url,
                                                                     model="m"))
    result = retrieve(store, "Where does Tomas work now?", namespaces=[demo_store.namespace],
                      reference_time=demo_store.reference_time, token_budget=300, settings=settings,
                      extra_nodes=["merged_candidates", "query_reformulations"])
    logged = result.log_record["payload"]["reformulation"]
    assert logged["alternatives"] == ["Where is Tomas employed these days?", "Tomas's current job"]
    assert logged["provider_failure"] is None and len(logged["embeddings"][0]["vector"]) == 384
    assert result.log_record["payload"]["configuration"]["reformulation"]["merge_policy"] == policy
    asked = len(chat.requests)
    report = replay(store, result.request_id)
    assert report.identical, report.to_text()
    assert len(chat.requests) == asked  # replay asked no provider
    with pytest.raises(ReplayError, match="logged alternatives"):
        RefusingReformulator("p").alternatives("q", 1)


def test_max_signals_finds_at_least_what_the_question_alone_finds(store, demo_store, chat):
    def pool(settings):
        return retrieve(store, "Where does Tomas work now?", namespaces=[demo_store.namespace],
                        reference_time=demo_store.reference_time, settings=settings, log=False,
                        extra_nodes=["merged_candidates"]).nodes["merged_candidates"].by_id

    alone = pool(RetrievalSettings())
    merged = pool(RetrievalSettings(reformulation=ReformulationSettings(
        enabled=True, merge_policy="max_signals", url=chat.url, model="m")))
    assert set(alone) <= set(merged)
    assert all(set(alone[oid].paths) <= set(merged[oid].paths) for oid in alone)


def test_a_non_finite_signal_in_an_alternative_pass_is_a_failure():
    from rms_retrieval.nodes.reformulation import _pass_failures

    nan = ChannelResult(path=PathType.LEXICAL, hits=(ChannelHit(make_object("a").id, PathType.LEXICAL, 1, float("nan"), 0.5),))
    assert _pass_failures(2, [nan]) == [f"alternative 2's LEXICAL path gave {make_object('a').id} a non-finite score"]
    assert _pass_failures(2, [ChannelResult(path=PathType.LEXICAL)]) == []
