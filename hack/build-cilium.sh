#!/usr/bin/env bash
# Builds Cilium from source, without a container registry, as the images its
# Helm chart runs when told to (image.override, operator.image.override):
#
#   mesh-cni.local/cilium:v1.20.2                   the agent, its CNI plugin and helpers, the
#                                                   BPF sources and clang-19 on a minbase Debian tree
#   mesh-cni.local/cilium-operator-generic:v1.20.2  the operator (generic IPAM provider)
#
# Everything comes from github.com/cilium/cilium, pinned in the module
# hack/cilium (kept apart from ours, so the product never links it); its
# go.mod says why it replaces two modules. The chart is the module's
# install/kubernetes/cilium (`hack/build-cilium.sh chart` prints its path).
# Not built: Envoy (C++, github.com/cilium/proxy), so the chart needs
# l7Proxy=false; Hubble relay and UI; the cloud operators.
#
#   hack/build-cilium.sh        builds (or finds) the images; prints the path
#                               of their `docker save` tarball last
#   hack/build-cilium.sh chart  prints the chart's directory
#
# Cached in $MESH_CNI_CACHE/cilium-<key>: the binaries and the tarball; the
# Debian tree beside it in cilium-rootfs-<suite>-<packages>. The key hashes
# this script, hack/cilium's go.mod, go.sum and stub module, the Go version
# and the build flags, so any change of an input builds anew and an unchanged one returns
# at once (without Docker).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${MESH_CNI_CACHE:-/var/cache/mesh-cni}
. "$ROOT/hack/pin.sh"
SUITE=$(pin DEBIAN_SUITE)
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
GO=${GO:-go}
export GOFLAGS=-mod=mod GOWORK=off GOTOOLCHAIN=local
MOD=$ROOT/hack/cilium

log() { echo "build-cilium: $*" >&2; }
die() { log "error: $*"; exit 1; }
stage() { log "[$((SECONDS))s] $*"; }

# The agent's userland as upstream's runtime image has it
# (images/runtime/install-runtime-deps.sh: iproute2, iptables, ipset, kmod,
# ca-certificates), plus the BPF compiler: the agent compiles bpf/*.c at
# runtime with `clang` from PATH (pkg/datapath/loader/compile.go). Upstream
# ships LLVM 19.1.7 (images/runtime/Dockerfile, CILIUM_LLVM_IMAGE); Debian
# bookworm's clang-19 is that release.
PKGS=iptables,ipset,iproute2,kmod,ca-certificates,clang-19

CILIUM_VERSION=$(sed -n 's|^[[:space:]]*\(require \)\{0,1\}github.com/cilium/cilium \(v[^[:space:]]*\).*|\2|p' "$MOD/go.mod" | head -n1)
[ -n "$CILIUM_VERSION" ] || die "no github.com/cilium/cilium requirement in $MOD/go.mod"
AGENT_IMAGE=mesh-cni.local/cilium:$CILIUM_VERSION
OPERATOR_IMAGE=mesh-cni.local/cilium-operator-generic:$CILIUM_VERSION

# Upstream's build (Makefile.defs): CGO_ENABLED=0, tag osusergo, stripped,
# the version stamped; the generic operator adds ipam_provider_operator
# (operator/Makefile).
TAGS=osusergo
OPERATOR_TAGS=osusergo,ipam_provider_operator
LDFLAGS="-s -w -X github.com/cilium/cilium/pkg/version.ciliumVersion=${CILIUM_VERSION#v}"

moddir() { # the module's source in the module cache (downloaded when missing)
  (cd "$MOD" && "$GO" mod download github.com/cilium/cilium &&
    "$GO" list -m -f '{{.Dir}}' github.com/cilium/cilium) || die "cannot download github.com/cilium/cilium $CILIUM_VERSION"
}

if [ "${1:-}" = chart ]; then
  echo "$(moddir)/install/kubernetes/cilium"
  exit 0
fi

