"""Rule-based named-entity spotting and name matching, shared by ingestion (the entity graph) and
query analysis, so the two cannot disagree on whether a text names an entity.

Name matching: a name and a text are compared as sequences of name words, made by NFKC
normalisation, case folding and splitting at anything that is not a letter or a digit
(underscores, apostrophes and hyphens included): "Jo_Ann", "jo-ann" and "JO ANN" are one name,
"Caroline's" contains "Caroline", "José" matches whether its accent is composed or not. A name
shorter than two characters is never matched: one letter is a word of almost every sentence.

What it catches: runs of capitalised words ("Caroline", "New York", "Sun Microsystems"), with a
possessive 's removed and "of"/"de"/"van" allowed inside a run ("Bank of America"); quoted
phrases are the caller's business. What it misses: lower-case names ("caroline"), names that
begin a sentence and are also common words ("Will", "Hope"), and entity types beyond a few
cue words. Capitalised function words, pronouns, weekdays and months are never entities here:
dates belong to the temporal parser.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from uuid import UUID

from rms_retrieval.stores.indexes.adjacency import uuid_of

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9&\-]*(?:'[A-Za-z]+)?|[.!?;:,\"()]")
_NAME_WORD = re.compile(r"[^\W_]+")
_JOINERS = frozenset({"of", "de", "van", "von", "la", "del", "da"})
_NEVER = frozenset(
    """
    i i'm i've i'll i'd im a an the this that these those there here it its it's he she they we you
    me my mine your yours his her hers our ours their theirs him them us
    what when where who whom whose why how which whether did do does is are was were be been am
    can could would should will shall may might must have has had not no yes yeah yep ok okay
    oh wow hey hi hello thanks thank sure well so but and or if then also just really maybe
    great awesome cool nice good glad sorry please congrats congratulations haha lol omg
    monday tuesday wednesday thursday friday saturday sunday
    january february march april june july august september october november december
    today tomorrow yesterday tonight last next since before after during on in at for with from
    mr mrs ms dr
    """.split()
)
_PLACE_CUES = frozenset({"in", "at", "to", "from", "near", "visited", "visit"})
_ORG_WORDS = frozenset(
    {"inc", "corp", "company", "university", "college", "club", "school", "group", "foundation",
     "bank", "church", "team", "society", "association", "center", "centre", "studio", "studios"}
)


@dataclass(frozen=True, slots=True)
class ExtractedEntity:
    name: str
    entity_type: str  # PERSON | PLACE | ORGANIZATION | OTHER
    start_token: int


def _strip_possessive(word: str) -> str:
    return re.sub(r"'s$", "", word)


def is_name_word(word: str) -> bool:
    """A capitalised word that is not a function word, pronoun, greeting, weekday or month."""
    return word[:1].isupper() and _strip_possessive(word).lower() not in _NEVER


def extract_entities(text: str) -> list[ExtractedEntity]:
    """Capitalised spans in `text`, in order of first appearance, each name once."""
    tokens = _WORD.findall(text)
    found: dict[str, ExtractedEntity] = {}
    i = 0
    while i < len(tokens):
        if not is_name_word(tokens[i]):
            i += 1
            continue
        start = i
        words = [_strip_possessive(tokens[i])]
        i += 1
        while i < len(tokens):
            if tokens[i - 1].endswith("'s"):
                break  # "Melanie's Sister": the possessive ends the name
            if is_name_word(tokens[i]):
                words.append(_strip_possessive(tokens[i]))
                i += 1
            elif (
                tokens[i] in _JOINERS
                and i + 1 < len(tokens)
                and is_name_word(tokens[i + 1])
            ):
                words.extend([tokens[i], _strip_possessive(tokens[i + 1])])
                i += 2
            else:
                break
        name = " ".join(words)
        if name.isupper() and len(name) <= 1:
            continue
        if name.lower() not in found:
            found[name.lower()] = ExtractedEntity(name, _guess_type(tokens, start, words), start)
    return list(found.values())


def _guess_type(tokens: list[str], start: int, words: list[str]) -> str:
    if words[-1].lower() in _ORG_WORDS or any(w.isupper() and len(w) > 1 for w in words):
        return "ORGANIZATION"
    if start > 0 and tokens[start - 1].lower() in _PLACE_CUES:
        return "PLACE"
    return "OTHER"


def name_words(text: str) -> list[str]:
    """The name words of `text`, as every name match compares them."""
    folded = text.lower() if text.isascii() else unicodedata.normalize("NFKC", text.casefold())
    return _NAME_WORD.findall(folded)


def name_key(name: str) -> str:
    """A name as its name words joined by single spaces; plain ASCII names skip the regex."""
    if name.isascii() and name.replace(" ", "").isalnum():
        return " ".join(name.lower().split())
    return " ".join(name_words(name))


def first_name_word(name: str) -> str:
    """The first name word of `name`, cheaply: query analysis asks it of every catalog name."""
    head = name.partition(" ")[0]
    if head.isalnum() and head.isascii():
        return head.lower()
    return next(iter(name_words(name)), "")


class NameMatcher:
    """Names and the ids they name, found in a text as whole name words. An id is kept as its
    integer (`UUID.int`), in a tuple per name: numbers in tuples are containers the garbage
    collector stops tracking, where a LongMemEval-S namespace's 2,600 names held a set of UUIDs
    each, scanned by every full collection of the writing process."""

    def __init__(self) -> None:
        self._ids: dict[str, tuple[int, ...]] = {}
        self._first_words: set[str] = set()  # where in a text a name can start
        self._longest = 0

    def add(self, object_id: UUID | int, name: str) -> str | None:
        """Record that `name` names `object_id` (a UUID or its integer); its key, or None for a
        name too short to match."""
        key = name_key(name)
        if len(key) < 2:
            return None
        number = object_id if type(object_id) is int else object_id.int
        named = self._ids.get(key, ())
        if number not in named:
            self._ids[key] = (*named, number)  # a new tuple: a copy shares the old one, never changed
        self._first_words.add(key.partition(" ")[0])
        self._longest = max(self._longest, key.count(" ") + 1)
        return key

    def copy(self) -> NameMatcher:
        """A matcher with these names, to which `add` adds without changing this one."""
        copied = NameMatcher()
        copied._ids, copied._first_words, copied._longest = dict(self._ids), set(self._first_words), self._longest
        return copied

    def named(self, name: str) -> set[UUID]:
        """The ids `name` names exactly (as name words)."""
        return {uuid_of(number) for number in self._ids.get(name_key(name), ())}

    def names_in(self, text: str) -> list[str]:
        """The keys of the names occurring in `text`: one-word names first, each size in text order."""
        words = name_words(text)
        starts = [start for start, word in enumerate(words) if word in self._first_words]
        found: dict[str, None] = {}
        for size in range(1, self._longest + 1):
            for start in starts:
                if start + size <= len(words) and (key := " ".join(words[start : start + size])) in self._ids:
                    found.setdefault(key)
        return list(found)

    def ids_in_order(self, text: str) -> list[UUID]:
        """The ids of every name occurring in `text`, each once, by where its first name starts
        (ids named at one start by id)."""
        words = name_words(text)
        first: dict[int, int] = {}
        for start, word in enumerate(words):
            if word not in self._first_words:
                continue
            for size in range(1, min(self._longest, len(words) - start) + 1):
                for number in self._ids.get(" ".join(words[start : start + size]), ()):
                    first.setdefault(number, start)
        return [uuid_of(number) for number in sorted(first, key=lambda number: (first[number], number))]
