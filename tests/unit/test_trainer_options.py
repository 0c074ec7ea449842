"""The default trainer's options of issue 13 item 3, one by one: id embeddings (parameters, training,
the size limit), dropout, the learning-rate schedule, negatives (in-batch off, logq without them),
early stopping (keeps the best weights), and their rules at config load."""

from __future__ import annotations

import math

import pytest
import torch

from graphstore.config.default_args import TrainerArgs
from graphstore.runtime.errors import UsageError
from graphstore.training.losses import (
    accidental_hit_mask, candidate_scores, logq_offsets, retrieval_loss,
)
from graphstore.training.model import LinkPredictionEncoder, ModelConfig, id_embedding_counts
from graphstore.training.schedule import EarlyStopping, lr_factor, set_lr

from tests.unit.test_model import BUYS, REV, _graph


def _cfg(**kw) -> ModelConfig:
    return ModelConfig(node_feature_dims={"user": 4, "item": 3}, edge_types=(BUYS, REV),
                       hidden_dim=16, out_dim=16, **kw)


def _params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_defaults_keep_the_behaviour_of_before():
    args = TrainerArgs()
    assert (args.dropout, args.id_embeddings, args.lr_schedule, args.warmup_steps,
            args.early_stopping_patience, args.in_batch_negatives) == (0.0, (), "constant", 0, 0, True)
    assert all(lr_factor(s, 300, "constant", 0) == 1.0 for s in range(300))
    assert _cfg() == ModelConfig.from_dict({k: v for k, v in _cfg().to_dict().items()
                                            if k != "id_embedding_counts"})  # old checkpoints


def test_id_embeddings_add_one_row_per_node_and_train_them():
    plain, with_ids = LinkPredictionEncoder(_cfg()), LinkPredictionEncoder(
        _cfg(id_embedding_counts={"user": 40, "item": 20}))
    assert _params(with_ids) - _params(plain) == (40 + 20) * 16
    x, ei, src, dst = _graph()
    ids = {"user": torch.arange(40), "item": torch.arange(20)}
    with pytest.raises(ValueError, match="node_ids_dict"):
        with_ids(x, ei, {"user": 40, "item": 20})
    torch.manual_seed(0)
    opt = torch.optim.AdamW(with_ids.parameters(), lr=0.01)
    before = with_ids.id_emb["user"].weight.detach().clone()
    losses = []
    for _ in range(60):
        h = with_ids(x, ei, {"user": 40, "item": 20}, ids)
        loss = retrieval_loss(candidate_scores(h["user"][src], h["item"][dst], h["item"][:0]),
                              accidental_hit_mask(src, dst, dst[:0]))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert losses[-1] < 0.7 * losses[0]
    assert not torch.equal(before, with_ids.id_emb["user"].weight)  # the table itself learned
    # the lookup is by global id: the same node in another position gets the same vector
    perm = torch.randperm(40)
    h1 = with_ids.id_emb["user"](ids["user"])[perm]
    assert torch.equal(h1, with_ids.id_emb["user"](ids["user"][perm]))


def test_id_embeddings_for_a_featureless_type_replace_its_type_vector():
    cfg = ModelConfig(node_feature_dims={"user": 4, "item": 0}, edge_types=(BUYS, REV),
                      hidden_dim=8, out_dim=8, id_embedding_counts={"item": 20})
    model = LinkPredictionEncoder(cfg)
    assert "item" not in model.type_bias and "item" in model.id_emb
    x, ei, _, _ = _graph()
    out = model({"user": x["user"]}, ei, {"user": 40, "item": 20},
                {"user": torch.arange(40), "item": torch.arange(20)})
    assert out["item"].shape == (20, 8)
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg


def test_id_embedding_size_limit_names_the_type_and_its_count():
    counts = {"user": 943, "item": 1682}
    assert id_embedding_counts(("item", "user"), counts, 2000) == {"item": 1682, "user": 943}
    with pytest.raises(UsageError) as err:
        id_embedding_counts(("user", "item"), counts, 1000)
    assert "node type 'item' has 1682 nodes" in str(err.value)
    assert "id_embedding_max_nodes=1000" in str(err.value)
    with pytest.raises(UsageError, match="'movie' is not a node type of the graph"):
        id_embedding_counts(("movie",), counts, 2000)


