"""A stand-in storage/compute command for the launcher tests (run by ``python -m pipeline launch``).

    python tests/integration/fake_roles.py --tag T --behave RULES  + the launcher's contract args

It reads the cluster exactly as real entrypoints do (``ClusterTopology.from_env(os.environ)``),
writes ``<run-dir>/seen/<role>_<index>.json`` (topology, argv, pid, local variables, spawned pids),
then behaves as ``RULES`` says: comma-separated ``TARGET=ACTION`` where TARGET is ``all``,
``storage``, ``compute``, ``storage-1``, ``compute-0`` ... (the most specific wins). Actions:

  ok                exit 0                    sleep:S       sleep S seconds, exit 0
  serve:S           bind this machine's CLUSTER_SPEC port (rank 0: MASTER_PORT too), hold S s,
                    exit 0
  hang              sleep until killed        fail:C        print 30 numbered lines, exit C
  fail-on-ready:C   wait for <run-dir>/seen/ready, print 30 lines, exit C
  grandchildren     spawn two grandchildren that ignore SIGTERM (one also leaves the session),
                    record their pids, touch <run-dir>/seen/ready, hang
  orphan            spawn a grandchild in this session, record it, exit 0 (leaving it behind)
  daemon            double fork: a grandchild in a new session whose parent exits at once, so it
                    re-parents away before the launcher can see it; record it (with its session
                    and parent), exit 0
  stop-self         SIGTERM handler that touches <run-dir>/seen/<role>_<index>.term and exits 0,
                    then SIGSTOP to itself (a frozen process: only SIGCONT lets the handler run)
  follow:C          wait for <run-dir>/seen/storage_1.json, then 1 s more, exit C (a compute
                    process failing fast after a storage process died)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from graphstore.runtime.env import ClusterTopology, split_address  # noqa: E402

LOCAL_VARS = ("GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "OMP_NUM_THREADS", "PYTHONUNBUFFERED")
_GRANDCHILD = """
import os, signal, sys, time
if sys.argv[2] == "1":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(sys.argv[1], "w").close()
time.sleep(600)
"""


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--tag", required=True)
    p.add_argument("--behave", required=True)
    p.add_argument("--task-config", required=True)
    p.add_argument("--resource-config", required=True)
    p.add_argument("--stage", required=True, choices=("train", "infer"))
    p.add_argument("--run-dir", required=True)
    return p.parse_args(argv)


def action_for(rules: str, role: str, index: int) -> str:
    table = dict(rule.split("=", 1) for rule in rules.split(","))
    for target in (f"{role}-{index}", role, "all"):
        if target in table:
            return table[target]
    return "ok"


def spawn(seen: Path, name: str, *, ignore_term: bool, new_session: bool) -> dict[str, float]:
    """Start a grandchild and wait until it has set up its signal handling."""
    marker = seen / f"{name}.started"
    argv = [sys.executable, "-c", _GRANDCHILD, str(marker), "1" if ignore_term else "0"]
    proc = subprocess.Popen(argv, start_new_session=new_session)
    deadline = time.monotonic() + 30
    while not marker.exists():
        if time.monotonic() > deadline:
            sys.exit(f"grandchild {name} did not start")
        time.sleep(0.02)
    return {"pid": proc.pid, "create_time": _create_time(proc.pid)}


def daemonize() -> dict[str, float]:
    """Double fork (as a daemon does): returns the grandchild's pid, create time, session and
    parent, read after its parent has exited."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # the intermediate: new session, fork, leave at once
        os.setsid()
        if os.fork() == 0:
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):  # let go of the launcher's output pipe, like a real daemon
                os.dup2(devnull, fd)
            os.write(write_end, f"{os.getpid()}\n".encode())
            time.sleep(600)
            os._exit(0)
        os._exit(0)
    os.close(write_end)
    os.waitpid(child, 0)
    pid = int(os.fdopen(read_end).readline())
    proc = psutil.Process(pid)
    return {"pid": pid, "create_time": proc.create_time(), "sid": os.getsid(pid),
            "ppid": proc.ppid()}


