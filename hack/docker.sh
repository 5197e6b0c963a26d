#!/usr/bin/env bash
# Makes a Docker engine usable for kind on this host, from Debian's packages and
# without systemd. Idempotent: every step checks first and does only what is missing.
#   1. installs docker.io (and jq, used by the runc wrapper) when dockerd is missing;
#   2. mounts cgroup v1 controllers the host left unmounted (kubelet inside the
#      node expects all of them, e.g. hugetlb);
#   3. where the capability bounding set lacks capabilities that --privileged asks
#      for, registers a runc wrapper that drops them from the OCI spec;
#   4. raises the inotify limits to kind's known-issues values (every kind node's
#      kubelet, containerd and each CNI agent's file watch take an instance from
#      one host-wide per-user budget, 128 by default: two or three clusters at
#      once exhaust it and agents fail with "too many open files");
#   5. starts dockerd in the background when it is not running and waits for it.
set -euo pipefail

log() { echo "docker.sh: $*" >&2; }

LIBEXEC=/usr/local/libexec/mesh-cni
WRAPPER=$LIBEXEC/runc-dropcaps
DAEMON_JSON=/etc/docker/daemon.json
DOCKERD_LOG=${DOCKERD_LOG:-/var/log/dockerd.log}

install_packages() {
  local missing=()
  command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
  command -v jq >/dev/null 2>&1 || missing+=(jq)
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# cgroup v1 hosts: mount each enabled controller that has no mount yet.
mount_cgroups() {
  [ -f /sys/fs/cgroup/cgroup.controllers ] && return 0 # pure cgroup v2
  local name hier num enabled
  while read -r name hier num enabled; do
    case "$name" in '#'*|'') continue ;; esac
    [ "$enabled" = 1 ] || continue
    if ! awk -v c="$name" '$3 == "cgroup" { n = split($4, o, ","); for (i = 1; i <= n; i++) if (o[i] == c) f = 1 } END { exit !f }' /proc/mounts; then
      log "mounting cgroup controller $name"
      mkdir -p "/sys/fs/cgroup/$name"
      mount -t cgroup -o "$name" cgroup "/sys/fs/cgroup/$name"
    fi
  done </proc/cgroups
}

# raise_inotify: fs.inotify.max_user_instances >= 512 and max_user_watches
# >= 524288 (kind docs, known issues: "Pod errors due to too many open
# files"); a higher value is kept.
raise_inotify() {
  local kv key want have
  for kv in max_user_instances=512 max_user_watches=524288; do
    key=fs.inotify.${kv%=*} want=${kv#*=}
    have=$(sysctl -n "$key")
    if [ "$have" -lt "$want" ]; then
      log "raising $key from $have to $want"
      sysctl -qw "$key=$want"
    fi
  done
}

# Names of capabilities 0..40 (linux/capability.h), as the OCI spec spells them.
CAPS=(CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP
  LINUX_IMMUTABLE NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER
  SYS_MODULE SYS_RAWIO SYS_CHROOT SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE
  SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG MKNOD LEASE AUDIT_WRITE AUDIT_CONTROL SETFCAP
  MAC_OVERRIDE MAC_ADMIN SYSLOG WAKE_ALARM BLOCK_SUSPEND AUDIT_READ PERFMON BPF
  CHECKPOINT_RESTORE)

# Prints CAP_* names the kernel knows but our bounding set lacks.
missing_caps() {
  local bnd last i
  bnd=$((16#$(awk '/^CapBnd:/ {print $2}' /proc/self/status)))
  last=$(cat /proc/sys/kernel/cap_last_cap)
  [ "$last" -lt ${#CAPS[@]} ] || last=$((${#CAPS[@]} - 1))
  for ((i = 0; i <= last; i++)); do
    if (((bnd >> i) & 1)); then :; else echo "CAP_${CAPS[$i]}"; fi
  done
}

real_runc() {
  local r
  for r in /usr/sbin/runc /usr/bin/runc /usr/local/sbin/runc; do
    [ -x "$r" ] && { echo "$r"; return 0; }
  done
  return 1
}

write_wrapper() {
  local drop="$1" runc
  runc=$(real_runc) || { log "runc not found"; exit 1; }
  mkdir -p "$LIBEXEC"
  cat >"$WRAPPER.tmp" <<EOF
#!/bin/bash
# OCI runtime wrapper: --privileged asks for every capability, but this host's
# bounding set lacks some; drop them from the spec, then run the real runc.
# Written by hack/docker.sh.
DROP='$drop'
strip() { # \$1 json file, \$2 jq path of the capabilities object
  [ -f "\$1" ] || return 0
  local t="\$1.dropcaps"
  jq --argjson d "\$DROP" "if \$2 then \$2 |= with_entries(.value |= ((. // []) - \\\$d)) else . end" "\$1" >"\$t" && mv "\$t" "\$1"
}
cmd='' prev=''
for a in "\$@"; do
  case "\$prev" in
    --bundle|-b) [ "\$cmd" = create ] || [ "\$cmd" = run ] && strip "\$a/config.json" .process.capabilities ;;
    --process|-p) [ "\$cmd" = exec ] && strip "\$a" .capabilities ;;
  esac
  case "\$a" in
    --bundle=*) [ "\$cmd" = create ] || [ "\$cmd" = run ] && strip "\${a#--bundle=}/config.json" .process.capabilities ;;
    --process=*) [ "\$cmd" = exec ] && strip "\${a#--process=}" .capabilities ;;
    create|run|exec) [ -z "\$cmd" ] && cmd=\$a ;;
  esac
  prev=\$a
done
exec $runc "\$@"
EOF
  chmod 755 "$WRAPPER.tmp"
  mv "$WRAPPER.tmp" "$WRAPPER"
}

