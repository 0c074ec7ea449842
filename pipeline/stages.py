"""What each pipeline task does: the bodies of the DAG's components (pipeline/dag.py) call these.

Run folder of one pipeline run: ``<runRoot>/<run_id>/``, laid out by
graphstore.formats.run_paths.RunPaths (frozen configs and the run record ``config/run.json`` in
``config/``, the stages' outputs, process logs, and ``_stages/<name>.json``: one record per task,
graphstore.formats.stage_records.StageRecord, status running from its start, then ok or failed with seconds
and error). The run id enters at the freeze task (:func:`freeze`), which hands it to every later
task with the run folder; a run folder's id can also be read back from its run record
(graphstore.formats.run_paths.read_run_id), never from its name.

Placeholders (scheduled retraining): ``{run_id}``, ``{run_date}`` (YYYY-MM-DD, UTC) and
``{run_time}`` (HHMMSS) anywhere in a config value are replaced when the run starts, and the
resolved configs are what every later task reads. Each task is idempotent for its run folder:
rerunning it replaces its own outputs. Nothing here imports torch (graph-store stages run in the
launcher's child processes).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import tempfile
import time
from typing import Iterator, NamedTuple

import yaml

from graphstore.io import uris
from graphstore.config import load_config_pair
from graphstore.runtime.errors import GraphstoreError, UsageError
from graphstore.formats.run_ids import RunId
from graphstore.formats.run_paths import RUN_RECORD, RunPaths, read_run_record
from graphstore.config.stage import stage_resources, stage_section
from graphstore.formats.stage_records import STAGES, StageRecord, write_record


log = logging.getLogger(__name__)


# RUN_RECORD (defined in graphstore.formats.run_paths, kept importable from here): a run folder's claim,
# created exclusively by the run that owns the folder (run id, date, time, started_at); later
# stages and resumed runs read it, nobody overwrites it.


def check_run_folder(run_dir: str, *, resume: bool) -> dict | None:
    """The run record of ``run_dir`` when it holds a run that may be resumed, None when the
    folder is free; UsageError when it holds another run and ``resume`` is off, or holds files
    that are not a run of ours (nothing is written here)."""
    record = read_run_record(run_dir)
    if record is not None:
        if not resume:
            raise UsageError(f"run folder {run_dir} already holds run "
                             f"{str(record.get('run_id', '?'))[:80]} (started "
                             f"{str(record.get('started_at', '?'))[:40]}); resume it with "
                             "--start-at <stage>, or choose another --run-id")
        return record
    if uris.list_names(run_dir) or uris.list_dirs(run_dir):
        raise UsageError(f"{run_dir} exists and holds files but no {'/'.join(RUN_RECORD)}: not a "
                         "run folder of ours; choose another --run-id or --run-root")
    return None


def claim_run_folder(run_root: str, run_id: str, record: dict, *, resume: bool) -> dict:
    """Claim ``<run_root>/<run_id>`` for a run: create its run record exclusively (atomic against
    a concurrent run, local and gs://). Returns the record in force: ``record`` when this call
    created it, the existing one when ``resume`` allows reusing the folder; UsageError otherwise
    (see :func:`check_run_folder`)."""
    run_dir = RunPaths.of_run(run_root, run_id).run_dir
    existing = check_run_folder(run_dir, resume=resume)
    if existing is not None:
        return existing
    if uris.create_exclusive(RunPaths(run_dir).run_record, json.dumps(record, indent=1)):
        return record
    return check_run_folder(run_dir, resume=resume) or record  # lost a race: the same rule


def resolve_placeholders(text: str, values: dict[str, str]) -> str:
    """Replace ``{run_id}`` / ``{run_date}`` / ``{run_time}`` in config text."""
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return text


def stage_range(start_at: str, stop_after: str) -> tuple[str, ...]:
    """The stages a run executes, in order; UsageError for unknown names or an empty range."""
    for name, value in (("--start-at", start_at), ("--stop-after", stop_after)):
        if value not in STAGES:
            raise UsageError(f"{name} must be one of {', '.join(STAGES)}, got {value!r}")
    first, last = STAGES.index(start_at), STAGES.index(stop_after)
    if first > last:
        raise UsageError(f"--start-at {start_at} comes after --stop-after {stop_after}")
    return STAGES[first:last + 1]


def config_paths(run_dir: str) -> tuple[str, str]:
    """URIs of the frozen task and resource configs of a run (RunPaths)."""
    paths = RunPaths(run_dir)
    return paths.task_config, paths.resource_config


def load_frozen(run_dir: str):
    """The run's frozen ``(TaskConfig, ResourceConfig)`` (copied locally first when on gs://)."""
    task_uri, res_uri = config_paths(run_dir)
    with tempfile.TemporaryDirectory(prefix="config-") as tmp:
        return load_config_pair(uris.localize(task_uri, tmp), uris.localize(res_uri, tmp))


def _resolve_and_validate(texts: tuple[str, str], values: dict[str, str]):
    """The config texts with placeholders resolved, and the validated TaskConfig."""
    resolved = [resolve_placeholders(text, values) for text in texts]
    with tempfile.TemporaryDirectory(prefix="config-") as tmp:
        local = [os.path.join(tmp, "task.yaml"), os.path.join(tmp, "resource.yaml")]
        for path, text in zip(local, resolved):
            with open(path, "w") as fh:
                fh.write(text)
        task, _ = load_config_pair(*local)
    return resolved, task


class Frozen(NamedTuple):
    """What the freeze task hands the stages: the run folder, the run id, the node types to
    export."""

    run_dir: str
    run_id: RunId
    node_types: list[str]


def freeze(task_yaml: str, resource_yaml: str, run_root: str, run_id: str,
           run_date: str = "", resume: bool = False) -> Frozen:
    """First task of a run: claim the run folder (an explicit ``run_id`` is checked; a folder
    holding another run is refused unless ``resume``; an empty ``run_id`` gets a fresh one),
    resolve placeholders (a resumed run keeps its original date and time), validate, and write
    the frozen configs into the run folder (local or gs://). The run id enters the run here
    (parsed, or made: graphstore.formats.run_ids) and is handed to every stage (:class:`Frozen`)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    if run_date:
        now = datetime.datetime.fromisoformat(run_date).replace(tzinfo=datetime.timezone.utc)
    given = RunId.parse(run_id, "run_id") if run_id else None
    candidates = [given] if given else [RunId.new(now) for _ in range(5)]
    for candidate in candidates:
        values = {"run_id": candidate, "run_date": now.strftime("%Y-%m-%d"),
                  "run_time": now.strftime("%H%M%S")}
        texts, task = _resolve_and_validate((task_yaml, resource_yaml), values)  # before claiming
        try:
            record = claim_run_folder(run_root, candidate,
                                      {**values, "started_at": now.isoformat(timespec="seconds")},
                                      resume=resume and given is not None)
        except UsageError:
            if given or candidate == candidates[-1]:
                raise
            continue  # a fresh id another run took in the same instant: draw again
        kept = {k: str(record.get(k, v)) for k, v in values.items()}
        if kept != values:  # a resumed run keeps the date and time it started with
            texts, task = _resolve_and_validate((task_yaml, resource_yaml), kept)
        break
    run_dir = RunPaths.of_run(run_root, candidate).run_dir
    for uri, text in zip(config_paths(run_dir), texts):
        uris.write_text(uri, text)
    node_types = list(task.inferencer.node_types) if task.inferencer else []
    return Frozen(run_dir, candidate, node_types)


class StageRun:
    """The record of the task in progress (:func:`recorded`): :meth:`update` replaces it with a
    copy holding more of its outcome; :meth:`write` writes it before the task ends (a Vertex AI
    job's name as soon as the job exists)."""

    def __init__(self, run_dir: str, record: StageRecord) -> None:
        self.run_dir = run_dir
        self.record = record

    def update(self, **fields) -> None:
        """Set fields of the record (StageRecord's; TypeError for any other)."""
        self.record = self.record.with_(**fields)

    def write(self) -> None:
        write_record(self.run_dir, self.record)


@contextlib.contextmanager
def recorded(run_dir: str, stage: str, node_type: str = "") -> Iterator[StageRun]:
    """Time a task and write its ``_stages/<name>.json`` (graphstore.formats.stage_records):
    status running when it starts, then ok or failed (with the error) when it ends."""
    run = StageRun(run_dir, StageRecord(stage=stage, node_type=node_type))
    run.write()  # what is running now (a crash leaves it)
    t0 = time.perf_counter()
    status, error = "failed", ""
    try:
        yield run
        status = "ok"
    except BaseException as exc:
        error = str(exc).strip()[-4000:]
        raise
    finally:
        run.update(status=status, error=error, seconds=round(time.perf_counter() - t0, 1))
        run.write()


def run_partition(run_dir: str) -> None:
    """Raw tables -> ``<run-dir>/shards`` (replaced when a previous attempt left one); in
    replicated mode (resource config ``mode: replicated``) then the graph and features files,
    ``<run-dir>/graph/`` (graphstore.modes.replicated.run_files; each replaced whole)."""
    from graphstore.modes.machine import write_mode_files
    from graphstore.partition import partition_task

    task, res = load_frozen(run_dir)
    with recorded(run_dir, "partition") as record:
        shards = RunPaths(run_dir).shards  # a new version; the old one stays until it is
        manifest = partition_task(task, num_partitions=task.dataset.partition.num_partitions
                                  or res.num_partitions, output_uri=shards)
        record.update(partitions=manifest.num_partitions,
                      edges=sum(e.count for e in manifest.edge_types.values()))
        mode_files = write_mode_files(task, res, run_dir)  # replicated: the graph files
        if mode_files:
            record.update(graph_files=mode_files)


def _run_vertex_job(run_dir: str, run_id: RunId, stage: str, image: str, record: StageRun, *,
                    pipeline_job: str, timeout_s: float, client=None, polling=None) -> None:
    """The stage as one Vertex AI CustomJob (pipeline.custom_jobs: SIGTERM cancels it, so does
    losing track of it). The stage record names the job (``custom_job``) as soon as it exists."""
    from pipeline import vertex
    from pipeline.custom_jobs import Polling, run_custom_job

    task_path, res_path = config_paths(run_dir)
    task, res = load_frozen(run_dir)
    job = vertex.custom_job(
        task, res, stage, image, task_config_uri=task_path, resource_config_uri=res_path,
        run_dir=run_dir, display_name=f"{run_id}-{stage}", timeout_s=timeout_s,
        labels=vertex.job_labels(res, run_id=run_id, stage=stage, pipeline_job=pipeline_job))

    def created(name: str) -> None:
        record.update(custom_job=name, display_name=job.display_name)
        record.write()

    run_custom_job(client or vertex.job_client(res), vertex.location_parent(res), job,
                   on_created=created, polling=polling or Polling())


def run_graph_store(run_dir: str, stage: str, image: str = "", pipeline_job: str = "", *,
                    run_id: RunId, client=None, polling=None) -> StageRecord:
    """A graph-store job (train or infer): the local launcher when the resource config is local,
    else one Vertex AI CustomJob running ``image``, labelled with ``run_id`` (the freeze task's), the stage and
    ``pipeline_job`` (the KFP pipeline job's name). ``client`` / ``polling``: the
    ``JobServiceClient`` and pipeline.custom_jobs.Polling to use (default: the region's client,
    default polling); tests give a client whose service is a local fake."""
    from pipeline.launch import LaunchFailed, LaunchInterrupted, launch_stage

    task_path, res_path = config_paths(run_dir)
    task, res = load_frozen(run_dir)
    stage_res = stage_resources(res, stage)
    sessions = stage_section(task, stage).storage.storage_args.num_server_sessions
    timeout_s = task.runtime.session_timeout_s * sessions
    with recorded(run_dir, stage) as record:
        if stage_res.kind == "vertex":
            _run_vertex_job(run_dir, run_id, stage, image, record, pipeline_job=pipeline_job,
                            timeout_s=timeout_s, client=client, polling=polling)
        else:
            try:
                result = launch_stage(task, res, stage=stage, run_dir=run_dir,
                                      task_config_path=task_path, resource_config_path=res_path,
                                      timeout_s=timeout_s)
            except (LaunchFailed, LaunchInterrupted) as exc:
                raise GraphstoreError(str(exc)) from None
            record.update(processes=len(result.processes))
        if stage == "train":
            paths = RunPaths(run_dir)
            metrics = json.loads(uris.read_text(paths.metrics))
            record.update(metrics=metrics.get("test", {}))
            if uris.exists(paths.report_html):  # the trainer's run report
                record.update(report=paths.report_html)
    return record.record


def run_export(run_dir: str, node_type: str, *, run_id: RunId) -> StageRecord:
    """One node type into the warehouse (graphstore.export), as the rows of ``run_id`` (the
    freeze task's)."""
    from graphstore.export import export_run

    task, res = load_frozen(run_dir)
    with recorded(run_dir, "export", node_type=node_type) as record:
        (done,) = export_run(task, run_dir, run_id=run_id, node_types=[node_type],
                             project=res.shared.project)
        record.update(rows=done.rows, table=done.table, where=done.where)
    return record.record


def dump_yaml(mapping: dict) -> str:
    return yaml.safe_dump(mapping, sort_keys=False)
