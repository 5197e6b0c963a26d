#!/usr/bin/env bash
# Builds a kind node image without a container registry, from Debian's archive
# and the Go module proxy only, the way kind's own images/base/Dockerfile and
# `kind build node-image` assemble it:
#   Debian rootfs (debootstrap) + kind's base-image files (sigs.k8s.io/kind module)
#   + containerd 2.x, CNI reference plugins (built from Go modules)
#   + kubelet/kubeadm/kubectl + control-plane images built from source
#   + the primary CNI (meshnet, see kind-configs/README.md) as /kind/manifests/default-cni.yaml.
# Every stage is cached under $MESH_CNI_CACHE/kind and skipped when what it
# holds was made from the same inputs: each binary has a stamp (.NAME.key)
# with its module version, the Go version and its build flags, and the image
# tag's key hashes all of them. Versions: hack/versions.env.
#
#   hack/kind-image.sh           builds (or finds) the image; prints its name last
#   hack/kind-image.sh binaries  builds (or finds) only the Go binaries
#   KIND_NODE_IMAGE=name:tag     overrides the image name
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${MESH_CNI_CACHE:-/var/cache/mesh-cni}
. "$ROOT/hack/pin.sh"
K8S_VERSION=$(pin K8S_VERSION)
CONTAINERD_VERSION=$(pin CONTAINERD_VERSION)
RUNC_VERSION=$(pin RUNC_VERSION)
CNI_PLUGINS_VERSION=$(pin CNI_PLUGINS_VERSION)
COREDNS_VERSION=$(pin COREDNS_VERSION)
SUITE=$(pin DEBIAN_SUITE)
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
IMAGE=${KIND_NODE_IMAGE:-mesh-cni/kind-node:$K8S_VERSION}
W=$CACHE/kind
GO=${GO:-go}
export GOFLAGS=-buildvcs=false GOWORK=off GOTOOLCHAIN=local
# kind's own version is the one e2e/go.mod requires.
KIND_VERSION=${KIND_VERSION:-$(cd "$ROOT/e2e" && "$GO" list -m -f '{{.Version}}' sigs.k8s.io/kind)}
GOVERSION=$("$GO" env GOVERSION)

