#!/usr/bin/env bash
# GPU check (issue 12 item 3): 1 storage + 1 compute process x 1 GPU, 50 training steps and
# inference on the tiny dataset, run as a Vertex AI CustomJob's replicas would be (a one-GPU
# Vertex resource config, the cluster variables on 127.0.0.1). See scripts/gpu_check.py.
#
#   scripts/gpu_check.sh [--expect auto|cuda|cpu] [--steps 50] [--workdir DIR] [--timeout-s 420]
#
# On a GPU machine: scripts/gpu_check.sh --expect cuda. Without one, --expect cpu (or auto) checks
# that the same config falls back to the CPU with a warning. Exit 0 ok, 1 a check failed, 2 usage.
# PYTHON: the interpreter with the project's stack (default .venv/bin/python, else python3).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-}"
if [[ -z "$PYTHON" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
exec "$PYTHON" scripts/gpu_check.py "$@"
