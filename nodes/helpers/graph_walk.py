"""The graph path's walk (RFC 4.1) over an `Adjacency` of edge arrays: breadth-first from the query's
entities, pruned between hops, one array pass per hop.

A plain module, not a stage: `graph_candidates` calls it. An object's weight sums, over the
query entities that reach it, 1 / sqrt(degree) of the entity next to it, divided by the hops:
a turn reached through a rare entity outranks one reached only through a speaker who said half
the conversation. An entity reached on the way joins the next hop's frontier; at most
`max_candidates` do, those behind the most confident edges.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from uuid import UUID

import numpy as np

from rms_retrieval.stores.indexes.adjacency import Adjacency

# Weights are sums of a few quotients; rounded to 12 places, sums that differ only in float
# addition order tie, and hops then edge id decide. (Fused scores round to 10: they are
# products of more factors, so they carry more noise.)
WEIGHT_DECIMALS = 12


@dataclass(frozen=True)
class Reached:
    """Objects the walk reached, best first: weight, then fewest hops, then the id of the edge
    that first reached it."""

    objects: tuple[UUID, ...]
    weight: np.ndarray
    hops: np.ndarray
    support: np.ndarray
    edge_paths: tuple[tuple[int, ...], ...]  # edge positions in the adjacency, start to object


def walk(
    graph: Adjacency,
    starts: Sequence[UUID],
    entity_keys: np.ndarray,
    *,
    max_hops: int,
    min_confidence: float,
    max_candidates: int,
) -> Reached:
    """The best `max_candidates` objects within `max_hops` of `starts`, ranked; `entity_keys`: the
    ids of the scope's entities as a V16 column (`EntityCatalog.id_keys`, `uuid_keys`)."""
    size = len(graph)
    is_entity = np.zeros(size, dtype=bool)
    is_entity[graph.key_numbers(entity_keys)] = True
    origin = np.full(size, -1, dtype=np.int64)
    parent_node = np.full(size, -1, dtype=np.int64)
    parent_edge = np.full(size, -1, dtype=np.int64)
    hops = np.zeros(size, dtype=np.int64)  # 0: not reached
    visited = np.zeros(size, dtype=bool)
    frontier = graph.numbers(starts)
    origin[frontier] = frontier
    visited[frontier] = True
    weights: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # per hop: object, source, weight
    reach_order: list[np.ndarray] = []
    for hop in range(1, max_hops + 1):
        if not len(frontier):
            break
        in_frontier = np.zeros(size, dtype=bool)
        in_frontier[frontier] = True
        edges = graph.incident_edges(frontier, min_confidence)
        source, target = graph.source[edges], graph.target[edges]
        degree = np.bincount(source[in_frontier[source]], minlength=size)
        degree += np.bincount(target[in_frontier[target] & (target != source)], minlength=size)
        # Each edge read from both ends, in edge-id order: (source, target), then (target, source).
        node, other = np.empty(2 * len(edges), dtype=np.int64), np.empty(2 * len(edges), dtype=np.int64)
        node[0::2], node[1::2] = source, target
        other[0::2], other[1::2] = target, source
        edge = np.repeat(edges, 2)
        reached_before = hops > 0
        keep = in_frontier[node] & ~(visited[other] & ~reached_before[other])
        node, other, edge = node[keep], other[keep], edge[keep]
        to_entity = is_entity[other]
        entity_pairs = np.flatnonzero(to_entity)
        found, first = np.unique(other[entity_pairs], return_index=True)
        first = entity_pairs[first]
        parent_node[found], parent_edge[found] = node[first], edge[first]
        origin[found] = origin[node[first]]
        # Objects first reached at this hop; one reached at an earlier hop keeps its weight.
        fresh = np.flatnonzero(~to_entity & ~reached_before[other])
        objects, first_object = np.unique(other[fresh], return_index=True)
        first_object = fresh[first_object]
        parent_node[objects], parent_edge[objects] = node[first_object], edge[first_object]
        hops[objects] = hop
        reach_order.append(objects[np.argsort(first_object, kind="stable")])
        lent = graph.confidence[edge[fresh]] / (np.sqrt(degree[node[fresh]]) * hop)
        positive = lent > 0
        weights.append((other[fresh][positive], origin[node[fresh]][positive], lent[positive]))
        visited[objects] = True
        visited[found] = True
        # Pruning between hops (RFC 4.1): a hub cannot flood the next hop.
        via = parent_edge[found]
        ranked = found[np.lexsort((graph.edge_id[via], -graph.confidence[via]))]
        frontier = np.sort(ranked[:max_candidates])
    return _ranked(graph, hops, parent_node, parent_edge, weights, reach_order, max_candidates)


