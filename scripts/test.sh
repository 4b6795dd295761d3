#!/usr/bin/env bash
# The test command behind `make test`: local cluster up, lint, then the whole suite against it.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
t0=$(date +%s)
# Lint and types meanwhile (CPU while the cluster starts, which mostly waits), read before the tests.
lint_log=$(mktemp)
{ $BIN/ruff check src tests bench && $BIN/mypy; } > "$lint_log" 2>&1 &
lint_pid=$!
# The documentation site, strict (a broken link or reference fails it), into a folder of its own.
docs_log=$(mktemp)
docs_site=$(mktemp -d)
NO_MKDOCS_2_WARNING=1 $BIN/mkdocs build --strict --quiet --site-dir "$docs_site" > "$docs_log" 2>&1 &
docs_pid=$!
# Slurm 26.05 (the newest release) built from ../shared/slurm when absent, so that every machine's
# run is live on the oldest and the newest release (make slurm-releases builds the others);
# where ../shared is absent the script says so and the release suites skip, saying why.
if [ $# -eq 0 ] && [ ! -x /opt/slurm-26.05/sbin/slurmctld ]; then
  bash scripts/slurm-releases.sh 26.05
fi
$BIN/slurmtower devcluster up
# PostgreSQL and Redis for the several-process tests (started, or installed, when missing).
bash scripts/services.sh
eval "$($BIN/slurmtower devcluster env)"
# Browser tests need Debian's Chromium (Playwright drives it; it never downloads a browser).
if ! command -v chromium >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >/dev/null \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium; }
fi
# The sign-on tests' OpenID provider: panva's oidc-provider, pinned by tests/oidc/package-lock.json,
# run by the machine's Node.js (Debian's nodejs and npm when missing).
if ! command -v npm >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends nodejs npm >/dev/null \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends nodejs npm; }
fi
[ -d tests/oidc/node_modules/oidc-provider ] || (cd tests/oidc && npm ci --no-audit --no-fund -q)
# promtool checks the /metrics scrape: take it out of Debian's prometheus package (19 MB .deb,
# unpacked under .venv, nothing installed, no daemon started).
if ! command -v promtool >/dev/null && [ ! -x .venv/promtool/usr/bin/promtool ]; then
  (cd /tmp && { apt-get download -q prometheus >/dev/null 2>&1 \
                || { apt-get update -qq && apt-get download -q prometheus >/dev/null 2>&1; }; } \
     && dpkg -x prometheus_*.deb "$OLDPWD/.venv/promtool" && rm -f prometheus_*.deb) \
    || echo "promtool unavailable: the promtool check will be skipped"
fi
[ -x .venv/promtool/usr/bin/promtool ] && export PATH="$PATH:$PWD/.venv/promtool/usr/bin"
status=0
wait $lint_pid || status=$?
cat "$lint_log"; rm -f "$lint_log"
[ $status -eq 0 ] || exit $status
wait $docs_pid || { echo "make docs failed:"; cat "$docs_log"; exit 1; }
cat "$docs_log"; rm -rf "$docs_log" "$docs_site"
# Two workers (pytest-xdist), each on a devcluster of its own (tests/conftest.py): most of the
# suite waits on Slurm (about a quarter of the two cores busy in a serial run), so two halves
# overlap. A worker takes whole modules (tests/conftest.py scope_of); SLURMTOWER_TEST_WORKERS=0 runs serially (the default
# when tests are named on the command line). The 30 slowest tests at the end.
# One hash seed for the controller and both workers: xdist refuses to run when they collect
# different test ids (a set's order in an id follows the seed).
export PYTHONHASHSEED=${PYTHONHASHSEED:-0}
workers=${SLURMTOWER_TEST_WORKERS:-$([ $# -eq 0 ] && echo 2 || echo 0)}
unset SLURMTOWER_TEST_WORKERS  # not a setting: slurmtower refuses unknown SLURMTOWER_ variables
parallel=()
[ "$workers" -gt 0 ] && parallel=(-n "$workers" --dist loadscope)
# The release suites (-m release: the actions and job control, the sensor, the REST API against
# squeue/sinfo, /history against sacct, the reports against sreport, the slurmrestd backend,
# init and doctor) again on every other Slurm install found (/opt/slurm-*,
# $SLURMTOWER_TEST_SLURM_PREFIXES), each on its own devcluster, stopped afterwards. They run
# beside the main suite, in two lanes of installs (they wait on Slurm most of the time); each
# lane's log is printed when it ends, and a test that failed there runs once more, alone.
release_lanes=()
release_dir=$(mktemp -d)
if [ $# -eq 0 ]; then
  mapfile -t installs < <($BIN/slurmtower devcluster installs)
  for lane in 0 1; do
    (
      for i in "${!installs[@]}"; do
        [ $((i % 2)) -eq $lane ] || continue
        IFS=$'\t' read -r prefix version dir _name _port <<<"${installs[$i]}"
        echo "== the release suites on Slurm $version ($prefix)"
        status=0
        SLURMTOWER_TEST_SLURM_PREFIX="$prefix" $BIN/pytest -m release -q -o cache_dir=".pytest_cache/release-$version" \
          || status=$?
        if [ $status -ne 0 ]; then
          echo "$prefix" >> "$release_dir/failed-$lane"
        else
          $BIN/slurmtower devcluster down --dir "$dir" >/dev/null || true
        fi
      done
    ) > "$release_dir/lane-$lane.log" 2>&1 &
    release_lanes+=($!)
  done
  # the main run leaves the tests of those clusters to them (tests/conftest.py)
  [ ${#installs[@]} -eq 0 ] || export RELEASE_SUITES_BESIDE=1
fi
main=0
$BIN/pytest "${parallel[@]}" --durations=30 "$@" || main=$?
for lane in "${!release_lanes[@]}"; do
  wait "${release_lanes[$lane]}" || true
  cat "$release_dir/lane-$lane.log"
done
if [ $main -ne 0 ]; then
  [ "$workers" -gt 0 ] || exit 1
  # A test bound in time (a drain of 1,000 nodes within a second, slurmctld answering within
  # 4 s) can miss its bound while the other worker's cluster takes both cores: the failed
  # tests run once more, alone and serially, and that run decides. Both runs are in the log.
  echo "== the tests that failed beside a second worker, again, serially:"
  $BIN/pytest --last-failed --last-failed-no-failures none "$@" -q || exit 1
fi
for failed in "$release_dir"/failed-*; do
  [ -f "$failed" ] || continue
  while read -r prefix; do
    version=$($BIN/slurmtower devcluster installs | awk -F'\t' -v p="$prefix" '$1 == p {print $2}')
    dir=$($BIN/slurmtower devcluster installs | awk -F'\t' -v p="$prefix" '$1 == p {print $3}')
    echo "== the tests that failed on Slurm $version beside the other suites, again, alone:"
    status=0
    SLURMTOWER_TEST_SLURM_PREFIX="$prefix" $BIN/pytest -m release -q -o cache_dir=".pytest_cache/release-$version" \
      --last-failed --last-failed-no-failures none || status=$?
    $BIN/slurmtower devcluster down --dir "$dir" >/dev/null || true
    [ $status -eq 0 ] || exit $status
  done < "$failed"
done
rm -rf "$release_dir"
echo "make test took $(( $(date +%s) - t0 )) s"
