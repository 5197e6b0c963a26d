#!/usr/bin/env bash
# Runs a command next to a real OCI registry holding a release of this
# checkout, the way users get mesh-cni: published by `make release`, pulled by
# kind's nodes from the registry (no `kind load`).
#
#   hack/e2e-registry.sh <command> [args...]
#
#  - serves the reference registry (hack/build-tools.sh) on every address of
#    this host, on a free port, so kind's nodes reach it through their
#    network's gateway while Helm, cosign and crane use localhost:<port>;
#  - runs hack/release.sh with REGISTRY=localhost:<port> (the port is part of
#    the chart's pinned image, so each run publishes afresh: with a warm Go
#    build cache that takes well under a minute);
#  - publishes the previous release (N-1, hack/previous-release.sh: the last
#    commit before VERSION took its value, built with that commit's own
#    hack/release.sh) into the same registry, for the versions spec; skipped,
#    and said so, when the clone lacks that commit;
#  - runs the command with E2E_RELEASE=<release.env>,
#    E2E_PREVIOUS_RELEASE=<N-1's release.env> and E2E_REGISTRY_PORT=<port>,
#    then stops the registry.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
log() { echo "e2e-registry: $*" >&2; }
[ $# -gt 0 ] || { log "usage: $0 <command> [args...]"; exit 2; }

tools=$(bash "$ROOT/hack/build-tools.sh" crane cosign registry | tail -n1)
OUT=${E2E_RELEASE_OUT:-$ROOT/_out/e2e-release}
rm -rf "$OUT" && mkdir -p "$OUT/registry"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("",0)); print(s.getsockname()[1])')
printf 'version: 0.1\nlog: {level: warn}\nstorage: {filesystem: {rootdirectory: %s}, delete: {enabled: true}}\nhttp: {addr: ":%s"}\n' \
  "$OUT/registry/data" "$port" >"$OUT/registry/config.yml"
"$tools/registry" serve "$OUT/registry/config.yml" >"$OUT/registry/log" 2>&1 &
regpid=$!
trap 'kill $regpid 2>/dev/null || true; wait $regpid 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  curl -fsS "http://localhost:$port/v2/" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fsS "http://localhost:$port/v2/" >/dev/null || { log "the registry did not start:"; cat "$OUT/registry/log" >&2; exit 1; }
log "registry on :$port (storage $OUT/registry/data)"

start=$(date +%s)
REGISTRY=localhost:$port OUT=$OUT/release bash "$ROOT/hack/release.sh" >"$OUT/release.log" 2>&1 ||
  { log "make release into the registry failed:"; cat "$OUT/release.log" >&2; exit 1; }
log "released $(cat "$ROOT/VERSION") into localhost:$port in $(($(date +%s) - start)) s"

# N-1: hack/previous-release.sh (the parent of the commit that set VERSION).
previous=
if prev=$(bash "$ROOT/hack/previous-release.sh" 2>/dev/null) && git -C "$ROOT" cat-file -e "$prev^{commit}" 2>/dev/null &&
  pv=$(git -C "$ROOT" show "$prev:VERSION" 2>/dev/null) && [ -n "$pv" ] && [ "$pv" != "$(cat "$ROOT/VERSION")" ]; then
  tree=$OUT/previous-src
  git -C "$ROOT" worktree add -q --detach "$tree" "$prev"
  trap 'kill $regpid 2>/dev/null || true; wait $regpid 2>/dev/null || true; git -C "$ROOT" worktree remove --force "$tree" 2>/dev/null || true' EXIT
  start=$(date +%s)
  if (cd "$tree" && REGISTRY=localhost:$port OUT=$OUT/previous bash hack/release.sh) >"$OUT/previous.log" 2>&1; then
    previous=$OUT/previous/release.env
    log "released the previous release $(cat "$tree/VERSION") (${prev:0:12}) in $(($(date +%s) - start)) s"
  else
    log "the previous release (${prev:0:12}) failed to build with its own pipeline:"; tail -20 "$OUT/previous.log" >&2; exit 1
  fi
else
  log "no previous release in this clone (no earlier VERSION, or a shallow clone): the versions spec will say so and skip"
fi

E2E_RELEASE=$OUT/release/release.env E2E_PREVIOUS_RELEASE=$previous E2E_REGISTRY_PORT=$port "$@"
