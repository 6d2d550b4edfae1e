"""Opt-in query reformulation (experimental retrieval policies): a provider turns the question
into alternative questions, each runs the vector, lexical and graph paths again, and the merge
policy decides what their hits add to the question's own pool.

Hamilton config `reformulation` switches it (`on` while `reformulation.enabled`). The policies:

- `new_only` (default): an alternative's hit for an object the question's own paths found is
  dropped; an object only alternatives found joins the pool with its best hit per path.
- `max_signals`: as `new_only` for new objects; an object already in the pool also takes the
  union of the distinct paths and, per path, the hit with the largest signal: the semantic
  (cosine), the normalised lexical and the graph proximity score.

An alternative equal to the question or to an earlier alternative (case and spacing aside) is
dropped: a repeated question is not another backend. Identity is the same stored object, and the
same object read by another pass must be the identical record. Failure rules: a provider failure
gives no alternatives and is recorded apart (`Reformulations.provider_failure`); an alternative
pass's backend failure, an embedding mismatch or a non-finite signal, and a record that differs
between passes (a conflicting snapshot), abort the request before anything is merged, after every
alternative pass has run. Scoring, filtering and packing then run as always.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from uuid import UUID

from hamilton.function_modifiers import config

from rms_retrieval.nodes.candidate_generation import (graph_candidates, lexical_candidates, objects_of,
                                                      vector_candidates)
from rms_retrieval.nodes.models import QueryEmbedding, Reformulations, RetrievalRequest
from rms_retrieval.nodes.pools import (AlternatePasses, Candidate, CandidateLimits, CandidatePool, ChannelHit,
                                       ChannelResult, PathType)
from rms_retrieval.nodes.query_analysis import query_analysis
from rms_retrieval.nodes.settings import RetrievalSettings
from rms_retrieval.stores.models import MemoryObject
from rms_retrieval.stores.analysis.entity_catalog import EntityCatalog
from rms_retrieval.stores.protocols import QueryEncoder, QueryReformulator, RetrievalStore

# The signal each path's hits are compared by under max_signals.
_SIGNALS = {PathType.VECTOR: "raw_score", PathType.LEXICAL: "score", PathType.GRAPH: "score"}


class ReformulationError(ValueError):
    """An alternative pass cannot be merged (the failure rules); the request is aborted."""


def _key(question: str) -> str:
    return " ".join(question.casefold().split())


def distinct_alternatives(question: str, alternatives: Sequence[str], limit: int) -> tuple[str, ...]:
    """At most `limit` alternatives, without blanks, repeats of the question or of each other."""
    seen = {_key(question)}
    kept = []
    for text in alternatives:
        key = _key(text)
        if key and key not in seen:
            seen.add(key)
            kept.append(" ".join(text.split()))
    return tuple(kept[:limit])


@config.when(reformulation="on")
def query_reformulations(
    request: RetrievalRequest,
    query_reformulator: QueryReformulator,
    query_encoder: QueryEncoder,
    query_embedding: QueryEmbedding | None,
    settings: RetrievalSettings,
) -> Reformulations:
    """The provider's alternative questions with their query vectors; none when the provider fails."""
    cfg = settings.reformulation
    try:
        offered = query_reformulator.alternatives(request.query, cfg.max_alternatives)
    except Exception as error:  # the failure rules: no alternatives, counted apart, the request goes on
        return Reformulations(provider=query_reformulator.identity,
                              provider_failure=f"{type(error).__name__}: {error}"[:500])
    alternatives = distinct_alternatives(request.query, offered, cfg.max_alternatives)
    if query_embedding is None or not alternatives:
        return Reformulations(alternatives, (None,) * len(alternatives), query_reformulator.identity)
    vectors = query_encoder.encode(list(alternatives))
    embeddings = tuple(QueryEmbedding(vector, query_encoder.identity) for vector in vectors)
    return Reformulations(alternatives, embeddings, query_reformulator.identity)


