"""The human-readable form of a bundle: what `rms query` and `rms demo` print without --json."""

from __future__ import annotations

from collections import Counter

from rms_retrieval.nodes.bundle import MemoryBundle


def format_bundle(bundle: MemoryBundle) -> str:
    """A header (question, namespaces, intent, tokens), warnings, one line per item, exclusion counts."""
    meta = bundle.retrieval_metadata
    lines = [
        f"question: {bundle.query}",
        f"namespaces: {', '.join(bundle.namespaces)}   intent: {meta.intent}   "
        f"tokens: {bundle.tokens_used}/{bundle.token_budget}   items: {len(bundle.items)}",
    ]
    if meta.embedding_mismatch:
        lines.append("warning: embedding model mismatch, the vector path was not used")
    for path, reason in meta.backend_failures.items():
        lines.append(f"warning: {path} path failed: {reason}")
    for rank, item in enumerate(bundle.items, start=1):
        paths = "+".join(str(p) for p in item.paths)
        when = f"{item.event_time:%Y-%m-%d}" if item.event_time else "undated   "
        lines.append(f"{rank:3d}. tier {item.tier}  {item.score:.6f}  {paths:<36} {when}  {item.text}")
    reasons = Counter(meta.excluded.values())
    if reasons:
        lines.append("excluded: " + ", ".join(f"{n} {r}" for r, n in sorted(reasons.items())))
    return "\n".join(lines)
