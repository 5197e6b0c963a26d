#!/usr/bin/env bash
# Builds flannel from source, without a container registry, as the images the
# kube-flannel manifest (hack/flannel/kube-flannel.yml) runs:
#
#   mesh-cni.local/flannel:v0.28.10            flanneld + install-conf on a minbase Debian tree
#   mesh-cni.local/flannel-cni-plugin:v0.9.1   the flannel CNI plugin (/flannel)
#
# flanneld and install-conf come from github.com/flannel-io/flannel, pinned
# in the module hack/flannel/flanneld; the CNI plugin is the meta plugin of
# github.com/containernetworking/plugins (plugins/meta/flannel), pinned in
# hack/flannel/cni-plugin. Both modules are kept apart from ours (and from
# each other: flanneld links a newer containernetworking/plugins), so the
# product never links them. hack/flannel/README.md says why these versions.
#
#   hack/build-flannel.sh       builds (or finds) the images; prints the path
#                               of their `docker save` tarball last
#
# Cached in $MESH_CNI_CACHE/flannel: the Debian tree (by suite and package
# list), and per key the binaries and the tarball. The key hashes this
# script, both modules' go.mod and go.sum, the Go version and the build
# flags, so any change of an input builds anew and an unchanged one returns
# at once (without Docker).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${MESH_CNI_CACHE:-/var/cache/mesh-cni}
. "$ROOT/hack/pin.sh"
SUITE=$(pin DEBIAN_SUITE)
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
GO=${GO:-go}
export GOFLAGS=-mod=mod GOWORK=off GOTOOLCHAIN=local
W=$CACHE/flannel
MOD_FLANNELD=$ROOT/hack/flannel/flanneld
MOD_PLUGIN=$ROOT/hack/flannel/cni-plugin

log() { echo "build-flannel: $*" >&2; }
die() { log "error: $*"; exit 1; }
stage() { log "[$((SECONDS))s] $*"; }

# flanneld's userland: iptables/nftables (--ip-masq, the forward rules) and
# iproute2, as upstream's image has (images/Dockerfile installs iproute2,
# ca-certificates, nftables, iptables on Alpine).
PKGS=iptables,nftables,iproute2,ca-certificates

modversion() { # MODDIR MODULE: the version its go.mod requires
  sed -n "s|^[[:space:]]*\(require \)\{0,1\}$2 \(v[^[:space:]]*\).*|\2|p" "$1/go.mod" | head -n1
}
FLANNEL_VERSION=$(modversion "$MOD_FLANNELD" github.com/flannel-io/flannel)
PLUGINS_VERSION=$(modversion "$MOD_PLUGIN" github.com/containernetworking/plugins)
[ -n "$FLANNEL_VERSION" ] || die "no github.com/flannel-io/flannel requirement in $MOD_FLANNELD/go.mod"
[ -n "$PLUGINS_VERSION" ] || die "no github.com/containernetworking/plugins requirement in $MOD_PLUGIN/go.mod"
FLANNEL_IMAGE=mesh-cni.local/flannel:$FLANNEL_VERSION
PLUGIN_IMAGE=mesh-cni.local/flannel-cni-plugin:$PLUGINS_VERSION
for i in "$FLANNEL_IMAGE" "$PLUGIN_IMAGE"; do
  grep -q "image: $i\$" "$ROOT/hack/flannel/kube-flannel.yml" ||
    die "hack/flannel/kube-flannel.yml does not run $i (the version in go.mod)"
done

# Upstream's build: flanneld with cgo on amd64 (the UDP backend is C) and
# linked statically (flannel's Makefile, dist/flanneld); netgo/osusergo
# keep glibc's NSS out of the static binary. install-conf plainly
# (images/Dockerfile). The plugin as containernetworking/plugins builds it
# (build_linux.sh), with its version stamped.
FLANNELD_TAGS=netgo,osusergo
FLANNELD_LDFLAGS="-s -w -X github.com/flannel-io/flannel/pkg/version.Version=$FLANNEL_VERSION -extldflags -static"
PLUGIN_LDFLAGS="-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$PLUGINS_VERSION"

KEY=$(
  {
    cat "$0"
    (cd "$MOD_FLANNELD" && cat go.mod go.sum)
    (cd "$MOD_PLUGIN" && cat go.mod go.sum)
    "$GO" env GOVERSION GOARCH
    echo "$SUITE $PKGS | $FLANNELD_TAGS | $FLANNELD_LDFLAGS | $PLUGIN_LDFLAGS"
  } | sha256sum | cut -c1-16
)
OUT=$W/$KEY
TAR=$OUT/flannel-images.tar
mkdir -p "$OUT/bin"

