#!/usr/bin/env bash
# The services the tests and benchmarks use besides Slurm: PostgreSQL (a deployment's store,
# leader election, LISTEN/NOTIFY) and Redis (the deployment's shared snapshot), on loopback.
# Starts each one that does not answer; installs it from Debian's packages when missing.
# Leaves running services as they are.
set -euo pipefail

apt_install() {
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >/dev/null \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"; }
}

pg_url_works() {
  psql -h 127.0.0.1 -U postgres -d test -Atc 'select 1' >/dev/null 2>&1
}

if ! pg_isready -q -h 127.0.0.1 2>/dev/null; then
  if ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
    echo "services: installing PostgreSQL" >&2
    apt_install postgresql postgresql-client
  fi
  version=$(ls /etc/postgresql | sort -V | tail -1)
  pg_ctlcluster --skip-systemctl-redirect "$version" main start 2>/dev/null \
    || pg_ctlcluster "$version" main start
  for _ in $(seq 1 50); do pg_isready -q -h 127.0.0.1 && break; sleep 0.2; done
fi
if ! pg_url_works; then
  # A fresh Debian install asks for a password on 127.0.0.1: let the local postgres role in
  # without one (loopback only), as the tests' URLs expect, and make their database.
  version=$(ls /etc/postgresql | sort -V | tail -1)
  hba=/etc/postgresql/$version/main/pg_hba.conf
  if ! grep -q "slurmtower tests" "$hba"; then
    sed -i '1i host all postgres 127.0.0.1/32 trust  # slurmtower tests' "$hba"
    su postgres -c "psql -qc 'select pg_reload_conf()'" >/dev/null
  fi
  su postgres -c "psql -Atc \"select 1 from pg_database where datname='test'\"" | grep -q 1 \
    || su postgres -c "createdb test"
fi
pg_url_works || { echo "services: PostgreSQL does not let postgres@127.0.0.1 in" >&2; exit 1; }

if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  command -v redis-server >/dev/null || { echo "services: installing Redis" >&2; apt_install redis-server redis-tools; }
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  for _ in $(seq 1 50); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.2; done
  redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null
fi
