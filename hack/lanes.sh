#!/usr/bin/env bash
# Runs commands side by side, each line of their output prefixed with the
# lane's name, waits for all of them and fails when one failed. make test
# runs the kind clusters (which mostly wait on pods) beside the host's
# tests (which mostly use the CPU).
#
#   hack/lanes.sh <name> <command> [<name> <command>]...
#
# Every lane runs to its end even when another failed, so one run reports
# every failure. An interrupt stops every lane.
set -euo pipefail
set -m # each lane in a process group of its own, stopped as a whole

[ $# -ge 2 ] && [ $(($# % 2)) -eq 0 ] || { echo "usage: $0 <name> <command> [<name> <command>]..." >&2; exit 2; }

names=() pids=()
took=$(mktemp -d)
stop() {
	for p in "${pids[@]}"; do kill -TERM -- "-$p" 2>/dev/null || true; done
}
trap 'stop; exit 130' INT TERM
trap 'rm -rf "$took"' EXIT

while [ $# -gt 0 ]; do
	name=$1 cmd=$2
	shift 2
	(
		start=$SECONDS
		rc=0
		bash -o pipefail -c "$cmd" 2>&1 | sed -u "s/^/[$name] /" || rc=$?
		echo $((SECONDS - start)) >"$took/${#names[@]}"
		exit "$rc"
	) &
	names+=("$name") pids+=($!)
done

failed=0 summary=()
for i in "${!pids[@]}"; do
	if wait "${pids[$i]}"; then rc=0; else rc=$?; fi
	s=$(cat "$took/$i" 2>/dev/null || echo '?')
	if [ "$rc" -eq 0 ]; then
		summary+=("lane ${names[$i]}: ok in $s s")
	else
		summary+=("lane ${names[$i]}: FAILED (exit status $rc) in $s s")
		failed=1
	fi
done
printf '%s\n' "${summary[@]}"
exit "$failed"