exec 9>"$W/.lock"
flock 9

if [ -s "$TAR" ]; then
  log "$FLANNEL_IMAGE and $PLUGIN_IMAGE are cached"
  echo "$TAR"
  exit 0
fi

# Debian packages the build needs: a C toolchain (flanneld's UDP backend is
# cgo) and debootstrap when the tree is not cached yet.
need_packages() {
  local missing=()
  command -v gcc >/dev/null 2>&1 || missing+=(gcc)
  [ -f /usr/include/stdio.h ] || missing+=(libc6-dev)
  [ -f "$TREE/.done" ] || command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${missing[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# The same way hack/kind-image.sh makes its Debian trees.
TREE=$W/rootfs-$SUITE-$(echo "$PKGS" | sha256sum | cut -c1-8)
debian_tree() {
  [ -f "$TREE/.done" ] && return 0
  stage "debootstrap ($SUITE, minbase + $PKGS)"
  rm -rf "$TREE"
  debootstrap --variant=minbase --include="$PKGS" "$SUITE" "$TREE" "$MIRROR" >"$TREE.log" 2>&1 ||
    die "debootstrap failed, see $TREE.log"
  chroot "$TREE" apt-get clean
  rm -rf "$TREE"/var/lib/apt/lists/* "$TREE"/usr/share/doc/* "$TREE"/usr/share/man/* "$TREE"/usr/share/locale/*
  touch "$TREE/.done"
}

build() { # NAME MODDIR PACKAGE CGO TAGS LDFLAGS
  local name=$1 dir=$2 pkg=$3 cgo=$4 tags=$5 ldflags=$6
  [ -x "$OUT/bin/$name" ] && return 0
  stage "building $name ($pkg)"
  (cd "$dir" && CGO_ENABLED=$cgo nice -n 10 "$GO" build -trimpath -tags "$tags" -ldflags "$ldflags" \
    -o "$OUT/bin/.$name" "$pkg") || die "building $name failed"
  mv "$OUT/bin/.$name" "$OUT/bin/$name"
}

main() {
  command -v "$GO" >/dev/null || die "go is not installed"
  need_packages
  # the Debian tree (network bound) in the background while Go builds run
  debian_tree &
  local boot=$!
  build flanneld "$MOD_FLANNELD" github.com/flannel-io/flannel 1 "$FLANNELD_TAGS" "$FLANNELD_LDFLAGS"
  build install-conf "$MOD_FLANNELD" github.com/flannel-io/flannel/cmd/install_conf 0 "" "-s -w"
  build flannel "$MOD_PLUGIN" github.com/containernetworking/plugins/plugins/meta/flannel 0 "" "$PLUGIN_LDFLAGS"
  wait "$boot" || die "debootstrap failed"

  "$ROOT/hack/docker.sh"
  stage "images $FLANNEL_IMAGE, $PLUGIN_IMAGE"
  local base=mesh-cni.local/flannel-base:$KEY
  tar -C "$TREE" --exclude=./.done -c . | docker import \
    -c 'ENV PATH=/opt/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' - "$base" >/dev/null ||
    die "importing the Debian tree failed"
  ctx=$(mktemp -d)
  trap 'rm -rf "$ctx"' EXIT
  cp "$OUT/bin/flanneld" "$OUT/bin/install-conf" "$OUT/bin/flannel" "$ctx/"
  printf 'FROM %s\nCOPY flanneld install-conf /opt/bin/\nENTRYPOINT ["/opt/bin/flanneld"]\n' "$base" >"$ctx/Dockerfile.flannel"
  printf 'FROM %s\nCOPY flannel /flannel\n' "$base" >"$ctx/Dockerfile.plugin"
  DOCKER_BUILDKIT=0 docker build -q -f "$ctx/Dockerfile.flannel" -t "$FLANNEL_IMAGE" "$ctx" >/dev/null ||
    die "docker build $FLANNEL_IMAGE failed"
  DOCKER_BUILDKIT=0 docker build -q -f "$ctx/Dockerfile.plugin" -t "$PLUGIN_IMAGE" "$ctx" >/dev/null ||
    die "docker build $PLUGIN_IMAGE failed"
  docker rmi "$base" >/dev/null
  docker save -o "$TAR.tmp" "$FLANNEL_IMAGE" "$PLUGIN_IMAGE" && mv "$TAR.tmp" "$TAR"
  # earlier keys' outputs
  find "$W" -mindepth 1 -maxdepth 1 -type d -regextype posix-egrep -regex '.*/[0-9a-f]{16}' ! -name "$KEY" -exec rm -rf {} +
  stage "done: $TAR"
  echo "$TAR"
}

main "$@"
