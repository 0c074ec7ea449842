"""The samplers' compiled kernels (numba): one pass over a hop's frontier (:func:`pick_neighbours`),
one over the ids it found (:func:`relabel`), and a counting sort by a small key
(:func:`group_by_key`: ids by their partition, edges by the frontier node that sampled them); no
Python per node.

Users: replicated mode's sampler over the mapped graph file (graphstore.modes.replicated.sampler),
and the partitioned sampler of graph-store and colocated mode
(graphstore.dataset.partitioned_sampler), whose storage partitions run :func:`pick_neighbours` on
their own rows (graphstore.dataset.service). All take and return numpy ``int64`` arrays (torch
tensors convert without a copy). Randomness: :func:`pick_neighbours` takes a seed
and reseeds numba's own generator with it on entry (numba keeps one Mersenne Twister per thread,
apart from numpy's and torch's), so a call's draws depend on its arguments only; the sampler draws
that seed from its torch generator, which keeps ``torch.manual_seed`` / a seeded generator
reproducible as before.

Compiled on first use in a process and cached on disk (``cache=True``: numba writes the machine
code beside this file, or under its user cache directory when this folder is read-only; a later
process loads it in ~0.1 s instead of compiling for ~2-4 s). ``nogil``: a kernel releases the GIL
while it runs (another Python thread of the process, e.g. a prefetcher, is not blocked).

Why not vectorised torch ops (what this replaced, measured in benchmarks/sampling.py): Floyd's
algorithm as whole-frontier tensor ops launches ~10 ops per fanout slot and allocates a tensor
per op, and the sort-based relabelling sorts every found id; per sampled edge that ran at ~1.9 M
edges/s per core against DGL's C++ sampler at ~3.2 M.
"""

from __future__ import annotations

import numba
import numpy as np
import torch

_HASH = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: the top bits of id * 2^64 / phi
_SEED_BOUND = 2**62  # a kernel call's seed: one draw in [0, bound)


def draw_seed(generator: torch.Generator | None) -> int:
    """The seed of one :func:`pick_neighbours` call: one draw from ``generator`` (None: torch's
    global one), so a seeded generator makes a sampler's draws reproducible."""
    return int(torch.randint(0, _SEED_BOUND, (1,), generator=generator))


@numba.njit(cache=True, nogil=True)
def _edges_per_node(indptr: np.ndarray, frontier: np.ndarray, fanout: int,
                    replace: bool) -> tuple[np.ndarray, int]:
    """How many edges each ``frontier`` node samples (:func:`pick_neighbours`), and their sum."""
    n = frontier.shape[0]
    take = np.empty(n, np.int64)
    total = 0
    for i in range(n):
        v = frontier[i]
        d = indptr[v + 1] - indptr[v]
        if fanout < 0:
            t = d
        elif replace:
            t = fanout if d > 0 else 0
        else:
            t = min(d, fanout)
        take[i] = t
        total += t
    return take, total


@numba.njit(cache=True, nogil=True)
def _sample_positions(indptr: np.ndarray, frontier: np.ndarray, fanout: int, replace: bool,
                      take: np.ndarray, pos: np.ndarray) -> None:
    """Fill ``pos`` with the sampled edges' positions, ``take[i]`` of them for node ``i``, in
    frontier order (:func:`pick_neighbours`; draws from numba's generator, seeded by the
    caller)."""
    o = 0
    for i in range(frontier.shape[0]):
        v = frontier[i]
        start = indptr[v]
        d = indptr[v + 1] - start
        t = take[i]
        if fanout < 0 or (not replace and d <= fanout):
            for j in range(t):
                pos[o + j] = start + j
        elif replace:
            for j in range(t):
                pos[o + j] = start + np.random.randint(0, d)
        else:
            for j in range(t):
                top = d - t + j
                r = start + np.random.randint(0, top + 1)
                for q in range(o, o + j):
                    if pos[q] == r:
                        r = start + top
                        break
                pos[o + j] = r
        o += t


@numba.njit(cache=True, nogil=True)
def pick_neighbours(indptr: np.ndarray, frontier: np.ndarray, fanout: int, replace: bool,
                    seed: int) -> tuple[np.ndarray, np.ndarray]:
    """One hop over a CSR (``indptr`` [N + 1]): the positions (into its ``indices``) of the
    edges each ``frontier`` node samples, and for each the index of its node in ``frontier``;
    edges grouped by node, in frontier order.

    Per node of degree d: ``fanout`` -1, or d <= ``fanout`` without ``replace``: every edge, in
    stored order; without ``replace`` and d > ``fanout``: a uniform ``fanout``-subset (Floyd's
    algorithm: slot j draws t in [0, d - fanout + j], and takes d - fanout + j instead when t
    was drawn before; the set is uniform, its order is not a uniform permutation); with
    ``replace``: ``fanout`` independent uniform draws (none when d is 0); ``fanout`` 0: none.
    """
    np.random.seed(seed)
    take, total = _edges_per_node(indptr, frontier, fanout, replace)
    pos = np.empty(total, np.int64)
    _sample_positions(indptr, frontier, fanout, replace, take, pos)
    owner = np.empty(total, np.int64)
    o = 0
    for i in range(frontier.shape[0]):
        for j in range(take[i]):
            owner[o + j] = i
        o += take[i]
    return pos, owner


