# Sourced by scripts/setup_venv.sh and scripts/setup_emulators.sh (bash): a virtual environment
# kept as hard links in the cache folder the image uses, so that a new clone on a machine that
# installed the same locked packages before (CI's fresh clone) gets its venv in seconds instead
# of installing them again (.venv: ~4 min, torch's 2.5 GB; .venv-emulators: ~70 s).
#
#   venv_from_cache VENV NAME   make VENV (which must not exist) from $CACHE/NAME; returns 1 when
#                               no such cache entry is complete
#   venv_to_cache VENV NAME     keep VENV as $CACHE/NAME (once per NAME; nothing where hard
#                               links cannot be made, e.g. another file system)
#
# NAME carries the hash of everything the venv is made from, so an entry never changes once
# written; an entry is complete when its marker file (the path of the venv it was copied from,
# written last, before the entry's atomic rename) is there. The scripts in bin/ that name the
# original venv's path are rewritten for the new one. pip replaces files instead of writing
# into them and Python writes its caches as new files, so a change in one venv never reaches the
# cache or another clone. `scripts/image.sh clean` removes the whole cache folder.
CACHE=${GRAPHSTORE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/graphstore-pipeline}
VENV_CACHE_MARKER=.graphstore-venv-origin

venv_from_cache() {
  local venv=$1 entry="$CACHE/$2" origin here f
  [ ! -e "$venv" ] && [ -f "$entry/$VENV_CACHE_MARKER" ] || return 1
  cp -al "$entry" "$venv.tmp.$$" || { rm -rf "$venv.tmp.$$"; return 1; }
  origin=$(cat "$entry/$VENV_CACHE_MARKER")
  rm -f "$venv.tmp.$$/$VENV_CACHE_MARKER"
  mv -T "$venv.tmp.$$" "$venv" || { rm -rf "$venv.tmp.$$"; return 1; }  # (set -e is off in an if)
  here=$(cd "$venv" && pwd)
  for f in "$venv"/bin/*; do  # console scripts and activate name the venv they were made in
    if [ -f "$f" ] && [ ! -L "$f" ] && grep -qsF "$origin" "$f"; then
      sed "s|$origin|$here|g" "$f" > "$f.new" && chmod --reference="$f" "$f.new" && mv "$f.new" "$f"
    fi
  done
  echo "venv_cache: $venv made from $entry (hard links)"
}

venv_to_cache() {
  local venv=$1 entry="$CACHE/$2"
  [ ! -e "$entry" ] || return 0
  mkdir -p "$CACHE"
  if cp -al "$venv" "$entry.tmp.$$" 2>/dev/null; then
    rm -f "$entry.tmp.$$/.setup-stamp"
    (cd "$venv" && pwd) > "$entry.tmp.$$/$VENV_CACHE_MARKER"
    if mv -T "$entry.tmp.$$" "$entry" 2>/dev/null; then
      echo "venv_cache: kept for new clones as $entry"
      return 0
    fi
  fi
  rm -rf "$entry.tmp.$$"
}
