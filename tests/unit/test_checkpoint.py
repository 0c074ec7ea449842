"""The checkpoint format (graphstore.training.checkpoint) and the two places that read one: the
inferencer (``inferencerArgs.checkpoint``, any file a user points at) and the trainer's resume.

Real files, real torch.save / pickle; the hostile files would create a marker file if anything in
them ran.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
import torch

from graphstore.runtime.errors import UsageError
from graphstore.inference.inferencer import load_checkpoint
from graphstore.training.checkpoint import FORMAT, SCHEMA_VERSION, read_checkpoint, write_checkpoint
from graphstore.training.model import LinkPredictionEncoder, ModelConfig
from graphstore.training.trainer import resume_checkpoint

CFG = ModelConfig(node_feature_dims={"user": 4, "item": 0},
                  edge_types=(("user", "buys", "item"), ("item", "rev_buys", "user")),
                  hidden_dim=8, out_dim=6)


class CreatesAFile:
    """Unpickling this runs ``open(path, "w")``: the file appears."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def _trained() -> tuple[LinkPredictionEncoder, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = LinkPredictionEncoder(CFG)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    x = {"user": torch.randn(3, 4), "item": torch.zeros(2, 0)}
    edges = {("user", "buys", "item"): torch.tensor([[0, 1, 2], [0, 1, 1]]),
             ("item", "rev_buys", "user"): torch.tensor([[0, 1, 1], [0, 1, 2]])}
    out = model(x, edges, {"user": 3, "item": 2})
    sum(h.sum() for h in out.values()).backward()
    optimizer.step()
    return model, optimizer


def _one_line(exc: pytest.ExceptionInfo, *must: str) -> str:
    text = str(exc.value)
    assert "\n" not in text, text
    for part in must:
        assert part in text, text
    return text


def test_round_trip_restores_model_optimizer_and_metadata(tmp_path: Path) -> None:
    model, optimizer = _trained()
    path = tmp_path / "model.pt"
    write_checkpoint(str(path), state_dict=model.state_dict(), optimizer=optimizer.state_dict(),
                     model_config=CFG, step=42, num_neighbors=[5, 3])
    raw = torch.load(path, weights_only=True)  # loadable without unpickling any object
    assert raw["format"] == FORMAT and raw["schema_version"] == SCHEMA_VERSION
    assert isinstance(raw["metadata"], str)
    for ckpt in (read_checkpoint(str(path), fix="-"), load_checkpoint(str(path))):
        assert ckpt.step == 42 and ckpt.num_neighbors == (5, 3)
        again = LinkPredictionEncoder(ckpt.model_config)
        again.load_state_dict(ckpt.state_dict)
        for (name, a), (_, b) in zip(model.state_dict().items(), again.state_dict().items()):
            assert torch.equal(a, b), name
        opt2 = torch.optim.AdamW(again.parameters(), lr=0.5)
        opt2.load_state_dict(ckpt.optimizer)
        assert opt2.param_groups[0]["lr"] == 0.01
        state = opt2.state_dict()["state"]
        assert all(torch.equal(state[k]["exp_avg"], v["exp_avg"])
                   for k, v in optimizer.state_dict()["state"].items())
    assert resume_checkpoint(str(tmp_path)).step == 42
    assert resume_checkpoint(str(tmp_path / "nothing-here")) is None


@pytest.mark.parametrize("how", ["torch zip", "torch legacy", "plain pickle"])
@pytest.mark.parametrize("reader", ["inference", "resume"])
def test_a_pickle_that_would_run_code_is_refused_and_nothing_runs(tmp_path: Path, how: str,
                                                                 reader: str) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "model.pt"
    payload = {"format": FORMAT, "schema_version": SCHEMA_VERSION, "state_dict": {},
               "metadata": CreatesAFile(marker)}
    if how == "plain pickle":
        path.write_bytes(pickle.dumps(payload))
    else:
        torch.save(payload, path, _use_new_zipfile_serialization=(how == "torch zip"))
    with pytest.raises(UsageError) as exc:
        load_checkpoint(str(path)) if reader == "inference" else resume_checkpoint(str(tmp_path))
    # torch files name the global they refused; a bare pickle is not even a torch file
    _one_line(exc, str(path), *(("refused", "io.open") if how != "plain pickle"
                                else ("not a graphstore checkpoint",)))
    assert not marker.exists()


