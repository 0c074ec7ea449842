"""Every thread's Python stack from a process that seems stuck, on request, into its log.

A process that imported this module writes the stacks of all its threads to its stderr (the
storage session's log, for a sampling worker) when it receives :data:`DUMP_SIGNAL`, and goes on
running. The sampling forkserver imports it (``graphstore.runtime.processes.SAMPLING_PRELOAD``), so every
sampling worker forked from it answers; a batch fetch that has waited
``glt_adapter.FETCH_REPORT_S`` asks its producer's workers (:func:`request_dump`).

Ordering: the handler is registered when the module is first imported (``faulthandler``
keeps it in C, so forked children inherit it). Never send :data:`DUMP_SIGNAL` to a process
that did not import this module: its default action ends the process.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys

DUMP_SIGNAL = signal.SIGUSR1


def enable() -> None:
    """Dump every thread's stack to stderr on :data:`DUMP_SIGNAL`. Idempotent."""
    faulthandler.register(DUMP_SIGNAL, file=sys.stderr, all_threads=True, chain=False)


def request_dump(pid: int) -> bool:
    """Ask process ``pid`` (one that imported this module) for its stacks; False if it is gone."""
    try:
        os.kill(pid, DUMP_SIGNAL)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def dump_here() -> None:
    """Write every thread's stack of this process to its stderr now."""
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)


enable()
