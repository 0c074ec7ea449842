"""When the default trainer changes its learning rate and when it stops early.

Both are pure bookkeeping over step numbers and validation results, so they are the same on every
rank (each rank sees the same all-reduced validation result) and survive a resume: the learning
rate is a function of the step alone (:func:`lr_factor`), not a scheduler's state.
"""

from __future__ import annotations

import math
from typing import Literal

import torch

Schedule = Literal["constant", "cosine", "linear"]


def lr_factor(step: int, max_steps: int, schedule: Schedule, warmup_steps: int) -> float:
    """The multiplier of ``trainerArgs.lr`` for the step that follows ``step`` steps done.

    Warm-up: ``(step + 1) / warmup_steps`` for the first ``warmup_steps`` steps. Then
    ``constant``: 1; ``cosine``: ``0.5 * (1 + cos(pi * t))``; ``linear``: ``1 - t``, where ``t``
    goes from 0 after the warm-up to 1 at ``max_steps`` (so the last step's factor is just above
    0). Never negative; ``constant`` without warm-up is exactly 1 (the behaviour of before)."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    span = max(1, max_steps - warmup_steps)
    t = min(1.0, (step - warmup_steps) / span)
    return 0.5 * (1.0 + math.cos(math.pi * t)) if schedule == "cosine" else 1.0 - t


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Give every parameter group of ``optimizer`` the learning rate ``lr``."""
    for group in optimizer.param_groups:
        group["lr"] = lr


class EarlyStopping:
    """Tracks the best validation MRR and says when ``patience`` validations in a row have not
    beaten it (``patience`` 0: never). A result counts as better only when strictly higher; the
    first validation always is. ``best_state`` holds a CPU copy of the best step's weights."""

    def __init__(self, patience: int) -> None:
        self.patience = patience
        self.best_mrr = -math.inf
        self.best_step: int | None = None
        self.best_state: dict[str, torch.Tensor] | None = None
        self.misses = 0

    def update(self, step: int, mrr: float, model: torch.nn.Module) -> bool:
        """Record one validation; True when it is the best so far (its weights are kept)."""
        if mrr > self.best_mrr:
            self.best_mrr, self.best_step, self.misses = mrr, step, 0
            self.best_state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
            return True
        self.misses += 1
        return False

    def should_stop(self) -> bool:
        """True once ``patience`` validations in a row did not improve on the best."""
        return self.patience > 0 and self.misses >= self.patience
