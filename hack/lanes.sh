#!/usr/bin/env bash
# Runs commands side by side, each line of their output prefixed with the
# lane's name, waits for all of them and fails when one failed. make test
# runs the kind clusters (which mostly wait on pods) beside the host's
# tests (which mostly use the CPU).
#
#   hack/lanes.sh <name> <command> [<name> <command>]...
#
# Every lane runs to its end even when another failed, so one run reports
# every failure. An interrupt stops every lane. After the summary, each
# failed lane's failure lines (Go's, Ginkgo's, make's) are printed again,
# so the last lines of a long run say what failed, not only where.
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
		bash -o pipefail -c "$cmd" 2>&1 | tee "$took/out.${#names[@]}" | sed -u "s/^/[$name] /" || rc=$?
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
# What failed, at most 10 lines a lane (the first failures matter most), each
# cut to 240 characters; a lane whose failure left no such line shows its
# last 10 lines instead.
for i in "${!pids[@]}"; do
	case ${summary[$i]} in *FAILED*) ;; *) continue ;; esac
	echo "--- lane ${names[$i]}: what failed"
	awk '/^[[:space:]]*--- FAIL|^FAIL|^panic:|\[(FAIL|FAILED|PANICKED)\]|_test\.go:[0-9]+: |make(\[[0-9]+\])?: \*\*\*/ {
		if (n++ < 10) print substr($0, 1, 240)
	} END { exit n == 0 }' "$took/out.$i" || tail -n 10 "$took/out.$i" | cut -c1-240
done
printf '%s\n' "${summary[@]}"
exit "$failed"