@pytest.mark.parametrize("content", [b"", b"not a checkpoint at all\n", os.urandom(4096)],
                         ids=["empty", "text", "random"])
def test_a_file_torch_cannot_read_is_a_usage_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "model.pt"
    path.write_bytes(content)
    with pytest.raises(UsageError) as exc:
        load_checkpoint(str(path))
    _one_line(exc, str(path), "not a graphstore checkpoint",
              "inferencerConfig.inferencerArgs.checkpoint")


def test_a_truncated_checkpoint_is_a_usage_error(tmp_path: Path) -> None:
    model, optimizer = _trained()
    path = tmp_path / "model.pt"
    write_checkpoint(str(path), state_dict=model.state_dict(), optimizer=optimizer.state_dict(),
                     model_config=CFG, step=1, num_neighbors=None)
    path.write_bytes(path.read_bytes()[:300])
    with pytest.raises(UsageError) as exc:
        resume_checkpoint(str(tmp_path))
    _one_line(exc, str(path), "train from scratch")


def test_a_torch_checkpoint_from_elsewhere_is_a_usage_error(tmp_path: Path) -> None:
    model, _ = _trained()
    path = tmp_path / "model.pt"
    torch.save(model.state_dict(), path)  # a bare state dict, as most code saves one
    with pytest.raises(UsageError) as exc:
        load_checkpoint(str(path))
    _one_line(exc, str(path), "not a graphstore checkpoint")


@pytest.mark.parametrize("version", [1, 3])
def test_another_schema_version_is_a_usage_error(tmp_path: Path, version: int) -> None:
    model, optimizer = _trained()
    path = tmp_path / "model.pt"
    if version == 1:  # what graphstore's trainer wrote before this format
        torch.save({"schema_version": 1, "model_config": CFG.to_dict(),
                    "state_dict": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "step": 5, "num_neighbors": [5, 3]}, path)
    else:
        write_checkpoint(str(path), state_dict=model.state_dict(), optimizer=None,
                         model_config=CFG, step=5, num_neighbors=[5, 3])
        raw = torch.load(path, weights_only=True)
        torch.save({**raw, "schema_version": version}, path)
    with pytest.raises(UsageError) as exc:
        load_checkpoint(str(path))
    _one_line(exc, str(path), f"schema_version {version}", f"reads {SCHEMA_VERSION}")


def test_corrupt_metadata_is_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "model.pt"
    torch.save({"format": FORMAT, "schema_version": SCHEMA_VERSION, "metadata": "{not json",
                "state_dict": {}, "optimizer": None}, path)
    with pytest.raises(UsageError) as exc:
        load_checkpoint(str(path))
    _one_line(exc, str(path), "corrupt")


def test_a_missing_checkpoint_says_to_train_first(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as exc:
        load_checkpoint(str(tmp_path / "model.pt"))
    _one_line(exc, "run the train stage first")


def test_the_fan_out_comes_from_the_config_then_the_checkpoint_then_the_default(tmp_path):
    from graphstore.config.default_args import DEFAULT_NUM_NEIGHBORS, TrainerArgs

    model, optimizer = _trained()
    for recorded in ([5, 3], None):
        path = tmp_path / f"model-{recorded}.pt"
        write_checkpoint(str(path), state_dict=model.state_dict(), optimizer=None,
                         model_config=CFG, step=3, num_neighbors=recorded)
        ckpt = read_checkpoint(str(path), fix="-")
        assert ckpt.model_config == CFG
        assert ckpt.fanout([7]) == (7,)
        assert ckpt.fanout(None) == (tuple(recorded) if recorded else DEFAULT_NUM_NEIGHBORS)
    assert TrainerArgs().num_neighbors == DEFAULT_NUM_NEIGHBORS
