"""``python -m pipeline compile --output pipeline.yaml [--image IMAGE] [--cache] [--resource-config R]``.

Writes the KFP v2 pipeline (pipeline/dag.py) as YAML for Vertex AI Pipelines. ``--image`` is
the container image every task runs in (it must hold this repository installed, e.g. built from
the repo with `pip install .`); ``--cache`` turns KFP caching on for every task (off by default:
tasks write into the run folder, and resuming uses ``start_at``); ``--resource-config`` sets the
partition and export tasks' CPU and memory requests (``partition_resource_config`` /
``export_resource_config``; without it, their defaults).
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from pipeline.dag import DEFAULT_IMAGE

    parser.add_argument("--output", required=True, help="where to write the pipeline YAML")
    parser.add_argument("--image", default=DEFAULT_IMAGE,
                        help=f"container image of every task (default: {DEFAULT_IMAGE})")
    parser.add_argument("--cache", action="store_true", help="enable KFP caching on every task")
    parser.add_argument("--resource-config", default=None, metavar="PATH",
                        help="resource config whose partition_resource_config / "
                             "export_resource_config set those tasks' CPU and memory (default: "
                             "their defaults)")


def run(args: argparse.Namespace) -> int:
    from graphstore.config import load_resource_config
    from pipeline.dag import compile_pipeline

    res = load_resource_config(args.resource_config) if args.resource_config else None
    compile_pipeline(args.output, image=args.image, enable_caching=args.cache, resources=res)
    print(f"compile: wrote {args.output}")
    return 0
