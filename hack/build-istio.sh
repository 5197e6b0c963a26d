#!/usr/bin/env bash
# Builds Istio's own commands from the Go module proxy, in the module
# hack/istio (kept apart so the plugin and agent never link Istio).
#
#   hack/build-istio.sh [component...]
#
# Components: istioctl pilot-discovery pilot-agent istio-cni install-cni
# inject (default: all of them). install-cni is Istio's CNI node agent (the
# istio-cni-node DaemonSet's container, hack/istio-images.sh makes its image). inject is ours (hack/istio/cmd/inject): it runs
# Istio's injector library offline. The Istio version is pinned in one place,
# hack/istio/go.mod. Binaries are static (CGO off) and land in
# $MESH_CNI_CACHE/istio/<key>/bin, where <key> hashes the Istio version, the
# Go version, the build flags, hack/istio/go.mod and go.sum. Our own tools are
# rebuilt in that directory when their sources change (a stamp beside each
# holds their hash), so editing them does not rebuild Istio's large binaries.
# The last line of stdout is that directory:
# bin=$(hack/build-istio.sh istioctl | tail -n1). Logs go to stderr.
#
# Cold, on a shared 2-core machine with a warm module cache: about 7.5 min
# for all five (inject 3.3 min, istioctl and pilot-discovery about 2 each);
# cached: 0.1 s.
set -euo pipefail

MOD=$(cd "$(dirname "$0")/istio" && pwd)
CACHE=${MESH_CNI_CACHE:-/var/cache/mesh-cni}
GO=${GO:-go}

declare -A pkg=(
  [istioctl]=istio.io/istio/istioctl/cmd/istioctl
  [pilot-discovery]=istio.io/istio/pilot/cmd/pilot-discovery
  [pilot-agent]=istio.io/istio/pilot/cmd/pilot-agent
  [istio-cni]=istio.io/istio/cni/cmd/istio-cni
  [install-cni]=istio.io/istio/cni/cmd/install-cni
  [inject]=./cmd/inject
)
all=(istioctl pilot-discovery pilot-agent istio-cni install-cni inject)

log() { echo "build-istio: $*" >&2; }
die() { log "error: $*"; exit 1; }

want=("$@")
[ ${#want[@]} -gt 0 ] || want=("${all[@]}")
for c in "${want[@]}"; do
  [ -n "${pkg[$c]:-}" ] || die "unknown component $c (known: ${all[*]})"
done
command -v "$GO" >/dev/null || die "go is not installed"

# istio-cni and install-cni get Istio's release tags and stripping (they run
# on nodes; Istio builds both, its CNI_BINARIES, with AGENT_TAGS and
# RELEASE_LDFLAGS: Makefile.core.mk in the module); the others are built
# plainly. These flags are inputs of the key too.
cni_tags=agent,disable_pgv,grpcnotrace,retrynotrace
cni_ldflags="-s -w"

version=$(sed -n 's|^[[:space:]]*istio\.io/istio \(v[^[:space:]]*\).*|\1|p' "$MOD/go.mod")
[ -n "$version" ] || die "no istio.io/istio requirement in $MOD/go.mod"
key=$(
  {
    echo "$version"
    echo "CGO_ENABLED=0 -trimpath istio-cni: -tags $cni_tags -ldflags $cni_ldflags"
    GOTOOLCHAIN=local "$GO" env GOVERSION
    cd "$MOD" && sha256sum go.mod go.sum
  } | sha256sum | cut -c1-16
)
# srchash prints the hash of our own sources behind a component ("" for
# Istio's, which the key covers).
srchash() {
  case "${pkg[$1]}" in
  ./*) (cd "$MOD" && find "${pkg[$1]}" -type f | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16) ;;
  esac
}
ROOT="$CACHE/istio/$key"
BIN="$ROOT/bin"
mkdir -p "$BIN"

# One build at a time per key: the second caller waits and then finds the
# binaries made.
exec 9>"$ROOT/.lock"
flock 9

missing=()
for c in "${want[@]}"; do
  if [ ! -x "$BIN/$c" ] || [ "$(srchash "$c")" != "$(cat "$BIN/.$c.src" 2>/dev/null)" ]; then
    missing+=("$c")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "$BIN"
  exit 0
fi

export GOFLAGS=-buildvcs=false GOWORK=off CGO_ENABLED=0 GO111MODULE=on GOTOOLCHAIN=local
out=$(mktemp -d "$ROOT/.out-XXXXXX")
trap 'rm -rf "$out"' EXIT
log "istio.io/istio $version, key $key"
for c in "${missing[@]}"; do
  start=$SECONDS
  flags=()
  if [ "$c" = istio-cni ] || [ "$c" = install-cni ]; then
    flags=(-tags "$cni_tags" -ldflags "$cni_ldflags")
  fi
  (cd "$MOD" && nice -n 10 "$GO" build -mod=readonly -trimpath "${flags[@]}" -o "$out/$c" "${pkg[$c]}") ||
    die "building $c failed"
  srchash "$c" >"$out/.$c.src"
  mv "$out/$c" "$BIN/$c"
  mv "$out/.$c.src" "$BIN/.$c.src"
  log "built $c in $((SECONDS - start))s ($(du -h "$BIN/$c" | cut -f1))"
done
echo "$BIN"
