#!/bin/sh
# Install the locked stack into a virtual environment, in the one order that works (docs/stack.md).
# Shared by scripts/setup_venv.sh (.venv, from PyPI) and the Containerfile (the image, from a
# wheelhouse, --no-index), so both get the same versions from the same lock files:
#   1. torch, numpy and scipy (versions: requirements/constraints.txt) before anything else
#      (GLT 0.2.4 only loads against torch 2.3.0, and the extension wheels are built against it);
#   2. torch-scatter / torch-sparse, only as prebuilt wheels from wheels/, without dependencies;
#      exit 3 when no wheel there fits (setup_venv.sh then builds them and calls this again);
#   3. every requirement file given, locked by requirements/constraints.txt; then `pip check`.
# usage (from the repository root; POSIX sh, it also runs inside the image build):
#   scripts/install_stack.sh PYTHON REQUIREMENTS_FILE... [-- PIP_OPTION...]
# PIP_OPTIONs go to steps 1 and 3, e.g. `--no-index --find-links /wheelhouse --only-binary :all:`.
set -eu
[ $# -ge 2 ] || { echo "usage: $0 PYTHON REQUIREMENTS_FILE... [-- PIP_OPTION...]" >&2; exit 2; }
PY=$1
shift
CON=requirements/constraints.txt
[ -f "$CON" ] || { echo "install_stack: run it from the repository root ($CON not found)" >&2; exit 2; }
reqs=""
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  [ -f "$1" ] || { echo "install_stack: requirements file $1 not found" >&2; exit 2; }
  reqs="$reqs -r $1"
  shift
done
[ $# -gt 0 ] && shift  # the "--"
status=$(mktemp)
trap 'rm -f "$status"' EXIT

# pip, with this machine's "WARNING: Location ... is ignored" lines (its pip.conf names local
# indexes that lack most packages) left out; the exit status is pip's
pip_install() {
  { "$PY" -m pip install -q --disable-pip-version-check "$@" 2>&1; echo $? > "$status"; } \
    | grep -v "^WARNING: Location" || true
  return "$(cat "$status")"
}

echo "install_stack: [1/3] torch, numpy, scipy"
pip_install -c "$CON" "$@" torch numpy scipy
"$PY" -c "import torch" || { echo "install_stack: torch does not import" >&2; exit 1; }
echo "install_stack: [2/3] torch-scatter / torch-sparse from wheels/"
if ! pip_install --no-index --find-links wheels --only-binary :all: --no-deps -c "$CON" \
    torch-scatter torch-sparse >/dev/null; then
  echo "install_stack: no wheel in wheels/ fits this Python and platform" >&2
  exit 3
fi
echo "install_stack: [3/3]$reqs"
# shellcheck disable=SC2086  # $reqs is a list of "-r FILE" words
pip_install $reqs -c "$CON" "$@" --find-links wheels --only-binary torch-scatter,torch-sparse
"$PY" -m pip check
