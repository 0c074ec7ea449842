"""Run by tests/integration/test_replicated_ray.py in a process of its own: a sampling dataset
whose read tasks cannot start (an actor holds both CPUs of its own Ray) must raise RuntimeFailure
after its bound. Prints ``WAITED <seconds>`` and the error's text, shuts Ray down and exits 0
without waiting for the pulling thread (still inside Ray Data: graphstore.modes.replicated.progress
says it ends with the process). Its own process because that thread outlives ``ray.shutdown()``
and would take a shared pytest worker down with it later.

Usage: python -m tests.integration.ray_stall_probe GRAPH_FILE STALL_TIMEOUT_S
"""

from __future__ import annotations

import os
import sys
import time

import ray

from graphstore.modes.replicated import create_sampling_dataset
from graphstore.runtime.errors import RuntimeFailure


@ray.remote(num_cpus=2)
class Holder:
    def ready(self) -> bool:
        return True


def main(graph: str, stall_timeout_s: float) -> int:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    dataset = create_sampling_dataset(graph, [5, 5], batch_size=64, parallelism=2,
                                      ray_remote_args={"num_cpus": 1},
                                      stall_timeout_s=stall_timeout_s)
    holder = Holder.remote()
    assert ray.get(holder.ready.remote(), timeout=60)
    t0 = time.monotonic()
    try:
        for _ in dataset.iter_batches(batch_size=1, batch_format="pyarrow"):
            pass
    except RuntimeFailure as exc:
        print(f"WAITED {time.monotonic() - t0:.1f}", flush=True)
        print(exc, flush=True)
        code = 0
    else:
        print("NO ERROR", flush=True)
        code = 3
    ray.shutdown()  # Ray's own processes end with it; the pulling thread is a daemon
    return code


if __name__ == "__main__":
    # os._exit: not waiting for the pulling thread (interpreter shutdown would join Ray's)
    os._exit(main(sys.argv[1], float(sys.argv[2])))
