#!/usr/bin/env bash
# Runs `make test` N times in a row (default 3) while one CPU hog per core
# holds the machine busy, and prints each run's wall time and result. The
# hogs are stopped on exit, failure or interrupt.
set -u
n=${1:-3}
cd "$(dirname "$0")/.."
mkdir -p _out
hogs=()
stop_hogs() {
	for p in "${hogs[@]}"; do kill "$p" 2>/dev/null; done
	wait "${hogs[@]}" 2>/dev/null
}
trap stop_hogs EXIT
trap 'exit 130' INT TERM
for _ in $(seq "$(nproc)"); do
	sha256sum /dev/zero &
	hogs+=($!)
done
echo "${#hogs[@]} CPU hogs running: ${hogs[*]}"
fails=0
results=()
for i in $(seq "$n"); do
	start=$(date +%s)
	if make test >"_out/test-under-load.$i.log" 2>&1; then res=ok; else res=FAIL; fails=$((fails + 1)); fi
	results+=("run $i: $res in $(($(date +%s) - start)) s (log: _out/test-under-load.$i.log)")
	echo "${results[-1]}"
done
printf '%s\n' "${results[@]}"
exit $((fails > 0))
