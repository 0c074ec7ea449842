"""``LinkPredictionEncoder.embed_seeds`` (each layer only for the nodes a later layer reads) gives
what ``forward`` gives for the seeds, on random hetero and homogeneous batches."""

from __future__ import annotations

import pytest
import torch

from graphstore.training.model import LinkPredictionEncoder, ModelConfig, _needed_nodes

BUYS, REV, ALSO = ("user", "buys", "item"), ("item", "rev_buys", "user"), ("item", "also", "item")


def _batch(gen: torch.Generator, n: dict[str, int], ets, edges_per_type: int):
    edges = {}
    for src, rel, dst in ets:
        edges[(src, rel, dst)] = torch.stack([torch.randint(n[src], (edges_per_type,), generator=gen),
                                              torch.randint(n[dst], (edges_per_type,), generator=gen)])
    return edges


@pytest.mark.parametrize("layers, decoder, id_emb", [(2, "dot", False), (3, "cosine", True),
                                                     (1, "dot", False)])
def test_embed_seeds_matches_forward_on_the_seeds(layers, decoder, id_emb):
    gen = torch.Generator().manual_seed(layers)
    n = {"user": 300, "item": 200}
    cfg = ModelConfig(node_feature_dims={"user": 5, "item": 0}, edge_types=(BUYS, REV, ALSO),
                      hidden_dim=16, out_dim=8, num_layers=layers, decoder=decoder, dropout=0.3,
                      id_embedding_counts={"item": 1000} if id_emb else {})
    model = LinkPredictionEncoder(cfg).eval()
    x = {"user": torch.randn(n["user"], 5, generator=gen)}
    ids = {nt: torch.randperm(1000, generator=gen)[:k] for nt, k in n.items()}
    edges = _batch(gen, n, (BUYS, REV, ALSO), 400)
    with torch.no_grad():
        for nt, k in (("user", 17), ("item", 40)):
            full = model(x, edges, n, ids)[nt][:k]
            mine = model.embed_seeds(x, edges, n, ids, nt, k)
            assert mine.shape == full.shape
            torch.testing.assert_close(mine, full, rtol=1e-5, atol=1e-6)


def test_the_needed_sets_shrink_towards_the_seeds_and_each_holds_the_next():
    gen = torch.Generator().manual_seed(0)
    n = {"user": 500, "item": 500}
    edges = _batch(gen, n, (BUYS, REV), 300)
    needed = _needed_nodes(edges, n, "user", 10, 2)
    assert list(needed[2]) == ["user"] and torch.equal(needed[2]["user"], torch.arange(10))
    for before, after in zip(needed, needed[1:]):
        for nt, idx in after.items():
            assert torch.isin(idx, before[nt]).all()
    assert sum(len(v) for v in needed[1].values()) < sum(len(v) for v in needed[0].values())


def test_embed_seeds_refuses_train_mode():
    cfg = ModelConfig(node_feature_dims={"user": 2}, edge_types=(("user", "f", "user"),))
    with pytest.raises(ValueError, match="eval mode"):
        LinkPredictionEncoder(cfg).train().embed_seeds({}, {}, {"user": 1}, None, "user", 1)
