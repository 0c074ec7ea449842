"""The KFP v2 pipeline: freeze configs -> partition -> train -> infer -> export (per node type).

One definition serves both targets: ``compile`` writes it as YAML for Vertex AI Pipelines, and
``pipeline run`` executes the very same pipeline function on this machine through ``kfp.local``
(SubprocessRunner). Components are lightweight Python components whose bodies import our package
and call pipeline.stages, so they run wherever the image (``base_image``, a compile-time
parameter) or the local environment has it installed.

Parameters of the pipeline: ``task_config`` / ``resource_config`` (YAML text, already validated
by the client), ``run_root`` (runs folder, local or gs://), ``run_id`` (empty: derived from the
clock plus a random suffix), ``run_date`` (empty: today, UTC), ``start_at`` / ``stop_after``
(stage names), ``resume`` (the run folder of ``run_id`` may already hold that run: the client
sets it when the user gave ``--start-at``; otherwise an existing run folder is refused),
``graph_store_image`` (the image of the Vertex AI CustomJobs of train and infer; default: the
compile-time image). The freeze task's outputs, the run folder, the run id (the one it was
given, or the one it made: graphstore.formats.run_ids) and the node types to export, are the
later tasks' inputs. The train and infer tasks also get the pipeline job's name (KFP's
placeholder), which labels their CustomJobs (pipeline.vertex.job_labels).

Stage selection uses ``dsl.If`` / ``dsl.Elif`` on ``start_at``, one branch per first stage, each
holding the chain from that stage on; inside a chain every next stage sits in a nested
``dsl.If(stop_after != <previous stage>)``. (KFP forbids a task depending on a task inside a
condition it is not nested in, so the chain is nested rather than flat.) Export runs one task
per node type in a ``dsl.ParallelFor`` with parallelism 1 (the local warehouse has one writer).
"""

# no ``from __future__ import annotations``: KFP reads the components' annotations as types

from typing import Callable, List, NamedTuple, Optional, Tuple

from kfp import dsl
from kfp.dsl import HTML, Metrics, Output

from graphstore.config.resource_schema import (
    ExportTaskResources, PartitionTaskResources, ResourceConfig, TaskResources,
)
from pipeline.stages import STAGES

DEFAULT_IMAGE = "python:3.11"  # the local runner ignores it; Vertex needs an image with this repo
PIPELINE_NAME = "graphstore-pipeline"


def _freeze(task_config: str, resource_config: str, run_root: str, run_id: str, run_date: str,
            resume: bool, job_name: str
            ) -> NamedTuple("Frozen", run_dir=str, run_id=str, node_types=List[str]):
    from collections import namedtuple

    from pipeline.stages import freeze

    frozen = freeze(task_config, resource_config, run_root, run_id or "", run_date, resume=resume)
    return namedtuple("Frozen", "run_dir run_id node_types")(frozen.run_dir, str(frozen.run_id),
                                                             frozen.node_types)


def _partition(run_dir: str) -> str:
    from pipeline.stages import run_partition

    run_partition(run_dir)
    return run_dir


def _train(run_dir: str, run_id: str, image: str, pipeline_job: str, metrics: Output[Metrics],
           report: Output[HTML]) -> str:
    import os

    from graphstore.formats.run_ids import RunId
    from graphstore.io import uris
    from pipeline.stages import run_graph_store

    record = run_graph_store(run_dir, "train", image, pipeline_job,
                             run_id=RunId.parse(run_id, "the freeze task's run_id"))
    if record.report:  # the run report as an HTML artifact: Vertex Pipelines shows it
        os.makedirs(os.path.dirname(report.path) or ".", exist_ok=True)
        with open(report.path, "w", encoding="utf-8") as fh:
            fh.write(uris.read_text(record.report))
    test = record.metrics
    # test_model_mrr, test_popularity_hits@10, test_bpr_mrr, test_lightgcn_mrr, ... (first
    # supervision type), then per type: test_user__buys__item_model_mrr, ...
    groups = [("test", test), *((f"test_{key}", r) for key, r in
                                test.get("by_supervision_edge_type", {}).items())]
    for prefix, result in groups:
        for group, values in result.items():
            if isinstance(values, dict) and group != "by_supervision_edge_type":
                for name, value in values.items():
                    if isinstance(value, (int, float)):
                        metrics.log_metric(f"{prefix}_{group}_{name}", float(value))
    return run_dir


def _infer(run_dir: str, run_id: str, image: str, pipeline_job: str) -> str:
    from graphstore.formats.run_ids import RunId
    from pipeline.stages import run_graph_store

    run_graph_store(run_dir, "infer", image, pipeline_job,
                    run_id=RunId.parse(run_id, "the freeze task's run_id"))
    return run_dir


