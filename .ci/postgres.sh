# Sourced by .ci/run: a throwaway PostgreSQL cluster for the PostgreSQL ledger's tests
# (tests/engine/test_ledger_postgres.py), made as in /work/shared/RECIPES.md §2: the Debian
# package `postgresql` (installed here when missing and apt-get is available), initdb as the
# `postgres` user (initdb refuses root), one loopback port, removed on exit. Exports
# DPKIT_TEST_PG_DSN for pytest. Where PostgreSQL cannot be installed or started this says why
# and leaves the variable unset: those tests then start their own cluster or skip with a reason.

dpkit_pg_stop() {
  if [ -n "${DPKIT_PG_DIR:-}" ]; then
    "${DPKIT_PG_AS[@]}" "$DPKIT_PG_BIN/pg_ctl" -D "$DPKIT_PG_DIR/data" -m immediate -w stop \
      >/dev/null 2>&1 || true
    rm -rf "$DPKIT_PG_DIR"
  fi
}

dpkit_pg_start() {
  DPKIT_PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [ -z "$DPKIT_PG_BIN" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      echo "ci: installing PostgreSQL (Debian package postgresql) for the ledger tests"
      if ! { apt-get install -y -q postgresql >/dev/null 2>&1 || { apt-get update -q \
          >/dev/null 2>&1 && apt-get install -y -q postgresql >/dev/null 2>&1; }; }; then
        echo "ci: apt-get could not install postgresql: the PostgreSQL ledger tests will skip"
        return 0
      fi
      DPKIT_PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    else
      echo "ci: no PostgreSQL here and no apt-get as root: the PostgreSQL ledger tests will skip"
      return 0
    fi
  fi
  DPKIT_PG_DIR=$(mktemp -d)
  DPKIT_PG_AS=()
  if [ "$(id -u)" = 0 ]; then
    chown postgres: "$DPKIT_PG_DIR"
    DPKIT_PG_AS=(runuser -u postgres --)
  fi
  local port
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  if ! { "${DPKIT_PG_AS[@]}" "$DPKIT_PG_BIN/initdb" -D "$DPKIT_PG_DIR/data" -U postgres -A trust \
           --no-locale -E UTF8 >"$DPKIT_PG_DIR/initdb.log" 2>&1 \
         && "${DPKIT_PG_AS[@]}" "$DPKIT_PG_BIN/pg_ctl" -D "$DPKIT_PG_DIR/data" \
           -l "$DPKIT_PG_DIR/log" -w -t 60 -o "-c listen_addresses=127.0.0.1 -p $port \
           -k $DPKIT_PG_DIR -c fsync=off -c max_connections=200" start >/dev/null \
         && "${DPKIT_PG_AS[@]}" "$DPKIT_PG_BIN/createdb" -h 127.0.0.1 -p "$port" -U postgres \
           dpkit; }; then
    echo "ci: PostgreSQL did not start (logs below): the PostgreSQL ledger tests will skip"
    cat "$DPKIT_PG_DIR/initdb.log" "$DPKIT_PG_DIR/log" 2>/dev/null | tail -n 20
    dpkit_pg_stop
    unset DPKIT_PG_DIR
    return 0
  fi
  trap dpkit_pg_stop EXIT
  export DPKIT_TEST_PG_DSN="host=127.0.0.1 port=$port user=postgres dbname=dpkit"
  echo "ci: $("$DPKIT_PG_BIN/postgres" --version) started for the ledger tests:" \
       "DPKIT_TEST_PG_DSN='$DPKIT_TEST_PG_DSN'"
}
