"""A compute machine's workers (graphstore.runtime.workers): a worker's death is one line naming it."""

from __future__ import annotations

import os
import signal
import traceback

import pytest
import torch.multiprocessing as mp

from graphstore.config.errors import ConfigError, Problem
from graphstore.runtime.errors import RuntimeFailure, UsageError
from graphstore.runtime.workers import _contract_error, spawn_workers


def _trace(exc: BaseException) -> str:
    try:
        raise exc
    except BaseException:  # noqa: BLE001 - formatting what was raised
        return traceback.format_exc()


def test_errors_of_the_contract_are_found_at_the_end_of_a_traceback() -> None:
    assert _contract_error(_trace(RuntimeFailure("storage rank 1 died"))) == (
        RuntimeFailure, "storage rank 1 died")
    problems = [Problem(file="task.yaml", path="a.b", value="0", message="must be > 0"),
                Problem(file="task.yaml", path="a.c", value=None, message="bad")]
    cls, message = _contract_error(_trace(ConfigError(problems)))  # a subclass, two lines
    assert cls is UsageError and message == str(ConfigError(problems))
    assert _contract_error(_trace(ValueError("graphstore.runtime.errors.UsageError: no"))) is None
    assert _contract_error("") is None
    try:  # ours handled, then a bug ended the worker: the bug's traceback stays
        try:
            raise UsageError("handled")
        except UsageError:
            raise KeyError("k") from None
    except KeyError:
        assert _contract_error(traceback.format_exc()) is None
    try:
        try:
            raise UsageError("handled")
        except UsageError:
            raise KeyError("k")
    except KeyError:
        assert _contract_error(traceback.format_exc()) is None
