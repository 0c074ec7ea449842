"""A compute machine's workers (graphstore.workers): a worker's death is one line naming it."""

from __future__ import annotations

import os
import signal
import traceback

import pytest
import torch.multiprocessing as mp

from graphstore.config.errors import ConfigError, Problem
from graphstore.errors import RuntimeFailure, UsageError
from graphstore.workers import _contract_error, spawn_workers


def _worker(local_rank: int, behaviour: str) -> None:
    """Local rank 1 misbehaves; local rank 0 waits to be ended by spawn's clean-up."""
    if local_rank == 0:
        if behaviour != "ok":
            signal.pause()
        return
    if behaviour == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif behaviour == "exit":
        os._exit(3)
    elif behaviour == "usage":
        raise UsageError("trainerArgs.x must be > 0, got 0")
    elif behaviour == "bug":
        raise ValueError("a bug")


@pytest.mark.timeout(120)
def test_a_workers_death_becomes_one_line_naming_it() -> None:
    spawn_workers(_worker, ("ok",), 2, first_rank=4)
    with pytest.raises(RuntimeFailure, match=r"^compute process rank 5 \(local rank 1, pid \d+\) "
                                             r"was killed by signal SIGKILL; "):
        spawn_workers(_worker, ("kill",), 2, first_rank=4)
    with pytest.raises(RuntimeFailure, match=r"^compute process rank 1 \(local rank 1, pid \d+\) "
                                             r"exited with code 3; "):
        spawn_workers(_worker, ("exit",), 2, first_rank=0)
    with pytest.raises(UsageError) as info:
        spawn_workers(_worker, ("usage",), 2, first_rank=2)
    assert info.value.exit_code == 2
    assert str(info.value).endswith("(local rank 1, pid %s): trainerArgs.x must be > 0, got 0"
                                    % str(info.value).split("pid ")[1].split(")")[0])
    with pytest.raises(mp.ProcessRaisedException, match="ValueError: a bug"):  # a bug: traceback
        spawn_workers(_worker, ("bug",), 2, first_rank=0)


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
    assert _contract_error(_trace(ValueError("graphstore.errors.UsageError: no"))) is None
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
