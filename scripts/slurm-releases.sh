#!/usr/bin/env bash
# `make slurm-releases`: build SchedMD's release archives in ../shared/slurm/ into /opt/slurm-<series>
# (slurmctld, slurmd, slurmdbd, slurmrestd, the accounting, JWT and JSON/YAML plugins), for the
# release suites (`make test` runs them live on every /opt/slurm-* it finds).
#
#   bash scripts/slurm-releases.sh            every archive there
#   bash scripts/slurm-releases.sh 26.05      that series only (what `make test` asks for when absent)
#
# Checksums are verified first (SHA256SUMS beside the archives). A build leaves a stamp with its
# archive's checksum in the prefix: a second run with the same archive does nothing. Each build's
# time is printed. No Slurm source or binary is kept in this repository.
# $SLURMTOWER_SLURM_SOURCES names another folder of archives; $SLURMTOWER_SLURM_OPT another /opt.
set -euo pipefail
cd "$(dirname "$0")/.."
SOURCES=${SLURMTOWER_SLURM_SOURCES:-../shared/slurm}
OPT=${SLURMTOWER_SLURM_OPT:-/opt}
STAMP_NAME=.slurmtower-build
# Debian 12's packages a build needs (by name: a missing one is named, not guessed at).
DEPS=(build-essential pkg-config libmunge-dev munge libmariadb-dev libjwt-dev libjson-c-dev libyaml-dev
      libhttp-parser-dev libpam0g-dev libdbus-1-dev libreadline-dev)

fail() { echo "slurm-releases: $*" >&2; exit 1; }

if [ ! -d "$SOURCES" ]; then
  echo "slurm-releases: no $SOURCES here (a clone outside this workplace): nothing to build;" \
       "the release suites skip, saying so"
  exit 0
fi
cd "$SOURCES"
SOURCES=$PWD
cd - >/dev/null
[ -f "$SOURCES/SHA256SUMS" ] || fail "$SOURCES/SHA256SUMS is missing: the archives cannot be verified"

# The archives asked for: every one listed in SHA256SUMS, or those of the series named.
mapfile -t listed < <(awk '{print $2}' "$SOURCES/SHA256SUMS" | grep -E '^slurm-[0-9]+\.[0-9]+\.[0-9]+\.tar\.(gz|bz2)$')
wanted=()
for archive in "${listed[@]}"; do
  version=${archive#slurm-}; version=${version%.tar.*}
  series=${version%.*}
  if [ $# -eq 0 ] || printf '%s\n' "$@" | grep -qxF -e "$series" -e "$version"; then
    wanted+=("$archive")
  fi
done
for asked in "$@"; do
  printf '%s\n' "${wanted[@]/#/}" | grep -qE "^slurm-${asked//./\\.}[.]" \
    || fail "no archive of Slurm $asked in $SOURCES (SHA256SUMS lists: ${listed[*]})"
done
[ ${#wanted[@]} -gt 0 ] || fail "no slurm-<version>.tar.gz listed in $SOURCES/SHA256SUMS"

# Checksums first, of every archive asked for (a missing archive is named).
for archive in "${wanted[@]}"; do
  [ -f "$SOURCES/$archive" ] || fail "missing archive: $SOURCES/$archive"
  line=$(grep -E "  $archive\$" "$SOURCES/SHA256SUMS")
  (cd "$SOURCES" && printf '%s\n' "$line" | sha256sum -c --quiet --status) \
    || fail "checksum mismatch: $SOURCES/$archive does not match SHA256SUMS"
done

todo=()
for archive in "${wanted[@]}"; do
  version=${archive#slurm-}; version=${version%.tar.*}
  prefix="$OPT/slurm-${version%.*}"
  sum=$(grep -E "  $archive\$" "$SOURCES/SHA256SUMS" | awk '{print $1}')
  if [ -f "$prefix/$STAMP_NAME" ] && [ "$(cat "$prefix/$STAMP_NAME")" = "$sum  $archive" ] \
     && [ -x "$prefix/sbin/slurmctld" ]; then
    echo "slurm $version: up to date in $prefix (built from $archive, sha256 ${sum:0:12})"
  else
    todo+=("$archive")
  fi
done
[ ${#todo[@]} -gt 0 ] || exit 0

missing=()
for dep in "${DEPS[@]}"; do
  dpkg-query -W -f='${Status}' "$dep" 2>/dev/null | grep -q 'install ok installed' || missing+=("$dep")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "slurm-releases: installing Debian's build dependencies: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1; } \
    || { for dep in "${missing[@]}"; do
           dpkg-query -W -f='${Status}' "$dep" 2>/dev/null | grep -q 'install ok installed' \
             || fail "missing build dependency: $dep (apt-get install $dep failed)"
         done; }
fi

jobs=$(nproc)
for archive in "${todo[@]}"; do
  version=${archive#slurm-}; version=${version%.tar.*}
  prefix="$OPT/slurm-${version%.*}"
  sum=$(grep -E "  $archive\$" "$SOURCES/SHA256SUMS" | awk '{print $1}')
  build=$(mktemp -d /var/tmp/slurm-build-"$version".XXXXXX)
  log="$build.log"
  echo "slurm $version: building into $prefix (log: $log)"
  t0=$(date +%s)
  tar -xf "$SOURCES/$archive" -C "$build" --strip-components=1
  rm -rf "$prefix"
  # --enable-slurmrestd: configure fails (instead of leaving slurmrestd out) where http-parser or
  # json-c is missing; --enable-multiple-slurmd: the local cluster runs one slurmd per node.
  if ! (cd "$build" \
        && ./configure --prefix="$prefix" --sysconfdir="$prefix/etc" --enable-multiple-slurmd \
             --enable-slurmrestd --with-jwt --with-json --with-yaml --with-munge --with-mysql_config=/usr/bin \
             --disable-debug >"$log" 2>&1); then
    fail "slurm $version: configure failed: $(grep -E 'error:' "$log" | tail -1) (log: $log)"
  fi
  t1=$(date +%s)
  (cd "$build" && make -j"$jobs" >>"$log" 2>&1) \
    || fail "slurm $version: make failed: $(grep -E 'error' "$log" | tail -1) (log: $log)"
  t2=$(date +%s)
  (cd "$build" && make install >>"$log" 2>&1) || fail "slurm $version: make install failed (log: $log)"
  t3=$(date +%s)
  for need in sbin/slurmctld sbin/slurmd sbin/slurmdbd sbin/slurmrestd bin/sinfo bin/strigger; do
    [ -x "$prefix/$need" ] || fail "slurm $version: the build has no $need (log: $log)"
  done
  for plugin in accounting_storage_slurmdbd auth_jwt serializer_json serializer_yaml; do
    ls "$prefix"/lib*/slurm/"$plugin".so >/dev/null 2>&1 \
      || fail "slurm $version: the build has no $plugin plugin (log: $log)"
  done
  echo "$sum  $archive" > "$prefix/$STAMP_NAME"
  rm -rf "$build" "$log"
  echo "slurm $version: built in $((t3 - t0)) s (configure $((t1 - t0)) s, make $((t2 - t1)) s," \
       "install $((t3 - t2)) s) on $jobs cores"
done
