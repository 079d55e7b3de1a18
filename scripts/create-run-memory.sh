#!/bin/sh
# Measures creating a run of `synthetic jobs=JOBS` (BENCHMARKS.md, "Creating
# a run of 10^7 jobs"): starts `census coordinator` with that census, which
# creates the run before it listens; prints the seconds until it listens,
# then stops it (SIGTERM) and prints /usr/bin/time -v's peak RSS and CPU.
# Usage: scripts/create-run-memory.sh DATABASE_URL_OR_PATH JOBS
set -eu
census=${CENSUS:-target/release/census}
database=$1
jobs=$2
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
listening() { python3 -c "import socket, sys; sys.exit(socket.socket().connect_ex(('127.0.0.1', $port)))"; }
report=$(mktemp)
start=$(date +%s.%N)
nice /usr/bin/time -v "$census" coordinator --database-url "$database" --listen "127.0.0.1:$port" \
    --census "synthetic jobs=$jobs" 2>"$report" >/dev/null &
timer=$!
until listening 2>/dev/null; do
    if ! kill -0 "$timer" 2>/dev/null; then
        echo "the coordinator exited before listening:" >&2
        tail -5 "$report" >&2
        exit 1
    fi
    sleep 0.2
done
echo "created_seconds $(echo "$(date +%s.%N) - $start" | bc)"
# The coordinator is the one child of `time`.
pkill -TERM -P "$timer"
wait "$timer" || true
grep -E "Maximum resident|User time|System time" "$report"
rm -f "$report"
