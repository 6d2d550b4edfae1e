"""The small interfaces the retrieval nodes see. Nodes never import duckdb or faiss.

`StoreSnapshot` (stores/snapshot.py), one generation of a `MemoryStore`, implements all of them, which makes it a
`RetrievalStore`; tests use tiny fakes. They are
abstract base classes rather than `typing.Protocol`s because Hamilton checks driver inputs with
`isinstance`, which it skips for Protocol (generic) classes: implementations inherit them.
Every method that takes `namespaces` applies the namespace filter inside the backend,
before any limit, so another namespace can never use up a candidate budget.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, NamedTuple
from uuid import UUID

import numpy as np

from rms_retrieval.stores.models import MemoryObject

if TYPE_CHECKING:  # the adjacency module imports Edge from here, the entities module EntityRef
    from rms_retrieval.stores.analysis.entity_catalog import EntityCatalog
    from rms_retrieval.stores.indexes.adjacency import Adjacency


@dataclass(frozen=True, slots=True)
class EmbeddingIdentity:
    """What produced a set of vectors; two identities must be equal to compare vectors (RFC 4.2)."""

    model_name: str
    model_hash: str
    dimension: int


class LexicalHit(NamedTuple):
    """One BM25 hit. `score` is min-max normalised within this query; `bm25` is raw and stays internal.
    Hits are named tuples (as `nodes.models.ChannelHit`): hundreds are made per request."""

    object_id: UUID
    bm25: float
    score: float


class VectorHit(NamedTuple):
    object_id: UUID
    cosine: float


@dataclass(frozen=True, slots=True)
class EntityRef:
    """An ENTITY object and the name (canonical or alias) it is known by."""

    object_id: UUID
    namespace: str
    canonical_name: str
    alias: str


@dataclass(frozen=True, slots=True)
class Edge:
    """An undirected edge of the entity-object graph. Ids are unique and give the visit order."""

    edge_id: int
    source: UUID
    target: UUID
    edge_type: str
    confidence: float


@dataclass(frozen=True, slots=True)
class SessionNeighbour:
    """`neighbour` is within the session window of `trigger` (same namespace, owner, scope, session)."""

    trigger: UUID
    neighbour: MemoryObject
    offset: int


class QueryEncoder(ABC):
    @property
    @abstractmethod
    def identity(self) -> EmbeddingIdentity: ...

    @abstractmethod
    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Return float32 unit vectors, shape (len(texts), dimension)."""
        ...


class CrossEncoder(ABC):
    """A model that scores (question, record) pairs together: higher is more relevant (RFC 7.3)."""

    @property
    @abstractmethod
    def identity(self) -> str:
        """The model's name and a hash of its files; logged beside the scores it gave."""
        ...

    @abstractmethod
    def score(self, question: str, texts: Sequence[str]) -> np.ndarray:
        """One finite float64 score per text, in order."""
        ...


class ChatModel(ABC):
    """A chat model that answers one system and one user message (the answerability evaluator, the
    answer benchmark's reader, the chat reformulator)."""

    @property
    @abstractmethod
    def identity(self) -> str:
        """The provider, endpoint and model (never a credential)."""
        ...

    @abstractmethod
    def reply(self, system: str, user: str) -> str:
        """The model's text; raises on a provider failure."""
        ...


class QueryReformulator(ABC):
    """Turns a question into alternative questions (experimental policies, query reformulation)."""

    @property
    @abstractmethod
    def identity(self) -> str:
        """The provider, endpoint and model (never a credential)."""
        ...

    @abstractmethod
    def alternatives(self, question: str, limit: int) -> tuple[str, ...]:
        """At most `limit` alternative questions; raises on a provider failure."""
        ...


@dataclass(frozen=True)
class FieldWeights:
    """How much a term in each field of a lexical document counts (RFC-0005 Section 4.3,
    `boost_fields`): 1 and 1 are match_bm25 over both fields as one text, 0 leaves a field out."""

    value: float = 1.0
    entity_canonical_name: float = 1.0

    def __post_init__(self) -> None:
        weights = (self.value, self.entity_canonical_name)
        if not all(np.isfinite(weights)) or min(weights) < 0 or max(weights) <= 0:
            raise ValueError(f"field weights must be finite, at least 0 and not all 0, got {weights}")

    @property
    def plain(self) -> bool:
        return self.value == 1.0 and self.entity_canonical_name == 1.0


