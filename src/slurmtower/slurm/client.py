"""The SlurmClient protocol: the one typed way everything above talks to Slurm.

Nouns for reads (``nodes()``, ``jobs()``), verbs for acts (``drain(nodes, reason=...)``).
Two backends implement it: :class:`~slurmtower.slurm.cli_backend.CliSlurmClient` (the
Slurm commands) and :class:`~slurmtower.slurm.rest_backend.RestSlurmClient` (slurmrestd).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal, Protocol, runtime_checkable

from slurmtower.errors import NotFound
from slurmtower.models import (
    ClusterConfig,
    ControllerStats,
    Job,
    JobStep,
    Node,
    Partition,
    Reservation,
    SlurmVersion,
    Trigger,
)
from slurmtower.models.table import JobTable, QueueDelta, StateDelta
from slurmtower.nodeset import NodeSet
from slurmtower.slurm.adapters._queue import QUEUE_JOB_FIELDS

__all__ = [
    "NODE_STATES_SETTABLE",
    "NODE_UPDATE_FIELDS",
    "QUEUE_TEXT_FIELDS",
    "TRIGGER_EVENTS",
    "Capabilities",
    "SlurmActs",
    "SlurmClient",
    "SlurmReads",
    "select_nodes",
]

#: States ``scontrol update nodename=... state=`` accepts that slurmtower offers.
NODE_STATES_SETTABLE = ("DOWN", "DRAIN", "RESUME", "UNDRAIN", "FAIL", "FUTURE", "IDLE")

#: Node fields Slurm can update (scontrol man page; checked on 22.05), with the keyword
#: scontrol wants. Anything else is refused before a command runs.
NODE_UPDATE_FIELDS: dict[str, str] = {
    "features": "AvailableFeatures",
    "available_features": "AvailableFeatures",
    "active_features": "ActiveFeatures",
    "weight": "Weight",
    "comment": "Comment",
    "extra": "Extra",
    "gres": "Gres",
    "reason": "Reason",
    "state": "State",
    "cpu_bind": "CpuBind",
}

#: The :class:`Job` fields :meth:`SlurmClient.queue` fills (squeue's text form, see
#: :func:`slurmtower.slurm.adapters.parse_queue_line`); the others need :meth:`SlurmClient.jobs`.
QUEUE_TEXT_FIELDS = QUEUE_JOB_FIELDS

#: strigger events slurmtower can arm (the seed's list plus job events).
TRIGGER_EVENTS = ("burst_buffer", "drained", "down", "fail", "up", "idle", "reconfig", "fini", "time")


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do against the Slurm release it talks to."""

    backend: Literal["cli", "rest"]
    version: SlurmVersion
    scontrol_json: bool = False
    """``scontrol show ... --json`` exists (23.02 and later)."""
    sdiag_json: bool = False
    config_json: bool = False
    """The running configuration comes as JSON (``scontrol show config --json``, REST ``/conf``: 26.05+)."""
    json_filters: bool = False
    """``squeue/sinfo --json`` honour their filter options (22.05 ignores them)."""
    rest_node_update: bool = False
    """slurmrestd can update nodes (23.02 and later)."""
    rest_reservations: bool = False
    """slurmrestd can create, update and delete reservations (``POST reservation``, ``DELETE
    reservation/{name}``: 25.05 and later, API v0.0.43+)."""
    reservation_comment: bool = False
    """A reservation takes a ``Comment`` (23.02 and later): slurmtower's owner tag goes there."""
    rest_api_versions: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    unsupported: dict[str, str] = field(default_factory=dict)
    """Operation -> why this backend cannot do it."""

    def as_dict(self) -> dict[str, object]:
        return {
            "backend": self.backend,
            "slurm_version": str(self.version),
            "data_parser": self.version.data_parser,
            "scontrol_json": self.scontrol_json,
            "sdiag_json": self.sdiag_json,
            "config_json": self.config_json,
            "json_filters": self.json_filters,
            "rest_node_update": self.rest_node_update,
            "rest_reservations": self.rest_reservations,
            "reservation_comment": self.reservation_comment,
            "rest_api_versions": list(self.rest_api_versions),
            "reads": list(self.reads),
            "writes": list(self.writes),
            "unsupported": dict(self.unsupported),
        }


