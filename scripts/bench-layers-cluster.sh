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
source "$(dirname "$0")/throwaway-postgres.sh"
gport=$(free_port)
coordinator=
on_exit() { [ -z "$coordinator" ] || kill "$coordinator" 2>/dev/null || true; }
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
