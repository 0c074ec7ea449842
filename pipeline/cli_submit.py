"""``python -m pipeline submit``: run the pipeline on Vertex AI Pipelines.

    python -m pipeline submit --task-config T --resource-config R --image IMAGE
        [--run-root gs://...] [--run-id ID] [--start-at S] [--stop-after S] [--display-name N]
        [--set K=V]... [--shards URI] [--dry-run]

Compiles the pipeline (pipeline/dag.py) with ``IMAGE`` as every task's image and the graph-store
CustomJobs' image, and submits an ``aiplatform.PipelineJob`` in the resource config's project and
region, as its service account, with its labels; the pipeline root is
``<temp_assets_bucket>/pipeline_root``; runs go under ``--run-root`` (default
``<perm_assets_bucket>/runs``). ``--dry-run`` prints the request instead (no network, no
credentials needed, beyond reading the sizes below). Before compiling, the storage machines are
sized as ``pipeline plan`` does (from ``--shards`` or the raw tables' row counts); a pool that
cannot hold its partition is refused (exit 2), and so is a run that would partition in BigQuery
on tables that are missing or in another location than the configured one
(pipeline.bigquery_checks), and one whose service account lacks a permission the run needs
(pipeline.service_account_checks: asked as that account, not with ``--dry-run``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile


def add_common(parser: argparse.ArgumentParser) -> None:
    """Arguments shared by ``submit`` and ``schedule create``."""
    from pipeline.stages import STAGES

    parser.add_argument("--task-config", required=True, help="task config YAML")
    parser.add_argument("--resource-config", required=True, help="resource config YAML (Vertex)")
    parser.add_argument("--image", required=True,
                        help="container image holding this repository (every task and CustomJob)")
    parser.add_argument("--run-root", help="runs folder (default: <perm_assets_bucket>/runs)")
    parser.add_argument("--start-at", default=None, choices=STAGES,
                        help=f"first stage (default {STAGES[0]}); with --run-id of an earlier run "
                             "it resumes that run in its folder")
    parser.add_argument("--stop-after", default=STAGES[-1], choices=STAGES)
    parser.add_argument("--display-name", default="graphstore-pipeline")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--dry-run", action="store_true", help="print the request, send nothing")
    parser.add_argument("--shards", default=None, metavar="URI",
                        help="size the storage machines from this shard set's manifest (as "
                             "`pipeline plan --shards`); default: from the raw tables' row counts")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common(parser)
    parser.add_argument("--run-id", default="", help="run id (default: derived when the run starts)")


def build_job(args: argparse.Namespace, run_id: str, tmp: str):
    """``(PipelineJob, ResourceConfig)`` for the arguments; compiles into ``tmp``."""
    from google.auth.credentials import AnonymousCredentials

    from graphstore.config import load_config_pair
    from graphstore.runtime.errors import UsageError
    from pipeline import vertex
    from pipeline.dag import compile_pipeline
    from pipeline.stages import dump_yaml, stage_range

    from graphstore.formats.run_ids import RunId
    from pipeline.stages import STAGES

    stages = stage_range(args.start_at or STAGES[0], args.stop_after)
    run_id = RunId.parse(run_id, "--run-id") if run_id else ""  # "": the freeze task makes one
    task, res = load_config_pair(args.task_config, args.resource_config, tuple(args.overrides))
    run_root = args.run_root
    if not run_root:
        if not res.shared.perm_assets_bucket:
            raise UsageError("give --run-root, or set shared_resource_config.common_compute_config."
                             "perm_assets_bucket")
        run_root = f"{res.shared.perm_assets_bucket.rstrip('/')}/runs"
    from pipeline.vertex_checks import check_for_vertex

    # every config that would fail later on Vertex AI is refused here, before anything is sent
    check_for_vertex(task, res, image=args.image, run_root=run_root, task_file=args.task_config,
                     resource_file=args.resource_config)
    submitter = None  # the submitter's credentials (--dry-run: none needed)
    if not args.dry_run:  # no credentials: one line naming the login command, before sizing
        import google.auth  # reads the raw tables' sizes with them

        with vertex.credentials_needed():
            submitter = google.auth.default()[0]
    check_sizes(task, res, args)  # a storage machine that cannot hold its partition: refused
    from graphstore.config import ConfigError
    from pipeline.bigquery_checks import bigquery_engine_problems

    try:  # partitioning in BigQuery: tables, locations, scratch dataset
        problems = bigquery_engine_problems(task, args.task_config)
    except Exception as exc:  # noqa: BLE001 - no credentials or access here: said, not fatal
        print(f"submit: BigQuery engine not checked: {type(exc).__name__}: {exc}"[:300],
              file=sys.stderr, flush=True)
        problems = []
    problems += service_account_problems(task, res, run_root, args, submitter)
    if problems:
        raise ConfigError(problems)
    template = os.path.join(tmp, "pipeline.yaml")
    compile_pipeline(template, image=args.image, resources=res)
    params = {"task_config": dump_yaml(task.to_dict()), "resource_config": dump_yaml(res.to_dict()),
              "run_root": run_root, "run_id": str(run_id), "start_at": stages[0],
              "stop_after": stages[-1], "graph_store_image": args.image,
              "resume": bool(run_id) and args.start_at is not None}
    credentials = AnonymousCredentials() if args.dry_run else None
    job = vertex.pipeline_job(res, template_path=template, parameter_values=params,
                              display_name=args.display_name, credentials=credentials)
    return job, res


def service_account_problems(task, res, run_root: str, args: argparse.Namespace,
                             submitter) -> list:
    """What the run's service account lacks (pipeline.service_account_checks), asked with the
    ``submitter``'s credentials (None with ``--dry-run``); lines it could not check or confirm go
    to stderr. Not asked with ``--dry-run``, nor without a service account in the resource config
    (Vertex AI then runs as the project's default one)."""
    from pipeline.service_account_checks import (AsServiceAccount, needed_permissions,
                                                 permission_problems)

    email = res.shared.gcp_service_account_email
    if args.dry_run or not email:
        why = "--dry-run" if args.dry_run else "no gcp_service_account_email in the resource config"
        print(f"submit: service account permissions not checked ({why})", file=sys.stderr,
              flush=True)
        return []
    account = AsServiceAccount(email, submitter)
    outcome = permission_problems(needed_permissions(task, res, run_root), account,
                                  args.task_config)
    for line in outcome.notes:
        print(line, file=sys.stderr, flush=True)
    if not outcome.problems and not outcome.notes:
        print(f"submit: service account {email}: every permission the run needs is granted",
              file=sys.stderr, flush=True)
    return outcome.problems


def check_sizes(task, res, args: argparse.Namespace) -> None:
    """``pipeline plan``'s check (pipeline.plan): a ConfigError (exit 2) naming the keys to change
    when a storage machine or its disk cannot hold its partition; when the sizes cannot be read
    here (a raw-table uri resolved per run, no access), one line on stderr says so and the
    submission goes on."""
    from graphstore.config import ConfigError
    from graphstore.runtime.errors import GraphstoreError
    from pipeline.plan import SizesUnknown, check, partition_loads

    try:
        loads, source = partition_loads(task, res.num_partitions, args.shards)
    except (SizesUnknown, GraphstoreError) as exc:
        if args.shards:  # asked for explicitly: it must be readable
            raise
        print(f"submit: storage sizing not checked: {exc}", file=sys.stderr, flush=True)
        return
    plan = check(task, res, loads, source, task_file=args.task_config,
                 res_file=args.resource_config)
    if not plan.fits:
        raise ConfigError(plan.problems)
    print(f"submit: storage sizing from {source}: fits", file=sys.stderr, flush=True)


def printable(request: dict) -> dict:
    """The request with the compiled pipeline spec summarised (it is the pipeline YAML)."""
    out = json.loads(json.dumps(request, default=str))

    def shrink(node):
        if isinstance(node, dict):
            for key, value in list(node.items()):
                if key == "pipeline_spec" and isinstance(value, dict):
                    node[key] = {"pipelineInfo": value.get("pipelineInfo"),
                                 "sdkVersion": value.get("sdkVersion"),
                                 "tasks": sorted(value.get("root", {}).get("dag", {}).get("tasks", {}))}
                else:
                    shrink(value)
        return node

    return shrink(out)


def run(args: argparse.Namespace) -> int:
    from pipeline import vertex

    with tempfile.TemporaryDirectory(prefix="submit-") as tmp:
        job, res = build_job(args, args.run_id, tmp)
        if args.dry_run:
            print(json.dumps(printable(vertex.pipeline_job_request(job, res)), indent=1))
            return 0
        name = vertex.submit(job, res)
    print(f"submit: {name}")
    return 0