def _summed(weights: list[tuple[np.ndarray, np.ndarray, np.ndarray]], size: int) -> tuple[np.ndarray, np.ndarray]:
    """Per object: the sum over the entities that reached it of the largest weight each lent,
    added in the order the entities first lent one (as a loop over the edges would), and how many."""
    total, support = np.zeros(size), np.zeros(size, dtype=np.int64)
    if not weights:
        return total, support
    obj = np.concatenate([w[0] for w in weights])
    source = np.concatenate([w[1] for w in weights])
    lent = np.concatenate([w[2] for w in weights])
    if not len(obj):
        return total, support
    key = obj * size + source
    groups, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    largest = np.zeros(len(groups))
    np.maximum.at(largest, inverse, lent)
    group_obj = groups // size
    order = np.lexsort((first, group_obj))
    owner = group_obj[order]
    starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
    run = np.cumsum(np.r_[True, owner[1:] != owner[:-1]]) - 1
    column = np.arange(len(order)) - starts[run]
    # One row per object, its terms left to right, zeros after: adding a column at a time is
    # the left-to-right sum a loop makes (numpy's own reductions pair terms differently).
    terms = np.zeros((len(starts), int(column.max()) + 1))
    terms[run, column] = largest[order]
    sums = np.zeros(len(starts))
    for position in range(terms.shape[1]):
        sums = sums + terms[:, position]
    total[owner[starts]] = sums
    support[owner[starts]] = np.diff(np.r_[starts, len(order)])
    return total, support


def _paths(parent_node: np.ndarray, parent_edge: np.ndarray, nodes: np.ndarray) -> tuple[tuple[int, ...], ...]:
    """Each node's edges from its start, followed back one hop at a time for all nodes at once."""
    steps: list[np.ndarray] = []  # steps[k][i]: node i's k-th edge counted back from it, or -1
    current = nodes
    while len(current):
        edge = parent_edge[current]
        if not (edge >= 0).any():
            break
        steps.append(edge)
        current = np.where(edge >= 0, parent_node[current], current)
    if not steps:
        return tuple(() for _ in range(len(nodes)))
    backwards = np.column_stack(steps[::-1]).tolist()  # start first; -1 where a shorter path has none
    return tuple(tuple(e for e in row if e >= 0) for row in backwards)


def _ranked(
    graph: Adjacency, hops: np.ndarray, parent_node: np.ndarray, parent_edge: np.ndarray,
    weights: list[tuple[np.ndarray, np.ndarray, np.ndarray]], reach_order: list[np.ndarray], limit: int,
) -> Reached:
    reached = np.concatenate(reach_order) if reach_order else np.arange(0)
    total, support = _summed(weights, len(graph))
    weight = total[reached]
    # Python's round() is correctly rounded (numpy's is not always); many weights are equal, so
    # each distinct one is rounded once.
    distinct, where = np.unique(weight, return_inverse=True)
    rounded = np.array([round(w, WEIGHT_DECIMALS) for w in distinct.tolist()], dtype=float)[where]
    last_edge = graph.edge_id[parent_edge[reached]] if len(reached) else np.arange(0)
    order = np.lexsort((np.arange(len(reached)), last_edge, hops[reached], -rounded))[:limit]
    best = reached[order]
    return Reached(
        objects=tuple(graph.node_at(i) for i in best.tolist()),
        weight=weight[order],
        hops=hops[best],
        support=support[best],
        edge_paths=_paths(parent_node, parent_edge, best),
    )
