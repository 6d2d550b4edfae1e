import gc
import os
import subprocess
import sys
import warnings

import pytest

from rms_retrieval.nodes import settings as settings_module
from rms_retrieval.nodes.policy_settings import ReformulationSettings, RerankSettings
from rms_retrieval.nodes.pools import PathType
from rms_retrieval.nodes.settings import (
    FilterSettings,
    IgnoredSettingWarning,
    RetrievalSettings,
    ScoringSettings,
    SessionSettings,
)


def test_defaults_and_the_structural_switch():
    settings = RetrievalSettings()
    assert settings.hamilton_config() == {"fusion": "rrf", "reranker": "off", "reformulation": "off"}
    assert RetrievalSettings(scoring=ScoringSettings(fusion="weighted")).hamilton_config()["fusion"] == "weighted"
    assert RetrievalSettings(rerank=RerankSettings(enabled=True)).hamilton_config()["reranker"] == "cross_encoder"
    assert RetrievalSettings(reformulation={"enabled": True}).hamilton_config()["reformulation"] == "on"
    assert settings.candidates.graph_max_hops == 2 and settings.candidates.graph_max_candidates == 50
    assert settings.scoring.rank_fusion.rrf_k == 60 and settings.session.rank_fusion_score_decay == 0.6


@pytest.mark.parametrize("build, field", [
    (lambda: SessionSettings(score_decay=0), "score_decay"),
    (lambda: ScoringSettings(fusion="sum"), "fusion"),
    (lambda: ScoringSettings(epistemic_weights={"OBSERVED": 1.0}), "epistemic_weights lacks"),
    (lambda: RetrievalSettings(candidates={"vector_k": -1}), "vector_k"),
    (lambda: FilterSettings(namespace_thresholds={"ns": float("nan")}), r"namespace_thresholds\['ns'\].*got nan"),
    (lambda: FilterSettings(namespace_thresholds={"ns": float("inf")}), r"namespace_thresholds\['ns'\].*got inf"),
    (lambda: FilterSettings(namespace_thresholds={"ns": -0.1}), r"namespace_thresholds\['ns'\]"),
    (lambda: FilterSettings(unverified_threshold=float("nan")), "unverified_threshold"),
])
def test_bad_settings_are_rejected_naming_the_field(build, field):
    with pytest.raises(ValueError, match=field):
        build()


def test_the_opt_in_policies_change_the_fingerprint_only_when_set():
    default = RetrievalSettings().fingerprint()
    # The defaults' fingerprint without the policies (it moved once, when the benchmark-only settings
    # left RetrievalSettings): unset policies keep every bundle's bytes.
    assert default == "9e414eaba0e5a9c2"
    assert RetrievalSettings(rerank=RerankSettings(), reformulation=ReformulationSettings()).fingerprint() == default
    variants = [RetrievalSettings(rerank=RerankSettings(enabled=True)),
                RetrievalSettings(rerank=RerankSettings(enabled=True, policy="score_envelope")),
                RetrievalSettings(rerank=RerankSettings(enabled=True, policy="score_envelope", prior_weight=0.0)),
                RetrievalSettings(rerank=RerankSettings(policy="score_envelope")),
                RetrievalSettings(reformulation=ReformulationSettings(enabled=True)),
                RetrievalSettings(reformulation=ReformulationSettings(enabled=True, merge_policy="max_signals")),
                RetrievalSettings(scoring={"pronoun_speakers": ["user"]}),
                RetrievalSettings(scoring={"pronoun_speakers": ["user", "assistant"]}),
                RetrievalSettings(packing={"tier_order": "score"})]
    fingerprints = {v.fingerprint() for v in variants}
    assert len(fingerprints) == len(variants) and default not in fingerprints


def test_the_fingerprint_follows_the_values_and_is_the_same_in_every_process():
    assert RetrievalSettings().fingerprint() != RetrievalSettings(session={"window": 1}).fingerprint()
    script = "from rms_retrieval.nodes.settings import RetrievalSettings; print(RetrievalSettings().fingerprint())"
    prints = {
        subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                       env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout.strip()
        for seed in (1, 2, 3)
    }
    assert prints == {RetrievalSettings().fingerprint()}


