"""The default encoder: shapes, featureless types, and that it can learn a planted link rule."""

from __future__ import annotations

import pytest
import torch

from graphstore.training.losses import accidental_hit_mask, candidate_scores, retrieval_loss
from graphstore.training.model import LinkPredictionEncoder, ModelConfig

BUYS, REV = ("user", "buys", "item"), ("item", "rev_buys", "user")


def _graph(n_users=40, n_items=20, seed=0):
    g = torch.Generator().manual_seed(seed)
    group_u = torch.arange(n_users) % 4
    group_i = torch.arange(n_items) % 4
    src = torch.randint(0, n_users, (200,), generator=g)
    dst = torch.stack([torch.nonzero(group_i == group_u[s]).flatten()[
        torch.randint(0, 5, (1,), generator=g)] for s in src]).flatten()
    x = {"user": torch.nn.functional.one_hot(group_u, 4).float() + 0.1 * torch.randn(n_users, 4, generator=g),
         "item": torch.randn(n_items, 3, generator=g)}
    return x, {BUYS: torch.stack([src, dst]), REV: torch.stack([dst, src])}, src, dst


def test_shapes_and_featureless_types():
    cfg = ModelConfig(node_feature_dims={"user": 4, "item": 0}, edge_types=(BUYS, REV), out_dim=8)
    model = LinkPredictionEncoder(cfg)
    x, ei, _, _ = _graph()
    out = model({"user": x["user"]}, ei, {"user": 40, "item": 20})
    assert out["user"].shape == (40, 8) and out["item"].shape == (20, 8)
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg


def test_every_output_is_on_the_model_device():
    """A node type with features but none in the batch starts from zeros on the model's device
    (the "meta" device stands for a GPU here: mixing it with a CPU tensor fails the same way)."""
    cfg = ModelConfig(node_feature_dims={"user": 4, "item": 3}, edge_types=(BUYS, REV), out_dim=8)
    model = LinkPredictionEncoder(cfg).to("meta")
    edges = {et: torch.zeros(2, 5, dtype=torch.long, device="meta") for et in (BUYS, REV)}
    out = model({"user": torch.ones(4, 4, device="meta")}, edges, {"user": 4, "item": 3})
    assert {k: (v.device.type, tuple(v.shape)) for k, v in out.items()} == \
        {"user": ("meta", (4, 8)), "item": ("meta", (3, 8))}


def test_learns_planted_groups_better_than_chance():
    torch.manual_seed(0)
    cfg = ModelConfig(node_feature_dims={"user": 4, "item": 3}, edge_types=(BUYS, REV),
                      hidden_dim=16, out_dim=16)
    model = LinkPredictionEncoder(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    x, ei, src, dst = _graph()
    losses = []
    for _ in range(150):
        h = model(x, ei, {"user": 40, "item": 20})
        scores = candidate_scores(h["user"][src], h["item"][dst], h["item"][:0])
        loss = retrieval_loss(scores, accidental_hit_mask(src, dst, dst[:0]))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert losses[-1] < 0.7 * losses[0]
    h = model(x, ei, {"user": 40, "item": 20})
    top = (h["user"] @ h["item"].T).argmax(1)
    assert ((top % 4) == (torch.arange(40) % 4)).float().mean() > 0.8  # chance is 0.25


def test_finish_epoch_reads_the_current_epoch_without_starting_another():
    from graphstore.training.batches import finish_epoch

    class Loader:  # like GLT's DistLoader: iter() starts an epoch on the servers
        def __init__(self):
            self.epochs_started, self.left = 0, 0

        def __iter__(self):
            self.epochs_started += 1
            self.left = 5
            return self

        def __next__(self):
            if self.left == 0:
                raise StopIteration
            self.left -= 1
            return self.left

    loader = Loader()
    for i, _ in enumerate(loader):
        if i == 1:
            assert finish_epoch(loader) == 3
            break
    assert loader.epochs_started == 1 and loader.left == 0


def test_pair_edges_are_dropped_in_both_directions_and_nothing_else():
    import torch

    from graphstore.training.batches import without_pair_edges

    buys, rev, sim = ("user", "buys", "item"), ("item", "rev_buys", "user"), ("item", "sim", "item")
    edges = {buys: torch.tensor([[0, 0, 1, 2], [0, 1, 1, 2]]),
             rev: torch.tensor([[0, 1, 1, 2], [0, 0, 2, 1]]),
             sim: torch.tensor([[0, 1], [1, 0]])}
    pairs = torch.tensor([[0, 2], [1, 2]])  # (user 0, item 1), (user 2, item 2)
    out = without_pair_edges(edges, "user", "item", pairs, {"user": 3, "item": 3})
    assert out[buys].tolist() == [[0, 1], [0, 1]]
    assert out[rev].tolist() == [[0, 1, 2], [0, 2, 1]]  # (item 1 -> user 0) dropped
    assert out[sim].tolist() == edges[sim].tolist()
    homo = {("n", "to", "n"): torch.tensor([[0, 1, 1, 3], [1, 0, 3, 1]])}
    out = without_pair_edges(homo, "n", "n", torch.tensor([[0], [1]]), {"n": 4})
    assert out[("n", "to", "n")].tolist() == [[1, 3], [3, 1]]


class _FakeLoader:
    """Like GLT's DistLoader: iter() starts an epoch of ``sizes[epoch]`` batches (last repeats)."""

    def __init__(self, sizes):
        self.sizes, self.epochs_started, self.left, self.shut = sizes, 0, 0, False

    def __iter__(self):
        self.left = self.sizes[min(self.epochs_started, len(self.sizes) - 1)]
        self.epochs_started += 1
        return self

    def __next__(self):
        if self.left == 0:
            raise StopIteration
        self.left -= 1
        return (self.epochs_started, self.left)

    def shutdown(self):
        self.shut = True


def test_epoch_stream_caps_epochs_and_reads_the_rest_before_the_next():
    from graphstore.training.batches import EpochStream

    loader = _FakeLoader([5])
    stream = EpochStream(loader, per_epoch=2)
    got = [stream.next() for _ in range(5)]
    assert [epoch for epoch, _ in got] == [1, 1, 2, 2, 3]
    assert loader.epochs_started == 3 and loader.left == 4
    stream.close()  # shuts down without reading the rest of the epoch (no new epoch either)
    assert loader.left == 4 and loader.shut and loader.epochs_started == 3


def test_epoch_stream_without_cap_runs_each_epoch_out_and_rejects_empty_loaders():
    from graphstore.runtime.errors import RuntimeFailure
    from graphstore.training.batches import EpochStream

    loader = _FakeLoader([3])
    stream = EpochStream(loader)
    assert [stream.next()[0] for _ in range(7)] == [1, 1, 1, 2, 2, 2, 3]
    with pytest.raises(RuntimeFailure, match="yields no batches"):
        EpochStream(_FakeLoader([0])).next()


def test_epoch_stream_counts_finished_epochs():
    from graphstore.training.batches import EpochStream

    capped = EpochStream(_FakeLoader([5]), per_epoch=2)
    for _ in range(4):
        capped.next()
    assert capped.epochs_done == 1 and capped.epoch_full()  # the second epoch is at its cap
    capped.next()
    assert capped.epochs_done == 2 and not capped.epoch_full()
    open_ended = EpochStream(_FakeLoader([2]))
    for _ in range(3):
        open_ended.next()
    assert open_ended.epochs_done == 1