def test_dropout_is_active_in_training_only():
    model = LinkPredictionEncoder(_cfg(dropout=0.5))
    x, ei, _, _ = _graph()
    n = {"user": 40, "item": 20}
    torch.manual_seed(0)
    a, b = model(x, ei, n)["user"], model(x, ei, n)["user"]
    assert not torch.equal(a, b)
    model.eval()
    assert torch.equal(model(x, ei, n)["user"], model(x, ei, n)["user"])


def test_lr_schedules_warm_up_then_decay_to_zero():
    assert [lr_factor(s, 10, "constant", 4) for s in range(5)] == [0.25, 0.5, 0.75, 1.0, 1.0]
    cos = [lr_factor(s, 104, "cosine", 4) for s in range(104)]
    lin = [lr_factor(s, 104, "linear", 4) for s in range(104)]
    assert cos[4] == 1.0 and lin[4] == 1.0
    assert math.isclose(cos[54], 0.5) and math.isclose(lin[54], 0.5)
    assert all(x >= y for x, y in zip(cos[4:], cos[5:])) and 0 < cos[-1] < 0.001
    assert all(x > y for x, y in zip(lin[4:], lin[5:])) and math.isclose(lin[-1], 0.01)
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    set_lr(opt, 0.125)
    assert opt.param_groups[0]["lr"] == 0.125


def test_without_in_batch_negatives_only_the_random_ones_count():
    anchors, pos, neg = torch.tensor([0, 1, 2]), torch.tensor([10, 11, 12]), torch.tensor([13, 14])
    on = accidental_hit_mask(anchors, pos, neg)
    off = accidental_hit_mask(anchors, pos, neg, in_batch=False)
    assert not on[:, :3].any()
    assert off[:, :3].tolist() == [[False, True, True], [True, False, True], [True, True, False]]
    assert not off[:, 3:].any()
    scores = torch.zeros(3, 5)
    # three columns left per row (own positive + 2 random): loss log(3), not log(5)
    assert math.isclose(float(retrieval_loss(scores, off)), math.log(3), rel_tol=1e-6)
    pop = torch.ones(20)
    offsets = logq_offsets(pos, neg, pop, in_batch=False)
    assert torch.allclose(offsets, torch.full((5,), math.log(2 / 20)))


def test_early_stopping_keeps_the_best_weights_and_waits_patience_validations():
    model = torch.nn.Linear(2, 1)
    stop = EarlyStopping(patience=2)
    weights = {}
    for step, mrr in [(100, 0.1), (200, 0.3), (300, 0.2), (400, 0.3), (500, 0.25)]:
        with torch.no_grad():
            model.weight.fill_(step)
        weights[step] = stop.update(step, mrr, model)
        if stop.should_stop():
            break
    assert weights == {100: True, 200: True, 300: False, 400: False}  # a tie is no improvement
    assert stop.should_stop() and stop.best_step == 200 and stop.best_mrr == 0.3
    model.load_state_dict(stop.best_state)
    assert model.weight.eq(200).all()
    never = EarlyStopping(patience=0)
    for step in range(5):
        never.update(step, 0.0, model)
    assert not never.should_stop()


def test_option_rules_at_config_load():
    ok = TrainerArgs.from_mapping({"id_embeddings": ["user", "item"], "dropout": 0.2,
                                   "lr_schedule": "cosine", "warmup_steps": 10,
                                   "early_stopping_patience": 3, "in_batch_negatives": False,
                                   "num_random_negatives": 0})
    assert ok.id_embeddings == ("user", "item") and ok.dropout == 0.2
    for raw, text in [({"id_embeddings": ["user", "user"]}, "id_embeddings: "),
                      ({"id_embeddings": "user"}, "is not a list of distinct non-empty strings"),
                      ({"dropout": 0.95}, "dropout: 0.95 is not a finite number >= 0 and <= 0.9"),
                      ({"lr_schedule": "step"}, "is not one of 'constant', 'cosine', 'linear'"),
                      ({"id_embedding_max_nodes": 0}, "is not an int >= 1"),
                      ({"val_every_steps": 0}, "val_every_steps: 0 is not an int >= 1")]:
        with pytest.raises(UsageError) as err:
            TrainerArgs.from_mapping(raw)
        assert text in str(err.value), (raw, str(err.value))
