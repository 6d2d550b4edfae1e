from rms_retrieval.dataflows.demo import build_demo_store, load_demo


def test_the_demo_corpus_is_stable_and_self_consistent():
    first, second = load_demo(), load_demo()
    assert [o.id for o in first.objects] == [o.id for o in second.objects]
    assert first.namespace == "demo-priya-tomas" and len(first.sample_questions) == 4
    assert {o.node_type for o in first.objects} >= {"TURN", "ENTITY", "TASK", "PREFERENCE", "FACT"}


def test_building_the_demo_store_twice_adds_nothing_the_second_time(tmp_path):
    store, corpus = build_demo_store(tmp_path / "demo")
    with store:
        count = store.snapshot().count_objects()
        assert count >= len(corpus.objects)
    again, _ = build_demo_store(tmp_path / "demo")
    with again:
        assert again.snapshot().count_objects() == count
