#!/usr/bin/env bash
# Prints the git commit binaries are stamped with: the full hash, "-dirty"
# appended when tracked files differ from it; "unknown" outside a git tree.
set -euo pipefail
cd "$(dirname "$0")/.."
c=$(git rev-parse HEAD 2>/dev/null) || { echo unknown; exit 0; }
git diff --quiet HEAD -- 2>/dev/null || c+=-dirty
echo "$c"
