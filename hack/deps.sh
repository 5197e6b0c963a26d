#!/usr/bin/env bash
# Installs what the tests need from Debian, only what is missing.
set -euo pipefail
pkgs=(iptables nftables iproute2 containernetworking-plugins util-linux qemu-user-static)
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
