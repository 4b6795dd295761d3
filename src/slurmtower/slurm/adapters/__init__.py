"""The one version-adapter and parsing layer between Slurm's output and the models.

One module per resource holds that resource's JSON builder, its text parser(s) and its release
steps, so a new field or a new release is added in one file:

====================  =========================================================================
module                what it reads
====================  =========================================================================
:mod:`.nodes`         nodes: scontrol/REST/sinfo JSON, ``scontrol -o show node``, ``sinfo``,
                      ``sinfo -R``
:mod:`.jobs`          slurmctld's jobs (squeue/scontrol/REST JSON, ``scontrol -o show job``,
                      squeue's table) and ``scontrol show steps``
:mod:`.accounting`    sacct/slurmdbd jobs and steps, associations, users (JSON, ``sacct -P``,
                      ``sacctmgr -P show assoc``)
:mod:`.partitions`    partitions (JSON, ``scontrol -o show partition``)
:mod:`.reservations`  reservations (JSON, ``scontrol -o show reservation``)
:mod:`.stats`         sdiag (JSON and text) and REST ``/ping``
:mod:`.triggers`      ``strigger --get``
:mod:`.config`        ``scontrol show config`` (text; JSON and REST ``/conf`` from 26.05)
====================  =========================================================================

Shared machinery: :mod:`._data_parsers` (the one list of known ``v0.0.N`` formats),
:mod:`._envelope` (``meta``, errors, version detection), :mod:`._chain` (the step runner: each
JSON record is brought up to the newest format, v0.0.45, before it is built), :mod:`._values`
(numbers, times, durations), :mod:`._json` and :mod:`._text` (helpers of the builders and text
parsers) and :mod:`._queue` (the compact ``squeue -O``/``sinfo -O`` forms of the live views).
Nothing here does I/O.
"""

from __future__ import annotations

from slurmtower.slurm.adapters._data_parsers import (
    DATA_PARSERS,
    KNOWN_DATA_PARSERS,
    DataParser,
    data_parser,
    data_parser_note,
    deprecated_parsers,
    newest_known,
    served_by,
)
from slurmtower.slurm.adapters._envelope import (
    detect_version,
    envelope_messages,
    error_from_rest_response,
    format_version,
    parse_sinfo_version,
    raise_for_errors,
)
from slurmtower.slurm.adapters._queue import (
    QUEUE_FIELDS,
    QUEUE_JOB_FIELDS,
    SEP,
    STATE_FIELDS,
    QueueRow,
    QueueRowParser,
    line_hash,
    parse_node_state_line,
    parse_node_states_text,
    parse_queue_line,
    queue_format,
    state_format,
)
from slurmtower.slurm.adapters._text import split_key_values
from slurmtower.slurm.adapters._values import parse_duration, parse_text_time
from slurmtower.slurm.adapters.accounting import (
    parse_associations_json,
    parse_associations_text,
    parse_sacct_json,
    parse_sacct_steps_json,
    parse_sacct_steps_text,
    parse_sacct_text,
    parse_users_json,
)
from slurmtower.slurm.adapters.config import parse_config_json, parse_config_text
from slurmtower.slurm.adapters.jobs import (
    parse_jobs_json,
    parse_jobs_text,
    parse_squeue_text,
    parse_steps_json,
    parse_steps_text,
)
from slurmtower.slurm.adapters.nodes import (
    parse_nodes_json,
    parse_nodes_text,
    parse_sinfo_reasons_text,
    parse_sinfo_text,
)
from slurmtower.slurm.adapters.partitions import json_marks_default, parse_partitions_json, parse_partitions_text
from slurmtower.slurm.adapters.reservations import parse_reservations_json, parse_reservations_text
from slurmtower.slurm.adapters.stats import parse_ping_json, parse_sdiag_json, parse_sdiag_text
from slurmtower.slurm.adapters.triggers import parse_triggers_text

__all__ = [
    "DATA_PARSERS",
    "KNOWN_DATA_PARSERS",
    "QUEUE_FIELDS",
    "QUEUE_JOB_FIELDS",
    "SEP",
    "STATE_FIELDS",
    "DataParser",
    "QueueRow",
    "QueueRowParser",
    "data_parser",
    "data_parser_note",
    "deprecated_parsers",
    "detect_version",
    "envelope_messages",
    "error_from_rest_response",
    "format_version",
    "json_marks_default",
    "line_hash",
    "newest_known",
    "parse_associations_json",
    "parse_associations_text",
    "parse_config_json",
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
    "served_by",
    "split_key_values",
    "state_format",
]
