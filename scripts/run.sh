#!/usr/bin/env bash
# The run command behind `make run`: the service, on the local cluster where no Slurm is
# configured (no $SLURM_CONF, no /etc/slurm/slurm.conf), and once it answers, where to go
# (`slurmtower welcome`: the dashboard, the API, how to log in, how to stop). Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
if [ -z "${SLURM_CONF:-}" ] && [ ! -f /etc/slurm/slurm.conf ]; then
  $BIN/slurmtower devcluster up
  eval "$($BIN/slurmtower devcluster env)"
fi
$BIN/slurmtower serve "$@" &
serve=$!
trap 'kill -TERM $serve 2>/dev/null || true; wait $serve 2>/dev/null || true; exit 0' INT TERM
$BIN/slurmtower welcome --wait 180 || true
wait $serve
