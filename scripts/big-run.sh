#!/bin/bash
# Measures a whole run of `synthetic jobs=JOBS` through real processes
# (BENCHMARKS.md, "A run of 10^7 jobs, end to end"): `census coordinator`
# creates the run (timed until it listens), then WORKERS `census worker`
# processes lease, count and report every job while the coordinator's
# resident memory is sampled every second and its status page
# (/api/status) and `census status --json` are timed every POLL seconds;
# once the run is finished, the page is timed again, and then a second
# coordinator started on the same database is timed as it checks the
# finished answer (the page says "verifying" until then).
# Usage: scripts/big-run.sh DATABASE_URL_OR_PATH JOBS [WORKERS] [POLL]
# Prints lines of `phase name value`; the coordinator's log is kept in
# $OUT (default: a new temporary directory).
set -eu
census=${CENSUS:-target/release/census}
database=$1
jobs=$2
workers=${3:-2}
poll=${4:-20}
out=${OUT:-$(mktemp -d /tmp/big-run-XXXXXX)}
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
listening() { python3 -c "import socket, sys; sys.exit(socket.socket().connect_ex(('127.0.0.1', $1)))"; }
rss_kib() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
now() { date +%s.%N; }
seconds_since() { echo "$(now) - $1" | bc; }

for i in $(seq 1 "$workers"); do
    "$census" token create --database "$database" --role worker --name "big-$i" --output "$out/worker-$i.token" >/dev/null
done

# The coordinator: created when it listens.
grpc=$(free_port)
http=$(free_port)
start=$(now)
"$census" coordinator --database "$database" --listen "127.0.0.1:$grpc" --http-listen "127.0.0.1:$http" \
    --public-read --census "synthetic jobs=$jobs" >"$out/coordinator.log" 2>&1 &
coordinator=$!
peak=0
sample() { local r; r=$(rss_kib "$coordinator"); [ "$r" -gt "$peak" ] && peak=$r; true; }
until listening "$grpc" 2>/dev/null; do
    kill -0 "$coordinator" 2>/dev/null || { tail -5 "$out/coordinator.log" >&2; exit 1; }
    sample
    sleep 0.2
done
echo "create seconds $(seconds_since "$start")"
echo "create peak_rss_mib $((peak / 1024))"

time_status() {
    local phase=$1 port=$2 page cli
    page=$(curl -s -o "$out/status.json" -w '%{time_total}' "http://127.0.0.1:$port/api/status")
    cli=$(now)
    "$census" status --coordinator "http://127.0.0.1:$3" --json >/dev/null
    cli=$(seconds_since "$cli")
    echo "$phase api_status_seconds $page census_status_seconds $cli done $(python3 -c "import json; r = json.load(open('$out/status.json'))['runs'][0]; print(r['done'], 'verifying' if r.get('verifying') else '', r['n0'] or r['answer'] or '-')")"
}

# Workers: lease, count, report until the run is done.
start=$(now)
pids=()
for i in $(seq 1 "$workers"); do
    "$census" worker --coordinator "http://127.0.0.1:$grpc" --token-file "$out/worker-$i.token" \
        --threads 1 --exit-when-done >"$out/worker-$i.log" 2>&1 &
    pids+=($!)
done
next=$(( $(date +%s) + poll ))
while kill -0 "${pids[0]}" 2>/dev/null || { [ "$workers" -gt 1 ] && kill -0 "${pids[1]}" 2>/dev/null; }; do
    sample
    if [ "$(date +%s)" -ge "$next" ]; then
        time_status counting "$http" "$grpc"
        next=$(( $(date +%s) + poll ))
    fi
    sleep 1
done
wait "${pids[@]}" || true
echo "count seconds $(seconds_since "$start")"
until grep -q "census finished" "$out/coordinator.log"; do sample; sleep 1; done
echo "count peak_rss_mib $((peak / 1024))"
for _ in 1 2 3; do time_status finished "$http" "$grpc"; sample; done
echo "finished peak_rss_mib $((peak / 1024))"
kill -TERM "$coordinator"; wait "$coordinator" || true

# A coordinator started on the finished run checks its answer once.
grpc=$(free_port)
http=$(free_port)
"$census" coordinator --database "$database" --listen "127.0.0.1:$grpc" --http-listen "127.0.0.1:$http" \
    --public-read >"$out/restarted.log" 2>&1 &
coordinator=$!
peak=0
until listening "$http" 2>/dev/null; do sleep 0.2; done
start=$(now)
time_status restarted "$http" "$grpc"
until grep -q '"verifying":false' "$out/status.json"; do
    sample
    sleep 1
    curl -s -o "$out/status.json" "http://127.0.0.1:$http/api/status"
done
echo "restarted checked_seconds $(seconds_since "$start")"
for _ in 1 2 3; do time_status restarted "$http" "$grpc"; sample; done
echo "restarted peak_rss_mib $((peak / 1024))"
kill -TERM "$coordinator"; wait "$coordinator" || true
