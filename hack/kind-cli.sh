#!/usr/bin/env bash
# Builds the kind CLI into the shared cache when missing and prints its path.
# It is a `tool` directive of e2e/go.mod, the module that links kind as a
# library, so the CLI, the library and the node image's kind files
# (hack/kind-image.sh) are one version; hack/build-tools.sh keys the build by
# e2e's go.mod and go.sum.
set -euo pipefail
bin=$(bash "$(dirname "$0")/build-tools.sh" kind | tail -n1)
echo "$bin/kind"
