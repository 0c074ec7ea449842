"""The container image (Containerfile, ``make image``) proven, not assumed: everything here runs
inside the built image (tests/image/containers.py), the way Vertex AI runs it.

- The image holds exactly ``.venv``'s packages minus the test-only ones (requirements/test.txt),
  no compiler, and no certificate, pip configuration or credential of this machine.
- The doctor passes with ``--require-glt --require-neighbor-backend``.
- The compiled pipeline's own tasks: ``python -m pipeline compile`` writes the PipelineSpec, and
  each task's container command and args are run in the image as the KFP launcher would (the
  executor input JSON in place of ``{{$}}``, parameters in, outputs read back from where it says):
  freeze -> partition, then the graph-store stages as the replicas of a CustomJob run them
  (``python -m components.storage`` and ``components.train`` / ``components.infer``, each
  machine in its own container with ``CLUSTER_SPEC``, ``RANK``, ...), then export per node type.

Skipped, with the reason, when no image is built for this working tree (``make image``); with
``--require-image`` (CI, ``make image-test``) that is a failure instead.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import duckdb
import pytest
import yaml
from packaging.requirements import Requirement

from graphstore.tools.datagen import DatasetSpec, generate_dataset
from graphstore.runtime.ports import free_ports
from graphstore.formats.shards.reader import ShardSet
from pipeline import topology
from pipeline.launch import local_env, loopback_interface
from pipeline.stages import config_paths, load_frozen
from tests.image.containers import (
    REPO, image_record, run_in_image, start_in_image, wait_all, why_no_image,
)

pytestmark = [pytest.mark.image, pytest.mark.slow]

TRAINER_ARGS = {"num_neighbors": [5, 3], "batch_size": 16, "num_random_negatives": 32,
                "max_steps": 10, "val_every_steps": 1000, "log_every_steps": 5,
                "eval_candidates": 50, "hidden_dim": 16, "out_dim": 16}
ONE_MACHINE_EACH = {"local_graph_store_config": {"num_storage_processes": 1,
                                                 "num_compute_machines": 1,
                                                 "compute_cluster_local_world_size": 1}}
HOST_SECRETS = ("PIP_CERT", "PIP_CLIENT_CERT", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL",
                "PIP_FIND_LINKS", "PIP_TRUSTED_HOST", "PIP_CONFIG_FILE", "SSL_CERT",
                "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GOOGLE_APPLICATION_CREDENTIALS",
                "CLOUDSDK_", "GRPC_DEFAULT_SSL_ROOTS")  # variables of this machine's set-up


@pytest.fixture(scope="module")
def image(request: pytest.FixtureRequest) -> dict:
    reason = why_no_image()
    if reason and request.config.getoption("--require-image"):
        pytest.fail(f"--require-image: {reason}")
    if reason:
        pytest.skip(reason)
    return image_record()


# --- what the image holds ---------------------------------------------------------------------------

def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _freeze(text: str) -> dict[str, str]:
    """``pip freeze`` lines -> {name: version}; ``name @ url`` lines get version ``@``."""
    found = {}
    for line in text.splitlines():
        if "==" in line:
            name, version = line.split("==", 1)
            found[_canon(name)] = version.strip()
        elif " @ " in line:
            found[_canon(line.split(" @ ", 1)[0])] = "@"
    return found


def _requirements(path: Path) -> list[Requirement]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [Requirement(line) for line in lines if line]


def _closure(requirements: list[Requirement]) -> set[str]:
    """Every distribution these requirements pull into .venv (extras followed), by name."""
    seen: set[tuple[str, str]] = set()
    todo = [(r, extra) for r in requirements for extra in ("", *r.extras)]
    while todo:
        req, extra = todo.pop()
        key = (_canon(req.name), extra)
        if key in seen:
            continue
        seen.add(key)
        for line in metadata.requires(req.name) or []:
            dep = Requirement(line)
            if dep.marker is None or dep.marker.evaluate({"extra": extra}):
                todo += [(dep, e) for e in ("", *dep.extras)]
    return {name for name, _ in seen}


INSPECT = r"""
import json, os, shutil, subprocess, sys
freeze = subprocess.run([sys.executable, "-m", "pip", "freeze"], capture_output=True, text=True,
                        check=True).stdout
paths = ["/etc/pip.conf", "/etc/xdg/pip", "/root/.config/pip", "/root/.pip", "/root/.config/gcloud",
         "/root/.docker", "/wheelhouse", "/usr/local/share/ca-certificates"]