@numba.njit(cache=True, nogil=True)
def pick_neighbour_ids(indptr: np.ndarray, indices: np.ndarray, frontier: np.ndarray,
                       fanout: int, replace: bool, seed: int, ids_like: np.ndarray,
                       counts_like: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`pick_neighbours` (the same draws for the same arguments) answered as a storage
    partition sends it: ``(positions, neighbours, counts)``, the sampled edges' positions, their
    neighbour ids (``indices`` at those positions) in the dtype of ``ids_like`` and the edges
    each frontier node sampled in the dtype of ``counts_like`` (both empty arrays that only
    choose the dtype, e.g. int32 wire ids). One pass per output, no per-edge owner array."""
    np.random.seed(seed)
    take, total = _edges_per_node(indptr, frontier, fanout, replace)
    pos = np.empty(total, np.int64)
    _sample_positions(indptr, frontier, fanout, replace, take, pos)
    neighbours = np.empty(total, ids_like.dtype)
    for e in range(total):
        neighbours[e] = indices[pos[e]]
    counts = np.empty(frontier.shape[0], counts_like.dtype)
    for i in range(frontier.shape[0]):
        counts[i] = take[i]
    return pos, neighbours, counts


@numba.njit(cache=True, nogil=True)
def gather_rows(rows: np.ndarray, ids: np.ndarray, first: int) -> np.ndarray:
    """``rows[ids - first]`` (``rows`` [N, D]) as a new [len(ids), D] array, for ids of any
    integer dtype, without an intermediate index array."""
    dim = rows.shape[1]
    out = np.empty((ids.shape[0], dim), rows.dtype)
    for i in range(ids.shape[0]):
        r = ids[i] - first
        for j in range(dim):
            out[i, j] = rows[r, j]
    return out


@numba.njit(cache=True, nogil=True)
def merge_replies(frontier_size: int, at: np.ndarray, counts: np.ndarray,
                  neighbours: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The partitions' replies to one hop, put back in frontier order: ``at`` (the frontier
    position of each node asked, every position at most once, parts end to end), ``counts``
    (edges each sampled) and ``neighbours`` (those edges, grouped in ``at``'s order) become
    ``(owner, neighbours, order)``: every edge's frontier position (ascending), its neighbour
    as int64, and where it was in the input (to reorder edge ids the same way). Stable within
    a node: its edges keep their order."""
    off = np.zeros(frontier_size + 1, np.int64)
    for i in range(at.shape[0]):
        off[at[i] + 1] = counts[i]
    for k in range(frontier_size):
        off[k + 1] += off[k]
    total = off[frontier_size]
    owner = np.empty(total, np.int64)
    out = np.empty(total, np.int64)
    order = np.empty(total, np.int64)
    src = 0
    for i in range(at.shape[0]):
        dst = off[at[i]]
        for j in range(counts[i]):
            owner[dst + j] = at[i]
            out[dst + j] = neighbours[src + j]
            order[dst + j] = src + j
        src += counts[i]
    return owner, out, order


_MAX_RELABEL = 2**31 - 1  # ids one relabel call may hold: its table holds int32 indices


@numba.njit(cache=True, nogil=True)
def relabel(known: np.ndarray, found: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``known`` (unique ids, kept in order) extended by the ids of ``found`` it lacks (each
    once, appended in the order ``found`` first holds them), and the index in that list of
    every ``found`` id.

    One open-addressing hash table (a power of two at least twice the ids it can hold, so
    linear probes stay short) of int32 indices into the list (-1: empty), an id compared
    through the list: 4 bytes a slot, where a table of ids and indices took 16 (the table of a
    round's ~290 k feature ids fits in 4 MiB, not 16; measured 2.5x faster there, 1.7x on one
    batch's hop). One probe sequence per id of ``known`` and of ``found``. At most
    2^31 - 1 ids in all (ValueError beyond)."""
    n, m = known.shape[0], found.shape[0]
    if n + m > _MAX_RELABEL:
        raise ValueError("relabel: more than 2^31 - 1 ids in one call")
    bits = 4
    while (1 << bits) < 2 * (n + m):
        bits += 1
    mask, shift = np.int64((1 << bits) - 1), np.uint64(64 - bits)
    slots = np.full(1 << bits, -1, np.int32)
    nodes = np.empty(n + m, np.int64)
    for i in range(n):
        key = known[i]
        h = np.int64((np.uint64(key) * _HASH) >> shift)
        while slots[h] != -1:
            h = (h + np.int64(1)) & mask
        slots[h] = i
        nodes[i] = key
    local = np.empty(m, np.int64)
    k = n
    for i in range(m):
        key = found[i]
        h = np.int64((np.uint64(key) * _HASH) >> shift)
        while True:
            at = slots[h]
            if at == -1:
                slots[h] = k
                nodes[k] = key
                local[i] = k
                k += 1
                break
            if nodes[at] == key:
                local[i] = at
                break
            h = (h + np.int64(1)) & mask
    return nodes[:k].copy(), local


@numba.njit(cache=True, nogil=True)
def group_by_key(keys: np.ndarray, num_keys: int) -> tuple[np.ndarray, np.ndarray]:
    """A stable counting sort of ``keys`` (each in ``[0, num_keys)``): ``(order, starts)``, where
    ``keys[order]`` is ascending, elements of one key keep their order, and the elements of key
    ``k`` are ``order[starts[k]:starts[k + 1]]`` (``starts``: ``num_keys + 1`` offsets). One pass
    to count, one to place."""
    starts = np.zeros(num_keys + 1, np.int64)
    for i in range(keys.shape[0]):
        starts[keys[i] + 1] += 1
    for k in range(num_keys):
        starts[k + 1] += starts[k]
    cursor = starts[:-1].copy()
    order = np.empty(keys.shape[0], np.int64)
    for i in range(keys.shape[0]):
        k = keys[i]
        order[cursor[k]] = i
        cursor[k] += 1
    return order, starts
