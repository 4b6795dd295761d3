"""The one version-adapter and parsing layer between Slurm's output and the models.

Every release's JSON runs through one adapter chain (:mod:`._chain`, a step per data format:
v0.0.38 -> v0.0.40 -> v0.0.42 -> v0.0.44) so the builders see a single shape; text output
(``scontrol -o show``, ``sdiag``, ``strigger --get``, ``sacct -P``, ``sacctmgr -P`` ...) has
its own parsers that produce the same models. Nothing here does I/O.
"""

from __future__ import annotations

from slurmtower.slurm.adapters._envelope import (
    detect_version,
    envelope_messages,
    error_from_rest_response,
    format_version,
    parse_sinfo_version,
    raise_for_errors,
)
from slurmtower.slurm.adapters._json import (
    parse_associations_json,
    parse_jobs_json,
    parse_nodes_json,
    parse_partitions_json,
    parse_ping_json,
    parse_reservations_json,
    parse_sacct_json,
    parse_sacct_steps_json,
    parse_sdiag_json,
    parse_steps_json,
    parse_users_json,
)
from slurmtower.slurm.adapters._queue import (
    QUEUE_FIELDS,
    QUEUE_JOB_FIELDS,
    SEP,
    STATE_FIELDS,
    QueueRow,
    QueueRowParser,
    parse_node_state_line,
    parse_node_states_text,
    parse_queue_line,
    queue_format,
    state_format,
)
from slurmtower.slurm.adapters._text import (
    parse_associations_text,
    parse_config_text,
    parse_jobs_text,
    parse_nodes_text,
    parse_partitions_text,
    parse_reservations_text,
    parse_sacct_steps_text,
    parse_sacct_text,
    parse_sdiag_text,
    parse_sinfo_reasons_text,
    parse_sinfo_text,
    parse_squeue_text,
    parse_steps_text,
    parse_triggers_text,
    split_key_values,
)
from slurmtower.slurm.adapters._values import parse_duration, parse_text_time

__all__ = [
    "QUEUE_FIELDS",
    "QUEUE_JOB_FIELDS",
    "SEP",
    "STATE_FIELDS",
    "QueueRow",
    "QueueRowParser",
    "detect_version",
    "envelope_messages",
    "error_from_rest_response",
    "format_version",
    "parse_associations_json",
    "parse_associations_text",
    "parse_config_text",
    "parse_duration",
    "parse_jobs_json",
    "parse_jobs_text",
    "parse_node_state_line",
    "parse_node_states_text",
    "parse_nodes_json",
    "parse_nodes_text",
    "parse_partitions_json",
    "parse_partitions_text",
    "parse_ping_json",
    "parse_queue_line",
    "parse_reservations_json",
    "parse_reservations_text",
    "parse_sacct_json",
    "parse_sacct_steps_json",
    "parse_sacct_steps_text",
    "parse_sacct_text",
    "parse_sdiag_json",
    "parse_sdiag_text",
    "parse_sinfo_reasons_text",
    "parse_sinfo_text",
    "parse_sinfo_version",
    "parse_squeue_text",
    "parse_steps_json",
    "parse_steps_text",
    "parse_text_time",
    "parse_triggers_text",
    "parse_users_json",
    "queue_format",
    "raise_for_errors",
    "split_key_values",
    "state_format",
]
