"""The evaluation candidates are a seeded uniform sample of the label type's ids
(graphstore.training.candidates); the statistical checks here reject the earlier "lowest dense
ids of every partition" choice."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from graphstore.training.candidates import by_partition, fingerprint, sample_candidates

N, K = 100_000, 2_000


def uniformity_p(ids: torch.Tensor, num_labels: int, bins: int = 20) -> float:
    """The smaller p-value of two tests that ``ids`` are a uniform sample of ``[0, num_labels)``:
    Kolmogorov-Smirnov on ``ids / num_labels`` and chi-square on equal-width bins."""
    x = ids.double().numpy() / num_labels
    ks = stats.kstest(x, "uniform").pvalue
    counts = np.histogram(x, bins=bins, range=(0.0, 1.0))[0]
    chi = stats.chisquare(counts).pvalue
    return float(min(ks, chi))


def slice_zero_of_partitions(num_labels: int, count: int, partitions: int) -> torch.Tensor:
    """What the evaluation took before: the first ``count / partitions`` ids each partition owns
    (partition of id i: i % partitions), i.e. the lowest dense ids."""
    per = count // partitions
    return torch.cat([torch.arange(p, num_labels, partitions)[:per] for p in range(partitions)]).sort().values


@pytest.mark.parametrize("seed", [0, 1, 7, 12345])
def test_candidates_are_a_uniform_sample_of_the_ids(seed):
    ids = sample_candidates(N, K, seed)
    assert ids.dtype == torch.long and ids.numel() == K
    assert torch.equal(ids, ids.sort().values) and ids.unique().numel() == K
    assert 0 <= int(ids.min()) and int(ids.max()) < N
    assert uniformity_p(ids, N) > 1e-3


def test_the_uniformity_check_rejects_the_lowest_dense_ids():
    """The check can fail: the old slice-0 candidates (and a skewed draw) do not pass it."""
    assert uniformity_p(slice_zero_of_partitions(N, K, 2), N) < 1e-12
    assert uniformity_p(torch.arange(K), N) < 1e-12
    skewed = torch.from_numpy(np.unique((np.random.default_rng(0).random(3 * K) ** 2 * N).astype(np.int64))[:K])
    assert uniformity_p(skewed, N) < 1e-6


def test_every_id_is_drawn_equally_often_over_many_seeds():
    """Inclusion frequency per id over many draws: each id is in a set with probability K/N."""
    n, k, draws = 1_000, 100, 2_000
    counts = torch.zeros(n)
    for seed in range(draws):
        counts[sample_candidates(n, k, seed)] += 1
    expected = draws * k / n
    assert stats.chisquare(counts.numpy(), np.full(n, expected)).pvalue > 1e-3
    # the lowest ids are not favoured
    assert abs(float(counts[:100].mean()) - expected) < 0.1 * expected


def test_the_same_seed_gives_the_same_set_and_another_seed_another():
    a, b, c = sample_candidates(N, K, 3), sample_candidates(N, K, 3), sample_candidates(N, K, 4)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert fingerprint(a) == fingerprint(b) != fingerprint(c)
    assert fingerprint(a) == fingerprint(a.flip(0))  # order does not matter


def test_asking_for_at_least_every_id_gives_every_id():
    assert torch.equal(sample_candidates(50, 50, 0), torch.arange(50))
    assert torch.equal(sample_candidates(50, 500, 0), torch.arange(50))
    assert sample_candidates(0, 5, 0).numel() == 0
    with pytest.raises(ValueError):
        sample_candidates(-1, 5, 0)


def test_by_partition_gives_each_partition_the_ids_it_owns():
    ids = sample_candidates(10_000, 500, 0)
    book = torch.arange(10_000) % 3
    parts = by_partition(ids, book, (0, 1, 2))
    assert list(parts) == [0, 1, 2]
    assert all(bool((book[v] == p).all()) for p, v in parts.items())
    assert torch.equal(torch.cat(list(parts.values())).sort().values, ids)
    # a colocated machine asks only for its own partition
    only = by_partition(ids, book, (1,))
    assert list(only) == [1] and torch.equal(only[1], parts[1])
    assert by_partition(torch.tensor([0, 3], dtype=torch.long), book, (1,))[1].numel() == 0
