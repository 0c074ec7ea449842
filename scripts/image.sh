#!/usr/bin/env bash
# Build the pipeline's container image (Containerfile) on this machine, with no container registry
# and no daemon, and run commands in it. docs/image.md has the why; in short:
#
#   scripts/image.sh build        inputs + base + `buildah bud`; writes build/image/image.json last
#   scripts/image.sh inputs       only the build inputs (what `docker build` also needs):
#                                   build/image/wheelhouse  every wheel of the locked stack
#                                     (requirements/base.txt + constraints.txt, pip on this machine)
#                                   build/image/dist        this package's wheel
#   scripts/image.sh run [-v HOST:CTR]... [-e K=V]... -- CMD...
#                                 CMD in a fresh working container of the image (removed after);
#                                 exit status: CMD's
#   scripts/image.sh push DEST [--token-stdin]
#                                 push the built image: DEST docker://HOST/PATH:TAG (Artifact
#                                 Registry: `gcloud auth print-access-token | scripts/image.sh push
#                                 docker://REGION-docker.pkg.dev/PROJECT/REPO/graphstore:TAG
#                                 --token-stdin`; the token is kept only in a temporary auth file)
#                                 or oci-archive:FILE (a file docker/skopeo can load)
#   scripts/image.sh clean        remove build/image and the cache $CACHE (what this script created)
#   scripts/image.sh sources-hash the hash of the files the image is made from (image.json keeps it)
#
# Where things live:
#   build/image/ (git-ignored, per clone): the build context's inputs (the wheelhouse, hard-linked
#     from the cache; this package's wheel) and image.json, the record of the last good build;
#   $CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/graphstore-pipeline, outside the clone, shared
#     by every clone of this machine): buildah/ (buildah's --root/--runroot storage with its layer
#     cache, the mmdebstrap rootfs of the base, containers.conf, libmount's utab) and
#     wheelhouse-<lock hash>/ (the wheels of one set of lock files). A fresh clone on a machine
#     that built the image before reuses the base, the stack's layer and the wheelhouse, so only
#     this package's two small layers are built (a lock-file change rebuilds the stack and
#     downloads a new wheelhouse; a new machine builds everything).
# CONTAINERS_CONF and LIBMOUNT_UTAB point into $CACHE/buildah, so nothing is written under /run
# (buildah still keeps a blob-info cache in /var/lib/containers/cache). The image is run by the
# id its record names, so clones that share the storage never run each other's build.
# The base: a Debian bookworm rootfs (python3, python3-venv, ca-certificates from Debian) made by
# mmdebstrap from the mirror apt on this machine uses (MIRROR overrides it), imported with
# `buildah from scratch`. Build and run use chroot isolation (crun/podman `run` fails here on
# cgroups). buildah and mmdebstrap are installed with apt-get when missing (needs root).
#
# env: IMAGE (default localhost/graphstore-pipeline:dev), PYTHON (default .venv/bin/python; a
#      Python 3.11 with pip, setuptools and wheel), MIRROR, STORAGE_DRIVER (default overlay),
#      GRAPHSTORE_CACHE (the cache folder, default above)
# exit: 0 ok, 2 usage or a missing prerequisite (named), 1 a failed step
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
IMAGE=${IMAGE:-localhost/graphstore-pipeline:dev}
BASE_IMAGE=localhost/graphstore-base:bookworm
PYTHON=${PYTHON:-.venv/bin/python}
OUT=$REPO/build/image
CACHE=${GRAPHSTORE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/graphstore-pipeline}
STATE=$CACHE/buildah
RECORD=$OUT/image.json

die() { echo "image: $2" >&2; exit "$1"; }
now() { date +%s; }

setup_buildah() {
  if ! command -v buildah >/dev/null || ! command -v mmdebstrap >/dev/null; then
    [ "$(id -u)" = 0 ] || die 2 "buildah and mmdebstrap are missing; install them (apt-get install buildah mmdebstrap) or run as root"
    echo "image: installing buildah and mmdebstrap (apt-get)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah mmdebstrap >/dev/null \
      || die 1 "apt-get could not install buildah and mmdebstrap"
  fi
  mkdir -p "$STATE/cni"
  export LIBMOUNT_UTAB="$STATE/utab"
  printf '[network]\nnetwork_backend = "cni"\nnetwork_config_dir = "%s/cni"\n' "$STATE" > "$STATE/containers.conf"
  export CONTAINERS_CONF="$STATE/containers.conf"
  B=(buildah --storage-driver "${STORAGE_DRIVER:-overlay}" --root "$STATE/root" --runroot "$STATE/runroot")
}