def test_a_fingerprint_is_made_once_per_settings_object_and_a_changed_copy_has_its_own():
    settings = RetrievalSettings()
    made = settings.fingerprint()
    assert settings.fingerprint() is made and made == settings._fingerprint()
    changed = settings.model_copy(update={"session": settings.session.model_copy(update={"window": 1})})
    assert changed.fingerprint() == RetrievalSettings(session={"window": 1}).fingerprint() != made
    held = len(settings_module._FINGERPRINTS)
    del changed
    gc.collect()
    assert len(settings_module._FINGERPRINTS) == held - 1  # an object's fingerprint goes with it


def test_settings_round_trip_through_json():
    settings = RetrievalSettings(candidates={"enabled_paths": {PathType.LEXICAL, PathType.VECTOR}})
    assert RetrievalSettings.model_validate_json(settings.model_dump_json()) == settings
    assert settings.model_dump(mode="json")["candidates"]["enabled_paths"] == ["LEXICAL", "VECTOR"]


def test_rank_fusion_warns_of_recency_time_and_leaves_it_out_of_the_fingerprint():
    with pytest.warns(IgnoredSettingWarning, match=r"fusion='rrf' ignores scoring.weighted.recency_time='event_time'"):
        ignored = RetrievalSettings(scoring={"weighted": {"recency_time": "event_time"}})
    assert ignored.fingerprint() == RetrievalSettings().fingerprint()
    weighted = RetrievalSettings(scoring={"fusion": "weighted"})
    stated = RetrievalSettings(scoring={"fusion": "weighted", "weighted": {"recency_time": "event_time"}})
    assert stated.fingerprint() != weighted.fingerprint()
    with pytest.raises(ValueError, match="recency_time"):
        RetrievalSettings(scoring={"fusion": "weighted", "weighted": {"recency_time": "updated_at"}})


def test_rank_fusion_warns_of_the_current_state_shift_and_leaves_it_out_of_the_fingerprint():
    with pytest.warns(IgnoredSettingWarning, match=r"fusion='rrf' ignores scoring.weighted.current_state_recency_weight"):
        ignored = RetrievalSettings(scoring={"weighted": {"current_state_recency_weight": 0.25}})
    assert ignored.fingerprint() == RetrievalSettings().fingerprint()
    weighted = RetrievalSettings(scoring={"fusion": "weighted"})
    shifted = RetrievalSettings(scoring={"fusion": "weighted", "weighted": {"current_state_recency_weight": 0.25}})
    assert shifted.fingerprint() != weighted.fingerprint()
    for bad in (0.0, 1.0, float("nan")):
        with pytest.raises(ValueError, match="current_state_recency_weight"):
            RetrievalSettings(scoring={"fusion": "weighted", "weighted": {"current_state_recency_weight": bad}})


def test_weighted_scoring_warns_of_rank_fusion_settings_and_leaves_them_out_of_the_fingerprint():
    weighted = RetrievalSettings(scoring={"fusion": "weighted"})
    with pytest.warns(IgnoredSettingWarning, match=r"fusion='weighted' ignores scoring.rank_fusion \(rrf_k=30, "
                                                    r"rrf_recency_boost=None, rrf_tie_break=None\)"):
        ignored = RetrievalSettings(scoring={"fusion": "weighted", "rank_fusion": {
            "rrf_k": 30, "rrf_recency_boost": None, "rrf_tie_break": None}})
    assert ignored.fingerprint() == weighted.fingerprint()
    assert ignored.scoring.rank_fusion.rrf_k == 30  # kept as given, and logged as given
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # neither the defaults nor rank fusion itself warn
        used = RetrievalSettings(scoring={"rank_fusion": {"rrf_k": 30}})
        RetrievalSettings.model_validate(weighted.model_dump(mode="json"))
    assert used.fingerprint() != RetrievalSettings().fingerprint()
