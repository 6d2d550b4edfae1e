import pytest

from rms_retrieval.nodes.policy_settings import RERANKER_POLICIES, ReformulationSettings, RerankSettings
from rms_retrieval.nodes.settings import RetrievalSettings


def test_both_policies_are_off_by_default_and_name_the_three_reranker_policies():
    assert RerankSettings().enabled is False and ReformulationSettings().enabled is False
    assert RERANKER_POLICIES == ("legacy", "score_envelope", "anchored_score_envelope")
    assert {RerankSettings(policy=p, prior_weight=0.3).policy for p in RERANKER_POLICIES} == set(RERANKER_POLICIES)


def test_a_prior_weight_other_than_0_3_needs_an_envelope_policy():
    with pytest.raises(ValueError, match="needs an envelope policy"):
        RerankSettings(prior_weight=0.0)
    with pytest.raises(ValueError, match="needs an envelope policy"):
        RerankSettings(prior_weight=0.5, policy="legacy")
    assert RerankSettings(prior_weight=0.0, policy="score_envelope").prior_weight == 0.0
    assert RerankSettings(prior_weight=0.0, policy="anchored_score_envelope").policy == "anchored_score_envelope"
    with pytest.raises(ValueError, match="policy"):
        RerankSettings(policy="calibrated")
    with pytest.raises(ValueError, match="merge_policy"):
        ReformulationSettings(merge_policy="everything")


def test_an_api_key_is_never_dumped():
    settings = RetrievalSettings(reformulation=ReformulationSettings(enabled=True, api_key="sk-secret"))
    assert "sk-secret" not in str(settings.model_dump(mode="json"))
    assert settings.reformulation.api_key.get_secret_value() == "sk-secret"