# Registers the wrapper as the default runtime; prints "changed" when the file changed.
register_wrapper() {
  mkdir -p /etc/docker
  local cur='{}' next
  [ -s "$DAEMON_JSON" ] && cur=$(cat "$DAEMON_JSON")
  next=$(jq --arg p "$WRAPPER" '.runtimes["runc-dropcaps"] = {path: $p} | ."default-runtime" = "runc-dropcaps"' <<<"$cur")
  if [ "$(jq -S . <<<"$cur")" != "$(jq -S . <<<"$next")" ]; then
    echo "$next" >"$DAEMON_JSON"
    echo changed
  fi
}

dockerd_running() { docker info >/dev/null 2>&1; }

start_dockerd() {
  if dockerd_running; then return 0; fi
  if pgrep -x dockerd >/dev/null; then
    log "dockerd is running but not answering yet"
  else
    log "starting dockerd (log: $DOCKERD_LOG)"
    # Without our other fds: a caller's flock fd (hack/kind-image.sh holds
    # one) inherited by dockerd would hold that lock for dockerd's life. In
    # a session of its own: a caller whose process group is stopped (a lane
    # of hack/lanes.sh on interrupt) must not take the engine with it.
    (
      for fd in /proc/self/fd/*; do
        fd=${fd##*/}
        [ "$fd" -gt 2 ] && eval "exec $fd>&-"
      done 2>/dev/null
      exec setsid nohup dockerd >>"$DOCKERD_LOG" 2>&1 </dev/null
    ) &
  fi
  local i
  for ((i = 0; i < 60; i++)); do
    dockerd_running && return 0
    sleep 1
  done
  log "dockerd did not come up; last lines of $DOCKERD_LOG:"
  tail -n 20 "$DOCKERD_LOG" >&2
  exit 1
}

main() {
  install_packages
  mount_cgroups
  raise_inotify
  local drop changed=''
  drop=$(missing_caps | jq -R . | jq -sc .)
  if [ "$drop" != "[]" ]; then
    write_wrapper "$drop"
    changed=$(register_wrapper)
    log "bounding set lacks $(jq -r 'join(" ")' <<<"$drop"): runc wrapper registered"
  fi
  if [ -n "$changed" ] && dockerd_running; then
    log "reloading dockerd for the new runtime"
    kill -HUP "$(cat /var/run/docker.pid)"
    sleep 2
  fi
  start_dockerd
  if [ "$drop" != "[]" ] && ! docker info --format '{{.DefaultRuntime}}' | grep -qx runc-dropcaps; then
    log "dockerd did not pick up the runc wrapper; restart dockerd"
    exit 1
  fi
  log "docker ready ($(docker version --format '{{.Server.Version}}'))"
}

main "$@"
