"""The run folder layout, in one place: every path of one run, and the rule for its run id.

One run of the pipeline (or one hand-made run folder given to ``pipeline launch`` /
``components.*``) keeps everything under one folder, a local path or a ``gs://`` prefix::

    <run-dir>/                                 <run-root>/<run-id>/ for pipeline runs
      config/task.yaml, config/resource.yaml   the frozen configs (placeholders resolved)
      config/run.json                          the run record: run_id, run_date, run_time,
                                               started_at; created exclusively by the run that
                                               owns the folder (its claim), never rewritten
      shards/                                  shard-set root (graphstore.formats.shards.publish)
      graph/graph.bin, graph/features.bin      replicated mode: the graph file and the features
                                               file, written from shards/ after partitioning
                                               (format: graphstore.modes.replicated.format)
      checkpoint/model.pt                      the trainer's checkpoint
                                               (format: graphstore.training.checkpoint)
      checkpoint/metrics.json                  the trainer's metrics
      embeddings/<node_type>/                  the inferencer's output (graphstore.formats.embeddings)
      export/<node_type>/rows.parquet          the rows export loads (graphstore.export.rows)
      report/report.html, report/report.md     the trainer's run report, self-contained HTML and
      report/<plot>.png                        its Markdown twin with the plots beside it
                                               (graphstore.training.report)
      tensorboard/                             TensorBoard event files (trainerArgs.tensorboard)
      logs/<stage>/                            graph-store process logs (local launcher)
      _stages/<name>.json                      one record per pipeline task (pipeline.stages;
                                               format: graphstore.formats.stage_records)
      _graphstore/<stage>/<job id>/            readiness markers of one graph-store job

Each prefix has one writer (the stage named beside it). :class:`RunPaths` only plans paths: it
does no I/O and imports neither torch nor anything that does, so ``pipeline/`` uses it too.

**The run id** of a folder is :func:`read_run_id`: the ``run_id`` of its ``config/run.json``
when the folder has one (every folder made by ``pipeline run`` / ``submit`` does); a folder
without one (made by hand, e.g. ``pipeline launch --run-dir D`` and then ``components.export
--run-dir D``) falls back to its folder name, which must then be a valid run id
(:meth:`graphstore.formats.run_ids.RunId.parse`). The id is never parsed back from the name of a folder
that has a run record: a run folder copied or renamed keeps the id it was created with.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from graphstore.io import uris
from graphstore.runtime.errors import UsageError
from graphstore.formats.run_ids import RunId

CONFIG_DIR = "config"
TASK_CONFIG = "task.yaml"
RESOURCE_CONFIG = "resource.yaml"
RUN_RECORD = (CONFIG_DIR, "run.json")
"""A run folder's claim, relative to the folder (pipeline.stages creates it exclusively)."""
SHARDS_DIR = "shards"
GRAPH_DIR = "graph"
GRAPH_FILE = "graph.bin"
FEATURES_FILE = "features.bin"
CHECKPOINT_DIR = "checkpoint"
CHECKPOINT_MODEL = "model.pt"
"""The checkpoint file's name inside ``checkpoint/`` (the trainer writes, the inferencer reads)."""
CHECKPOINT_METRICS = "metrics.json"
EMBEDDINGS_DIR = "embeddings"
EXPORT_DIR = "export"
EXPORT_ROWS = "rows.parquet"
REPORT_DIR = "report"
REPORT_HTML = "report.html"
REPORT_MARKDOWN = "report.md"
TENSORBOARD_DIR = "tensorboard"
LOGS_DIR = "logs"
STAGE_RECORDS_DIR = "_stages"
READINESS_DIR = "_graphstore"


def _segment(value: str, what: str) -> str:
    """``value`` when it is one path segment (so a joined path stays inside the run folder);
    ValueError otherwise."""
    if not isinstance(value, str) or not value or value in (".", "..") or "/" in value \
            or "\\" in value or "\0" in value:
        raise ValueError(f"RunPaths: {what} {value!r} is not a single path segment")
    return value