# Whatever a failed run leaves half made is removed on exit.
TEMPS=()
cleanup() { [ ${#TEMPS[@]} -eq 0 ] || rm -rf "${TEMPS[@]}"; }
trap cleanup EXIT
tempdir() { local -n _dir=$1; _dir=$(mktemp -d); TEMPS+=("$_dir"); } # tempdir VAR

log() { echo "kind-image: $*" >&2; }
die() { log "error: $*"; exit 1; }
stage() { log "[$((SECONDS))s] $*"; }

mkdir -p "$W/bin" "$W/rootfs" "$W/src" "$W/images"
exec 8>"$W/.lock"
flock 8

# Node packages: what kind's base image installs (images/base/Dockerfile) plus runc.
NODE_PKGS=systemd,dbus,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,e2fsprogs,bash,ca-certificates,curl,jq,procps,runc,ipset,iputils-ping,netcat-openbsd
PROXY_PKGS=iptables,nftables,conntrack,ipset,kmod,iproute2

# Hash of everything that defines the image: a change of this script or its
# inputs gives a new image; otherwise the existing one is reused.
image_key() {
  {
    cat "$0" "$ROOT"/hack/meshnet/*.go "$ROOT"/hack/meshnet/*.yaml
    echo "$K8S_VERSION $(pin ETCD_VERSION) $KIND_VERSION $CONTAINERD_VERSION $RUNC_VERSION $CNI_PLUGINS_VERSION $COREDNS_VERSION $SUITE $GOVERSION"
  } | sha256sum | cut -c1-12
}

debootstrap_tree() { # name packages
  local dir="$W/rootfs/$1-$SUITE"
  [ -f "$dir/.done" ] && return 0
  command -v debootstrap >/dev/null || {
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
  }
  stage "debootstrap $1 ($SUITE)"
  rm -rf "$dir"
  TEMPS+=("$dir")
  debootstrap --variant=minbase --include="$2" "$SUITE" "$dir" "$MIRROR" >"$W/rootfs/$1.log" 2>&1 ||
    die "debootstrap $1 failed, see $W/rootfs/$1.log"
  chroot "$dir" apt-get clean
  rm -rf "$dir"/var/lib/apt/lists/* "$dir"/usr/share/doc/* "$dir"/usr/share/man/* "$dir"/usr/share/locale/*
  touch "$dir/.done"
  unset 'TEMPS[-1]'
}

# go_build NAME MODULE@VERSION PACKAGE [tags]: builds a static binary from a
# published module in a scratch module of its own, so our go.mod stays untouched.
# CGO=1 in its environment builds with cgo (runc).
go_build() {
  local name=$1 modver=$2 pkg=$3 tags=${4:-} cgo=${CGO:-0}
  local key="$modver $pkg $GOVERSION tags=$tags ldflags=-s -w ${5:-}"
  [ "$cgo" = 0 ] || key="$key cgo=$cgo"
  fresh "$name" "$key" && return 0
  local mod="$W/src/${modver//[@\/]/_}"
  if [ ! -f "$mod/.prepared" ]; then
    stage "fetching $modver"
    rm -rf "$mod" && mkdir -p "$mod"
    TEMPS+=("$mod")
    (cd "$mod" && "$GO" mod init mesh-cni.local/build >/dev/null 2>&1 &&
      printf 'package main\n\nimport _ "%s"\n\nfunc main() {}\n' "$pkg" >tools.go &&
      "$GO" get "$modver" >&2 && "$GO" mod tidy >&2 && rm tools.go) || die "fetching $modver failed"
    touch "$mod/.prepared"
    unset 'TEMPS[-1]'
  fi
  stage "building $name"
  TEMPS+=("$W/bin/.$name")
  (cd "$mod" && CGO_ENABLED=$cgo nice -n 10 "$GO" build -mod=mod -trimpath -tags "$tags" -ldflags "-s -w ${5:-}" \
    -o "$W/bin/.$name" "$pkg") || die "building $name failed"
  mv "$W/bin/.$name" "$W/bin/$name" && echo "$key" >"$W/bin/.$name.key"
}

# fresh NAME KEY: the binary exists and was built from KEY.
fresh() { [ -x "$W/bin/$1" ] && [ "$(cat "$W/bin/.$1.key" 2>/dev/null)" = "$2" ]; }

# go_main NAME DIR: builds a main package we write ourselves (coredns, pause, etcd).
go_main() { # NAME DIR KEY
  local name=$1 dir=$2 key="$3 $GOVERSION ldflags=-s -w"
  fresh "$name" "$key" && return 0
  stage "building $name"
  TEMPS+=("$W/bin/.$name")
  (cd "$dir" && CGO_ENABLED=0 nice -n 10 "$GO" build -mod=mod -trimpath -ldflags "-s -w" -o "$W/bin/.$name" .) ||
    die "building $name failed"
  mv "$W/bin/.$name" "$W/bin/$name" && echo "$key" >"$W/bin/.$name.key"
}

build_binaries_upstream() {
  local cv=${CONTAINERD_VERSION#v}
  local cldf="-X github.com/containerd/containerd/v2/version.Version=$cv -X github.com/containerd/containerd/v2/version.Package=github.com/containerd/containerd/v2"
  local ctags="no_aufs no_zfs no_btrfs no_devmapper"
  go_build containerd "github.com/containerd/containerd/v2@$CONTAINERD_VERSION" github.com/containerd/containerd/v2/cmd/containerd "$ctags" "$cldf"
  go_build ctr "github.com/containerd/containerd/v2@$CONTAINERD_VERSION" github.com/containerd/containerd/v2/cmd/ctr "$ctags" "$cldf"
  go_build containerd-shim-runc-v2 "github.com/containerd/containerd/v2@$CONTAINERD_VERSION" github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 "$ctags" "$cldf"
  # runc links libseccomp (cgo): the node image has the same Debian suite's
  # libseccomp2, and the build host needs gcc and libseccomp-dev.
  local p missing=()
  for p in gcc libc6-dev libseccomp-dev pkg-config; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    stage "installing ${missing[*]} (to build runc)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  CGO=1 go_build runc "github.com/opencontainers/runc@$RUNC_VERSION" github.com/opencontainers/runc seccomp "-X main.version=${RUNC_VERSION#v}"
  # crictl: sigs.k8s.io/cri-tools is not served by the module proxy, and
  # Debian does not package it; kind needs it only for `kind load`'s
  # already-present check and one file of `kind export logs`.
  for p in ipam/host-local main/loopback main/ptp main/bridge meta/portmap; do
    go_build "cni-${p#*/}" "github.com/containernetworking/plugins@$CNI_PLUGINS_VERSION" "github.com/containernetworking/plugins/plugins/$p" "" ""
  done
  build_small_mains
}

build_binaries() {
  build_binaries_upstream
  # meshnet is ours and changes with the repo: one binary per image key.
  [ -x "$W/bin/meshnet-$KEY" ] || {
    stage "building meshnet"
    (cd "$ROOT" && CGO_ENABLED=0 nice -n 10 "$GO" build -trimpath -ldflags "-s -w" -o "$W/bin/.meshnet" ./hack/meshnet) ||
      die "building meshnet failed"
    find "$W/bin" -maxdepth 1 -name 'meshnet*' -delete
    mv "$W/bin/.meshnet" "$W/bin/meshnet-$KEY"
  }
  ln -sfn "meshnet-$KEY" "$W/bin/meshnet"
}

# coredns and pause: two-line mains around published modules.
build_small_mains() {
  local d="$W/src/coredns-$COREDNS_VERSION" key="coredns $COREDNS_VERSION"
  if ! fresh coredns "$key $GOVERSION ldflags=-s -w"; then
    if [ ! -f "$d/.prepared" ]; then
      stage "fetching coredns $COREDNS_VERSION"
      rm -rf "$d" && mkdir -p "$d"
      TEMPS+=("$d")
      cat >"$d/main.go" <<'EOF'
package main

import (
	_ "github.com/coredns/coredns/core/plugin"
	"github.com/coredns/coredns/coremain"
)

func main() { coremain.Run() }
EOF
      (cd "$d" && "$GO" mod init mesh-cni.local/coredns >/dev/null 2>&1 &&
        "$GO" get "github.com/coredns/coredns@$COREDNS_VERSION" >&2 && "$GO" mod tidy >&2) || die "fetching coredns failed"
      touch "$d/.prepared"
      unset 'TEMPS[-1]'
    fi
    go_main coredns "$d" "$key"
  fi
  d="$W/src/pause"
  mkdir -p "$d"
  cat >"$d/main.go" <<'EOF'
// Command pause holds a pod's namespaces: it sleeps until SIGINT or SIGTERM.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
	<-c
}
EOF
  [ -f "$d/go.mod" ] || (cd "$d" && "$GO" mod init mesh-cni.local/pause >/dev/null 2>&1) || true
  go_main pause "$d" "pause $(sha256sum <"$d/main.go" | cut -c1-12)"
}

k8s_bin() {
  stage "Kubernetes $K8S_VERSION binaries (hack/build-k8s.sh)"
  K8S_BIN=$(K8S_VERSION=$K8S_VERSION "$ROOT/hack/build-k8s.sh" kube-apiserver kube-controller-manager \
    kube-scheduler kube-proxy kubelet kubeadm kubectl etcd | tail -n1)
  [ -x "$K8S_BIN/kubeadm" ] || die "hack/build-k8s.sh gave no kubeadm"
}

# scratch_image TAG BINARY...: FROM scratch with static binaries in /usr/local/bin.
scratch_image() {
  local tag=$1 ctx key
  shift
  # kubeadm fixes some tags (etcd, coredns, pause) whatever we build: the
  # label with the binaries' hash tells a stale image from a current one.
  key=$(cat "$@" | sha256sum | cut -c1-16)
  [ "$(docker image inspect -f '{{index .Config.Labels "io.mesh-cni.key"}}' "$tag" 2>/dev/null)" = "$key" ] && return 0
  tempdir ctx
  cp "$@" "$ctx/"
  {
    echo "FROM scratch"
    for b in "$@"; do echo "COPY $(basename "$b") /usr/local/bin/"; done
    echo 'ENV PATH=/usr/local/bin:/usr/bin:/bin'
    echo "LABEL io.mesh-cni.key=$key"
    echo "ENTRYPOINT [\"/usr/local/bin/$(basename "$1")\"]"
  } >"$ctx/Dockerfile"
  docker build -q -t "$tag" "$ctx" >/dev/null || die "docker build $tag failed"
  rm -rf "$ctx"
}

control_plane_images() {
  local list tag name tar="$W/images/k8s-$K8S_VERSION-$KEY.tar"
  mapfile -t list < <("$K8S_BIN/kubeadm" config images list --kubernetes-version "$K8S_VERSION" 2>/dev/null)
  [ ${#list[@]} -ge 6 ] || die "kubeadm config images list gave: ${list[*]}"
  PAUSE_IMAGE=$(printf '%s\n' "${list[@]}" | grep /pause:)
  IMAGES_TAR=$tar
  [ -s "$tar" ] && return 0
  stage "control-plane images"
  local tags=()
  for tag in "${list[@]}"; do
    name=${tag##*/}
    name=${name%%:*}
    case "$name" in
      kube-apiserver | kube-controller-manager | kube-scheduler | etcd) scratch_image "$tag" "$K8S_BIN/$name" ;;
      coredns) scratch_image "$tag" "$W/bin/coredns" ;;
      pause) scratch_image "$tag" "$W/bin/pause" ;;
      kube-proxy) proxy_image "$tag" ;;
      *) die "no recipe for image $tag" ;;
    esac
    tags+=("$tag")
  done
  scratch_image "$MESHNET_IMAGE" "$W/bin/meshnet"
  tags+=("$MESHNET_IMAGE")
  docker save -o "$tar.tmp" "${tags[@]}" && mv "$tar.tmp" "$tar"
}