@runtime_checkable
class SlurmReads(Protocol):
    """What slurmtower reads of one Slurm cluster (the live snapshots, the sensor, read
    actions). Errors are :mod:`slurmtower.errors` types."""

    def version(self) -> SlurmVersion: ...

    def capabilities(self) -> Capabilities: ...

    # -- reads ------------------------------------------------------------------------
    def nodes(self, nodes: NodeSet | None = None) -> list[Node]:
        """All nodes, or those of ``nodes`` (unknown names raise :class:`NotFound`)."""
        ...

    def jobs(self, job_ids: Sequence[int] | None = None) -> list[Job]:
        """Jobs slurmctld knows (pending, running, and finished within MinJobAge)."""
        ...

    def job_table(self) -> JobTable:
        """The whole queue (every job slurmctld holds) as a compact table: what the live
        views, their filters and paging need, without a model per job."""
        ...

    def job_queue_delta(self, *, full: bool = False) -> QueueDelta:
        """The queue as it changed since this client's previous delta (every row when
        ``full``): what a refresh worker sends to the process that holds the table."""
        ...

    def job_state_delta(self, *, full: bool = False) -> StateDelta:
        """The job states alone (no other field), as they changed since this client's previous
        read (every job's when ``full``): the cheapest read of the queue where the release has
        one. Raises :class:`~slurmtower.errors.Unsupported` where it has none."""
        ...

    def node_states(self) -> list[Node]:
        """Every node with only its base state, flags and reason (who set it, when): the
        sensor's poll. The same list object is returned while nothing changed, when the
        backend can tell."""
        ...

    def job_ids(
        self,
        *,
        users: Sequence[str] = (),
        accounts: Sequence[str] = (),
        partitions: Sequence[str] = (),
        states: Sequence[str] = (),
        names: Sequence[str] = (),
        nodes: NodeSet | None = None,
        job_ids: Sequence[int] = (),
    ) -> list[int]:
        """Ids of the jobs matching filters Slurm applies itself (cheap: no job details)."""
        ...

    def job_count(
        self,
        *,
        users: Sequence[str] = (),
        accounts: Sequence[str] = (),
        partitions: Sequence[str] = (),
        states: Sequence[str] = (),
        names: Sequence[str] = (),
        nodes: NodeSet | None = None,
        job_ids: Sequence[int] = (),
    ) -> int:
        """How many jobs match :meth:`job_ids`' filters, as Slurm counts them: each array task
        (pending ones too, one record in squeue) and each het-job component
        (:attr:`~slurmtower.models.Job.job_count`)."""
        ...

    def queue(
        self,
        *,
        users: Sequence[str] = (),
        accounts: Sequence[str] = (),
        partitions: Sequence[str] = (),
        states: Sequence[str] = (),
        names: Sequence[str] = (),
        nodes: NodeSet | None = None,
        job_ids: Sequence[int] = (),
    ) -> list[Job]:
        """The jobs matching :meth:`job_ids`' filters, with only the fields of squeue's text
        form (:data:`QUEUE_TEXT_FIELDS`): what a search needs, without every job's details."""
        ...

    def job_steps(self, job_ids: Sequence[int] | None = None) -> list[JobStep]: ...

    def partitions(self) -> list[Partition]: ...

    def reservations(self) -> list[Reservation]: ...

    def config(self) -> ClusterConfig: ...

    def stats(self) -> ControllerStats: ...

    def triggers(self) -> list[Trigger]: ...

    def ping(self) -> bool: ...


@runtime_checkable
class SlurmActs(Protocol):
    """What slurmtower changes on one Slurm cluster (the action catalogue's mutating actions,
    maintenance). Errors are :mod:`slurmtower.errors` types."""

    def submit_batch(self, args: Sequence[str], command: str) -> int:
        """``sbatch --parsable <args> --wrap <command>``: the new job's id (maintenance checks)."""
        ...

    def cancel_jobs(self, job_ids: Sequence[int]) -> None:
        """``scancel`` these jobs (a job already gone is no error)."""
        ...

    def update_nodes(self, nodes: NodeSet, *, state: str | None = None, reason: str | None = None,
                     **fields: str) -> None:
        """One ``scontrol update`` for the whole node set."""
        ...

    def drain(self, nodes: NodeSet, *, reason: str) -> None: ...

    def down(self, nodes: NodeSet, *, reason: str) -> None: ...

    def resume(self, nodes: NodeSet) -> None: ...

    def undrain(self, nodes: NodeSet) -> None: ...

    def create_reservation(
        self,
        name: str,
        *,
        nodes: NodeSet | None = None,
        start_time: datetime | Literal["now"] = "now",
        duration: timedelta | None = None,
        end_time: datetime | None = None,
        node_count: int | None = None,
        partition: str | None = None,
        features: str | None = None,
        users: Sequence[str] = ("root",),
        accounts: Sequence[str] = (),
        flags: Sequence[str] = (),
        tres: str | None = None,
        comment: str | None = None,
    ) -> str:
        """Create reservation ``name`` (its end: ``end_time``, else ``duration``, else none);
        returns the name Slurm gave it. ``comment`` goes to Slurm where the release takes one
        (:attr:`Capabilities.reservation_comment`), else it is left out."""
        ...

    def update_reservation(self, name: str, *, nodes: NodeSet | None = None,
                           duration: timedelta | None = None, users: Sequence[str] | None = None,
                           flags: Sequence[str] | None = None, start_time: datetime | None = None,
                           end_time: datetime | None = None, accounts: Sequence[str] | None = None,
                           remove_flags: Sequence[str] | None = None, comment: str | None = None) -> None:
        """Change what is given (``nodes``: the whole new list); ``flags`` are added to the
        reservation's, ``remove_flags`` taken away (Slurm's own update semantics)."""
        ...

    def delete_reservation(self, name: str) -> None: ...

    def set_trigger(
        self,
        *,
        event: str,
        program: str,
        nodes: NodeSet | None = None,
        job_id: int | None = None,
        offset: int = 0,
        perm: bool = False,
    ) -> int:
        """Arm an strigger as SlurmUser; returns the trigger id."""
        ...

    def clear_triggers(self, trigger_ids: Sequence[int], *, user: str | None = None) -> None: ...


@runtime_checkable
class SlurmClient(SlurmReads, SlurmActs, Protocol):
    """Reads and acts on one Slurm cluster: what a backend (CLI, slurmrestd) implements."""

def select_nodes(all_nodes: list[Node], nodes: NodeSet | None) -> list[Node]:
    """The nodes of ``nodes`` among ``all_nodes`` (all when ``None``); unknown names raise NotFound."""
    if nodes is None:
        return all_nodes
    wanted = set(nodes)
    found = [n for n in all_nodes if n.name in wanted]
    missing = wanted - {n.name for n in found}
    if missing:
        raise NotFound(f"unknown node(s): {NodeSet(sorted(missing))}", param="nodes")
    return found
