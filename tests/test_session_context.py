"""Adjacent session context (RFC 4.5): promotion, addition, decay, provenance, re-filtering."""

from __future__ import annotations

import pytest

from rms_retrieval.dataflows.frames import scored_frame
from rms_retrieval.nodes.models import QueryAnalysis
from rms_retrieval.nodes.pools import FilteredPool, RerankedPool
from rms_retrieval.nodes.scoring import fused_scores__rrf, fused_scores__weighted
from rms_retrieval.nodes.session_context import ranked_candidates, session_context
from rms_retrieval.nodes.settings import RetrievalSettings, SessionSettings
from tests.factories import BASE_TIME, FakeStore, make_candidate, make_object, make_request, oid


def _turn(name, seq, **fields):
    return make_object(name, f"turn {name}", session_id="s1", session_seq=seq, **fields)


def _run(candidates, objects, settings=None):
    settings = settings or RetrievalSettings()
    pool = FilteredPool(tuple(candidates), {})
    analysis = QueryAnalysis(raw_query="q", namespace_scope=("ns",), reference_time=BASE_TIME)
    fused = fused_scores__rrf(pool, analysis, settings)
    store = FakeStore(objects)
    links = session_context(RerankedPool(fused), store, make_request(namespaces=("ns",)), settings)
    return fused, ranked_candidates(RerankedPool(fused), links, pool, make_request(), settings, {})


def test_new_neighbours_join_with_the_decayed_trigger_score_and_provenance():
    t0, t1, t2 = _turn("t0", 0), _turn("t1", 1), _turn("t2", 2)
    trigger = make_candidate(t1, VECTOR=(1, 0.9), LEXICAL=(1, 1.0))
    fused, ranked = _run([trigger], [t0, t1, t2])
    frame = scored_frame(ranked).set_index("object_id")
    assert list(frame.index)[0] == str(t1.id)
    for neighbour, offset in ((t0, -1), (t2, 1)):
        row = frame.loc[str(neighbour.id)]
        assert row["score"] == pytest.approx(1.0 * 0.6)
        assert row["paths"] == ("SESSION_CONTEXT",) and row["path_count"] == 1
        assert row["session_trigger"] == str(t1.id) and row["session_offset"] == offset
        assert row["session_decay"] == 0.6
        assert row["semantic_relevance"] == pytest.approx(0.9)
    assert set(ranked.pool.object_ids) == {t0.id, t1.id, t2.id}


def test_a_neighbour_already_in_the_pool_is_promoted_but_keeps_its_path_count():
    t0, t1 = _turn("t0", 0), _turn("t1", 1)
    weak = make_candidate(t0, VECTOR=(40, 0.1))
    strong = make_candidate(t1, VECTOR=(1, 0.9), LEXICAL=(1, 1.0))
    _, ranked = _run([weak, strong], [t0, t1])
    row = scored_frame(ranked).set_index("object_id").loc[str(t0.id)]
    assert row["paths"] == ("VECTOR", "SESSION_CONTEXT") and row["path_count"] == 1
    assert row["score"] == pytest.approx(0.6)


def test_neighbours_are_filtered_again():
    t0, t1 = _turn("t0", 0, epistemic_type="DEPRECATED"), _turn("t1", 1)
    _, ranked = _run([make_candidate(t1, VECTOR=(1, 0.9))], [t0, t1])
    assert ranked.excluded == {t0.id: "DEPRECATED"}
    assert str(t0.id) not in set(scored_frame(ranked)["object_id"])


def test_window_zero_turns_session_context_off():
    t0, t1 = _turn("t0", 0), _turn("t1", 1)
    off = RetrievalSettings(session=SessionSettings(window=0))
    _, ranked = _run([make_candidate(t1, VECTOR=(1, 0.9))], [t0, t1], settings=off)
    assert list(scored_frame(ranked)["object_id"]) == [str(t1.id)]


