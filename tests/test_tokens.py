from rms_retrieval.nodes.tokens import count_tokens


def test_counts_cl100k_base_tokens_offline():
    # cl100k_base's own counts: digits go in threes, a run of spaces before a word is one token.
    assert count_tokens("hello world") == 2
    assert count_tokens("1234567890") == 4
    assert count_tokens("        indented") == 3
    assert count_tokens("[2023-05-08] Caroline: I went to a LGBTQ support group yesterday.") == 19
    assert count_tokens("") == 0


def test_special_token_text_is_counted_as_text_not_rejected():
    assert count_tokens("<|endoftext|>") == 7
