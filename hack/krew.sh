#!/usr/bin/env bash
# The kubectl plugin's release files: per platform a tarball holding the
# CLI as kubectl-mesh_cni (the name kubectl runs for "kubectl mesh-cni"),
# and the krew manifest naming each tarball by URI and sha256:
#
#   [EPOCH=seconds] hack/krew.sh VERSION OUT BINROOT [URI_BASE]
#
# reads BINROOT/linux-ARCH/mesh-cnictl (as release.sh builds them) for ARCH
# amd64 and arm64, and writes OUT/kubectl-mesh_cni-VERSION-linux-ARCH.tar.gz
# and OUT/mesh-cni.yaml (kubectl krew install --manifest=mesh-cni.yaml
# [--archive=TARBALL]). URI_BASE is where the tarballs are published
# (default: the release's download URL); EPOCH is the entries' mtime, so
# the same binaries give the same tarballs and sums.
set -euo pipefail

[ $# -ge 3 ] || { echo "usage: $0 VERSION OUT BINROOT [URI_BASE]" >&2; exit 2; }
version=$1 out=$2 bins=$3
base=${4:-https://github.com/mesh-cni/mesh-cni/releases/download/$version}
epoch=${EPOCH:-0}
mkdir -p "$out"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

platforms=
for arch in amd64 arm64; do
  name=kubectl-mesh_cni-$version-linux-$arch.tar.gz
  cp "$bins/linux-$arch/mesh-cnictl" "$stage/kubectl-mesh_cni"
  chmod 0755 "$stage/kubectl-mesh_cni"
  tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" -cf - kubectl-mesh_cni |
    gzip -n -9 >"$out/$name"
  sum=$(sha256sum "$out/$name" | cut -c1-64)
  platforms+="  - selector:
      matchLabels:
        os: linux
        arch: $arch
    uri: $base/$name
    sha256: $sum
    bin: kubectl-mesh_cni
"
done

cat >"$out/mesh-cni.yaml" <<YAML
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: mesh-cni
spec:
  version: $version
  homepage: https://github.com/mesh-cni/mesh-cni
  shortDescription: Check mesh-cni and explain a pod's redirection
  description: |
    kubectl mesh-cni checks a cluster before and after mesh-cni (a chained
    CNI plugin that redirects meshed pods' traffic to their sidecar) is
    installed, explains what the plugin does for a live pod with the chain
    entry its node runs, and prints the client's and the agents' versions.
  platforms:
${platforms%$'\n'}
YAML
