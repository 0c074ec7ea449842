"""A compute machine's workers (graphstore.runtime.workers): a worker's death is one line naming it: the tests
that start processes (a command line, a second interpreter, workers). The others are in
tests/unit/test_workers.py: unit tests start no process."""

from __future__ import annotations

import os
import signal
import traceback
import pytest
import torch.multiprocessing as mp
from graphstore.config.errors import ConfigError, Problem
from graphstore.runtime.errors import RuntimeFailure, UsageError
from graphstore.runtime.workers import _contract_error, spawn_workers

pytestmark = [pytest.mark.integration]


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
