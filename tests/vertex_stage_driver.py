"""A pipeline task running one graph-store stage on "Vertex AI", as its own process, for the
cancellation tests: ``python -m tests.vertex_stage_driver ADDRESS RUN_DIR STAGE POLLING_JSON``.

It calls pipeline.stages.run_graph_store exactly as the train / infer task does, with the real
JobServiceClient pointed at the fake JobService at ``ADDRESS`` (tests/fake_vertex.py) and the
given pipeline.custom_jobs.Polling fields; exit codes follow graphstore.runtime.cli.run_cli.
"""

from __future__ import annotations

import json
import sys

from graphstore.runtime.cli import run_cli, setup_logging
from pipeline.custom_jobs import Polling
from graphstore.formats.run_paths import read_run_id
from pipeline.stages import run_graph_store
from tests.fake_vertex import client_for

IMAGE = "us-central1-docker.pkg.dev/my-project/graphstore/graphstore:1"


def main() -> int:
    address, run_dir, stage, polling = sys.argv[1:5]
    print("driver: started", flush=True)
    run_graph_store(run_dir, stage, IMAGE, "graphstore-pipeline-20261129031500",
                    run_id=read_run_id(run_dir), client=client_for(address),
                    polling=Polling(**json.loads(polling)))
    return 0


if __name__ == "__main__":
    setup_logging("vertex-stage")
    run_cli(main, "vertex-stage")
