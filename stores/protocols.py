"""The small interfaces the retrieval nodes see. Nodes never import duckdb or faiss.

`MemoryStore` (stores/memory_store.py) implements all of them, which makes it a `RetrievalStore`; tests use tiny fakes. They are
abstract base classes rather than `typing.Protocol`s because Hamilton checks driver inputs with
`isinstance`, which it skips for Protocol (generic) classes: implementations inherit them.
Every method that takes `namespaces` applies the namespace filter inside the backend,
before any limit, so another namespace can never use up a candidate budget.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, NamedTuple
from uuid import UUID

import numpy as np

from rms_retrieval.stores.models import MemoryObject

if TYPE_CHECKING:  # the adjacency module imports Edge from here
    from rms_retrieval.stores.adjacency import Adjacency


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


class LexicalIndex(ABC):
    @abstractmethod
    def search_lexical(self, text: str, namespaces: Sequence[str], limit: int) -> list[LexicalHit]:
        """BM25 over content and entity names, best first, ties by object id."""
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
    def entity_catalog(self, namespaces: Sequence[str]) -> list[EntityRef]:
        """Every entity name and alias in the namespaces."""
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

    @abstractmethod
    def pinned_objects(self, namespaces: Sequence[str]) -> list[MemoryObject]:
        """Salience 1.0, ACTIVE TASK and ACTIVE INTENT objects in the namespaces, by id."""
        ...

    @abstractmethod
    def session_neighbours(self, triggers: Sequence[UUID], window: int, namespaces: Sequence[str]) -> list[SessionNeighbour]:
        """Objects within `window` positions of each trigger (an object of `namespaces`) in its own session."""
        ...

    @abstractmethod
    def state_fingerprint(self) -> str:
        """Changes whenever rows, vectors or the FTS snapshot change."""
        ...


class RetrievalLog(ABC):
    @abstractmethod
    def log_retrieval(self, record: Mapping[str, Any]) -> None: ...


class RecordReader(ABC):
    """Read-only exact queries over every stored record, for enumeration and aggregation.

    The SQL behind each method lives in stores/store_sql.py; `parameters` are its bound values.
    """

    @abstractmethod
    def scan_page(self, parameters: Mapping[str, Any]) -> list[MemoryObject]:
        """One keyset page of `store_sql.SCAN_PAGE`, as objects in id order."""
        ...

    @abstractmethod
    def exclusion_counts(self, parameters: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """(reason, count) rows of `store_sql.EXCLUSION_COUNTS`."""
        ...

    @abstractmethod
    def assertion_groups(self, parameters: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """The rows of `store_sql.ASSERTION_GROUPS`."""
        ...

    @abstractmethod
    def quantity_page(self, parameters: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """One keyset page of `store_sql.QUANTITY_PAGE`."""
        ...

    @abstractmethod
    def state_fingerprint(self) -> str: ...


class SnapshotSource(ABC):
    """A store whose requests can each be pinned to one immutable generation."""

    @abstractmethod
    def snapshot(self) -> Any:
        """The live generation, as an object that implements every store protocol and never changes."""
        ...

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


@dataclass(frozen=True)
class IngestReport:
    """What one `MemoryStore.add` wrote."""

    objects_added: int
    entities_added: int
    edges_added: int
    seconds: float
    details: dict[str, Any] = field(default_factory=dict)
