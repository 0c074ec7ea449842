"""``python -m pipeline compile --output pipeline.yaml [--image IMAGE] [--cache]``.

Writes the KFP v2 pipeline (pipeline/dag.py) as YAML for Vertex AI Pipelines. ``--image`` is
the container image every task runs in (it must hold this repository installed, e.g. built from
the repo with `pip install .`); ``--cache`` turns KFP caching on for every task (off by default:
tasks write into the run folder, and resuming uses ``start_at``).
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from pipeline.dag import DEFAULT_IMAGE

    parser.add_argument("--output", required=True, help="where to write the pipeline YAML")
    parser.add_argument("--image", default=DEFAULT_IMAGE,
                        help=f"container image of every task (default: {DEFAULT_IMAGE})")
    parser.add_argument("--cache", action="store_true", help="enable KFP caching on every task")


def run(args: argparse.Namespace) -> int:
    from pipeline.dag import compile_pipeline

    compile_pipeline(args.output, image=args.image, enable_caching=args.cache)
    print(f"compile: wrote {args.output}")
    return 0
