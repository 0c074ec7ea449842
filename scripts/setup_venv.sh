#!/usr/bin/env bash
# Create or update the project virtual environment (.venv) on a fresh machine. Idempotent and fast
# when nothing changed: a stamp holding the hash of the requirement files skips the work.
#
# The stack is installed by scripts/install_stack.sh, the same script and lock files the image uses
# (Containerfile), in the order that matters (docs/stack.md):
#   1. torch 2.3.0 first (the PyPI CUDA 12.1 build; runs on CPU; GLT 0.2.4 only loads against it);
#   2. torch-scatter / torch-sparse from wheels/ (PyPI has only sdists, ~11 min to compile on 2 cores);
#      when no wheel in wheels/ fits this machine, build them (scripts/build_wheels.sh) and keep them;
#   3. requirements/base.txt and the test-only requirements/test.txt, locked by
#      requirements/constraints.txt; then `pip check`. Then this package, editable.
# A new .venv on a machine that installed the same stack before is made from the cache of
# scripts/venv_cache.sh (the stack before this package's editable install, keyed by the lock
# files, wheels/ and install_stack.sh): seconds instead of ~4 min.
#
# usage: scripts/setup_venv.sh            env: VENV (default .venv), PYTHON (default python3.11 / python3),
#                                              GRAPHSTORE_CACHE (the cache folder, scripts/venv_cache.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
REQ=requirements/base.txt
TEST_REQ=requirements/test.txt
CON=requirements/constraints.txt
stamp="$VENV/.setup-stamp"
want=$(cat "$REQ" "$TEST_REQ" "$CON" requirements/pyg-ext-sdists.txt scripts/setup_venv.sh \
  scripts/install_stack.sh pyproject.toml | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$VENV/bin/python" ]; then
  exit 0
fi
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' || {
  echo "setup_venv: Python 3.11 is required (graphlearn-torch 0.2.4 + torch 2.3.0); got $("$PYTHON" --version)" >&2
  exit 2
}
start=$(date +%s)
. scripts/venv_cache.sh
stack=venv-$(cat "$REQ" "$TEST_REQ" "$CON" requirements/pyg-ext-sdists.txt scripts/install_stack.sh \
  wheels/*.whl | sha256sum | cut -d' ' -f1)
PIP=("$VENV/bin/pip" install -q --disable-pip-version-check)
if ! venv_from_cache "$VENV" "$stack"; then
  [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
  echo "setup_venv: build tools (setuptools, wheel: scripts/build_wheels.sh and the editable install)"
  "${PIP[@]}" setuptools wheel 2>&1 | grep -v "^WARNING: Location" || true
  echo "setup_venv: the locked stack (first install downloads ~2.5 GB for torch)"
  rc=0
  scripts/install_stack.sh "$VENV/bin/python" "$REQ" "$TEST_REQ" || rc=$?
  if [ "$rc" = 3 ]; then
    echo "setup_venv: no wheel in wheels/ fits this machine; building from the PyPI sdists (~11 min)"
    scripts/build_wheels.sh "$VENV" wheels
    scripts/install_stack.sh "$VENV/bin/python" "$REQ" "$TEST_REQ"
  elif [ "$rc" != 0 ]; then
    exit "$rc"
  fi
fi
venv_to_cache "$VENV" "$stack"  # before this package goes in; nothing when the entry exists
"${PIP[@]}" --no-deps --no-build-isolation -e . 2>&1 | grep -v "^WARNING: Location" || true
"$VENV/bin/pip" check
echo "$want" > "$stamp"
echo "setup_venv: ready in $(( $(date +%s) - start ))s ($VENV)"
