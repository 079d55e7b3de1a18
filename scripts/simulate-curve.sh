#!/bin/sh
# Measures `census simulate` at one point of the curve (BENCHMARKS.md, "Load").
# Usage: scripts/simulate-curve.sh WORKERS JOBS [census simulate options...]
# With POSTMASTER_PID set (a local Postgres the simulation uses), it also
# prints the CPU seconds that server spent (postmaster, its live backends,
# and the backends it reaped), from /proc.
set -eu
census=${CENSUS:-target/release/census}
workers=$1
jobs=$2
shift 2
ticks=$(getconf CLK_TCK)
postgres_cpu() {
    [ -n "${POSTMASTER_PID:-}" ] || { echo 0; return; }
    {
        awk '{ sub(/^.*\) /, ""); print $12 + $13 + $14 + $15 }' "/proc/$POSTMASTER_PID/stat"
        for child in $(pgrep -P "$POSTMASTER_PID"); do
            awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$child/stat" 2>/dev/null || true
        done
    } | awk -v t="$ticks" '{ s += $1 } END { printf "%.2f\n", s / t }'
}
before=$(postgres_cpu)
output=$(mktemp)
status=0
nice "$census" simulate --workers "$workers" --jobs "$jobs" --json "$@" >"$output" || status=$?
summary=$(tail -1 "$output")
rm -f "$output"
after=$(postgres_cpu)
echo "$summary"
echo "exit_status $status"
echo "postgres_cpu_seconds $(echo "$after - $before" | bc)"