def test_neighbours_inherit_from_their_triggers_own_score_not_a_promoted_one():
    t0, t1, t2 = _turn("t0", 0), _turn("t1", 1), _turn("t2", 2)
    strong = make_candidate(t0, VECTOR=(1, 0.9), LEXICAL=(1, 1.0))  # fused 1.0
    weak = make_candidate(t1, VECTOR=(2, 0.5))  # fused 0.4919..., promoted to 0.6 by t0
    one = RetrievalSettings(session=SessionSettings(window=1))
    fused, ranked = _run([strong, weak], [t0, t1, t2], settings=one)
    own = scored_frame(fused).set_index("object_id").loc[str(t1.id), "score"]
    frame = scored_frame(ranked).set_index("object_id")
    assert frame.loc[str(t1.id), "score"] == pytest.approx(0.6)
    assert frame.loc[str(t2.id), "session_trigger"] == str(t1.id)
    assert frame.loc[str(t2.id), "score"] == pytest.approx(round(own * 0.6, 10))


def _packed(candidates, objects, settings):
    from rms_retrieval.nodes.packing import packed_bundle, selected_candidates
    from rms_retrieval.nodes.pools import CandidatePool

    _, ranked = _run(candidates, objects, settings)
    merged = CandidatePool(tuple(candidates))
    analysis = QueryAnalysis(raw_query="q", namespace_scope=("ns",), reference_time=BASE_TIME)
    selection = selected_candidates(ranked, merged, make_request())
    return ranked, packed_bundle(selection, ranked, FilteredPool(tuple(candidates), {}), merged, analysis,
                                 make_request(), settings)


def test_session_context_packing_counts_the_session_path_links_neighbours_and_lifts_them_to_their_triggers_tier():
    """RFC 4.5 and 8 item 2 (opt-in): the session path counts toward path_count; each neighbour
    that is not itself a trigger is linked to the highest-ranked trigger whose window holds it,
    and packs in tier 2 behind a tier 2 trigger."""
    t0, t1, t2, t3 = _turn("t0", 0), _turn("t1", 1), _turn("t2", 2), _turn("t3", 3)
    strong = make_candidate(t1, VECTOR=(1, 0.9), LEXICAL=(1, 1.0))  # two paths: tier 2
    weak = make_candidate(t0, VECTOR=(40, 0.1))
    lone = make_candidate(make_object("lone", "elsewhere"), VECTOR=(2, 0.8))  # one path, no session
    on = RetrievalSettings(session=SessionSettings(top_triggers=1, context_packing=True))
    ranked, bundle = _packed([strong, weak, lone], [t0, t1, t2, t3, lone.object], on)
    frame = scored_frame(ranked).set_index("object_id")
    assert frame.loc[str(t0.id), "path_count"] == 2  # VECTOR and SESSION_CONTEXT
    assert frame.loc[str(t2.id), "path_count"] == 1  # found by the session path alone
    assert dict(ranked.session_links) == {t0.id: (t1.id, -1), t2.id: (t1.id, 1), t3.id: (t1.id, 2)}
    items = {item.id: item for item in bundle.items}
    assert [items[t.id].tier for t in (t1, t0, t2, t3)] == [2, 2, 2, 2] and items[lone.object.id].tier == 3
    assert items[t2.id].session_context_link.model_dump() == {"trigger": t1.id, "offset": 1}
    assert '"session_context_link":{"trigger":"%s","offset":-1}' % t1.id in bundle.to_json()
    assert items[t1.id].session_context_link is None

    _, default = _packed([strong, weak, lone], [t0, t1, t2, t3, lone.object],
                         RetrievalSettings(session=SessionSettings(top_triggers=1)))
    assert "session_context_link" not in default.to_json()
    assert {item.id: item.tier for item in default.items}[t2.id] == 3
    assert RetrievalSettings(session=SessionSettings(context_packing=True)).fingerprint() != RetrievalSettings().fingerprint()