PLAIN_FIELDS = FieldWeights()


class LexicalIndex(ABC):
    @abstractmethod
    def search_lexical(self, text: str, namespaces: Sequence[str], limit: int,
                       fields: FieldWeights = PLAIN_FIELDS) -> list[LexicalHit]:
        """BM25 over content and entity names, each field's terms counted times its weight, best
        first, ties by object id."""
        ...


class VectorIndex(ABC):
    @property
    @abstractmethod
    def embedding_identity(self) -> EmbeddingIdentity | None:
        """The identity of the stored vectors; None while the store holds none."""
        ...

    @abstractmethod
    def search_vector(self, vector: np.ndarray, namespaces: Sequence[str], limit: int) -> list[VectorHit]:
        """Exact inner-product top-k over the namespaces' vectors, best first, ties by object id."""
        ...


class GraphIndex(ABC):
    @abstractmethod
    def entity_catalog(self, namespaces: Sequence[str]) -> EntityCatalog:
        """Every entity name and alias in the namespaces, as a read-only `EntityCatalog`."""
        ...

    @abstractmethod
    def adjacency(self, namespaces: Sequence[str]) -> Adjacency:
        """The graph of edges whose both endpoints lie in `namespaces`, as CSR arrays."""
        ...


class ObjectStore(ABC):
    @abstractmethod
    def get_objects(self, ids: Iterable[UUID], namespaces: Sequence[str]) -> dict[UUID, MemoryObject]:
        """The objects of `namespaces` among `ids`, by id; an id only another namespace holds is
        left out, exactly like an unknown one."""
        ...

    def text_tokens(self, ids: Iterable[UUID], namespaces: Sequence[str]) -> dict[UUID, int]:
        """Of the objects of `namespaces` among `ids`, the cl100k tokens of each one's spoken text
        (`stores.analysis.text_tokens`) where the store keeps them; packing counts the rest. A
        store that keeps none gives none."""
        return {}

    @abstractmethod
    def pinned_objects(self, namespaces: Sequence[str]) -> list[MemoryObject]:
        """Salience 1.0, ACTIVE TASK and ACTIVE INTENT objects in the namespaces, by id."""
        ...

    @abstractmethod
    def session_neighbours(self, triggers: Sequence[UUID], window: int, namespaces: Sequence[str]) -> list[SessionNeighbour]:
        """Objects within `window` places of each trigger (an object of `namespaces`) in its own
        session; a place is a distinct session_seq of the session's live objects, in order."""
        ...

    @abstractmethod
    def state_fingerprint(self) -> str:
        """Changes whenever rows, vectors or the FTS snapshot change."""
        ...


class RetrievalLog(ABC):
    @abstractmethod
    def log_retrieval(self, record: Mapping[str, Any]) -> None: ...


@dataclass(frozen=True)
class ScanSelection:
    """What one page of enumeration reads: a namespace (and scope), node types and lifecycle
    states as their values, the ids after `after_id`, at most `limit` of them."""

    namespace: str
    scope: str | None
    node_types: tuple[str, ...]
    lifecycles: tuple[str, ...]
    after_id: UUID | None
    limit: int


@dataclass(frozen=True)
class ClaimSelection:
    """The records an aggregation selects, and the rules that exclude some of them (each with its
    reason): one namespace (and scope), node types, the claim selectors as normalised text, the
    retrieval mode's epistemic and lifecycle rules, the time filters, and whether a quantity is required."""

    namespace: str
    scope: str | None
    node_types: tuple[str, ...]
    subjects: tuple[str, ...]
    predicates: tuple[str, ...]
    objects: tuple[str, ...]
    polarities: tuple[str, ...]
    predicate_prefixes: tuple[str, ...]
    dropped_epistemic_types: tuple[str, ...]
    drop_low_unverified: bool
    unverified_min_confidence: float
    lifecycles: tuple[str, ...]
    event_time_from: datetime | None
    event_time_to: datetime | None
    valid_at: datetime | None
    knowledge_at: datetime | None
    require_quantity: bool