# ---- inputs: the wheelhouse and this package's wheel ----------------------------------------------
lock_hash() {
  cat requirements/base.txt requirements/constraints.txt wheels/*.whl | sha256sum | cut -d' ' -f1
}

wheelhouse() {
  # the cache holds one wheelhouse per lock hash; the build context gets hard links to it
  local want have tmp t0 cached
  want=$(lock_hash)
  cached=$CACHE/wheelhouse-$want
  have=$(cat "$OUT/wheelhouse/.stamp" 2>/dev/null || true)
  if [ "$want" = "$have" ]; then
    echo "image: wheelhouse up to date ($(ls "$OUT/wheelhouse" | grep -c '\.whl$') wheels)"
    return
  fi
  if [ ! -f "$cached/.stamp" ]; then
    t0=$(now)
    echo "image: wheelhouse: every wheel of requirements/base.txt, locked by constraints.txt (~3 GB)"
    mkdir -p "$CACHE"
    tmp=$(mktemp -d "$CACHE/.wheelhouse-XXXXXX")
    local reuse=()
    local older
    for older in "$CACHE"/wheelhouse-*/; do [ -d "$older" ] && reuse+=(--find-links "$older"); done
    # pip wheel downloads the wheels PyPI has and builds the rest (pure-Python sdists such as kfp)
    "$PYTHON" -m pip wheel -q --disable-pip-version-check -w "$tmp" "${reuse[@]}" --find-links wheels \
        --only-binary torch-scatter,torch-sparse -r requirements/base.txt -c requirements/constraints.txt \
        2>&1 | grep -v "^WARNING: Location" || true
    [ "${PIPESTATUS[0]}" = 0 ] || { rm -rf "$tmp"; die 1 "pip wheel failed (output above)"; }
    # a wheel compiled here would only fit machines like this one: only wheels/ may hold such
    local bad=()
    for whl in "$tmp"/*-linux_x86_64.whl; do
      [ -e "$whl" ] || continue
      [ -e "wheels/$(basename "$whl")" ] || bad+=("$(basename "$whl")")
    done
    [ ${#bad[@]} = 0 ] || { rm -rf "$tmp"; die 1 "these wheels were compiled on this machine (an sdist with C code?): ${bad[*]}; add prebuilt wheels to wheels/"; }
    echo "$want" > "$tmp/.stamp"
    rm -rf "$cached"
    mv "$tmp" "$cached"
    # wheelhouses of older lock files are only a download cache for the next one: keep the newest
    for older in "$CACHE"/wheelhouse-*/; do
      [ "${older%/}" = "$cached" ] || rm -rf "${older%/}"
    done
    echo "image: wheelhouse ready: $(ls "$cached" | grep -c '\.whl$') wheels, $(du -sh "$cached" | cut -f1), $(( $(now) - t0 )) s"
  else
    echo "image: wheelhouse from the cache ($cached)"
  fi
  mkdir -p "$OUT"
  rm -rf "$OUT/wheelhouse" "$OUT/.wheelhouse-part"
  cp -al "$cached" "$OUT/.wheelhouse-part" 2>/dev/null || cp -a "$cached" "$OUT/.wheelhouse-part"
  mv "$OUT/.wheelhouse-part" "$OUT/wheelhouse"
}

package_wheel() {
  # built from a fresh copy of the sources: setuptools would pack stale files left in build/lib
  local src
  src=$(mktemp -d)
  cp -r pyproject.toml README.md graphstore pipeline components "$src/"
  find "$src" -name __pycache__ -prune -exec rm -rf {} +
  rm -rf "$OUT/dist"
  mkdir -p "$OUT/dist"
  "$PYTHON" -m pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation -w "$OUT/dist" "$src" \
    2>&1 | grep -v "^WARNING: Location" || true
  local rc=${PIPESTATUS[0]}
  rm -rf "$src"
  [ "$rc" = 0 ] || die 1 "could not build this package's wheel (output above)"
  echo "image: $(ls "$OUT/dist")"
}

