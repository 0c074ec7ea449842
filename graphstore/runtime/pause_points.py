"""Named pause points: a test hook that stops a process at a dangerous moment so a test can kill it.

Writers of durable outputs (shard sets, embeddings, run records) call :func:`pause_point` with a
name at each step of publishing. Normally that does nothing. When the process runs with
``GRAPHSTORE_TEST_PAUSE_AT=<name>=<flag file>`` (read by :func:`graphstore.runtime.env.pause_request`)
and reaches that point, it writes its pid to the flag file and sleeps until it is killed, so a
fault test can SIGKILL it exactly there and then check that the old or the new output is intact.
"""

from __future__ import annotations

import os
import time

from graphstore.runtime import env


def pause_point(name: str) -> None:
    """Pause forever at ``name`` when a test asked for it (see module docs); else return."""
    request = env.pause_request(os.environ)
    if request is None or request[0] != name:
        return
    flag = request[1]
    with open(flag + ".tmp", "w") as fh:
        fh.write(str(os.getpid()))
    os.replace(flag + ".tmp", flag)
    while True:  # until the test's SIGKILL
        time.sleep(60)