KEY=$(
  {
    cat "$0"
    (cd "$MOD" && cat go.mod go.sum && find third_party -type f | LC_ALL=C sort | xargs cat)
    "$GO" env GOVERSION GOARCH
    echo "$SUITE $PKGS | $TAGS | $OPERATOR_TAGS | $LDFLAGS"
  } | sha256sum | cut -c1-16
)
OUT=$CACHE/cilium-$KEY
TAR=$OUT/cilium-images.tar
mkdir -p "$OUT/bin"

exec 9>"$CACHE/cilium-build.lock"
flock 9

if [ -s "$TAR" ]; then
  log "$AGENT_IMAGE and $OPERATOR_IMAGE are cached"
  echo "$TAR"
  exit 0
fi

need_packages() {
  [ -f "$TREE/.done" ] || command -v debootstrap >/dev/null 2>&1 && return 0
  log "installing debootstrap"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
}

# The same way hack/kind-image.sh makes its Debian trees.
TREE=$CACHE/cilium-rootfs-$SUITE-$(echo "$PKGS" | sha256sum | cut -c1-8)
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

# build TAGS NAME=PACKAGE...: one `go build` for all of them, so the compiler
# runs in parallel across their packages and one command's link overlaps
# another's compile (one build after another left a core idle for each link).
build() {
  local tags=$1 nv todo=() names=() d
  shift
  for nv; do
    [ -x "$OUT/bin/${nv%%=*}" ] && continue
    names+=("${nv%%=*}")
    todo+=("${nv#*=}")
  done
  [ ${#todo[@]} -gt 0 ] || return 0
  stage "building ${names[*]}"
  d=$(mktemp -d "$OUT/bin/.build.XXXX")
  (cd "$MOD" && CGO_ENABLED=0 nice -n 10 "$GO" build -trimpath -tags "$tags" -ldflags "$LDFLAGS" \
    -o "$d/" "${todo[@]}") || die "building ${names[*]} failed"
  for nv; do
    [ -x "$OUT/bin/${nv%%=*}" ] || mv "$d/$(basename "${nv#*=}")" "$OUT/bin/${nv%%=*}"
  done
  rm -rf "$d"
}

# agent_tree SRC DST: what upstream's image adds to its runtime base
# (images/cilium/Dockerfile, `make install-container-binary`).
agent_tree() {
  local src=$1 d=$2 b
  mkdir -p "$d/usr/bin" "$d/usr/local/bin" "$d/opt/cni/bin" "$d/var/lib/cilium" "$d/home/cilium"
  for b in cilium-agent cilium-dbg cilium-health cilium-health-responder cilium-mount cilium-sysctlfix; do
    cp "$OUT/bin/$b" "$d/usr/bin/"
  done
  ln -s cilium-dbg "$d/usr/bin/cilium" # cilium-dbg/Makefile install-binary
  cp "$OUT/bin/cilium-cni" "$d/opt/cni/bin/"
  ln -s /usr/lib/llvm-19/bin/clang "$d/usr/local/bin/clang"
  # make install-bpf: bpf/ without what Makefile.defs BPF_SRCFILES_IGNORE lists
  cp -r "$src/bpf" "$d/var/lib/cilium/bpf"
  chmod -R u+w "$d/var/lib/cilium/bpf" # the module cache is read-only
  rm -rf "$d/var/lib/cilium/bpf"/{tests,complexity-tests,custom,Makefile,Makefile.bpf,.gitignore}
  cp "$src/images/cilium/init-container.sh" "$src/plugins/cilium-cni/install-plugin.sh" \
    "$src/plugins/cilium-cni/cni-uninstall.sh" "$d/"
  chmod 0755 "$d"/*.sh
}

# smoke: the agent image runs its commands and compiles the datapath the way
# the agent does when it starts (pkg/datapath/loader/compile.go: -g,
# StandardCFlags, -mcpu=v3); bpf/'s own node_config.h and ep_config.h stand
# in for the headers the agent writes.
BPF_CFLAGS="-g -O2 --target=bpf -std=gnu99 -nostdinc -ftrap-function=__undefined_trap -Wall -Wextra -Werror -Wshadow \
-Wno-address-of-packed-member -Wno-unknown-warning-option -Wno-gnu-variable-sized-type-not-at-end \
-Wimplicit-int-conversion -Wenum-conversion -Wimplicit-fallthrough -mcpu=v3"
smoke() {
  stage "smoke test of $AGENT_IMAGE and $OPERATOR_IMAGE"
  docker run --rm --network none "$AGENT_IMAGE" sh -ec "
    cilium-agent --version; cilium-dbg --help >/dev/null; /opt/cni/bin/cilium-cni --help >/dev/null 2>&1 || true
    cd /var/lib/cilium/bpf
    for f in bpf_lxc bpf_host bpf_overlay bpf_sock; do clang -I. -Iinclude $BPF_CFLAGS -c \$f.c -o /tmp/\$f.o; done" >&2 ||
    die "$AGENT_IMAGE cannot run its agent or compile its datapath"
  docker run --rm --network none "$OPERATOR_IMAGE" cilium-operator-generic --version >&2 ||
    die "$OPERATOR_IMAGE does not run"
}

main() {
  command -v "$GO" >/dev/null || die "go is not installed"
  need_packages
  local src
  src=$(moddir)
  # the Debian tree (network bound) in the background while Go builds run
  debian_tree &
  local boot=$!
  build "$TAGS" cilium-agent=github.com/cilium/cilium/daemon cilium-cni=github.com/cilium/cilium/plugins/cilium-cni \
    cilium-dbg=github.com/cilium/cilium/cilium-dbg cilium-health=github.com/cilium/cilium/cilium-health \
    cilium-health-responder=github.com/cilium/cilium/cilium-health/responder \
    cilium-mount=github.com/cilium/cilium/tools/mount cilium-sysctlfix=github.com/cilium/cilium/tools/sysctlfix
  build "$OPERATOR_TAGS" cilium-operator-generic=github.com/cilium/cilium/operator
  wait "$boot" || die "debootstrap failed"

  "$ROOT/hack/docker.sh"
  stage "images $AGENT_IMAGE, $OPERATOR_IMAGE"
  local base=mesh-cni.local/cilium-base:$KEY
  tar -C "$TREE" --exclude=./.done -c . | docker import \
    -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' - "$base" >/dev/null ||
    die "importing the Debian tree failed"
  ctx=$(mktemp -d)
  trap 'rm -rf "$ctx"' EXIT
  agent_tree "$src" "$ctx/agent"
  # The operator needs only its binary and the CA bundle (upstream's
  # images/operator/Dockerfile adds the same to a distroless base).
  mkdir -p "$ctx/operator/usr/bin" "$ctx/operator/etc/ssl/certs" "$ctx/operator/tmp" "$ctx/operator/home/gops"
  chmod 1777 "$ctx/operator/tmp"
  cp "$OUT/bin/cilium-operator-generic" "$ctx/operator/usr/bin/"
  cp "$TREE/etc/ssl/certs/ca-certificates.crt" "$ctx/operator/etc/ssl/certs/"
  printf 'FROM %s\nCOPY agent/ /\nWORKDIR /home/cilium\nCMD ["/usr/bin/cilium-dbg"]\n' "$base" >"$ctx/Dockerfile.agent"
  printf 'FROM scratch\nCOPY operator/ /\nENV PATH=/usr/bin GOPS_CONFIG_DIR=/home/gops\n' >"$ctx/Dockerfile.operator"
  DOCKER_BUILDKIT=0 docker build -q -f "$ctx/Dockerfile.agent" -t "$AGENT_IMAGE" "$ctx" >/dev/null ||
    die "docker build $AGENT_IMAGE failed"
  DOCKER_BUILDKIT=0 docker build -q -f "$ctx/Dockerfile.operator" -t "$OPERATOR_IMAGE" "$ctx" >/dev/null ||
    die "docker build $OPERATOR_IMAGE failed"
  docker rmi "$base" >/dev/null
  smoke
  docker save -o "$TAR.tmp" "$AGENT_IMAGE" "$OPERATOR_IMAGE" && mv "$TAR.tmp" "$TAR"
  # earlier keys' outputs
  find "$CACHE" -mindepth 1 -maxdepth 1 -type d -regextype posix-egrep -regex '.*/cilium-[0-9a-f]{16}' \
    ! -name "cilium-$KEY" -exec rm -rf {} +
  stage "done: $TAR"
  echo "$TAR"
}

main "$@"
