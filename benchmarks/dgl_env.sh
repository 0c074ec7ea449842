#!/usr/bin/env bash
# Create or update .venv-dgl, the side environment of benchmarks/sampling.py's `dgl` row: DGL 2.1.0
# cannot be installed in the project venv, so the row runs under this environment's python
# (sampling.py --dgl-python, default .venv-dgl/bin/python). Idempotent: a stamp holding the hash of
# what the environment is made from skips the work when nothing changed.
#
# Versions: benchmarks/requirements-dgl.txt (torch 2.3.0, numpy 1.26.4, dgl 2.1.0 and the few
# packages dgl.graphbolt's Python code imports), everything else locked by the project's
# requirements/constraints.txt, so the packages both environments hold are the same versions.
#   1. torch and numpy first (PyPI's torch 2.3.0, the project's wheel: the CUDA 12.1 build, which
#      runs on CPU; TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu takes the smaller CPU build
#      from there instead, where that index can be reached);
#   2. the rest of benchmarks/requirements-dgl.txt (dgl from PyPI; `pip check`);
#   3. a smoke test: `benchmarks/_sampling_modes.py dgl --probe` imports DGL the way the row does
#      (DGL 2.1.0 ships no graphbolt library for torch 2.3: the row tolerates that one load error,
#      see benchmarks/_sampling_dgl.py) and prints the versions.
# The environment is ~5 GB (torch and its CUDA libraries), .gitignore'd.
#
# usage: benchmarks/dgl_env.sh        env: VENV (default .venv-dgl), PYTHON (default: the project
#                                          venv's python, else python3.11 / python3), TORCH_INDEX_URL
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-dgl}
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python
  else PYTHON=$(command -v python3.11 || command -v python3); fi
fi
REQ=benchmarks/requirements-dgl.txt
CON=requirements/constraints.txt
stamp="$VENV/.setup-stamp"
want=$( (cat "$REQ" "$CON" benchmarks/dgl_env.sh; echo "${TORCH_INDEX_URL:-}") | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$VENV/bin/python" ]; then
  echo "dgl_env: $VENV is up to date"
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PY=$VENV/bin/python
status=$(mktemp)
trap 'rm -f "$status"' EXIT

# pip, without this machine's "WARNING: Location ... is ignored" lines; the exit status is pip's
pip_install() {
  { "$PY" -m pip install -q --disable-pip-version-check "$@" 2>&1; echo $? > "$status"; } \
    | grep -v "^WARNING: Location" || true
  return "$(cat "$status")"
}
pin() { grep -E "^$1==" "$REQ" | awk '{print $1}'; }

echo "dgl_env: [1/3] $(pin torch) $(pin numpy) into $VENV"
pip_install -c "$CON" ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "$(pin torch)" "$(pin numpy)"
echo "dgl_env: [2/3] $REQ"
pip_install -c "$CON" -r "$REQ"
"$PY" -m pip check --disable-pip-version-check
echo "dgl_env: [3/3] smoke test"
"$PY" benchmarks/_sampling_modes.py dgl --probe
echo "$want" > "$stamp"
echo "dgl_env: $VENV ready (benchmarks/sampling.py uses it for the dgl row)"
