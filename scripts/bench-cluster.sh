#!/usr/bin/env bash
# Times a whole census on the Postgres deployment topology, as local
# processes: a throw-away Postgres, one coordinator, N workers.
#   scripts/bench-cluster.sh STAGE COUNTER WORKERS [THREADS_PER_WORKER]
# e.g. scripts/bench-cluster.sh 36288 column-sets 2
#      scripts/bench-cluster.sh 44 banded 1
# Prints the wall time from the coordinator's start to the final N0.
set -euo pipefail
stage=${1:?stage}; counter=${2:?counter}; workers=${3:?workers}; threads=${4:-1}
source "$(dirname "$0")/throwaway-postgres.sh"
gport=$(free_port)
pids=()
on_exit() { kill "${pids[@]}" 2>/dev/null || true; }
# Each worker its own identity and token, as a deployment would have.
for i in $(seq "$workers"); do
  "$census" token create --database "$url" --role worker --name "w$i" --output "$dir/w$i.token" >/dev/null
done
start=$(date +%s.%N)
"$census" coordinator --database-url "$url" --listen "127.0.0.1:$gport" --stage "$stage" --counter "$counter" >"$dir/coordinator.log" 2>&1 &
pids+=($!)
for i in $(seq "$workers"); do
  "$census" worker --coordinator "127.0.0.1:$gport" --threads "$threads" --token-file "$dir/w$i.token" --exit-when-done >"$dir/worker$i.log" 2>&1 &
  pids+=($!)
done
until grep -q "census finished: 6670903752021072936960" "$dir/coordinator.log"; do sleep 0.1; done
end=$(date +%s.%N)
python3 -c "print(f'stage $stage, counter $counter, $workers worker(s) x $threads thread(s): {$end - $start:.1f} s wall to the final N0')"
