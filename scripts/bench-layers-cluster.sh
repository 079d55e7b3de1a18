#!/usr/bin/env bash
# Times a layers census (issue 22) through the Postgres deployment
# topology, as local processes: a throw-away Postgres, one coordinator and
# N workers (N identities) sharing one directory of layer files.
#   scripts/bench-layers-cluster.sh CENSUS WORKERS [THREADS_PER_WORKER]
# e.g. scripts/bench-layers-cluster.sh "layers boxes=2x5 shards=4 parts=4" 2
# Prints the wall time from the coordinator's start to the workers' exit,
# each process's CPU seconds and peak memory (/usr/bin/time -v), and the
# answer and weighted sum as the store holds them.
set -euo pipefail
census_text=${1:?census}; workers=${2:?workers}; threads=${3:-1}
cd "$(dirname "$0")/.."
cargo build --release -q -p census
census=$PWD/target/release/census
bin=$(dirname "$(readlink -f "$(command -v initdb || echo /usr/lib/postgresql/15/bin/initdb)")")
dir=$(mktemp -d /tmp/census-bench-XXXXXX); chmod 777 "$dir"
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
gport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
as_pg "$bin/initdb" -D "$dir/data" -U census -A trust --no-sync >/dev/null
as_pg "$bin/postgres" -D "$dir/data" -p "$port" -h 127.0.0.1 -k "$dir" -c fsync=off -c synchronous_commit=off >"$dir/pg.log" 2>&1 &
pg=$!
coordinator=
cleanup() { [ -z "$coordinator" ] || kill "$coordinator" 2>/dev/null || true; kill $pg 2>/dev/null || true; wait 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$dir"; }
trap cleanup EXIT
until "$bin/pg_isready" -q -h 127.0.0.1 -p "$port"; do sleep 0.1; done
url="postgres://census@127.0.0.1:$port/postgres"
mkdir "$dir/layers"
for i in $(seq "$workers"); do
  "$census" token create --database "$url" --role worker --name "w$i" --output "$dir/w$i.token" >/dev/null
done
start=$(date +%s.%N)
# No `nice` or `time` wrapper in the process's place: SIGTERM reaches the coordinator itself.
"$census" coordinator --database-url "$url" --listen "127.0.0.1:$gport" --census "$census_text" >"$dir/coordinator.log" 2>&1 &
coordinator=$!
workers_pids=()
for i in $(seq "$workers"); do
  /usr/bin/time -v -o "$dir/worker$i.time" "$census" worker --coordinator "127.0.0.1:$gport" --threads "$threads" \
    --token-file "$dir/w$i.token" --exit-when-done --layers-dir "$dir/layers" >"$dir/worker$i.log" 2>&1 &
  workers_pids+=($!)
done
wait "${workers_pids[@]}"
end=$(date +%s.%N)
grep -q "census finished" "$dir/coordinator.log" || { echo "the run did not finish: $dir/coordinator.log" >&2; KEEP=1; exit 1; }
coordinator_cpu=$(ps -o times= -p "$coordinator" | tr -d ' ')
python3 -c "print(f'$census_text, $workers worker(s) x $threads thread(s): {$end - $start:.1f} s wall, coordinator start to the workers exit')"
for i in $(seq "$workers"); do
  awk -v w="worker $i" '/User time/ {u=$4} /System time/ {s=$4} /Maximum resident/ {m=$6} END {printf "%s: %s s user, %s s system, %d MB peak\n", w, u, s, m/1024}' "$dir/worker$i.time"
done
echo "coordinator: ${coordinator_cpu} s of CPU (whole seconds)"
"$bin/psql" -At -h 127.0.0.1 -p "$port" -U census postgres -c "SELECT 'answer ' || answer || ', weighted sum ' || weighted_sum FROM run_progress"
du -sh "$dir/layers" | awk '{print "layer files: " $1}'
