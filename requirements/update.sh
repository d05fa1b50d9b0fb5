#!/usr/bin/env bash
# Regenerates the lock files that every install command and CI use:
#   requirements/lock.txt              newest versions allowed by pyproject.toml (extras: dev, docs)
#   requirements/lock-core-0.14.20.txt the same with llama-index-core 0.14.20 (compat pass)
# Both are universal (Python 3.11+, Linux/macOS/Windows markers) and are used as pip constraints
# (`pip install -c requirements/lock.txt ...`), so pyproject.toml keeps its compatible ranges for
# library users. Run from anywhere, then re-run the suite: `bash requirements/update.sh && bash .ci/run`.
set -euo pipefail
cd "$(dirname "$0")/.."
UV_VERSION=0.13.9
uv=$(command -v uv || true)
if [ -z "$uv" ] || [ "$("$uv" --version | cut -d' ' -f2)" != "$UV_VERSION" ]; then
  tools=$(mktemp -d)
  trap 'rm -rf "$tools"' EXIT
  python3 -m venv "$tools/venv"
  "$tools/venv/bin/pip" install --quiet "uv==$UV_VERSION"
  uv="$tools/venv/bin/uv"
fi
compile() {  # compile OUTPUT PINS...
  local out=$1
  shift
  local pins=()
  for p in "$@"; do pins+=(-c "$p"); done
  "$uv" pip compile pyproject.toml --extra dev --extra docs --universal --python-version 3.11 \
    --custom-compile-command "bash requirements/update.sh" --quiet "${pins[@]}" -o "$out"
}
compile requirements/lock.txt requirements/pins.in
compile requirements/lock-core-0.14.20.txt requirements/pins.in requirements/pins-core-0.14.20.in
echo "wrote requirements/lock.txt and requirements/lock-core-0.14.20.txt"
