#!/usr/bin/env bash
# Builds Kubernetes components and etcd from source through the Go module
# proxy (no container registry, no release download needed).
#
#   hack/build-k8s.sh [component...]
#
# Components: kube-apiserver kube-controller-manager kube-scheduler kube-proxy
# kubelet kubeadm kubectl etcd (default: all of them). Binaries are static
# (CGO off) and land in $MESH_CNI_CACHE/k8s/$K8S_VERSION/bin. Each binary has
# a stamp beside it (.NAME.key) holding everything it was built from (its
# version, the Go version, the build tags and flags); a binary whose stamp
# differs from what this run would build is built again, so bumping
# ETCD_VERSION (or Go) is never ignored. Versions: hack/versions.env. The last line of stdout is that directory, so callers
# can write bin=$(hack/build-k8s.sh kubectl | tail -n1). Logs go to stderr.
#
# k8s.io/kubernetes is not meant to be consumed as a module: its go.mod
# replaces every k8s.io/* staging module with ./staging, which the module zip
# does not contain. So we copy the module out of the module cache, drop that
# replace block, require the published staging modules (v0.MINOR.PATCH)
# instead, tidy once, and build with -mod=mod. The version ldflags make the
# binaries report the real version (kubeadm picks image tags from it).
set -euo pipefail

. "$(dirname "$0")/pin.sh"
K8S_VERSION=$(pin K8S_VERSION)
ETCD_VERSION=$(pin ETCD_VERSION)
CACHE=${MESH_CNI_CACHE:-/var/cache/mesh-cni}
ROOT="$CACHE/k8s/$K8S_VERSION"
BIN="$ROOT/bin"
SRC="$ROOT/src"
GO=${GO:-go}

all=(kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet kubeadm kubectl etcd)

log() { echo "build-k8s: $*" >&2; }
die() { log "error: $*"; exit 1; }