# every file the image is made from (its record keeps their hash: the image test skips an image
# built from other sources than the working tree's)
source_files() {
  { find graphstore pipeline components -name '*.py' -not -path '*/__pycache__/*'
    ls pyproject.toml Containerfile .dockerignore scripts/install_stack.sh requirements/base.txt \
      requirements/constraints.txt wheels/*.whl
  } | LC_ALL=C sort
}
sources_hash() { source_files | xargs sha256sum | sha256sum | cut -d' ' -f1; }

inputs() {
  [ -x "$PYTHON" ] || die 2 "$PYTHON not found: run make setup (or set PYTHON to a Python 3.11 with pip)"
  wheelhouse
  package_wheel
}

# ---- the base image: a bookworm rootfs with python3 ------------------------------------------------
mirror() {
  if [ -n "${MIRROR:-}" ]; then echo "$MIRROR"; return; fi
  { sed -n 's/^URIs: *\([^ ]*\/debian\)\/* *$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null || true
    sed -n 's/^deb  *\(\[[^]]*\]  *\)\{0,1\}\([^ ]*\/debian\)\/*  *bookworm .*/\2/p' /etc/apt/sources.list 2>/dev/null || true
  } | head -1
}

base() {
  if "${B[@]}" inspect --type image "$BASE_IMAGE" >/dev/null 2>&1; then
    echo "image: base $BASE_IMAGE present"
    return
  fi
  local t0 m ctr
  t0=$(now)
  if [ ! -f "$STATE/bookworm.tar" ]; then
    m=$(mirror)
    [ -n "$m" ] || die 2 "no Debian mirror found in /etc/apt; set MIRROR (e.g. http://deb.debian.org/debian)"
    echo "image: mmdebstrap: Debian bookworm (python3) from $m"
    mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates --mode=root \
      bookworm "$STATE/bookworm.tar.part" "deb $m bookworm main" "deb $m bookworm-updates main" \
      "deb ${m%/debian}/debian-security bookworm-security main" || die 1 "mmdebstrap failed (output above)"
    mv "$STATE/bookworm.tar.part" "$STATE/bookworm.tar"
  fi
  ctr=$("${B[@]}" from scratch)
  "${B[@]}" add "$ctr" "$STATE/bookworm.tar" / >/dev/null
  "${B[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd '["/bin/bash"]' "$ctr"
  "${B[@]}" commit -q --rm "$ctr" "$BASE_IMAGE" >/dev/null
  echo "image: base $BASE_IMAGE ready in $(( $(now) - t0 )) s"
}

# ---- build, run, clean ------------------------------------------------------------------------------
build() {
  local t0 t1 id size sources
  t0=$(now)
  rm -f "$RECORD"  # a failed build must not leave the record of an older image looking current
  sources=$(sources_hash)
  inputs
  setup_buildah
  base
  t1=$(now)
  echo "image: buildah bud -> $IMAGE"
  "${B[@]}" bud --layers --pull=never --isolation chroot --build-arg "BASE=$BASE_IMAGE" \
    -f Containerfile -t "$IMAGE" . || die 1 "buildah bud failed (output above)"
  id=$("${B[@]}" inspect --type image --format '{{.FromImageID}}' "$IMAGE")
  # the image's size: its layers (uncompressed tars) as its manifest lists them
  size=$("${B[@]}" inspect --type image --format '{{.Manifest}}' "$IMAGE" \
    | "$PYTHON" -c 'import json,sys; print(sum(l["size"] for l in json.load(sys.stdin)["layers"]))')
  STATE=$STATE "$PYTHON" - "$RECORD" "$IMAGE" "$id" "$size" "$sources" "$t0" "$t1" "$(now)" <<'PY'
import json, os, sys
path, image, image_id, size, sources, t0, t1, t2 = sys.argv[1:]
record = {"image": image, "id": image_id, "size_bytes": int(size), "sources_sha256": sources,
          "seconds": int(t2) - int(t0), "bud_seconds": int(t2) - int(t1), "storage": os.environ["STATE"]}
with open(path + ".part", "w") as fh:
    json.dump(record, fh, indent=1)
import os; os.replace(path + ".part", path)
PY
  echo "image: built $IMAGE ($(( size / 1000000 )) MB) in $(( $(now) - t0 )) s (buildah bud $(( $(now) - t1 )) s); record $RECORD"
}

