#!/usr/bin/env bash
# Sourced by the other scripts: pin NAME prints NAME's value from the
# environment when set, else from hack/versions.env. Run as a command,
# `hack/pin.sh NAME` prints the same (the Makefile uses that).
pin() {
  local name=$1 file v
  file="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/versions.env"
  if [ -n "${!name:-}" ]; then
    echo "${!name}"
    return 0
  fi
  v=$(sed -n "s/^$name=//p" "$file")
  [ -n "$v" ] || { echo "pin: $name is not in $file" >&2; return 1; }
  echo "$v"
}
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  pin "$1"
fi