def test_episode_context_marks_the_matching_records_of_the_best_episode_and_packs_them_after_pins():
    """RFC 4.6 (opt-in): the episode whose pool records best match the question by BM25 lends
    its strongest score, times episode_decay, to its best matching records, which carry
    EPISODE_CONTEXT as one more path and pack first in tier 2."""
    from rms_retrieval.nodes.settings import PackingSettings

    strong = make_candidate(make_object("s", "we had lunch by the river", session_id="s1", session_seq=0),
                            VECTOR=(1, 0.9), LEXICAL=(1, 1.0))
    kiln = make_candidate(make_object("k", "the kiln reached cone six overnight", session_id="s1", session_seq=5),
                          VECTOR=(30, 0.2))
    other = make_candidate(make_object("o", "a kiln for sale, in no session"), VECTOR=(31, 0.2))
    pair = make_candidate(make_object("p", "Two paths, another day", session_id="s2", session_seq=0),
                          VECTOR=(2, 0.8), LEXICAL=(2, 0.9))
    candidates = [strong, kiln, other, pair]
    no_session = SessionSettings(window=0)
    routed = RetrievalSettings(session=no_session, packing=PackingSettings(episode_context_top_k=1))
    request = make_request("when did the kiln reach cone six?")

    def ranked_with(settings):
        pool = FilteredPool(tuple(candidates), {})
        analysis = QueryAnalysis(raw_query=request.query, namespace_scope=("ns",), reference_time=BASE_TIME)
        fused = fused_scores__rrf(pool, analysis, settings)
        return fused, ranked_candidates(RerankedPool(fused), [], pool, request, settings, {})

    fused, ranked = ranked_with(routed)
    frame = scored_frame(ranked).set_index("object_id")
    own = scored_frame(fused).set_index("object_id")
    row = frame.loc[str(kiln.object.id)]
    assert row["paths"] == ("VECTOR", "EPISODE_CONTEXT") and row["path_count"] == 2
    assert row["score"] == pytest.approx(round(own.loc[str(strong.object.id), "score"] * 0.85, 10))
    assert dict(ranked.episode_anchors) == {kiln.object.id: strong.object.id}  # the river turn matched nothing
    assert "EPISODE_CONTEXT" not in frame.loc[str(other.object.id), "paths"]

    from rms_retrieval.nodes.packing import packed_bundle, selected_candidates
    from rms_retrieval.nodes.pools import CandidatePool

    merged = CandidatePool(tuple(candidates))
    analysis = QueryAnalysis(raw_query=request.query, namespace_scope=("ns",), reference_time=BASE_TIME)
    bundle = packed_bundle(selected_candidates(ranked, merged, request), ranked, FilteredPool(tuple(candidates), {}),
                           merged, analysis, request, routed)
    assert [item.id for item in bundle.items][0] == kiln.object.id and bundle.items[0].tier == 2
    plain_fused, plain = ranked_with(RetrievalSettings(session=no_session))
    assert not plain.episode_anchors and "EPISODE_CONTEXT" not in "".join(map(str, scored_frame(plain)["paths"]))
    assert routed.fingerprint() != RetrievalSettings(session=no_session).fingerprint()


def _evidence_case():
    """A source turn that two claims cite, an entity citing it too, and an unrelated memory."""
    source = make_object("src", "Caroline: I went to the LGBTQ support group on 7 May, it was so powerful.",
                         node_type="TURN", session_id="s1", session_seq=3)
    refs = (str(source.id), "D1:3")  # a dialogue id beside the object id names no stored object
    first = make_candidate(make_object("c1", "Caroline attended a support group.", node_type="FACT",
                                       evidence_refs=refs), VECTOR=(2, 0.8), LEXICAL=(2, 0.9))
    second = make_candidate(make_object("c2", "Caroline found the group powerful.", node_type="FACT",
                                        evidence_refs=refs[::-1]), VECTOR=(3, 0.85))  # ranked lower, closer
    entity = make_candidate(make_object("e", "Caroline", node_type="ENTITY", entity_canonical_name="Caroline",
                                        evidence_refs=(str(oid("other")),)), VECTOR=(1, 0.9), LEXICAL=(1, 1.0))
    other = make_object("other", "Caroline: my sister visited.", node_type="TURN")
    loose = make_candidate(make_object("u", "the weather was fine"), VECTOR=(4, 0.3))
    return source, other, first, second, entity, loose


