import random

from rms_retrieval.nodes.helpers.tokens import (ITEM_TOKENS, TokenCountCache, count_context_tokens,
                                                 count_joined_tokens, count_tokens, least_tokens, tokens_within)


def test_counts_cl100k_base_tokens_offline():
    # cl100k_base's own counts: digits go in threes, a run of spaces before a word is one token.
    assert count_tokens("hello world") == 2
    assert count_tokens("1234567890") == 4
    assert count_tokens("        indented") == 3
    assert count_tokens("[2023-05-08] Caroline: I went to a LGBTQ support group yesterday.") == 19
    assert count_tokens("") == 0


def test_special_token_text_is_counted_as_text_not_rejected():
    assert count_tokens("<|endoftext|>") == 7


def test_packed_contexts_are_not_cached_and_the_item_cache_is_bounded_by_its_text():
    """Issue 21 #5: every different bundle's context stayed in an lru_cache(200_000)."""
    before = ITEM_TOKENS.characters
    for number in range(50):
        assert count_context_tokens(f"context {number} " + "word " * 2000) == 2004
    assert ITEM_TOKENS.characters == before
    small = TokenCountCache(characters=100)
    for number in range(40):
        assert small.count(f"item number {number}") == count_context_tokens(f"item number {number}")
        assert small.characters <= 100
    assert small.count("x" * 500) == count_context_tokens("x" * 500) and small.characters <= 100


def test_least_tokens_never_exceeds_the_count_whatever_the_spaces_and_scripts():
    pieces = [" ", "\t", "\n", "\r", "\x0b", "\x0c", "\x1c", "\x1f", "\x85", "\xa0", "\u1680", "\u2000", "\u2028",
              "\u202f", "\u3000", "\u200b", "a", "Z", "1", "234", "'", "'s", "-", "\u2014", ".", "!", "\xe9", "\xdf",
              "\u4e2d", "\U0001f600", "\u0301", "word", " word", "don't"]
    rng = random.Random(7)
    for _ in range(20_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 14)))
        assert least_tokens(text) <= count_context_tokens(text), repr(text)
    assert least_tokens("I went to a support group yesterday.") == 7 <= count_tokens("I went to a support group yesterday.")


def test_tokens_within_counts_only_what_could_fit():
    text = "an unseen line of eleven words that no other test will count"
    assert tokens_within(text, 5) is None and ITEM_TOKENS.known(text) is None  # eleven words cannot fit in five
    assert tokens_within(text, 20) == count_context_tokens(text) == ITEM_TOKENS.known(text)
    assert tokens_within(text, 5) == count_context_tokens(text)  # a count already known is given as it is


def test_a_cache_remembers_counts_given_to_it_and_names_the_texts_it_lacks():
    cache = TokenCountCache(characters=100)
    assert cache.remember("given elsewhere", 3) == 3 and cache.known("given elsewhere") == 3
    assert cache.count("counted here") == count_context_tokens("counted here")
    assert cache.missing(["counted here", "never seen", "given elsewhere", "also new"]) == [1, 3]
    assert cache.known("never seen") is None  # naming a missing text counts nothing
    assert cache.remember("x" * 200, 7) == 7 and cache.known("x" * 200) is None and cache.characters <= 100


def test_joined_lines_count_as_their_whole_text_whatever_their_ends_and_starts():
    # Lines ending in punctuation runs (after a space or not), marks, symbols, spaces, control
    # characters, digits, letters or unassigned characters, starting with anything: the sum of
    # each line's count with its newline where no line after the first starts with whitespace,
    # the whole text counted otherwise; either way the whole text's count.
    pieces = [" ", "  ", "\t", "\n", "\r", "\x0b", "\x1c", "\x1f", "\x85", "\xa0", "\u2028", "\u3000", "\u200b",
              "a", "Z", "1", "234", "'", "'s", "'ll", "-", ".", "!", "?!", "...", "[", "]", ":", ")", " .", " ?!",
              "\xe9", "e\u0301", "\u4e2d", "\u4e00", "\u2155", "\U0001f600", "\u2014", "\u0301", "\U000e0080",
              "word", " word", "[2023-05-08] Caroline:", "<|endoftext|>"]
    rng = random.Random(11)
    for _ in range(6_000):
        lines = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 8))) for _ in range(rng.randint(0, 6))]
        assert count_joined_tokens(lines) == (count_context_tokens("\n".join(lines)) if lines else 0), repr(lines)
    assert count_joined_tokens(["I went.", "[2023-05-08] Melanie: Nice!", "x  "], " | ") == \
        count_context_tokens("I went. | [2023-05-08] Melanie: Nice! | x  ")


def test_joined_lines_are_counted_from_the_counts_the_cache_holds_for_each_line():
    lines = ["[1 May 2023] a line only this test packs.", "[2 May 2023] another one!", "the last"]
    assert count_joined_tokens(lines) == count_context_tokens("\n".join(lines))
    # A count the store gave is what is summed: no line is counted again.
    stored = ["stored " + line for line in lines]
    for line in stored:
        ITEM_TOKENS.remember(line, 100)
    newline_after = {end: count_context_tokens(end + "\n") - count_context_tokens(end) for end in (".", "!")}
    assert count_joined_tokens(stored) == 3 * 100 + sum(newline_after.values())
