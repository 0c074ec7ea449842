"""The checkpoint format of the default trainer, its writer and its reader. Nothing read here is
unpickled as Python objects (docs/architecture.md, data safety).

Where it lives: ``RunPaths(run_dir).model`` (graphstore.formats.run_paths: ``<run-dir>/checkpoint/model.pt``)
unless ``inferencerConfig.inferencerArgs.checkpoint`` names another file; the functions here take
the file's URI and know nothing else of the run folder.

Format (``schema_version`` 2): one file written by ``torch.save`` holding one dict with exactly
these keys, every value a tensor, a number, a string, ``None`` or a list / tuple / dict of those:

    format          "graphstore-checkpoint"
    schema_version  2
    metadata        a JSON *string* (an object): "model_config" (ModelConfig.to_dict()), "step"
                    (int, steps trained), "num_neighbors" (list of ints: the training fan-out, or
                    null), "saved_at" (UTC, ISO 8601)
    state_dict      the model's state dict (parameter name -> tensor)
    optimizer       the optimizer's state dict (tensors and numbers), or None

It is read with ``torch.load(..., weights_only=True)``: torch's restricted unpickler, which rebuilds
tensors and plain containers and refuses every other Python global, so a file that would run code
when unpickled (any ``__reduce__``) is refused before anything of it runs. Keeping the metadata a
JSON string keeps the non-tensor part of the format explicit and checked here, not left to pickle.

Any file that is not this (a pickle of arbitrary objects, random bytes, a torch checkpoint from
elsewhere, schema_version 1 written by graphstore before this format) is a :class:`UsageError`
naming the file and what to do. Schema 1 (the same keys as top-level pickled values, no ``format``
key) is not read: retrain to write schema 2.
"""

from __future__ import annotations

import datetime
import json
import os
import pickle
import tempfile
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch

from graphstore.io import uris
from graphstore.config.default_args import DEFAULT_NUM_NEIGHBORS
from graphstore.runtime.errors import UsageError
from graphstore.formats.run_paths import CHECKPOINT_MODEL
from graphstore.training.model_config import ModelConfig

FORMAT = "graphstore-checkpoint"
SCHEMA_VERSION = 2
KEYS = ("format", "schema_version", "metadata", "state_dict", "optimizer")
METADATA_KEYS = ("model_config", "step", "num_neighbors")


@dataclass(frozen=True, kw_only=True)
class Checkpoint:
    """What :func:`read_checkpoint` returns: the checked contents of a checkpoint file."""

    model_config: ModelConfig
    step: int  # steps trained
    num_neighbors: tuple[int, ...] | None  # the training fan-out (None: not recorded)
    state_dict: dict[str, torch.Tensor]
    optimizer: dict[str, Any] | None

    def fanout(self, override: Sequence[int] | None = None) -> tuple[int, ...]:
        """The fan-out to sample with: ``override`` (a config's), else the training fan-out,
        else the trainer's default (:data:`DEFAULT_NUM_NEIGHBORS`)."""
        return tuple(override or self.num_neighbors or DEFAULT_NUM_NEIGHBORS)


def write_checkpoint(uri: str, *, state_dict: Mapping[str, torch.Tensor],
                     optimizer: Mapping[str, Any] | None, model_config: ModelConfig,
                     step: int, num_neighbors: Sequence[int] | None) -> None:
    """Write a schema-2 checkpoint to ``uri`` (local or gs://); a reader never sees part of it
    (uris.put_file: rename locally, one object upload on GCS)."""
    metadata = {"model_config": model_config.to_dict(), "step": int(step),
                "num_neighbors": None if num_neighbors is None else [int(n) for n in num_neighbors],
                "saved_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    payload = {"format": FORMAT, "schema_version": SCHEMA_VERSION,
               "metadata": json.dumps(metadata, sort_keys=True), "state_dict": dict(state_dict),
               "optimizer": None if optimizer is None else dict(optimizer)}
    with tempfile.TemporaryDirectory(prefix="ckpt-") as tmp:
        local = os.path.join(tmp, CHECKPOINT_MODEL)
        torch.save(payload, local)
        uris.put_file(local, uri)