def _create_time(pid: int) -> float:
    return psutil.Process(pid).create_time()


def write_seen(path: Path, record: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1))
    tmp.replace(path)


def shout(role: str, index: int) -> None:
    for i in range(30):
        print(f"{role} {index} line {i}", flush=True)


def main() -> int:
    args = parse(sys.argv[1:])
    topo = ClusterTopology.from_env(os.environ)
    run_dir = Path(args.run_dir)
    seen = run_dir / "seen"
    seen.mkdir(parents=True, exist_ok=True)
    action = action_for(args.behave, topo.role, topo.machine_index)
    print(f"hello from {topo.role} {topo.machine_index} ({args.tag}) action={action}", flush=True)
    print(f"stderr of {topo.role} {topo.machine_index}", file=sys.stderr, flush=True)
    record = {"topology": asdict(topo), "argv": sys.argv[1:], "tag": args.tag, "stage": args.stage,
              "task_config": args.task_config, "pid": os.getpid(),
              "create_time": _create_time(os.getpid()),
              "cluster_spec": json.loads(os.environ["CLUSTER_SPEC"]), "executable": sys.executable,
              "local_vars": {k: os.environ.get(k) for k in LOCAL_VARS}, "spawned": []}
    name = f"{topo.role}_{topo.machine_index}"
    if action == "grandchildren":
        record["spawned"] = [spawn(seen, f"{name}_gc_group", ignore_term=True, new_session=False),
                             spawn(seen, f"{name}_gc_session", ignore_term=True, new_session=True)]
    elif action == "orphan":
        record["spawned"] = [spawn(seen, f"{name}_orphan", ignore_term=False, new_session=False)]
    elif action == "daemon":
        record["spawned"] = [daemonize()]
    elif action == "stop-self":
        def on_term(_signum: int, _frame: object) -> None:
            (seen / f"{name}.term").touch()
            os._exit(0)
        signal.signal(signal.SIGTERM, on_term)
    write_seen(seen / f"{name}.json", record)
    kind, _, value = action.partition(":")
    if kind == "grandchildren":
        (seen / "ready").touch()
        time.sleep(600)
    elif kind == "hang":
        time.sleep(600)
    elif kind == "stop-self":
        os.kill(os.getpid(), signal.SIGSTOP)
        time.sleep(600)
    elif kind == "sleep":
        time.sleep(float(value))
    elif kind == "serve":
        serve(topo, float(value))
    elif kind == "follow":
        while not (seen / "storage_1.json").exists():
            time.sleep(0.02)
        time.sleep(1.0)
        return int(value)
    elif kind == "traceback":  # a warning, then a child dies with a traceback in our log; we live on
        print(f"12:00:00 {topo.role}0 WARNING graphstore.dataset.glt_adapter: a batch fetch has waited 30 s",
              file=sys.stderr)
        print(f"12:00:00 {topo.role}0 WARNING other.library: not ours", file=sys.stderr)
        try:
            raise ValueError(f"worker of {topo.role} {topo.machine_index} died")
        except ValueError:
            traceback.print_exc()
        sys.stderr.flush()
        (seen / "ready").touch()
        time.sleep(600)
    elif kind in ("fail", "fail-on-ready"):
        while kind == "fail-on-ready" and not (seen / "ready").exists():
            time.sleep(0.02)
        shout(topo.role, topo.machine_index)
        return int(value or 1)
    return 0


def serve(topo: ClusterTopology, hold_s: float) -> None:
    """Bind the ports a real process would (its CLUSTER_SPEC port; MASTER_PORT on rank 0)."""
    spec = json.loads(os.environ["CLUSTER_SPEC"])
    pool, index = spec["task"]["type"], spec["task"]["index"]
    host, port = split_address(spec["cluster"][pool][index])
    sockets = [socket.create_server((host, port))]
    if topo.rank == 0:
        sockets.append(socket.create_server((topo.master_addr, topo.master_port)))
    time.sleep(hold_s)
    for sock in sockets:
        sock.close()


if __name__ == "__main__":
    sys.exit(main())