out = open(sys.argv[1], "w")  # a file, not stdout: what a command prints is for people
json.dump({
    "freeze": freeze,
    "compilers": {c: shutil.which(c) for c in ("gcc", "cc", "c++", "g++", "clang", "make")},
    "present": [p for p in paths if os.path.exists(p) and (not os.path.isdir(p) or os.listdir(p))],
    "env": sorted(os.environ),
    "ca_bundle": open("/etc/ssl/certs/ca-certificates.crt").read(),
    "stack_folder": sorted(os.listdir("/opt/graphstore-stack")),
}, out)
out.close()
"""


def _pem_bodies(text: str) -> list[str]:
    return ["".join(body.split()) for body in
            re.findall(r"-----BEGIN CERTIFICATE-----(.*?)-----END CERTIFICATE-----", text, re.S)]


def test_image_holds_the_locked_stack_and_nothing_of_tests_compilers_or_this_host(image, tmp_path):
    work = tmp_path.resolve()
    done = run_in_image(["python", "-c", INSPECT, str(work / "seen.json")], volumes=[work],
                        timeout_s=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads((work / "seen.json").read_text())
    in_image = _freeze(seen["freeze"])
    assert in_image.pop("graphstore-pipeline") == "@"  # this package, from its wheel
    venv = _freeze(subprocess.run([sys.executable, "-m", "pip", "freeze", "--exclude-editable"],
                                  capture_output=True, text=True, check=True).stdout)
    test_only = (_closure(_requirements(REPO / "requirements" / "test.txt"))
                 - _closure(_requirements(REPO / "requirements" / "base.txt")))
    assert {"pytest", "pytest-timeout", "pluggy", "iniconfig"} <= test_only
    expected = {name: version for name, version in venv.items() if name not in test_only}
    drift = {name: (expected.get(name), in_image.get(name))
             for name in expected.keys() | in_image.keys()
             if expected.get(name) != in_image.get(name)}
    assert not drift, f"(.venv, image) versions that differ: {drift}"
    assert {c: p for c, p in seen["compilers"].items() if p} == {}
    assert seen["present"] == []
    assert [n for n in seen["env"] if n.startswith(HOST_SECRETS)] == []
    assert seen["stack_folder"] == ["requirements", "scripts", "wheels"]
    # this machine's own certificate authorities (its HTTPS set-up) are in its bundle, not in the image
    host_cas = [body for crt in Path("/usr/local/share/ca-certificates").glob("*.crt")
                for body in _pem_bodies(crt.read_text())]
    host_bundle = Path("/etc/ssl/certs/ca-certificates.crt")
    if host_bundle.is_file():
        assert set(host_cas) <= set(_pem_bodies(host_bundle.read_text()))
    image_bundle = set(_pem_bodies(seen["ca_bundle"]))
    assert len(image_bundle) > 100  # Debian's ca-certificates
    assert [body[:40] for body in host_cas if body in image_bundle] == []


def test_doctor_passes_in_the_image(image, tmp_path):
    work = tmp_path.resolve()
    done = run_in_image(["sh", "-c", f"python -m graphstore.tools.doctor --require-glt "
                         f"--require-neighbor-backend > {work}/doctor.json"], volumes=[work],
                        timeout_s=600)
    assert done.returncode == 0, (work / "doctor.json").read_text()[-3000:] + done.stderr[-3000:]
    report = json.loads((work / "doctor.json").read_text())
    assert report["requirements_failed"] == []
    assert report["python"]["executable"] == "/opt/venv/bin/python"
    assert report["torch"]["version"] == "2.3.0+cu121"
    assert report["neighbor_sampling"]["graphlearn_torch"]["ok"]
    assert report["distributed"]["rpc_loopback"]["ok"]


# --- the compiled pipeline's tasks ----------------------------------------------------------------

def _compile(image: str, out: Path) -> dict:
    done = subprocess.run([sys.executable, "-m", "pipeline", "compile", "--output", str(out),
                           "--image", image], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return yaml.safe_load(out.read_text())


def _run_task(spec: dict, task: str, params: dict, work: Path) -> dict:
    """Run the compiled task ``task`` in the image as the KFP launcher does; its executor output."""
    component = spec["components"][f"comp-{task}"]
    container = spec["deploymentSpec"]["executors"][component["executorLabel"]]["container"]
    assert set(params) == set(component["inputDefinitions"]["parameters"]), task
    out = work / "kfp" / task
    outputs = component.get("outputDefinitions", {}).get("parameters", {})
    executor_input = {"inputs": {"parameterValues": params},
                      "outputs": {"parameters": {n: {"outputFile": str(out / n)} for n in outputs},
                                  "outputFile": str(out / "executor_output.json")}}
    args = [arg.replace("{{$}}", json.dumps(executor_input)) for arg in container["args"]]
    assert not [a for a in args if "{{$" in a], args  # a placeholder this test does not fill
    done = run_in_image([*container["command"], *args], volumes=[work], timeout_s=600)
    (work / "kfp" / f"{task}.log").write_text(done.stdout + done.stderr)
    assert done.returncode == 0, f"task {task} exited {done.returncode}:\n{done.stderr[-4000:]}"
    return json.loads((out / "executor_output.json").read_text())["parameterValues"]


def _graph_store_stage(stage: str, run_dir: str, work: Path) -> None:
    """One graph-store stage as a CustomJob runs it: each machine in its own container, storage
    machines first, with the variables Vertex AI sets (pipeline.topology) and the loopback ones
    the local launcher adds (all machines share this host)."""
    task, res = load_frozen(run_dir)
    layout = topology.pool_layout(1, 1)
    machines = topology.machines(layout)
    ports = free_ports(len(machines) + 1)
    hosts: dict[str, list[str]] = {pool.name: [] for pool in layout}
    for machine, port in zip(machines, ports):
        hosts[machine.pool].append(f"127.0.0.1:{port}")
    task_uri, res_uri = config_paths(run_dir)
    contract = topology.contract_args(task_config_path=task_uri, resource_config_path=res_uri,
                                      stage=stage, run_dir=run_dir)
    commands = topology.role_commands(task, stage)
    started = []
    for machine in sorted(machines, key=lambda m: m.role != "storage"):
        key, command = commands[machine.role]
        env = {**topology.cluster_environ(layout, hosts, machine.pool, machine.pool_index,
                                          f"image-test-{stage}", ports[-1]),
               **local_env({}, loopback_interface())}
        label = f"{machine.role} {machine.role_index}"
        started.append(start_in_image(label, [*topology.split_command(command, key), *contract],
                                      log=work / "logs" / f"{stage}-{label.replace(' ', '')}.log",
                                      volumes=[work], env=env))
    wait_all(started, timeout_s=900)


@pytest.mark.timeout(2400)
def test_compiled_pipeline_tasks_run_in_the_image_as_vertex_runs_them(image, tmp_path):
    work = tmp_path.resolve()
    spec = _compile(image["image"], work / "pipeline.yaml")
    images = {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()}
    assert images == {image["image"]}
    generate_dataset(DatasetSpec.from_preset("tiny", kind="hetero", seed=7), str(work / "data"))
    task_cfg = yaml.safe_load((REPO / "configs" / "task_hetero.yaml").read_text())
    task_cfg["datasetConfig"]["dataRootUri"] = str(work / "data")
    task_cfg["trainerConfig"]["trainerArgs"] = TRAINER_ARGS
    task_cfg["graphStoreRuntimeConfig"] = {"heartbeatIntervalS": 1, "heartbeatTimeoutS": 30,
                                           "readinessTimeoutS": 300, "rpcTimeoutS": 300,
                                           "sessionTimeoutS": 900}
    res_cfg = {"shared_resource_config": {"resource_labels": {"team": "graph-ml"}},
               "trainer_resource_config": ONE_MACHINE_EACH,
               "inferencer_resource_config": ONE_MACHINE_EACH}

    frozen = _run_task(spec, "freeze", {
        "task_config": yaml.safe_dump(task_cfg), "resource_config": yaml.safe_dump(res_cfg),
        "run_root": str(work / "runs"), "run_id": "img1", "run_date": "", "resume": False,
        "job_name": "graphstore-pipeline-image-test"}, work)
    run_dir = frozen["run_dir"]
    assert run_dir == str(work / "runs" / "img1") and frozen["node_types"] == ["user", "item"]
    assert frozen["run_id"] == "img1"  # handed to every later task

    assert _run_task(spec, "partition", {"run_dir": run_dir}, work) == {"Output": run_dir}
    manifest = ShardSet.open(str(Path(run_dir) / "shards")).manifest
    assert manifest.num_partitions == 1

    _graph_store_stage("train", run_dir, work)
    metrics = json.loads((Path(run_dir) / "checkpoint" / "metrics.json").read_text())
    assert metrics["steps"] == TRAINER_ARGS["max_steps"] and metrics["test"]["model"]["count"] > 0
    assert (Path(run_dir) / "checkpoint" / "model.pt").is_file()

    _graph_store_stage("infer", run_dir, work)
    for node_type in frozen["node_types"]:
        marker = json.loads((Path(run_dir) / "embeddings" / node_type / "_SUCCESS").read_text())
        assert marker["count"] == manifest.node_types[node_type].count

    warehouse = Path(run_dir).parent / "warehouse" / "warehouse.duckdb"
    for node_type in frozen["node_types"]:
        count = manifest.node_types[node_type].count
        assert _run_task(spec, "export", {"run_dir": run_dir, "run_id": frozen["run_id"],
                                          "node_type": node_type}, work) == {"Output": count}
        con = duckdb.connect(str(warehouse), read_only=True)
        try:
            rows = con.execute(f"SELECT run_id, count(*), count(DISTINCT node_id) FROM "
                               f"embeddings_{node_type} GROUP BY run_id").fetchall()
        finally:
            con.close()
        assert rows == [("img1", count, count)]
    records = {json.loads(p.read_text())["stage"]: json.loads(p.read_text())["status"]
               for p in (Path(run_dir) / "_stages").glob("*.json")}
    assert records == {"partition": "ok", "export": "ok"}
