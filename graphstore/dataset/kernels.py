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
    pos = np.empty(total, np.int64)
    owner = np.empty(total, np.int64)
    o = 0
    for i in range(n):
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
        for j in range(t):
            owner[o + j] = i
        o += t
    return pos, owner


@numba.njit(cache=True, nogil=True)
def _slot(keys: np.ndarray, key: int, shift: np.uint64, mask: int) -> int:
    """The slot of ``key`` in the open-addressing table ``keys`` (-1: empty): where it is, or
    the empty slot where it goes (linear probing from its hash)."""
    h = np.int64((np.uint64(key) * _HASH) >> shift)
    while keys[h] != -1 and keys[h] != key:
        h = (h + np.int64(1)) & mask
    return h


@numba.njit(cache=True, nogil=True)
def relabel(known: np.ndarray, found: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``known`` (unique ids, kept in order) extended by the ids of ``found`` it lacks (each
    once, appended in the order ``found`` first holds them), and the index in that list of
    every ``found`` id.

    One open-addressing hash table of ids (a power of two at least twice the ids it can hold,
    so linear probes stay short); one probe per id of ``known`` and of ``found``."""
    n, m = known.shape[0], found.shape[0]
    bits = 4
    while (1 << bits) < 2 * (n + m):
        bits += 1
    size = 1 << bits
    mask, shift = np.int64(size - 1), np.uint64(64 - bits)
    keys = np.full(size, -1, np.int64)
    vals = np.empty(size, np.int64)
    for i in range(n):
        h = _slot(keys, known[i], shift, mask)
        keys[h] = known[i]
        vals[h] = i
    nodes = np.empty(n + m, np.int64)
    nodes[:n] = known
    local = np.empty(m, np.int64)
    k = n
    for i in range(m):
        h = _slot(keys, found[i], shift, mask)
        if keys[h] == -1:
            keys[h] = found[i]
            vals[h] = k
            nodes[k] = found[i]
            k += 1
        local[i] = vals[h]
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
