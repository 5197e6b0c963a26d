#!/usr/bin/env bash
# Prints the commit of the previous release (N-1): the last commit whose
# VERSION differs from HEAD's, that is the parent of the commit that set
# HEAD's VERSION. When no earlier VERSION exists (the first release), the
# commit named in hack/previous-release. Releases are tagged vX.Y.Z;
# bumping VERSION makes the release before it N-1 (docs/upgrade.md).
set -euo pipefail
cd "$(dirname "$0")/.."
cur=$(git show HEAD:VERSION)
bump=
for c in $(git log --format=%H HEAD -- VERSION); do
  [ "$(git show "$c:VERSION" 2>/dev/null)" = "$cur" ] || break
  bump=$c
done
if [ -n "$bump" ] && prev=$(git rev-parse -q --verify "$bump^" 2>/dev/null) &&
  v=$(git show "$prev:VERSION" 2>/dev/null) && [ -n "$v" ] && [ "$v" != "$cur" ]; then
  echo "$prev"
  exit 0
fi
tr -d '[:space:]' < hack/previous-release
echo
