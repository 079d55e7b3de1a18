#!/bin/sh
# The official postgres image's contract, for the variables census uses:
# on first start (an empty PGDATA) make a cluster whose superuser is
# POSTGRES_USER with the password POSTGRES_PASSWORD and a database
# POSTGRES_DB; then run the server, as the postgres user, listening on
# every address with password (scram-sha-256) authentication.
set -eu
case "${1:-postgres}" in
    postgres) [ $# -eq 0 ] || shift ;; # the server, with any further arguments
    -*) ;;                             # the server's own options
    *) exec "$@" ;;                    # another command (psql, pg_isready, a shell)
esac
: "${POSTGRES_USER:=postgres}"
: "${POSTGRES_DB:=$POSTGRES_USER}"
: "${PGDATA:=/var/lib/postgresql/data}"
export PGDATA
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"; }
mkdir -p "$PGDATA" /var/run/postgresql
chown postgres:postgres "$PGDATA" /var/run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    if [ -z "${POSTGRES_PASSWORD:-}" ]; then
        echo "docker-entrypoint.sh: POSTGRES_PASSWORD is not set: the database would have no password" >&2
        exit 1
    fi
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
    chown postgres "$pwfile"
    as_postgres initdb --username="$POSTGRES_USER" --pwfile="$pwfile" --encoding=UTF8 --locale=C.UTF-8 \
        --auth-local=trust --auth-host=scram-sha-256 >/dev/null
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
    if [ "$POSTGRES_DB" != postgres ]; then
        # A server on the Unix socket only, for the CREATE DATABASE.
        as_postgres pg_ctl -w -o "-c listen_addresses=''" start >/dev/null
        echo 'CREATE DATABASE :"db";' |
            as_postgres psql -q -v ON_ERROR_STOP=1 -v db="$POSTGRES_DB" --username="$POSTGRES_USER" --dbname=postgres
        as_postgres pg_ctl -w -m fast stop >/dev/null
    fi
    echo "docker-entrypoint.sh: made database $POSTGRES_DB for user $POSTGRES_USER in $PGDATA" >&2
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups -- postgres -c listen_addresses='*' "$@"
