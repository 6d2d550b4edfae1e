"""Validated settings of the opt-in experimental policies (RFC 7.3 and
`experimental-retrieval-policies.txt`): cross-encoder reranking and query reformulation. Both are
off by default; `RetrievalSettings.rerank` and `.reformulation` hold them, and each section enters
the settings fingerprint only when it differs from its default."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

RerankerPolicy = Literal["legacy", "score_envelope", "anchored_score_envelope"]
RERANKER_POLICIES: tuple[str, ...] = get_args(RerankerPolicy)
# The prior weight the legacy blend was written for; any other needs an envelope policy (RFC 7.3).
LEGACY_PRIOR_WEIGHT = 0.3


class RerankSettings(BaseModel):
    """The opt-in cross-encoder over the top of the scored pool (RFC 7.3, experimental policies).

    Setting a policy does not enable reranking; `enabled` does (Hamilton config `reranker`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(default=False, description="enable_reranker: off until a confirm split supports it.")
    top_k: int = Field(default=100, ge=1, le=2000, description="reranker_top_k: the scored pool's prefix reranked.")
    prior_weight: float = Field(
        default=LEGACY_PRIOR_WEIGHT, ge=0.0, le=1.0,
        description="reranker_prior_weight: the weight of a candidate's own score in the prefix's new order; "
                    "the cross-encoder gets the rest.",
    )
    policy: RerankerPolicy = Field(
        default="legacy",
        description="legacy: the prefix carries the blend as its score; score_envelope: the prefix takes its "
                    "original sorted scores in the new order; anchored_score_envelope: the same, the best "
                    "ordinary multi-path candidate first.",
    )
    max_tokens: int = Field(default=512, ge=16, le=512, description="Question and record, cut to the model's input limit.")

    @model_validator(mode="after")
    def _weight_needs_an_envelope(self) -> RerankSettings:
        if self.prior_weight != LEGACY_PRIOR_WEIGHT and self.policy == "legacy":
            raise ValueError(
                f"rerank.prior_weight {self.prior_weight} needs an envelope policy: under legacy the prefix would "
                f"carry raw blends beside the tail's own scores; set rerank.policy to score_envelope or "
                f"anchored_score_envelope, or keep the weight at {LEGACY_PRIOR_WEIGHT}"
            )
        return self


class ReformulationSettings(BaseModel):
    """Opt-in query reformulation (experimental policies): a provider's alternative questions run
    the vector, lexical and graph paths again, merged by `merge_policy` (Hamilton config `reformulation`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(default=False, description="enable_query_reformulation.")
    merge_policy: Literal["new_only", "max_signals"] = Field(
        default="new_only",
        description="new_only: alternative passes only add candidates the question did not find; max_signals: "
                    "an existing candidate also takes the union of the paths and the maximum semantic, "
                    "normalised lexical and graph signals.",
    )
    max_alternatives: int = Field(default=3, ge=1, le=10)
    provider: Literal["openai_chat"] = "openai_chat"
    url: str | None = Field(default=None, description="The chat-completions base URL (…/v1); else $RMS_REFORMULATION_URL.")
    model: str | None = Field(default=None, description="The chat model; else $RMS_REFORMULATION_MODEL.")
    api_key: SecretStr | None = Field(default=None, description="The API key; logged and fingerprinted as asterisks.")
    api_key_env: str = Field(default="RMS_REFORMULATION_API_KEY",
                             description="The environment variable holding the API key (the key is never logged).")
    timeout_seconds: float = Field(default=10.0, gt=0.0, le=300.0)
