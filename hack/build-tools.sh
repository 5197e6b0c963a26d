#!/usr/bin/env bash
# Builds the Go tools pinned by `tool` directives in a module of their own
# (kept apart so the product's go.mod never links them):
#
#   hack/build-tools.sh [tool...]
#
# Release tools, module hack/tools: crane cosign registry helm-docs (the
# default: all four). The linter, module hack/lint: golangci-lint. It has a
# module of its own because its dependency graph would move the versions
# the release tools share with it (golang.org/x/..., cloud.google.com/...).
# Binaries are static and land in $MESH_CNI_CACHE/<set>/<key>/bin, where
# <set> is release-tools or lint-tools and <key> hashes the Go version, the
# build flags and the module's go.mod and go.sum: bumping a pin builds a
# fresh set, nothing is installed by hand. One call builds tools of one
# module. The last line of stdout is that directory:
# bin=$(hack/build-tools.sh crane | tail -n1). Logs go to stderr.
set -euo pipefail

HACK=$(cd "$(dirname "$0")" && pwd)
CACHE=${MESH_CNI_CACHE:-/var/cache/mesh-cni}
GO=${GO:-go}

declare -A pkg=(
  [crane]=github.com/google/go-containerregistry/cmd/crane
  [cosign]=github.com/sigstore/cosign/v2/cmd/cosign
  [registry]=github.com/distribution/distribution/v3/cmd/registry
  [helm-docs]=github.com/norwoodj/helm-docs/cmd/helm-docs
  [golangci-lint]=github.com/golangci/golangci-lint/v2/cmd/golangci-lint
)
# The module (under hack/) and cache set of each tool; the default is tools.
declare -A mod=([golangci-lint]=lint)
declare -A set=([tools]=release-tools [lint]=lint-tools)
all=(crane registry cosign helm-docs)

log() { echo "build-tools: $*" >&2; }
die() { log "error: $*"; exit 1; }

want=("$@")
[ ${#want[@]} -gt 0 ] || want=("${all[@]}")
modname=
for t in "${want[@]}"; do
  [ -n "${pkg[$t]:-}" ] || die "unknown tool $t (known: ${all[*]} golangci-lint)"
  m=${mod[$t]:-tools}
  [ -z "$modname" ] || [ "$modname" = "$m" ] ||
    die "$t is pinned in hack/$m, ${want[0]} in hack/$modname: build them in two calls"
  modname=$m
done
MOD=$HACK/$modname
command -v "$GO" >/dev/null || die "go is not installed"

key=$(
  {
    echo "CGO_ENABLED=0 -trimpath -ldflags=-s -w"
    GOTOOLCHAIN=local "$GO" env GOVERSION
    cd "$MOD" && sha256sum go.mod go.sum
  } | sha256sum | cut -c1-16
)
ROOT="$CACHE/${set[$modname]}/$key"
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
