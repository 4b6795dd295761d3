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
if ! $BIN/pytest "${parallel[@]}" --durations=30 "$@"; then
  [ "$workers" -gt 0 ] || exit 1
  # A test bound in time (a drain of 1,000 nodes within a second, slurmctld answering within
  # 4 s) can miss its bound while the other worker's cluster takes both cores: the failed
  # tests run once more, alone and serially, and that run decides. Both runs are in the log.
  echo "== the tests that failed beside a second worker, again, serially:"
  $BIN/pytest --last-failed --last-failed-no-failures none "$@" -q || exit 1
fi
# The release suites (-m release: actions, sensor, REST API, /history against sacct, the
# slurmrestd backend) again on every other Slurm install found: /opt/slurm-* and
# $SLURMTOWER_TEST_SLURM_PREFIXES, each on its own devcluster, stopped afterwards.
if [ $# -eq 0 ]; then
  while IFS=$'\t' read -r prefix version dir _name _port; do
    echo "== the release suites on Slurm $version ($prefix)"
    status=0
    SLURMTOWER_TEST_SLURM_PREFIX="$prefix" $BIN/pytest -m release -p no:cacheprovider || status=$?
    $BIN/slurmtower devcluster down --dir "$dir" || true
    [ $status -eq 0 ] || exit $status
  done < <($BIN/slurmtower devcluster installs)
fi
echo "make test took $(( $(date +%s) - t0 )) s"