# kube-proxy needs the iptables/nftables userland: a minbase Debian tree.
proxy_image() {
  local tag=$1 key stampf="$W/images/.kube-proxy.key"
  key="$(sha256sum <"$K8S_BIN/kube-proxy" | cut -c1-16) $PROXY_PKGS"
  docker image inspect "$tag" >/dev/null 2>&1 && [ "$(cat "$stampf" 2>/dev/null)" = "$key" ] && return 0
  debootstrap_tree kube-proxy "$PROXY_PKGS"
  local dir="$W/rootfs/kube-proxy-$SUITE"
  cp "$K8S_BIN/kube-proxy" "$dir/usr/local/bin/kube-proxy"
  tar -C "$dir" --exclude=./.done -c . | docker import \
    -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    -c 'ENTRYPOINT ["/usr/local/bin/kube-proxy"]' - "$tag" >/dev/null || die "importing $tag failed"
  echo "$key" >"$stampf"
}

# The node filesystem: Debian tree + kind's base-image files + our binaries.
node_base_image() {
  BASE=mesh-cni/kind-base:$KEY
  docker image inspect "$BASE" >/dev/null 2>&1 && return 0
  debootstrap_tree node "$NODE_PKGS"
  stage "assembling the node filesystem"
  local kind tree="$W/tree-$KEY"
  kind=$(cd "$ROOT/e2e" && "$GO" list -m -f '{{.Dir}}' sigs.k8s.io/kind 2>/dev/null) || true
  [ -d "$kind/images/base/files" ] || kind=$("$GO" env GOMODCACHE)/sigs.k8s.io/kind@$KIND_VERSION
  [ -d "$kind/images/base/files" ] || (cd "$ROOT/e2e" && "$GO" mod download sigs.k8s.io/kind)
  [ -d "$kind/images/base/files" ] || die "kind's base-image files not found"
  local f="$kind/images/base/files"
  TEMPS+=("$tree")
  rm -rf "$tree" && cp -a "$W/rootfs/node-$SUITE" "$tree" && rm -f "$tree/.done"
  install -m 0755 "$f"/usr/local/bin/* "$tree/usr/local/bin/"
  mkdir -p "$tree/kind/bin" "$tree/LICENSES" "$tree/etc/containerd" "$tree/etc/default" \
    "$tree/etc/systemd/system/kubelet.service.d" "$tree/kind/manifests" "$tree/etc/kubernetes/manifests"
  install -m 0644 "$f"/kind/README.txt "$tree/kind/"
  install -m 0755 "$f"/kind/bin/* "$tree/kind/bin/"
  install -m 0644 "$f"/etc/crictl.yaml "$tree/etc/"
  install -m 0644 "$f"/etc/containerd/config.toml "$tree/etc/containerd/"
  install -m 0644 "$f"/etc/default/kubelet "$tree/etc/default/"
  install -m 0644 "$f"/etc/sysctl.d/* "$tree/etc/sysctl.d/"
  install -m 0644 "$f"/etc/systemd/system/*.service "$f"/etc/systemd/system/*.slice "$tree/etc/systemd/system/"
  install -m 0644 "$f"/etc/systemd/system/kubelet.service.d/* "$tree/etc/systemd/system/kubelet.service.d/"
  # containerd 2.x, runc (ours, first on containerd's PATH; Debian's stays
  # for its package's dependencies), CNI plugins
  local b
  for b in containerd ctr containerd-shim-runc-v2; do install -m 0755 "$W/bin/$b" "$tree/usr/local/bin/"; done
  install -m 0755 "$W/bin/runc" "$tree/usr/local/sbin/runc"
  mkdir -p "$tree/opt/cni/bin"
  for b in host-local loopback ptp bridge portmap; do install -m 0755 "$W/bin/cni-$b" "$tree/opt/cni/bin/$b"; done
  for b in kubelet kubeadm kubectl; do install -m 0755 "$K8S_BIN/$b" "$tree/usr/bin/"; done
  echo "$K8S_VERSION" >"$tree/kind/version"
  sed "s|image: .*meshnet.*|image: $MESHNET_IMAGE|" "$ROOT/hack/meshnet/default-cni.yaml" >"$tree/kind/manifests/default-cni.yaml"
  # kind's containerd config, with the two changes this host needs: the pause
  # image kubeadm wants, and restrict_oom_score_adj (lowering oom_score_adj needs
  # CAP_SYS_RESOURCE, which the bounding set here may lack).
  sed -i -e "s|sandbox_image = .*|sandbox_image = \"$PAUSE_IMAGE\"|" "$tree/etc/containerd/config.toml"
  if ! grep -q '^CapBnd:.*' /proc/self/status || [ $(((16#$(awk '/^CapBnd:/ {print $2}' /proc/self/status) >> 24) & 1)) = 0 ]; then
    sed -i -e 's|restrict_oom_score_adj = false|restrict_oom_score_adj = true|' "$tree/etc/containerd/config.toml"
  fi
  # the unit clean-up of kind's Dockerfile
  find "$tree/lib/systemd/system/sysinit.target.wants/" -name systemd-tmpfiles-setup.service -delete
  rm -f "$tree"/lib/systemd/system/multi-user.target.wants/* "$tree"/etc/systemd/system/*.wants/* \
    "$tree"/lib/systemd/system/local-fs.target.wants/* "$tree"/lib/systemd/system/sockets.target.wants/*udev* \
    "$tree"/lib/systemd/system/sockets.target.wants/*initctl* "$tree"/lib/systemd/system/basic.target.wants/*
  echo "ReadKMsg=no" >>"$tree/etc/systemd/journald.conf"
  ln -sf /usr/lib/systemd/systemd "$tree/sbin/init"
  chroot "$tree" systemctl enable kubelet.service containerd.service undo-mount-hacks.service >/dev/null 2>&1 ||
    die "systemctl enable in the node tree failed"
  chroot "$tree" systemctl mask systemd-binfmt.service >/dev/null 2>&1 || true
  # cri-base.json: containerd's default spec + kind's hook, without rlimits
  "$tree/usr/local/bin/ctr" oci spec |
    jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' |
    jq 'del(.process.rlimits)' >"$tree/etc/containerd/cri-base.json"
  stage "importing the node filesystem into docker"
  tar -C "$tree" -c . | docker import \
    -c 'ENV container=docker' \
    -c 'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]' - "$BASE.import" >/dev/null ||
    die "docker import of the node tree failed"
  rm -rf "$tree"
  local ctx
  tempdir ctx
  printf 'FROM %s\nSTOPSIGNAL SIGRTMIN+3\n' "$BASE.import" >"$ctx/Dockerfile"
  docker build -q -t "$BASE" "$ctx" >/dev/null || die "docker build $BASE failed"
  docker rmi "$BASE.import" >/dev/null
  rm -rf "$ctx"
}

# Preload: containerd in a throw-away container imports the image tarball (as
# `kind build node-image` does), then the container becomes the node image.
preload() {
  stage "preloading images into the node's containerd"
  local id
  id=$(docker run -d --privileged --security-opt seccomp=unconfined --entrypoint=sleep "$BASE" infinity)
  trap 'docker rm -f "$id" >/dev/null 2>&1 || true; cleanup' EXIT
  docker exec "$id" bash -c 'nohup containerd >/tmp/containerd.log 2>&1 &'
  docker exec "$id" bash -c 'for i in $(seq 50); do [ -S /run/containerd/containerd.sock ] && ctr version >/dev/null 2>&1 && exit 0; sleep 0.2; done; cat /tmp/containerd.log; exit 1' ||
    die "containerd did not start in the build container"
  docker exec -i "$id" ctr --namespace=k8s.io images import --label=io.cri-containerd.pinned=pinned \
    --all-platforms --no-unpack --digests - <"$IMAGES_TAR" >/dev/null || die "ctr images import failed"
  docker exec "$id" bash -c 'kill $(pidof containerd); for i in $(seq 50); do pidof containerd >/dev/null || exit 0; sleep 0.2; done'
  docker commit -c 'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]' "$id" "$IMAGE.commit" >/dev/null
  docker rm -f "$id" >/dev/null
  trap cleanup EXIT
  local ctx
  tempdir ctx
  printf 'FROM %s\nSTOPSIGNAL SIGRTMIN+3\nLABEL io.mesh-cni.kind-image=%s\n' "$IMAGE.commit" "$KEY" >"$ctx/Dockerfile"
  docker build -q -t "$IMAGE" "$ctx" >/dev/null || die "docker build $IMAGE failed"
  docker rmi "$IMAGE.commit" >/dev/null
  rm -rf "$ctx"
  docker save -o "$W/node-image.tar.tmp" "$IMAGE" && mv "$W/node-image.tar.tmp" "$W/node-image-$KEY.tar"
  find "$W" -maxdepth 1 -name 'node-image-*.tar' ! -name "node-image-$KEY.tar" -delete
  find "$W/images" -maxdepth 1 -name 'k8s-*.tar' ! -name "k8s-$K8S_VERSION-$KEY.tar" -delete
  # intermediate images of earlier keys
  docker images --format '{{.Repository}}:{{.Tag}}' |
    grep -E '^(mesh-cni/kind-base|mesh-cni\.local/meshnet):' | grep -v ":$KEY\$" |
    xargs -r docker rmi >/dev/null 2>&1 || true
}

main() {
  if [ "${1:-}" = binaries ]; then # the Go binaries only (no docker, no Debian)
    build_binaries_upstream
    return 0
  fi
  if [ "${1:-}" = prefetch ]; then # the slow, input-independent stages only
    (debootstrap_tree node "$NODE_PKGS" && debootstrap_tree kube-proxy "$PROXY_PKGS") &
    build_binaries_upstream
    wait $!
    return 0
  fi
  "$ROOT/hack/docker.sh"
  KEY=$(image_key)
  MESHNET_IMAGE=mesh-cni.local/meshnet:$KEY
  if [ "$(docker image inspect -f '{{index .Config.Labels "io.mesh-cni.kind-image"}}' "$IMAGE" 2>/dev/null)" = "$KEY" ]; then
    log "$IMAGE is up to date"
    echo "$IMAGE"
    return 0
  fi
  if [ -s "$W/node-image-$KEY.tar" ]; then
    stage "loading $IMAGE from $W/node-image-$KEY.tar"
    docker load -i "$W/node-image-$KEY.tar" >/dev/null
    echo "$IMAGE"
    return 0
  fi
  # Debian trees (network bound) in the background while Go builds run.
  (debootstrap_tree node "$NODE_PKGS" && debootstrap_tree kube-proxy "$PROXY_PKGS") &
  local boot=$!
  build_binaries
  k8s_bin
  wait "$boot" || die "debootstrap failed"
  control_plane_images
  node_base_image
  preload
  stage "done: $IMAGE"
  echo "$IMAGE"
}

main "$@"
