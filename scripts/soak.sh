#!/usr/bin/env bash
# Repeat the multi-process integration tests to find flaky failures and hangs.
#
#   scripts/soak.sh N [--timeout-s S] [--log-dir DIR] [-- PYTEST_ARGS...]
#
# Runs `python -m pytest -q PYTEST_ARGS` N times, one run after another (default PYTEST_ARGS:
# tests/integration/test_graph_store.py tests/integration/test_launcher.py
# tests/integration/test_faults.py). Each run:
#   - pass: pytest exited 0; fail: any other exit code; hang: still running after S seconds
#     (default 1800), then ended with its whole process tree (below);
#   - gets SOAK_RUN_ID=<unique> in its environment, which every process it starts inherits (the
#     launcher passes its environment on), so a hung run is ended completely: SIGTERM to every
#     descendant and every process carrying the id, then SIGKILL after 10 s. Processes carrying
#     the id that outlive a finished run are reported as left behind (and killed): a leak;
#   - logs to DIR/run_<i>.log (default DIR: runs/soak/<UTC time>/).
# At the end: pass / fail / hang counts, the runs that left processes behind, the seconds per run,
# and the log of every failure, hang or leak. Exit 0 when every run passed without leaving a
# process, 1 otherwise, 2 for a usage error.
set -uo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: scripts/soak.sh N [--timeout-s S] [--log-dir DIR] [-- PYTEST_ARGS...]" >&2; exit 2; }
[ $# -ge 1 ] || usage
runs=$1; shift
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "soak: N must be a positive integer, got '$runs'" >&2; exit 2; }
timeout_s=1800
log_dir="runs/soak/$(date -u +%Y%m%dT%H%M%SZ)"
while [ $# -gt 0 ]; do
  case "$1" in
    --timeout-s) [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || { echo "soak: --timeout-s needs a positive integer" >&2; exit 2; }
                 timeout_s=$2; shift 2 ;;
    --log-dir) [ -n "${2:-}" ] || usage; log_dir=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "soak: unknown argument '$1'" >&2; usage ;;
  esac
done
tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=(tests/integration/test_graph_store.py tests/integration/test_launcher.py
                                tests/integration/test_faults.py)
PY=.venv/bin/python
[ -x "$PY" ] || { echo "soak: $PY not found; run 'make setup' first" >&2; exit 2; }
mkdir -p "$log_dir"

# pids of every process whose environment holds SOAK_RUN_ID=$1 (readable ones: our own user's)
marked() {
  local f pid
  for f in /proc/[0-9]*/environ; do
    pid=${f#/proc/}; pid=${pid%/environ}
    { tr '\0' '\n' < "$f"; } 2>/dev/null | grep -qx "SOAK_RUN_ID=$1" && echo "$pid"
  done
}

# pids of every descendant of $1 (children first found by parent pid, recursively)
descendants() {
  local child
  for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do
    echo "$child"
    descendants "$child"
  done
}

# end a run: SIGTERM (+ SIGCONT, for a stopped process) to its tree and its marked processes,
# then SIGKILL to whatever is left after 10 s
end_run() {
  local pid=$1 id=$2 targets
  targets=$( { echo "$pid"; descendants "$pid"; marked "$id"; } | sort -u)
  kill -TERM $targets 2>/dev/null; kill -CONT $targets 2>/dev/null
  for _ in $(seq 20); do
    kill -0 $targets 2>/dev/null || break
    sleep 0.5
  done
  targets=$( { echo "$targets"; marked "$id"; } | sort -u)
  kill -KILL $targets 2>/dev/null
  wait "$pid" 2>/dev/null
}

pass=0; fail=0; hang=0; leaks=0; bad=(); seconds=()
echo "soak: $runs runs of pytest ${tests[*]} (per-run timeout ${timeout_s} s); logs in $log_dir"
for i in $(seq "$runs"); do
  log="$log_dir/run_$i.log"
  id="soak-$$-$i-$RANDOM$RANDOM"
  start=$(date +%s)
  SOAK_RUN_ID=$id "$PY" -m pytest -q "${tests[@]}" > "$log" 2>&1 &
  pid=$!
  outcome=""
  while kill -0 "$pid" 2>/dev/null; do
    if [ $(( $(date +%s) - start )) -ge "$timeout_s" ]; then
      outcome=hang
      echo "soak: run $i exceeded ${timeout_s} s: ending its process tree" >> "$log"
      end_run "$pid" "$id"
      break
    fi
    sleep 1
  done
  if [ -z "$outcome" ]; then
    wait "$pid"; code=$?
    if [ "$code" -eq 0 ]; then outcome=pass; else outcome="fail"; fi
  fi
  took=$(( $(date +%s) - start ))
  seconds+=("$took")
  left=$(marked "$id" | grep -vx "$$" || true)
  if [ -n "$left" ]; then
    echo "soak: run $i left processes behind: $(echo $left)" | tee -a "$log"
    # parent, start time and age of each, to tell which test started it (the run began at $start)
    echo "soak: run $i began $(date -u -d "@$start" '+%a %b %e %T %Y') UTC; pid ppid started age(s) command:" >> "$log"
    TZ=UTC ps -o pid=,ppid=,lstart=,etimes=,args= -p $(echo $left | tr ' ' ',') >> "$log" 2>/dev/null
    kill -KILL $left 2>/dev/null
    leaks=$((leaks + 1)); bad+=("leak run $i: $log (pids $(echo $left))")
  fi
  case $outcome in
    pass) pass=$((pass + 1)) ;;
    fail) fail=$((fail + 1)); bad+=("fail run $i: $log ($(tail -n 1 "$log"))") ;;
    hang) hang=$((hang + 1)); bad+=("hang run $i: $log") ;;
  esac
  echo "soak: run $i/$runs $outcome in ${took} s ($log)"
done
echo "soak: $pass pass, $fail fail, $hang hang of $runs runs ($leaks left processes behind);" \
     "seconds per run: ${seconds[*]}"
for line in "${bad[@]}"; do echo "  $line"; done
[ $((fail + hang + leaks)) -eq 0 ]
