"""Settings of the benchmark arms that give back behaviour the product no longer has: levers tried
on LoCoMo's tune split and either adopted (their arms undo them) or not proven (RM3 feedback).

`ArmSettings` is `RetrievalSettings` with six more fields; its DAG swaps three nodes for the
variants in `arm_nodes.py`, which read them. With every extra field at its default an arm retrieves
exactly as the product does (`tests/test_bench_arms.py`).
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from rms_retrieval.nodes.candidate_settings import CandidateSettings
from rms_retrieval.nodes.settings import PackingSettings, RetrievalSettings, ScoringSettings


class ArmCandidates(CandidateSettings):
    """RM3-style pseudo-relevance feedback for BM25 (`feedback.py`); 0 terms: off (the RFC has none)."""

    lexical_feedback_terms: int = Field(default=0, ge=0, le=50)
    lexical_feedback_docs: int = Field(default=10, ge=1, le=100)
    lexical_feedback_weight: float = Field(default=0.3, ge=0.0, le=10.0)


class ArmScoring(ScoringSettings):
    """False: temporal affinity reads the question's dates only under TEMPORAL intent (before issue 15)."""

    temporal_any_intent: bool = True


class ArmPacking(PackingSettings):
    """Inside a tier items go by score / tokens ** density_exponent (0.25 was the default before issue 15)."""

    density_exponent: float = Field(default=0.0, ge=0.0, le=1.0)


class ArmSettings(RetrievalSettings):
    """The retrieval settings of one benchmark arm."""

    dataflow_variants: ClassVar[tuple[str, ...]] = ("rms_retrieval.dataflows.bench.arm_nodes",)

    candidates: ArmCandidates = ArmCandidates()
    scoring: ArmScoring = ArmScoring()
    packing: ArmPacking = ArmPacking()