class AssertionGroupRow(NamedTuple):
    """One normalised claim, how many selected records state it and its first samples (each a
    mapping of object_id, evidence_refs and assertion as JSON text, stated_time), with the totals over
    every group before the group limit."""

    subject: str
    predicate: str
    object: str
    polarity: str
    occurrences: int
    samples: tuple[Mapping[str, Any], ...]
    group_count: int
    occurrence_total: int


class QuantityRow(NamedTuple):
    """One admitted claim with a quantity; evidence_refs, assertion and quantity are JSON text,
    validated again when read."""

    object_id: UUID
    evidence_refs: str
    stated_time: datetime
    assertion: str
    quantity: str
    subject: str
    predicate: str
    object: str
    polarity: str


class RecordReader(ABC):
    """Read-only exact queries over every stored record, for enumeration and aggregation (the SQL
    behind each lives in stores/engine/store_sql.py)."""

    @abstractmethod
    def scan_page(self, selection: ScanSelection) -> list[MemoryObject]:
        """The selected objects in id order: at most `selection.limit + 1`, so that one more tells
        that another page follows."""
        ...

    @abstractmethod
    def exclusion_counts(self, selection: ClaimSelection) -> dict[str, int]:
        """How many selected records each rule excluded, by reason, in reason order."""
        ...

    @abstractmethod
    def assertion_groups(self, selection: ClaimSelection, max_groups: int, max_samples: int) -> list[AssertionGroupRow]:
        """The admitted records grouped by normalised claim, most occurrences first, at most
        `max_groups` groups of at most `max_samples` samples each."""
        ...

    @abstractmethod
    def quantity_page(self, selection: ClaimSelection, after_id: UUID | None, limit: int) -> list[QuantityRow]:
        """The admitted records with a quantity and an id after `after_id`, in id order, at most `limit`."""
        ...

    @abstractmethod
    def state_fingerprint(self) -> str: ...


class SnapshotSource(ABC):
    """A store whose requests can each be pinned to one immutable generation."""

    @abstractmethod
    def snapshot(self) -> Any:
        """The live generation, as an object that implements every store protocol and never changes."""
        ...

    def answering(self) -> AbstractContextManager[None]:
        """Held while a request is answered from a snapshot of this store, so the store's background
        work may give way to it (`MemoryStore`'s merge thread does); by default nothing."""
        return nullcontext()


def snapshot_of(store: Any) -> Any:
    """What one request or one exact operation reads: the live generation of a store that hands out
    snapshots (`MemoryStore.snapshot()`), else the store itself (a snapshot, or a test's fake)."""
    return store.snapshot() if isinstance(store, SnapshotSource) else store


def answering(store: Any) -> AbstractContextManager[None]:
    """`store.answering()` for a store that hands out snapshots, else nothing."""
    return store.answering() if isinstance(store, SnapshotSource) else nullcontext()


class RetrievalStore(ABC):
    """What `retrieve()` needs of a store: the four indexes (LexicalIndex, VectorIndex,
    GraphIndex, ObjectStore), the retrieval log and the state fingerprint
    (`ObjectStore.state_fingerprint`). A class that implements the five is a RetrievalStore
    without naming it, so `MemoryStore` and test fakes need no change."""

    @classmethod
    def __subclasshook__(cls, other: type) -> bool:
        if cls is not RetrievalStore:
            return NotImplemented
        return all(issubclass(other, part) for part in _RETRIEVAL_STORE_PARTS) or NotImplemented


_RETRIEVAL_STORE_PARTS = (LexicalIndex, VectorIndex, GraphIndex, ObjectStore, RetrievalLog)

# What `retrieve()` and the audits take: a store that hands out snapshots (`MemoryStore`), or a
# RetrievalStore read as it is (a `StoreSnapshot`, a test's fake).
ReadableStore = RetrievalStore | SnapshotSource


@dataclass(frozen=True)
class IngestReport:
    """What one `MemoryStore.add` wrote."""

    objects_added: int
    entities_added: int
    edges_added: int
    seconds: float
    details: dict[str, Any] = field(default_factory=dict)