[[ "$K8S_VERSION" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || die "K8S_VERSION must look like v1.34.4, got $K8S_VERSION"
minor=${BASH_REMATCH[1]}
staging_version="v0.${minor}.${BASH_REMATCH[2]}"

want=("$@")
[ ${#want[@]} -gt 0 ] || want=("${all[@]}")
for c in "${want[@]}"; do
  [[ " ${all[*]} " == *" $c "* ]] || die "unknown component $c (known: ${all[*]})"
done

command -v "$GO" >/dev/null || die "go is not installed"
mkdir -p "$BIN"

# One build at a time per version: callers (tests, the node image build) may
# start this concurrently, and the second one then finds the binaries made.
exec 9>"$ROOT/.lock"
flock 9

GOVERSION=$(GOTOOLCHAIN=local "$GO" env GOVERSION)
K8S_TAGS=selinux,notest,grpcnotrace
key_of() { # what a binary is built from
  if [ "$1" = etcd ]; then
    echo "etcd $ETCD_VERSION $GOVERSION -trimpath -s -w"
  else
    echo "$1 $K8S_VERSION $GOVERSION -trimpath -tags $K8S_TAGS -s -w"
  fi
}
stamp() { key_of "$1" >"$BIN/.$1.key"; }
missing=()
for c in "${want[@]}"; do
  if [ ! -x "$BIN/$c" ] || [ "$(cat "$BIN/.$c.key" 2>/dev/null)" != "$(key_of "$c")" ]; then
    missing+=("$c")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "$BIN"
  exit 0
fi

# Whatever a failed run leaves half made is removed on exit.
TEMPS=()
cleanup() { [ ${#TEMPS[@]} -eq 0 ] || rm -rf "${TEMPS[@]}"; }
trap cleanup EXIT

export GOFLAGS=-buildvcs=false GOWORK=off CGO_ENABLED=0 GO111MODULE=on
# GOTOOLCHAIN=local: the module's go directive must not trigger a toolchain
# download.
export GOTOOLCHAIN=local
nice_go() { nice -n 10 "$GO" "$@"; }

prepare_kubernetes() {
  [ -f "$SRC/.prepared" ] && return 0
  log "preparing k8s.io/kubernetes@$K8S_VERSION (one time)"
  local tmp dir
  tmp=$(mktemp -d)
  TEMPS+=("$tmp" "$SRC.tmp")
  # Outside any module so nothing of the caller's go.mod is touched.
  dir=$(cd "$tmp" && "$GO" mod download -json "k8s.io/kubernetes@$K8S_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  rmdir "$tmp"
  [ -n "$dir" ] && [ -f "$dir/go.mod" ] || die "k8s.io/kubernetes@$K8S_VERSION not found in the module cache"

  rm -rf "$SRC" "$SRC.tmp"
  cp -r "$dir" "$SRC.tmp"
  chmod -R u+w "$SRC.tmp"
  rm -rf "$SRC.tmp/vendor" "$SRC.tmp"/go.work*
  (
    cd "$SRC.tmp"
    local m mods=()
    mapfile -t mods < <(sed -n 's|^[[:space:]]*\(k8s\.io/[^[:space:]]*\) => \./staging/.*|\1|p' go.mod)
    [ ${#mods[@]} -gt 0 ] || die "no ./staging replacements in go.mod: layout changed?"
    local args=()
    for m in "${mods[@]}"; do
      args+=("-dropreplace=$m")
      # Only what the module requires: some staging modules (samples) are
      # replaced but never published at every version.
      if grep -Eq "^[[:space:]]+${m//./\\.} v0\.0\.0" go.mod; then
        args+=("-require=$m@$staging_version")
      fi
    done
    "$GO" mod edit "${args[@]}"
    ! grep -q '=> ./staging' go.mod || die "staging replacements left in go.mod"
    log "go mod tidy (downloads the dependency graph)"
    nice_go mod tidy >&2
  )
  touch "$SRC.tmp/.prepared"
  mv "$SRC.tmp" "$SRC"
}

ldflags() {
  local date kv key val flags="-s -w"
  date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  for kv in "gitVersion=$K8S_VERSION" "gitMajor=1" "gitMinor=$minor" \
    "gitTreeState=clean" "buildDate=$date"; do
    key=${kv%%=*} val=${kv#*=}
    flags+=" -X k8s.io/component-base/version.$key=$val"
    flags+=" -X k8s.io/client-go/pkg/version.$key=$val"
  done
  echo "$flags"
}

build_kubernetes() {
  local comps=("$@") pkgs=() c out
  prepare_kubernetes
  for c in "${comps[@]}"; do pkgs+=("./cmd/$c"); done
  out=$(mktemp -d "$ROOT/.out-XXXXXX")
  TEMPS+=("$out")
  log "building ${comps[*]} ($K8S_VERSION)"
  (
    cd "$SRC"
    # The tags are the ones Kubernetes' own release build uses.
    nice_go build -mod=mod -trimpath -tags "$K8S_TAGS" \
      -ldflags "$(ldflags)" -o "$out/" "${pkgs[@]}"
  ) || { rm -rf "$out"; die "building ${comps[*]} failed"; }
  for c in "${comps[@]}"; do mv "$out/$c" "$BIN/$c" && stamp "$c"; done
}

build_etcd() {
  local mod="$ROOT/etcd-src"
  log "building etcd $ETCD_VERSION"
  # .prepared holds the version the module was prepared for.
  if [ "$(cat "$mod/.prepared" 2>/dev/null)" != "$ETCD_VERSION" ]; then
    rm -rf "$mod"
    TEMPS+=("$mod")
    mkdir -p "$mod"
    cat >"$mod/main.go" <<'EOF'
// Command etcd is etcd's own server main, built from its published module.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
    (
      cd "$mod"
      "$GO" mod init mesh-cni.local/etcd >&2 2>/dev/null
      nice_go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2
      nice_go mod tidy >&2
    ) || die "preparing etcd $ETCD_VERSION failed"
    echo "$ETCD_VERSION" >"$mod/.prepared"
    unset 'TEMPS[-1]'
  fi
  TEMPS+=("$BIN/.etcd.tmp")
  (
    cd "$mod"
    nice_go build -mod=mod -trimpath -ldflags "-s -w" -o "$BIN/.etcd.tmp" .
  ) || die "building etcd failed"
  mv "$BIN/.etcd.tmp" "$BIN/etcd" && stamp etcd
}

k8s=()
for c in "${missing[@]}"; do
  [ "$c" = etcd ] || k8s+=("$c")
done
start=$SECONDS
[ ${#k8s[@]} -eq 0 ] || build_kubernetes "${k8s[@]}"
[[ " ${missing[*]} " != *" etcd "* ]] || build_etcd
log "built ${missing[*]} in $((SECONDS - start))s"
echo "$BIN"