def _evidence_run(packing, candidates, objects, request=None):
    from rms_retrieval.nodes.session_context import evidence_sources

    settings = RetrievalSettings(session=SessionSettings(window=0), packing=packing)
    request = request or make_request()
    pool = FilteredPool(tuple(candidates), {})
    analysis = QueryAnalysis(raw_query="q", namespace_scope=("ns",), reference_time=BASE_TIME)
    fused = RerankedPool(fused_scores__rrf(pool, analysis, settings))
    sources = evidence_sources(fused, FakeStore(objects), settings)
    return fused, sources, ranked_candidates(fused, [], pool, request, settings, sources)


def test_evidence_projection_replaces_the_top_group_by_the_source_its_references_name():
    """RFC 4.7 (opt-in): the strongest candidate of the top exact evidence group routes it; the
    stored object its references name replaces the group as EVIDENCE_CONTEXT with that score."""
    from rms_retrieval.nodes.settings import PackingSettings

    source, other, first, second, entity, loose = _evidence_case()
    candidates = [first, second, loose]
    fused, sources, ranked = _evidence_run(PackingSettings(evidence_projection_top_k=1), candidates,
                                           [source, *(c.object for c in candidates)])
    assert dict(sources) == {first.object.id: (source,)}  # one group: the two claims cite one exact set
    frame = scored_frame(ranked).set_index("object_id")
    own = scored_frame(fused.pool).set_index("object_id")
    row = frame.loc[str(source.id)]
    assert row["paths"] == ("EVIDENCE_CONTEXT",) and row["path_count"] == 1
    assert row["score"] == own.loc[str(first.object.id), "score"]
    assert row["semantic_relevance"] == own.loc[str(second.object.id), "semantic_relevance"] == 0.85  # the group's largest
    assert set(frame.index) == {str(source.id), str(loose.object.id)}
    assert dict(ranked.excluded) == {first.object.id: "evidence_projected", second.object.id: "evidence_projected"}
    assert dict(ranked.evidence_anchors) == {source.id: first.object.id}


def test_evidence_augmentation_adds_the_source_beside_the_group_and_packs_it_in_tier_two():
    from rms_retrieval.nodes.packing import packed_bundle, selected_candidates
    from rms_retrieval.nodes.pools import CandidatePool
    from rms_retrieval.nodes.settings import PackingSettings

    source, other, first, second, entity, loose = _evidence_case()
    candidates = [first, second, loose]
    packing = PackingSettings(evidence_augmentation_top_k=1)
    _, _, ranked = _evidence_run(packing, candidates, [source, *(c.object for c in candidates)])
    frame = scored_frame(ranked).set_index("object_id")
    assert set(frame.index) == {str(source.id), *(str(c.object.id) for c in candidates)} and not ranked.excluded
    assert frame.loc[str(source.id), "paths"] == ("EVIDENCE_CONTEXT",)
    request = make_request()
    merged = CandidatePool(tuple(candidates))
    analysis = QueryAnalysis(raw_query=request.query, namespace_scope=("ns",), reference_time=BASE_TIME)
    settings = RetrievalSettings(session=SessionSettings(window=0), packing=packing)
    bundle = packed_bundle(selected_candidates(ranked, merged, request), ranked, FilteredPool(tuple(candidates), {}),
                           merged, analysis, request, settings)
    tiers = {item.id: item.tier for item in bundle.items}
    assert tiers[source.id] == 2 and [item.id for item in bundle.items if item.tier == 2][0] == source.id


