"""Token counting in cl100k_base, from tiktoken's offline copy of the official file.

`count_tokens` caches what repeats, the texts of packed items (the same memories are packed again
and again), in a least-recently-used cache bounded by the bytes of text it holds, so a long-lived
server's memory stays bounded however many different items it packs. `count_context_tokens` counts
a whole packed context, which rarely repeats, without caching it; `count_joined_tokens` counts one
from the cached counts of its lines.
"""

from __future__ import annotations

import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Sequence
from functools import lru_cache

from rms_retrieval.stores.analysis.text_tokens import token_count

# Characters of item text the cache may hold (about 4 bytes a character at worst): 16 M
# characters keep every item of a 100k-turn store's recent requests for well under 100 MB.
CACHE_CHARACTERS = 16_000_000


class TokenCountCache:
    """Token counts by text, least recently used first out, holding at most `characters` of text."""

    def __init__(self, characters: int) -> None:
        self._limit = characters
        self._counts: OrderedDict[str, int] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()

    @property
    def characters(self) -> int:
        """Characters of text held now."""
        return self._held

    def known(self, text: str) -> int | None:
        """The count of `text` if it is held, else None (nothing is counted)."""
        with self._lock:
            found = self._counts.get(text)
            if found is not None:
                self._counts.move_to_end(text)
            return found

    def missing(self, texts: Sequence[str]) -> list[int]:
        """The positions of the `texts` not held, looked up under one lock (none is counted, and the
        held ones keep their place: their next `known` or `count` moves them)."""
        with self._lock:
            return [position for position, text in enumerate(texts) if text not in self._counts]

    def count(self, text: str) -> int:
        found = self.known(text)
        if found is not None:
            return found
        return self.remember(text, token_count(text))

    def remember(self, text: str, tokens: int) -> int:
        """Hold `tokens` as the count of `text` (counted elsewhere, as the store keeps counts); `tokens`."""
        if len(text) > self._limit:
            return tokens
        with self._lock:
            if text not in self._counts:
                self._counts[text] = tokens
                self._held += len(text)
                while self._held > self._limit:
                    evicted, _ = self._counts.popitem(last=False)
                    self._held -= len(evicted)
        return tokens


ITEM_TOKENS = TokenCountCache(CACHE_CHARACTERS)


def count_tokens(text: str) -> int:
    """Tokens of `text` (an item, a header, a separator) in cl100k_base; cached (ITEM_TOKENS)."""
    return ITEM_TOKENS.count(text)


def least_tokens(text: str) -> int:
    """A lower bound on `count_tokens(text)`, at the cost of one `str.split`: cl100k_base's
    pre-tokenizer never puts characters of two whitespace-separated words in one piece (a piece
    holds whitespace only as its first character, or newlines as its last), and every piece is at
    least one token."""
    return len(text.split())


def tokens_within(text: str, room: int) -> int | None:
    """`count_tokens(text)`, or None where `text` surely has more than `room` tokens, which
    `least_tokens` tells without counting: what packing asks of an item once its budget is
    nearly spent (the first query on a namespace counts hundreds of long records)."""
    known = ITEM_TOKENS.known(text)
    if known is not None:
        return known
    return None if least_tokens(text) > room else ITEM_TOKENS.count(text)


def count_context_tokens(text: str) -> int:
    """Tokens of a whole packed context in cl100k_base, never cached: contexts rarely repeat."""
    return token_count(text)


def count_joined_tokens(lines: Sequence[str], separator: str = "\n") -> int:
    """`count_context_tokens(separator.join(lines))` for a newline `separator`, from the cached
    counts of the lines (the packed lines recur, and the store keeps their counts; the context they
    make does not recur). Exact: cl100k_base encodes each piece of its pre-tokenizer on its own,
    and a piece never crosses a newline into a next line that starts with a character other than
    whitespace, so the context's count is the sum of each line's count with its newline
    (`_newline_tokens`). Where a line after the first is empty or starts with whitespace, the
    joined text is counted whole."""
    if not lines:
        return 0
    if separator != "\n" or any(not line or line[0].isspace() for line in lines[1:]):
        return count_context_tokens(separator.join(lines))
    return sum(_newline_tokens(line) for line in lines[:-1]) + count_tokens(lines[-1])


# cl100k_base's pre-tokenizer's \s: Unicode White_Space, which str.isspace() holds with four
# control characters more.
_NOT_WHITE_SPACE = frozenset("\x1c\x1d\x1e\x1f")


def _white_space(character: str) -> bool:
    return character.isspace() and character not in _NOT_WHITE_SPACE


def _newline_tokens(line: str) -> int:
    """`count_tokens(line + "\n")`, from the line's own (cached) count. The newline changes only
    the line's last piece: after a letter or a number it is a piece of its own; after a run of
    other characters (punctuation, symbols, marks, with the one space before it, if any) it joins
    that run's piece, which is counted alone with and without it. After whitespace, or a character
    this Python's Unicode tables do not know, the line and its newline are counted whole."""
    end = line[-1:] or " "
    kind = unicodedata.category(end)
    if _white_space(end) or kind == "Cn":
        return count_tokens(line + "\n")
    if kind[0] in "LN":
        return count_tokens(line) + _piece_newline_tokens("")
    start = len(line) - 1
    while start > 0:  # back over the run, each character's category read once
        previous = line[start - 1]
        kind = unicodedata.category(previous)
        if _white_space(previous) or kind[0] in "LN":
            break
        if kind == "Cn":
            return count_tokens(line + "\n")
        start -= 1
    if start > 0 and line[start - 1] == " ":
        start -= 1
    return count_tokens(line) + _piece_newline_tokens(line[start:])


@lru_cache(maxsize=4096)  # the same few endings (".", "!", " ?", ...) close most lines
def _piece_newline_tokens(piece: str) -> int:
    """What a newline adds to the tokens of a line's last piece `piece` ("": a piece of its own)."""
    return token_count(piece + "\n") - token_count(piece)
