# shellcheck shell=bash
# Sourced by the bench scripts that run the Postgres topology as local
# processes: builds census ($census), starts a throw-away Postgres in a
# temporary directory ($dir, $url) and, on exit, runs the caller's
# `on_exit` (stopping its own processes), stops the server and removes the
# directory (kept with KEEP=1).
cd "$(dirname "$0")/.."
cargo build --release -q -p census
census=$PWD/target/release/census
bin=$(dirname "$(readlink -f "$(command -v initdb || echo /usr/lib/postgresql/15/bin/initdb)")")
dir=$(mktemp -d /tmp/census-bench-XXXXXX); chmod 777 "$dir"
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(free_port)
as_pg "$bin/initdb" -D "$dir/data" -U census -A trust --no-sync >/dev/null
as_pg "$bin/postgres" -D "$dir/data" -p "$port" -h 127.0.0.1 -k "$dir" -c fsync=off -c synchronous_commit=off >"$dir/pg.log" 2>&1 &
pg=$!
on_exit() { :; }
stop_postgres() { on_exit; kill $pg 2>/dev/null || true; wait 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$dir"; }
trap stop_postgres EXIT
until "$bin/pg_isready" -q -h 127.0.0.1 -p "$port"; do sleep 0.1; done
url="postgres://census@127.0.0.1:$port/postgres"