def test_a_source_already_in_the_pool_gains_the_path_and_the_higher_score():
    from rms_retrieval.nodes.settings import PackingSettings

    source, other, first, second, entity, loose = _evidence_case()
    weak_source = make_candidate(source, VECTOR=(5, 0.2))
    candidates = [first, second, loose, weak_source]
    fused, _, ranked = _evidence_run(PackingSettings(evidence_augmentation_top_k=1), candidates,
                                     [c.object for c in candidates])
    frame = scored_frame(ranked).set_index("object_id")
    own = scored_frame(fused.pool).set_index("object_id")
    assert frame.loc[str(source.id), "paths"] == ("VECTOR", "EVIDENCE_CONTEXT")
    assert frame.loc[str(source.id), "path_count"] == 2
    assert frame.loc[str(source.id), "score"] == own.loc[str(first.object.id), "score"]


def test_an_ineligible_or_foreign_source_leaves_its_group_as_it_was():
    from rms_retrieval.nodes.settings import PackingSettings

    source, other, first, second, entity, loose = _evidence_case()
    candidates = [first, second, loose]
    for unusable in (source.model_copy(update={"lifecycle_state": "DEPRECATED"}),
                     source.model_copy(update={"owner": "someone-else"}),
                     source.model_copy(update={"namespace": "elsewhere"})):
        _, _, ranked = _evidence_run(PackingSettings(evidence_projection_top_k=1), candidates,
                                     [unusable, *(c.object for c in candidates)])
        assert {o.id for o in ranked.pool.objects} == {c.object.id for c in candidates}
        assert not ranked.excluded and not ranked.evidence_anchors


def test_under_the_non_entity_policy_an_entity_never_routes_and_later_groups_fill_the_quota():
    from rms_retrieval.nodes.settings import PackingSettings

    source, other, first, second, entity, loose = _evidence_case()
    candidates = [entity, first, second, loose]
    objects = [source, other, *(c.object for c in candidates)]
    _, every, _ = _evidence_run(PackingSettings(evidence_projection_top_k=1), candidates, objects)
    assert dict(every) == {entity.object.id: (other,)}  # the entity is the strongest candidate
    _, non_entity, ranked = _evidence_run(
        PackingSettings(evidence_projection_top_k=1, evidence_anchor_policy="non_entity"), candidates, objects)
    assert dict(non_entity) == {first.object.id: (source,)}
    assert entity.object.id in {o.id for o in ranked.pool.objects}


def test_projection_and_augmentation_exclude_each_other_and_stay_out_of_the_default_fingerprint():
    from pydantic import ValidationError

    from rms_retrieval.nodes.settings import PackingSettings

    with pytest.raises(ValidationError, match="exclude each other"):
        PackingSettings(evidence_projection_top_k=1, evidence_augmentation_top_k=1)
    assert RetrievalSettings(packing=PackingSettings(evidence_projection_top_k=0)).fingerprint() == \
        RetrievalSettings().fingerprint()
    assert RetrievalSettings(packing=PackingSettings(evidence_projection_top_k=2)).fingerprint() != \
        RetrievalSettings().fingerprint()


