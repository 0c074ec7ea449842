"""``python -m pipeline schedule``: scheduled retraining on Vertex AI (``PipelineJobSchedule``).

    python -m pipeline schedule create --cron "0 3 * * *" --task-config T --resource-config R
        --image IMAGE [--display-name N] [--max-concurrent-runs 1] [--dry-run] ...
    python -m pipeline schedule list   --resource-config R
    python -m pipeline schedule pause|resume|delete --resource-config R --name SCHEDULE

Every scheduled run gets its own run id (from the clock when it starts), so its own run folder and
its own rows in the embedding tables; config values may use ``{run_date}`` / ``{run_id}``
(pipeline/stages.py). ``create --dry-run`` prints the request (no network, no credentials).
"""

from __future__ import annotations

import argparse
import json
import tempfile


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from pipeline.cli_submit import add_common

    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = sub.add_parser("create", help="create a schedule")
    add_common(create)
    create.add_argument("--cron", required=True, help='cron expression, e.g. "0 3 * * *" (UTC)')
    create.add_argument("--max-concurrent-runs", type=int, default=1)
    listing = sub.add_parser("list", help="list the schedules of the project and region")
    listing.add_argument("--resource-config", required=True)
    for action in ("pause", "resume", "delete"):
        p = sub.add_parser(action, help=f"{action} a schedule")
        p.add_argument("--resource-config", required=True)
        p.add_argument("--name", required=True, help="schedule resource name or id")


def run(args: argparse.Namespace) -> int:
    from graphstore.runtime.errors import UsageError
    from pipeline import vertex

    if args.action == "create":
        from pipeline.cli_submit import build_job, printable

        if args.max_concurrent_runs < 1:
            raise UsageError("--max-concurrent-runs must be >= 1")
        if len(args.cron.split()) not in (5, 6):  # the client does not check cron strings
            raise UsageError(f"--cron {args.cron!r}: expected 5 fields (minute hour day month weekday)"
                             ", optionally prefixed by TZ=...")
        with tempfile.TemporaryDirectory(prefix="schedule-") as tmp:
            job, res = build_job(args, "", tmp)
            sched = vertex.schedule(job, args.display_name, credentials=job.credentials)
            if args.dry_run:
                request = vertex.schedule_request(sched, res, args.cron, args.max_concurrent_runs)
                print(json.dumps(printable(request), indent=1))
                return 0
            name = vertex.create_schedule(sched, res, args.cron, args.max_concurrent_runs)
        print(f"schedule: created {name}")
        return 0
    from google.cloud import aiplatform

    from graphstore.config import load_resource_config

    res = load_resource_config(args.resource_config)
    project, region = vertex._gcp(res)
    if args.action == "list":
        with vertex.credentials_needed():
            for s in aiplatform.PipelineJobSchedule.list(project=project, location=region):
                print(f"{s.resource_name}\t{s.display_name}\t{s.cron}\t{s.state.name}")
        return 0
    with vertex.credentials_needed():
        sched = aiplatform.PipelineJobSchedule.get(args.name, project=project, location=region)
        getattr(sched, args.action)()
    print(f"schedule: {args.action} {sched.resource_name}")
    return 0
