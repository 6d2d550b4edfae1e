"""Pseudo-relevance feedback for BM25 (RM3-style, no LLM): the query widened by the terms that
weigh most in its own top hits.

A first BM25 search ranks the namespace; the contents of its best `docs` hits vote for their
words, each vote weighted by the hit's normalised score and the word's share of that hit's
words (the relevance model of Lavrenko and Croft, as RM3 uses it). The best words that are not
stopwords, speaker labels or already in the query are searched for as a second query, and each
document scores bm25(query) + weight * bm25(feedback words): RM3's interpolation of the original
and the feedback model, done on scores because the store's BM25 weighs each query stem once.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from uuid import UUID

from rms_retrieval.stores.protocols import LexicalHit

_WORD = re.compile(r"[a-z][a-z'\-]{2,}")
_SPEAKER_LABEL = re.compile(r"^\s*[^:\n]{1,40}:\s")
# Function words and the conversational fillers that fill every LoCoMo turn; they would
# otherwise win the vote in any set of feedback turns.
_STOPWORDS = frozenset(
    """a about above after again against all also am an and any are aren't as at be because been
    before being below between both but by can can't cannot could couldn't did didn't do does
    doesn't doing don't down during each few for from further get got had hadn't has hasn't have
    haven't having he her here hers herself him himself his how i i'm i've if in into is isn't it
    it's its itself just let's like me more most much must my myself no nor not now of off on once
    only or other ought our ours ourselves out over own really same she should so some such than
    that that's the their theirs them themselves then there there's these they they're this those
    through to too under until up very was wasn't we we're were weren't what when where which while
    who whom why will with won't would wouldn't you you're your yours yourself yourselves yeah yes
    wow hey thanks thank great awesome cool sounds sound glad good nice love lot lots totally
    definitely know think thought feel feeling make made going gonna way things thing something
    anything even still well want one time see""".split()
)


def feedback_terms(query: str, documents: Sequence[tuple[str, float]], terms: int) -> list[str]:
    """The `terms` words weighing most in `documents` ((content, normalised score) pairs, best
    first), excluding stopwords and the query's own words; ties in first-seen order."""
    if terms <= 0:
        return []
    asked = set(_WORD.findall(query.lower()))
    weights: Counter[str] = Counter()
    for content, score in documents:
        words = [word for word in _WORD.findall(_SPEAKER_LABEL.sub("", content).lower())
                 if word not in _STOPWORDS and word not in asked]
        if not words:
            continue
        for word, count in Counter(words).items():
            weights[word] += max(score, 0.0) * count / len(words)
    ranked = sorted(weights.items(), key=lambda item: -item[1])
    return [word for word, weight in ranked[:terms] if weight > 0.0]


def interpolated_hits(
    original: Sequence[LexicalHit], feedback: Sequence[LexicalHit], weight: float, limit: int
) -> list[LexicalHit]:
    """The union of both searches scored bm25(query) + weight * bm25(feedback terms), the best
    `limit` first, ties by object id (as the store orders them), scores min-max normalised again."""
    raw: dict[UUID, float] = {hit.object_id: hit.bm25 for hit in original}
    for hit in feedback:
        raw[hit.object_id] = raw.get(hit.object_id, 0.0) + weight * hit.bm25
    ranked = sorted(raw.items(), key=lambda item: (-item[1], item[0].int))[:limit]
    if not ranked:
        return []
    low, high = ranked[-1][1], ranked[0][1]
    spread = high - low
    return [LexicalHit(object_id, bm25, (bm25 - low) / spread if spread > 0 else 1.0) for object_id, bm25 in ranked]