def _export(run_dir: str, run_id: str, node_type: str) -> int:
    from graphstore.formats.run_ids import RunId
    from pipeline.stages import run_export

    record = run_export(run_dir, node_type, run_id=RunId.parse(run_id, "the freeze task's run_id"))
    return int(record.rows or 0)


def _request(task, resources: TaskResources):
    """Request and limit ``resources`` (vCPUs, GB) for a KFP task; Vertex AI Pipelines picks a
    machine that has them. Returns the task."""
    cpu, memory = f"{resources.cpu:g}", f"{resources.memory_gb}G"
    return (task.set_cpu_request(cpu).set_cpu_limit(cpu)
            .set_memory_request(memory).set_memory_limit(memory))


def build_pipeline(image: str = DEFAULT_IMAGE, enable_caching: bool = False,
                   resources: Optional[ResourceConfig] = None) -> Callable:
    """The pipeline function (a KFP graph component) with components built on ``image``.

    Caching is off by default: every task writes into the run folder, and a cached task would
    skip that write; resuming uses ``start_at`` instead. The partition and export tasks request
    the CPU and memory of ``resources``' ``partition_resource_config`` / ``export_resource_config``
    (their defaults without a resource config); they are fixed at compile time.
    """
    partition_res = resources.partition_task if resources else PartitionTaskResources()
    export_res = resources.export_task if resources else ExportTaskResources()
    freeze_op = dsl.component(_freeze, base_image=image)
    ops = {"partition": dsl.component(_partition, base_image=image),
           "train": dsl.component(_train, base_image=image),
           "infer": dsl.component(_infer, base_image=image)}
    export_op = dsl.component(_export, base_image=image)

    def add_stage(stage: str, frozen, after, image_param):
        if stage == "export":
            with dsl.ParallelFor(frozen.outputs["node_types"], parallelism=1) as node_type:
                task = export_op(run_dir=frozen.outputs["run_dir"],
                                 run_id=frozen.outputs["run_id"], node_type=node_type)
                task.set_display_name("export").set_caching_options(enable_caching).after(after)
                _request(task, export_res)
            return task
        extra = ({"run_id": frozen.outputs["run_id"], "image": image_param,
                  "pipeline_job": dsl.PIPELINE_JOB_NAME_PLACEHOLDER}
                 if stage in ("train", "infer") else {})
        task = ops[stage](run_dir=frozen.outputs["run_dir"], **extra)
        task.set_display_name(stage).set_caching_options(enable_caching).after(after)
        if stage == "partition":
            _request(task, partition_res)
        return task

    @dsl.pipeline(name=PIPELINE_NAME, description="partition -> train -> infer -> export")
    def graphstore_pipeline(task_config: str, resource_config: str, run_root: str,
                            run_id: str = "", run_date: str = "", start_at: str = "partition",
                            stop_after: str = "export", graph_store_image: str = image,
                            resume: bool = False):
        frozen = freeze_op(task_config=task_config, resource_config=resource_config,
                           run_root=run_root, run_id=run_id, run_date=run_date, resume=resume,
                           job_name=dsl.PIPELINE_JOB_NAME_PLACEHOLDER)
        frozen.set_display_name("freeze-configs").set_caching_options(enable_caching)

        def chain(stages: Tuple[str, ...], after) -> None:
            task = add_stage(stages[0], frozen, after, graph_store_image)
            if len(stages) > 1:
                with dsl.If(stop_after != stages[0], name=f"after-{stages[0]}"):
                    chain(stages[1:], task)

        for k, first in enumerate(STAGES):
            branch = dsl.If if k == 0 else dsl.Elif
            with branch(start_at == first, name=f"start-at-{first}"):
                chain(STAGES[k:], frozen)

    return graphstore_pipeline


def compile_pipeline(output: str, image: str = DEFAULT_IMAGE, enable_caching: bool = False,
                     resources: Optional[ResourceConfig] = None) -> None:
    """Write the pipeline's YAML (what Vertex AI Pipelines runs) to ``output``; ``resources``
    sets the partition and export tasks' CPU and memory (see :func:`build_pipeline`). Every task's
    command ``exec``s its Python, so a cancel's SIGTERM reaches it (pipeline/task_commands.py)."""
    import yaml
    from kfp import compiler

    from pipeline.task_commands import exec_task_commands

    compiler.Compiler().compile(build_pipeline(image, enable_caching, resources), output)
    with open(output, encoding="utf-8") as fh:
        docs = list(yaml.safe_load_all(fh))
    exec_task_commands(docs[0])  # signals reach each task's Python (pipeline/task_commands.py)
    with open(output, "w", encoding="utf-8") as fh:
        yaml.safe_dump_all(docs, fh, sort_keys=False)