run() {
  local opts=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    case $1 in
      -v|-e) [ $# -ge 2 ] || die 2 "$1 needs a value"; opts+=("$([ "$1" = -v ] && echo --volume || echo --env)" "$2"); shift 2 ;;
      *) die 2 "run: unknown option $1 (usage: run [-v HOST:CTR]... [-e K=V]... -- CMD...)" ;;
    esac
  done
  [ $# -ge 2 ] || die 2 "run: no command (usage: run [-v HOST:CTR]... [-e K=V]... -- CMD...)"
  shift
  [ -f "$RECORD" ] || die 2 "no image built ($RECORD missing): run make image"
  setup_buildah
  local image rc=0
  # by id: another clone sharing the cache may have moved the tag to its own build since
  image=$("$PYTHON" -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r.get("id") or r["image"])' "$RECORD" 2>/dev/null || true)
  [ -n "$image" ] || die 2 "$RECORD is not an image record: run make image"
  "${B[@]}" inspect --type image "$image" >/dev/null 2>&1 \
    || die 2 "the image $image of $RECORD is no longer in $STATE: run make image"
  CTR=$("${B[@]}" from --pull=never -q "$image") || die 1 "buildah from $image failed"
  trap '"${B[@]}" rm "$CTR" >/dev/null 2>&1 || true' EXIT
  "${B[@]}" run --isolation chroot "${opts[@]}" "$CTR" -- "$@" || rc=$?
  return "$rc"
}

push() {
  # push DEST [--token-stdin]: DEST is a buildah destination (docker://HOST/PATH:TAG,
  # oci-archive:FILE, ...). --token-stdin reads an OAuth access token (gcloud auth
  # print-access-token) and hands it to buildah in an auth file that lives only for this push.
  local dest="" token_stdin=0 auth=()
  while [ $# -gt 0 ]; do
    case $1 in
      --token-stdin) token_stdin=1 ;;
      -*) die 2 "push: unknown option $1 (usage: push DEST [--token-stdin])" ;;
      *) [ -z "$dest" ] || die 2 "push: one DEST only"; dest=$1 ;;
    esac
    shift
  done
  [ -n "$dest" ] || die 2 "push: no DEST (e.g. docker://REGION-docker.pkg.dev/PROJECT/REPO/graphstore:TAG)"
  [ -f "$RECORD" ] || die 2 "no image built ($RECORD missing): run make image"
  setup_buildah
  local image tmp
  image=$("$PYTHON" -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r.get("id") or r["image"])' "$RECORD")
  if [ "$token_stdin" = 1 ]; then
    case $dest in docker://*) ;; *) die 2 "push: --token-stdin is for docker:// destinations" ;; esac
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    local host=${dest#docker://}
    host=${host%%/*}
    (umask 077; "$PYTHON" -c '
import base64, json, sys
token = sys.stdin.read().strip()
if not token: sys.exit(1)
auth = base64.b64encode(("oauth2accesstoken:" + token).encode()).decode()
json.dump({"auths": {sys.argv[1]: {"auth": auth}}}, open(sys.argv[2], "w"))' "$host" "$tmp/auth.json") \
      || die 2 "push: no token on stdin (gcloud auth print-access-token | ...)"
    auth=(--authfile "$tmp/auth.json")
  fi
  "${B[@]}" push "${auth[@]}" "$image" "$dest" || die 1 "buildah push to $dest failed (output above)"
  echo "image: pushed $image to $dest"
}

clean() {
  if [ -d "$STATE/root" ]; then
    setup_buildah
    "${B[@]}" rm --all >/dev/null 2>&1 || true
    "${B[@]}" umount --all >/dev/null 2>&1 || true
  fi
  rm -rf "$CACHE" "$OUT"
  echo "image: removed build/image and $CACHE"
}

case ${1:-} in
  build) build ;;
  inputs) inputs ;;
  run) shift; run "$@" ;;
  push) shift; push "$@" ;;
  clean) clean ;;
  sources-hash) sources_hash ;;
  *) echo "usage: scripts/image.sh build | inputs | run [-v H:C]... [-e K=V]... -- CMD... | push DEST [--token-stdin] | clean | sources-hash" >&2; exit 2 ;;
esac
