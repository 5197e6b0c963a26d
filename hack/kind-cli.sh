#!/usr/bin/env bash
# Builds the kind CLI (the version in e2e/go.mod, the module that links kind) into the shared cache when
# missing; prints its path.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${MESH_CNI_CACHE:-/var/cache/mesh-cni}
v=$(cd "$ROOT/e2e" && go list -m -f '{{.Version}}' sigs.k8s.io/kind)
out=$CACHE/tools/kind-$v/kind
if [ ! -x "$out" ]; then
  echo "building kind $v" >&2
  mkdir -p "$(dirname "$out")"
  (cd "$ROOT/e2e" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false nice go build -trimpath -ldflags '-s -w' -o "$out.tmp" sigs.k8s.io/kind) >&2
  mv "$out.tmp" "$out"
fi
echo "$out"