def _pass_failures(number: int, results: Sequence[ChannelResult]) -> list[str]:
    failures = []
    for result in results:
        if result.embedding_mismatch:
            failures.append(f"alternative {number}'s {result.path} path: embedding mismatch")
        elif result.failure:
            failures.append(f"alternative {number}'s {result.path} path failed: {result.failure}")
        bad = next((h for h in result.hits if not (math.isfinite(h.raw_score) and math.isfinite(h.score))), None)
        if bad is not None:
            failures.append(f"alternative {number}'s {result.path} path gave {bad.object_id} a non-finite score")
    return failures


@config.when(reformulation="on")
def alternate_candidates(
    query_reformulations: Reformulations,
    entity_catalog: EntityCatalog,
    store_snapshot: RetrievalStore,
    candidate_limits: CandidateLimits,
    request: RetrievalRequest,
    settings: RetrievalSettings,
) -> AlternatePasses:
    """The vector, lexical and graph paths run for each alternative question; every pass settles
    before a failure aborts the request (ReformulationError), and nothing is merged then."""
    passes, failures = [], []
    objects: dict[UUID, MemoryObject] = {}
    for number, (text, embedding) in enumerate(
            zip(query_reformulations.alternatives, query_reformulations.embeddings), start=1):
        alternate = request.model_copy(update={"query": text})
        analysis = query_analysis(alternate, entity_catalog, settings)
        results = (
            vector_candidates(embedding, store_snapshot, candidate_limits, alternate, settings),
            lexical_candidates(store_snapshot, candidate_limits, alternate, settings),
            graph_candidates(analysis, entity_catalog, store_snapshot, candidate_limits, alternate, settings),
        )
        failures += _pass_failures(number, results)
        passes.append(results)
        if not failures:
            objects.update(objects_of(results, store_snapshot, alternate))
    if failures:
        raise ReformulationError("query reformulation aborted before merging: " + "; ".join(failures))
    return AlternatePasses(tuple(passes), objects)


def _best(hits: Sequence[ChannelHit]) -> ChannelHit:
    """The hit with the largest signal of its path; the earliest pass wins a tie."""
    signal = _SIGNALS[hits[0].path]
    return max(hits, key=lambda hit: getattr(hit, signal))


def merge_alternates(pool: CandidatePool, alternates: AlternatePasses, merge_policy: str) -> CandidatePool:
    """The question's own pool with what the alternative passes add under `merge_policy`."""
    found: dict[UUID, dict[PathType, list[ChannelHit]]] = {}
    for results in alternates.passes:
        for result in results:
            for hit in result.hits:
                found.setdefault(hit.object_id, {}).setdefault(hit.path, []).append(hit)
    own = pool.by_id
    conflicts = sorted(str(oid) for oid in found if oid in own and oid in alternates.objects
                       and alternates.objects[oid] != own[oid].object)
    if conflicts:
        raise ReformulationError(f"query reformulation aborted before merging: {len(conflicts)} objects read "
                                 f"differently by the alternative passes (first {conflicts[0]}), a conflicting snapshot")
    merged: dict[UUID, Candidate] = dict(own)
    for oid, by_path in found.items():
        best = {path: _best(hits) for path, hits in by_path.items()}
        if oid not in own:
            obj = alternates.objects.get(oid)
            if obj is not None:  # an object deleted since the search is no candidate
                merged[oid] = Candidate(obj, {p: best[p] for p in PathType if p in best})
        elif merge_policy == "max_signals":
            hits = dict(own[oid].hits)
            for path, hit in best.items():
                mine = hits.get(path)
                if mine is None or getattr(hit, _SIGNALS[path]) > getattr(mine, _SIGNALS[path]):
                    hits[path] = hit
            merged[oid] = Candidate(own[oid].object, {p: hits[p] for p in PathType if p in hits})
    return CandidatePool(
        candidates=tuple(merged[oid] for oid in sorted(merged, key=lambda u: u.int)),
        backend_failures=pool.backend_failures, embedding_mismatch=pool.embedding_mismatch,
        paths_at_limit=pool.paths_at_limit,
    )
