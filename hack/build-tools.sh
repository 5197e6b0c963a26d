#!/usr/bin/env bash
# Builds the release tools pinned in the module hack/tools (its go.mod's
# `tool` directives; kept apart so the product's go.mod never links them):
#
#   hack/build-tools.sh [tool...]
#
# Tools: crane cosign registry helm-docs (default: all). Binaries are
# static and land in $MESH_CNI_CACHE/release-tools/<key>/bin, where <key>
# hashes the Go version, hack/tools/go.mod and go.sum: bumping a pin there
# builds a fresh set, nothing is installed by hand. The last line of stdout
# is that directory: bin=$(hack/build-tools.sh crane | tail -n1). Logs go to
# stderr.
set -euo pipefail

MOD=$(cd "$(dirname "$0")/tools" && pwd)
CACHE=${MESH_CNI_CACHE:-/var/cache/mesh-cni}
GO=${GO:-go}

declare -A pkg=(
  [crane]=github.com/google/go-containerregistry/cmd/crane
  [cosign]=github.com/sigstore/cosign/v2/cmd/cosign
  [registry]=github.com/distribution/distribution/v3/cmd/registry
  [helm-docs]=github.com/norwoodj/helm-docs/cmd/helm-docs
)
all=(crane registry cosign helm-docs)

log() { echo "build-tools: $*" >&2; }
die() { log "error: $*"; exit 1; }

want=("$@")
[ ${#want[@]} -gt 0 ] || want=("${all[@]}")
for t in "${want[@]}"; do
  [ -n "${pkg[$t]:-}" ] || die "unknown tool $t (known: ${all[*]})"
done
command -v "$GO" >/dev/null || die "go is not installed"

key=$(
  {
    echo "CGO_ENABLED=0 -trimpath -ldflags=-s -w"
    GOTOOLCHAIN=local "$GO" env GOVERSION
    cd "$MOD" && sha256sum go.mod go.sum
  } | sha256sum | cut -c1-16
)
ROOT="$CACHE/release-tools/$key"
BIN="$ROOT/bin"
mkdir -p "$BIN"

missing() {
  missing=()
  for t in "${want[@]}"; do
    [ -x "$BIN/$t" ] || missing+=("$t")
  done
}
# A binary is moved into place whole once built, so one that is there is
# ready: no lock needed to use it, even while another tool is being built.
missing
if [ ${#missing[@]} -eq 0 ]; then
  echo "$BIN"
  exit 0
fi
# One build at a time per key: a second caller waits, then finds them built.
exec 9>"$ROOT/.lock"
flock 9
missing

export GOFLAGS=-buildvcs=false GOWORK=off CGO_ENABLED=0 GO111MODULE=on GOTOOLCHAIN=local
out=$(mktemp -d "$ROOT/.out-XXXXXX")
trap 'rm -rf "$out"' EXIT
for t in "${missing[@]}"; do
  start=$SECONDS
  (cd "$MOD" && nice -n 10 "$GO" build -mod=readonly -trimpath -ldflags '-s -w' -o "$out/$t" "${pkg[$t]}") ||
    die "building $t failed"
  mv "$out/$t" "$BIN/$t"
  log "built $t in $((SECONDS - start))s ($(du -h "$BIN/$t" | cut -f1))"
done
echo "$BIN"
