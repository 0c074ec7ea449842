#!/usr/bin/env bash
# Rebuild the torch-scatter / torch-sparse wheels in wheels/ from their PyPI sdists.
#
# PyPI ships these two packages only as source; compiling them takes ~8 and ~11 minutes on 2 cores,
# so the built wheels are kept in wheels/ and scripts/setup_venv.sh installs from there. Run this when
# wheels/ has no wheel for your platform / Python (setup_venv.sh calls it automatically then).
# The sdists are verified against the sha256 sums in requirements/pyg-ext-sdists.txt.
#
# usage: scripts/build_wheels.sh [VENV] [OUTDIR]     (VENV must already hold torch==2.3.0)
set -euo pipefail
VENV=${1:-.venv}
OUT=${2:-wheels}
HERE=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
"$VENV/bin/python" -c "import torch; print('building against torch', torch.__version__)"
# --no-build-isolation compiles against the torch in VENV; it needs setuptools + wheel there.
"$VENV/bin/pip" install -q setuptools wheel
export FORCE_ONLY_CPU=1 FORCE_CUDA=0 MAX_JOBS=2
start=$(date +%s)
logdir=$(mktemp -d)
"$VENV/bin/pip" wheel --no-build-isolation --no-deps --no-binary :all: --require-hashes \
    -r <(grep torch-scatter "$HERE/requirements/pyg-ext-sdists.txt") -w "$OUT" >"$logdir/scatter.log" 2>&1 &
p1=$!
"$VENV/bin/pip" wheel --no-build-isolation --no-deps --no-binary :all: --require-hashes \
    -r <(grep torch-sparse "$HERE/requirements/pyg-ext-sdists.txt") -w "$OUT" >"$logdir/sparse.log" 2>&1 &
p2=$!
rc1=0; rc2=0
wait $p1 || rc1=$?
wait $p2 || rc2=$?
echo "torch-scatter rc=$rc1 torch-sparse rc=$rc2 wall=$(( $(date +%s) - start ))s (logs: $logdir)"
if [ $rc1 -ne 0 ] || [ $rc2 -ne 0 ]; then
  tail -20 "$logdir"/*.log >&2
  exit 1
fi
ls -l "$OUT"/torch_s*.whl
