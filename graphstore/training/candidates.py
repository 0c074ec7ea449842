"""The evaluation candidates: a seeded uniform sample of the label node type's dense ids.

Every (anchor, positive) pair of a split is ranked against the same candidate set, and so is
every baseline (graphstore.training.evaluation). The set is drawn here, as a pure function of
``(num_labels, count, seed)``: every compute rank computes it alone and gets the same ids, in
both modes, with no collective. Dense ids carry no meaning a sample may depend on (they follow
the raw ids' order, graphstore.partition), so the draw is uniform over all ids without
replacement: each id is in the set with probability ``count / num_labels``.

A rank embeds the candidates its input partitions own (:func:`by_partition`); the ranks then
share what they embedded (graphstore.training.evaluation).
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch

SEED_SALT = 0x5EED_CA4D  # keeps the candidate draw apart from other uses of the same seed


def sample_candidates(num_labels: int, count: int, seed: int) -> torch.Tensor:
    """``min(count, num_labels)`` distinct label ids drawn uniformly without replacement, sorted
    ascending, int64 on the CPU. The same arguments give the same ids on every machine (torch's
    CPU generator); ``count >= num_labels`` gives every id."""
    if num_labels < 0 or count < 0:
        raise ValueError(f"sample_candidates: num_labels {num_labels} and count {count} must be >= 0")
    if count >= num_labels:
        return torch.arange(num_labels, dtype=torch.long)
    gen = torch.Generator(device="cpu").manual_seed((seed ^ SEED_SALT) & 0x7FFF_FFFF_FFFF_FFFF)
    return torch.randperm(num_labels, generator=gen)[:count].sort().values


def by_partition(ids: torch.Tensor, partition_book: Any,
                 partitions: tuple[int, ...]) -> dict[int, torch.Tensor]:
    """``{partition: ids it owns}`` for each of ``partitions`` (in that order; an empty tensor
    for one that owns none), keeping the order of ``ids``. ``partition_book[ids]`` is the
    partition of each dense id (a GLT partition book: the ranges of the shard format)."""
    owner = partition_book[ids].to(torch.long)
    return {p: ids[owner == p] for p in partitions}


def fingerprint(ids: torch.Tensor) -> str:
    """A short hash of a candidate set (sorted int64 ids): metrics.json records it, so runs and
    modes can be checked to have ranked against the same set."""
    data = ids.to(torch.long).sort().values.numpy().tobytes()
    return hashlib.sha256(data).hexdigest()[:16]