def test_evidence_projection_in_the_pipeline_reads_the_source_from_a_real_store(tmp_path, encoder):
    """`evidence_sources` reads the store's snapshot: through `retrieve()`, the turn a claim cites
    replaces the claim in the bundle, and the bundle's exclusions say why the claim is missing."""
    from datetime import datetime, timezone

    from rms_retrieval.dataflows.retrieval import retrieve
    from rms_retrieval.nodes.settings import PackingSettings
    from rms_retrieval.stores.memory_store import MemoryStore
    from rms_retrieval.stores.models import MemoryObject

    turn = MemoryObject(namespace="ns", node_type="TURN", session_id="s1",
                        content="Caroline: I went to the LGBTQ support group yesterday, the stories were so moving.")
    claim = MemoryObject(namespace="ns", node_type="FACT", content="Caroline attended an LGBTQ support group.",
                         evidence_refs=(str(turn.id),))
    filler = [MemoryObject(namespace="ns", node_type="TURN", session_id="s2", content=f"Melanie: we painted fence {i}.")
              for i in range(5)]
    when = datetime(2025, 6, 1, tzinfo=timezone.utc)
    settings = RetrievalSettings(packing=PackingSettings(evidence_projection_top_k=1))
    with MemoryStore.open(tmp_path / "store", encoder) as store:
        store.add([turn, claim, *filler])
        bundle = retrieve(store, "Which support group did Caroline attend?", namespaces="ns", reference_time=when,
                          settings=settings, log=False, encoder=encoder).bundle
        plain = retrieve(store, "Which support group did Caroline attend?", namespaces="ns", reference_time=when,
                         log=False, encoder=encoder).bundle
    items = {item.id: item for item in bundle.items}
    assert "EVIDENCE_CONTEXT" in items[turn.id].paths and claim.id not in items
    assert bundle.retrieval_metadata.excluded[claim.id] == "evidence_projected"
    assert claim.id in {item.id for item in plain.items}


def test_under_weighted_scoring_a_neighbour_inherits_its_trigger_score_times_session_score_decay():
    t0, t1 = _turn("t0", 0), _turn("t1", 1)
    trigger = make_candidate(t1, VECTOR=(1, 0.9), LEXICAL=(1, 1.0))
    request = make_request()
    for decay in (0.85, 0.5):
        # the rank fusion decay never applies to a weighted trigger
        settings = RetrievalSettings(scoring={"fusion": "weighted"},
                                     session=SessionSettings(score_decay=decay, rank_fusion_score_decay=0.6))
        pool = FilteredPool((trigger,), {})
        analysis = QueryAnalysis(raw_query="q", namespace_scope=("ns",), reference_time=BASE_TIME)
        fused = fused_scores__weighted(pool, analysis, request, settings)
        links = session_context(RerankedPool(fused), FakeStore([t0, t1]), request, settings)
        frame = scored_frame(ranked_candidates(RerankedPool(fused), links, pool, request, settings, {})).set_index("object_id")
        assert frame.loc[str(t0.id), "score"] == pytest.approx(frame.loc[str(t1.id), "score"] * decay)
        assert frame.loc[str(t0.id), "session_decay"] == decay


def test_the_adjacent_order_packs_each_window_as_one_block_in_session_order():
    """RFC 4.5 "adjacent": a linked neighbour is offered with its trigger, in session order, not
    after every other tier 2 memory that outscores it."""
    t0, t1, t2 = _turn("t0", 0), _turn("t1", 1), _turn("t2", 2)
    strong = make_candidate(t1, VECTOR=(1, 0.9), LEXICAL=(1, 1.0))
    rival = make_candidate(make_object("rival", "other news"), VECTOR=(2, 0.8), LEXICAL=(2, 0.9))
    objects = [t0, t1, t2, rival.object]
    linked = dict(top_triggers=1, context_packing=True)
    by_score = RetrievalSettings(session=SessionSettings(**linked), packing={"item_format": "plain"})
    adjacent = RetrievalSettings(session=SessionSettings(**linked), packing={"item_format": "plain", "order": "adjacent"})
    _, scored = _packed([strong, rival], objects, by_score)
    assert [i.id for i in scored.items][:2] == [t1.id, rival.object_id]
    _, together = _packed([strong, rival], objects, adjacent)
    assert [i.id for i in together.items] == [t0.id, t1.id, t2.id, rival.object_id]
    assert together.context.splitlines() == ["turn t0", "turn t1", "turn t2", "other news"]
    with pytest.raises(ValueError, match="needs session.context_packing=True"):
        RetrievalSettings(packing={"order": "adjacent"})