@dataclass(frozen=True, slots=True)
class RunPaths:
    """Every path of the run folder ``run_dir`` (module docs).

    Invariants: ``run_dir`` is non-empty and has no trailing ``/``; every path returned lies
    under it (names passed in, such as node types and stage names, must be single path
    segments: ValueError otherwise). Paths are joined with :func:`graphstore.io.uris.join`, so
    local folders and ``gs://`` prefixes work alike. Nothing here touches the file system.
    """

    run_dir: str

    def __post_init__(self) -> None:
        if not isinstance(self.run_dir, str):
            raise ValueError(f"RunPaths: run_dir must be a string, got {type(self.run_dir).__name__}")
        trimmed = self.run_dir.rstrip("/")
        if not trimmed or trimmed == "gs:":
            raise ValueError(f"RunPaths: run_dir {self.run_dir!r} names no folder")
        object.__setattr__(self, "run_dir", trimmed)

    @classmethod
    def of_run(cls, run_root: str, run_id: RunId) -> RunPaths:
        """The folder of run ``run_id`` under a runs root, ``<run_root>/<run_id>``. A plain
        ``str`` is parsed by the run-id rule (UsageError otherwise): a run id is never a path."""
        return cls(uris.join(run_root, RunId.parse(run_id)))

    def _join(self, *parts: str) -> str:
        return uris.join(self.run_dir, *parts)

    # --- config/ (the pipeline's freeze task) ---------------------------------------------
    @property
    def config_dir(self) -> str:
        return self._join(CONFIG_DIR)

    @property
    def task_config(self) -> str:
        """The frozen task config, ``config/task.yaml``."""
        return self._join(CONFIG_DIR, TASK_CONFIG)

    @property
    def resource_config(self) -> str:
        """The frozen resource config, ``config/resource.yaml``."""
        return self._join(CONFIG_DIR, RESOURCE_CONFIG)

    @property
    def run_record(self) -> str:
        """The run record, ``config/run.json`` (module docs)."""
        return self._join(*RUN_RECORD)

    # --- stage outputs ----------------------------------------------------------------------
    @property
    def shards(self) -> str:
        """The shard-set root the partition stage publishes and storage reads."""
        return self._join(SHARDS_DIR)

    @property
    def graph_file(self) -> str:
        """Replicated mode's graph file, ``graph/graph.bin`` (graphstore.modes.replicated.format)."""
        return self._join(GRAPH_DIR, GRAPH_FILE)

    @property
    def features_file(self) -> str:
        """Replicated mode's node features file, ``graph/features.bin``."""
        return self._join(GRAPH_DIR, FEATURES_FILE)

    @property
    def checkpoint(self) -> str:
        """The trainer's folder: ``model.pt`` and ``metrics.json``."""
        return self._join(CHECKPOINT_DIR)

    @property
    def model(self) -> str:
        """The trainer's checkpoint file, ``checkpoint/model.pt``."""
        return self._join(CHECKPOINT_DIR, CHECKPOINT_MODEL)

    @property
    def metrics(self) -> str:
        """The trainer's metrics, ``checkpoint/metrics.json``."""
        return self._join(CHECKPOINT_DIR, CHECKPOINT_METRICS)

    def embeddings(self, node_type: str) -> str:
        """The embeddings folder of one node type, ``embeddings/<node_type>``."""
        return self._join(EMBEDDINGS_DIR, _segment(node_type, "node type"))

    def export(self, node_type: str) -> str:
        """The export folder of one node type, ``export/<node_type>``."""
        return self._join(EXPORT_DIR, _segment(node_type, "node type"))

    def export_rows(self, node_type: str) -> str:
        """The rows file the warehouse loads, ``export/<node_type>/rows.parquet``."""
        return self._join(EXPORT_DIR, _segment(node_type, "node type"), EXPORT_ROWS)

    @property
    def report_dir(self) -> str:
        """The trainer's run report folder, ``report``."""
        return self._join(REPORT_DIR)

    @property
    def report_html(self) -> str:
        """The run report, ``report/report.html`` (plots embedded; written last)."""
        return self._join(REPORT_DIR, REPORT_HTML)

    @property
    def report_markdown(self) -> str:
        """The run report's Markdown twin, ``report/report.md`` (plots beside it)."""
        return self._join(REPORT_DIR, REPORT_MARKDOWN)

    def report_image(self, name: str) -> str:
        """One plot of the report, ``report/<name>.png``."""
        return self._join(REPORT_DIR, _segment(name, "plot name") + ".png")

    @property
    def tensorboard(self) -> str:
        """TensorBoard event files of the trainer, ``tensorboard``."""
        return self._join(TENSORBOARD_DIR)

    # --- bookkeeping ------------------------------------------------------------------------
    def logs(self, stage: str) -> str:
        """The process logs of one graph-store stage, ``logs/<stage>``."""
        return self._join(LOGS_DIR, _segment(stage, "stage"))

    @property
    def stage_records(self) -> str:
        """The folder of the pipeline's task records, ``_stages``."""
        return self._join(STAGE_RECORDS_DIR)

    def stage_record(self, name: str) -> str:
        """One task's record, ``_stages/<name>.json`` (``name``: the stage, or
        ``export-<node_type>``)."""
        return self._join(STAGE_RECORDS_DIR, _segment(name, "stage record") + ".json")

    def readiness(self, stage: str, job_id: str) -> str:
        """Readiness markers of one graph-store job, ``_graphstore/<stage>/<job id>``."""
        return self._join(READINESS_DIR, _segment(stage, "stage"), _segment(job_id, "job id"))

    @property
    def folder_name(self) -> str:
        """The run folder's own name (not its run id: see :func:`read_run_id`)."""
        return uris.basename(self.run_dir)


def read_run_record(run_dir: str) -> dict | None:
    """The run record (``config/run.json``) of ``run_dir`` as a dict, or None when the folder
    has none. UsageError naming the file when it exists but is not a JSON object."""
    uri = RunPaths(run_dir).run_record
    if not uris.exists(uri):
        return None
    try:
        record = json.loads(uris.read_text(uri))
    except (ValueError, UnicodeDecodeError):
        record = None
    if not isinstance(record, dict):
        raise UsageError(f"{uri} is not a run record (not a JSON object): the folder holds no "
                         "run of ours; choose another run folder (--run-id / --run-root / --run-dir)")
    return record


def read_run_id(run_dir: str) -> RunId:
    """The run id of ``run_dir`` (module docs): ``config/run.json``'s ``run_id``, else (a folder
    without a run record) the folder's name. Either is checked by the run-id rule; UsageError
    naming the file, or the folder, when it breaks it."""
    paths = RunPaths(run_dir)
    record = read_run_record(run_dir)
    if record is not None:
        return RunId.parse(record.get("run_id"), f"{paths.run_record}: run_id")
    try:
        return RunId.parse(paths.folder_name, "run folder name")
    except UsageError as exc:
        raise UsageError(f"{paths.run_dir} has no {'/'.join(RUN_RECORD)}, so its folder name is "
                         f"its run id, and {exc}; rename the folder or give the run id "
                         "explicitly (--run-id)") from None