WEIGHTS_ONLY_DETAIL = "WeightsUnpickler error: "
"""torch 2.3 ends a refused ``weights_only`` load with this and the reason (``Unsupported class
io.open`` for a global it would have called, ``Unsupported operand 153`` for bytes that are no
pickle at all)."""


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    text = text.rpartition(WEIGHTS_ONLY_DETAIL)[2] if WEIGHTS_ONLY_DETAIL in text else text
    return (f"{type(exc).__name__}: {text}" if text else type(exc).__name__)[:200]


def _load_restricted(uri: str, path: str, fix: str) -> Any:
    """``torch.load(weights_only=True)``; every failure is one line naming ``uri``."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except OSError as exc:
        raise UsageError(f"{uri}: cannot read the checkpoint ({_reason(exc)}); {fix}") from None
    except Exception as exc:  # noqa: BLE001  random bytes / truncated file: torch raises anything
        reason = _reason(exc)
        if isinstance(exc, pickle.UnpicklingError) and "Unsupported class" in reason:
            raise UsageError(
                f"{uri}: refused to load: it is not a graphstore checkpoint and would run Python "
                f"code when loaded ({reason.split(': ', 1)[1]}); {fix}") from None
        raise UsageError(f"{uri}: not a graphstore checkpoint (torch cannot read it: {reason}); "
                         f"{fix}") from None


def parse_checkpoint(raw: Any, uri: str, fix: str) -> Checkpoint:
    """Check what ``torch.load`` returned against the format (module docs)."""
    if isinstance(raw, dict) and "format" not in raw and raw.get("schema_version") == 1 \
            and "model_config" in raw:  # what graphstore's trainer wrote before this format
        raise UsageError(f"{uri}: graphstore checkpoint schema_version 1 (written before the "
                         f"current format), this graphstore reads {SCHEMA_VERSION}; {fix}")
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        keys = sorted(map(str, raw))[:6] if isinstance(raw, dict) else type(raw).__name__
        raise UsageError(f"{uri}: not a graphstore checkpoint (no format {FORMAT!r}; found "
                         f"{keys}: a checkpoint written by other code?); {fix}")
    version = raw.get("schema_version")
    if version != SCHEMA_VERSION:
        raise UsageError(f"{uri}: graphstore checkpoint schema_version {version!r}, this graphstore "
                         f"reads {SCHEMA_VERSION}; {fix}")
    missing = [k for k in KEYS if k not in raw]
    try:
        metadata = json.loads(raw["metadata"]) if isinstance(raw.get("metadata"), str) else None
    except json.JSONDecodeError:
        metadata = None
    if missing or not isinstance(metadata, dict) or any(k not in metadata for k in METADATA_KEYS):
        raise UsageError(f"{uri}: corrupt graphstore checkpoint (keys {missing or 'present'}, "
                         f"metadata {'not a JSON object' if not isinstance(metadata, dict) else 'incomplete'}"
                         f"); {fix}")
    state = raw["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise UsageError(f"{uri}: corrupt graphstore checkpoint (state_dict is not a dict of "
                         f"tensors); {fix}")
    if not isinstance(metadata["model_config"], dict) or not isinstance(metadata["step"], int):
        raise UsageError(f"{uri}: corrupt graphstore checkpoint (metadata model_config / step); "
                         f"{fix}")
    fanout = metadata["num_neighbors"]
    try:
        model_config = ModelConfig.from_dict(metadata["model_config"])
        fanout = None if fanout is None else tuple(int(n) for n in fanout)
    except (TypeError, KeyError, ValueError) as exc:
        raise UsageError(f"{uri}: corrupt graphstore checkpoint (metadata model_config / "
                         f"num_neighbors: {exc}); {fix}") from None
    return Checkpoint(model_config=model_config, step=metadata["step"], num_neighbors=fanout,
                      state_dict=state, optimizer=raw["optimizer"])


def read_checkpoint(uri: str, *, fix: str) -> Checkpoint:
    """Read and check the checkpoint at ``uri`` (local or gs://).

    ``fix`` ends every error message: what the user should do (e.g. which config key to point
    elsewhere). Raises UsageError naming ``uri`` for a missing or unreadable file and for anything
    that is not a schema-2 graphstore checkpoint; nothing in the file runs as code.
    """
    with tempfile.TemporaryDirectory(prefix="ckpt-") as tmp:
        try:
            path = uris.localize(uri, tmp)
        except UsageError as exc:
            raise UsageError(f"{exc}; {fix}") from None
        raw = _load_restricted(uri, path, fix)
    return parse_checkpoint(raw, uri, fix)
