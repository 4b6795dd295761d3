"""The CLI backend: Slurm's own commands, through the one :class:`CommandRunner`.

It reads the Slurm version once (``sinfo -V``) and asks the commands once which of them print
JSON (:meth:`CliSlurmClient.json_forms`: ``scontrol show partition --json``, ``sdiag --json``,
``scontrol show config --json``), then uses the best source each release offers: the JSON
forms where they answer (``scontrol show ...`` and ``sdiag`` from 23.02 on), the ``-o`` text
forms elsewhere (and always for ``show config``, see :meth:`CliSlurmClient.config`);
``sinfo``/``squeue --json`` where they exist.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, NoReturn

from slurmtower.errors import InvalidInput, SlurmError, SlurmRequestError, SlurmUnavailable, Unsupported
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
from slurmtower.models.job import array_task_count
from slurmtower.models.table import JobTable, QueueDelta, StateDelta
from slurmtower.nodeset import NodeSet
from slurmtower.slurm import adapters as ad
from slurmtower.slurm.client import NODE_UPDATE_FIELDS, TRIGGER_EVENTS, Capabilities, select_nodes
from slurmtower.slurm.runner import CommandRunner, classify_failure

__all__ = ["CliSlurmClient", "JsonForms"]

_READS = ("nodes", "node_states", "jobs", "job_table", "job_ids", "queue", "job_steps", "partitions",
          "reservations", "config", "stats", "triggers", "ping")
_WRITES = ("update_nodes", "drain", "down", "resume", "undrain", "create_reservation",
           "update_reservation", "delete_reservation", "set_trigger", "clear_triggers")


def _fmt_duration(d: timedelta | None) -> str:
    if d is None:
        return "infinite"
    minutes = max(1, int(d.total_seconds() // 60))
    return str(minutes)


def _fmt_time(t: datetime | Literal["now"]) -> str:
    if t == "now":
        return "now"
    assert isinstance(t, datetime)
    return t.astimezone().strftime("%Y-%m-%dT%H:%M:%S")


def _squeue_filters(*, users: Sequence[str], accounts: Sequence[str], partitions: Sequence[str],
                    states: Sequence[str], names: Sequence[str], nodes: NodeSet | None,
                    job_ids: Sequence[int]) -> list[str]:
    """squeue's options for :meth:`CliSlurmClient.job_ids`' filters (every job state by default)."""
    argv = ["--states=all" if not states else f"--states={','.join(states)}"]
    if users:
        argv.append(f"--user={','.join(users)}")
    if accounts:
        argv.append(f"--account={','.join(accounts)}")
    if partitions:
        argv.append(f"--partition={','.join(partitions)}")
    if names:
        argv.append(f"--name={','.join(names)}")
    if nodes is not None:
        argv.append(f"--nodelist={nodes}")
    if job_ids:
        argv.append(f"--jobs={','.join(str(int(j)) for j in job_ids)}")
    return argv


#: Up to this many job ids, :meth:`CliSlurmClient.jobs` reads each with its own ``scontrol show
#: job <id>`` (about 10 ms each); more, it reads every job's record once.
_SINGLE_JOB_READS = 64


@dataclass(frozen=True)
class JsonForms:
    """Which commands print JSON on this cluster (asked, not assumed from the release)."""

    scontrol: bool
    """``scontrol show node|job|partition|reservation --json`` (23.02+)."""
    sdiag: bool
    config: bool
    """``scontrol show config --json`` prints JSON (26.05+; 24.11 prints the text form)."""
    data_parser: str | None
    """The data_parser the commands' JSON comes from by default, e.g. ``data_parser/v0.0.45``."""
    json_flag: str = "--json"
    """What the reads pass: ``--json``, or ``--json=v0.0.<newest parsed>`` where the default
    format is newer than slurmtower parses (26.11's v0.0.46)."""


class CliSlurmClient:
    """A :class:`~slurmtower.slurm.client.SlurmClient` over Slurm's command-line tools."""

    def __init__(self, runner: CommandRunner | None = None, *, slurm_user: str = "slurm") -> None:
        self.runner = runner or CommandRunner()
        self.slurm_user = slurm_user
        self._version: SlurmVersion | None = None
        self._forms: JsonForms | None = None
        self._lock = threading.Lock()
        self._queue_memo: dict[int, int] = {}
        self._rows = ad.QueueRowParser()
        self._queue_digest: bytes | None = None
        self._queue_seq = 0
        self._queue_table: JobTable | None = None
        self._job_states: dict[int, str] = {}
        self._states_text: str | None = None
        self._nodes_memo: dict[str, Node] = {}
        self._nodes_text: str | None = None
        self._nodes: list[Node] | None = None
        self._states: list[Node] | None = None
        self._state_lines: dict[str, list[Node]] = {}

    # -- detection --------------------------------------------------------------------
    def version(self) -> SlurmVersion:
        if self._version is None:
            with self._lock:
                if self._version is None:
                    out = self.runner.run(["sinfo", "-V"], timeout=10).stdout
                    self._version = ad.parse_sinfo_version(out)
        return self._version

    def _probe(self, argv: list[str], key: str) -> dict[str, Any] | None:
        """``argv``'s JSON document when it prints one holding ``key`` (24.11's ``scontrol show
        config --json`` prints the text form; 22.05's commands reject ``--json``)."""
        res = self.runner.run(argv, timeout=30, check=False)
        if res.returncode != 0 or not res.stdout.lstrip().startswith("{"):
            return None
        try:
            doc = json.loads(res.stdout)
        except ValueError:
            return None
        # A newer release may name its lists otherwise: its envelope (meta) is enough here.
        return doc if isinstance(doc, dict) and (key in doc or "meta" in doc) else None

    def json_forms(self) -> JsonForms:
        """Which commands print JSON here, asked once (three cheap commands)."""
        if self._forms is None:
            with self._lock:
                if self._forms is None:
                    part = self._probe(["scontrol", "show", "partition", "--json"], "partitions")
                    sdiag = part is not None and self._probe(["sdiag", "--json"], "statistics") is not None
                    config = part is not None and \
                        self._probe(["scontrol", "show", "config", "--json"], "slurm_conf") is not None
                    parser = ad.detect_version(part).data_parser if part is not None else None
                    flag = "--json"
                    found = re.search(r"v0\.0\.(\d+)", parser or "")
                    newest = max(ad.KNOWN_DATA_PARSERS)
                    if found is not None and int(found[1]) > newest:
                        # A release newer than this slurmtower (26.11: v0.0.46): its commands
                        # still print the formats it serves when asked for one by name.
                        flag = f"--json=v0.0.{newest}"
                    self._forms = JsonForms(scontrol=part is not None, sdiag=sdiag, config=config,
                                            data_parser=parser, json_flag=flag)
        return self._forms

    def _json_flag(self) -> str:
        return self.json_forms().json_flag

    def _modern(self) -> bool:
        """``scontrol show <entity> --json`` answers (23.02 and later)."""
        return self.json_forms().scontrol

    def capabilities(self) -> Capabilities:
        forms = self.json_forms()
        version = self.version()
        if forms.data_parser and not version.data_parser:
            version = version.model_copy(update={"data_parser": forms.data_parser})
        return Capabilities(
            backend="cli",
            version=version,
            scontrol_json=forms.scontrol,
            sdiag_json=forms.sdiag,
            config_json=forms.config,
            # 22.05's squeue/sinfo --json print everything whatever -p/-u/-t say: a behaviour,
            # not something a command tells, so it goes by the release (23.02 fixed it).
            json_filters=self.version() >= SlurmVersion(major=23, minor=2),
            rest_node_update=False,
            reservation_comment=self._reservation_comments(),
            reads=_READS,
            writes=_WRITES,
        )

    def _json(self, argv: list[str], timeout: float | None = None) -> dict[str, Any]:
        res = self.runner.run(argv, timeout=timeout, check=False)
        doc: Any = None
        try:
            doc = json.loads(res.stdout) if res.stdout.strip() else None
        except ValueError as exc:
            if res.returncode == 0:
                raise SlurmError(f"{argv[0]} printed invalid JSON: {exc}", argv=argv) from exc
        errors = (doc.get("errors") or []) if isinstance(doc, dict) else []
        if res.returncode == 0 and isinstance(doc, dict) and not errors:
            return doc
        if res.returncode == 0 and doc is not None and not isinstance(doc, dict):
            raise SlurmError(f"{argv[0]} printed JSON that is not an object", argv=argv)
        msg = "; ".join(str(e.get("description") or e.get("error") or e) for e in errors if isinstance(e, dict))
        msg = msg or res.stderr.strip() or f"{argv[0]} exited with status {res.returncode}"
        # 22.05's `sinfo --json` reports an unreachable controller as rc 0 with
        # "Unspecified error", and `squeue --json` as rc 1 with no message: ask slurmctld.
        if not self.ping():
            raise SlurmUnavailable(f"slurmctld is not responding ({argv[0]}: {msg})", argv=argv,
                                   returncode=res.returncode, stderr=res.stderr)
        raise SlurmRequestError(f"{argv[0]}: {msg}", argv=argv, returncode=res.returncode, stderr=res.stderr)

    # -- reads ------------------------------------------------------------------------
    def ping(self) -> bool:
        try:
            out = self.runner.run(["scontrol", "ping"], timeout=10, check=False).stdout
        except SlurmUnavailable:
            return False
        return "UP" in out

    def nodes(self, nodes: NodeSet | None = None) -> list[Node]:
        if nodes is not None:
            return self._some_nodes(nodes)
        # The text form on every release: at 10,000 nodes 26.05's `scontrol show node --json`
        # takes 7.7 s and 463 MB in scontrol alone (and 1.3 s of parsing here), the text form
        # 0.16 s and 16 MB (22.05: 0.05 s and 11 MB at 5,000 nodes where `sinfo --json` takes
        # 0.3 s and 114 MB); both say the same (tests/test_parse_fixtures.py). A line identical
        # to the previous read is not parsed again (nodes whose slurmd is silent never change),
        # and the same list comes back when no line did.
        self.json_forms()  # asked once, before the first read (not inside a later action's timed calls)
        res = self.runner.run(["scontrol", "-o", "show", "node"], check=False)
        if res.returncode != 0:
            self._raise_failure(res.argv, res.returncode, res.stderr or res.stdout)
        with self._lock:
            if res.stdout == self._nodes_text and self._nodes is not None:
                return self._nodes
            memo, fresh = self._nodes_memo, {}
            for line in res.stdout.split("\n"):
                if line.startswith("NodeName="):
                    node = memo.get(line)
                    fresh[line] = node if node is not None else ad.parse_nodes_text(line)[0]
            result = list(fresh.values())
            self._nodes_memo, self._nodes_text, self._nodes = fresh, res.stdout, result
            return result

    def jobs(self, job_ids: Sequence[int] | None = None) -> list[Job]:
        if job_ids is not None:
            return self._some_jobs(job_ids)
        if self._modern():
            # 24.11 `squeue --json` applies the default PENDING/RUNNING filter; scontrol
            # returns every job slurmctld still holds, like 22.05's squeue --json.
            result = ad.parse_jobs_json(self._json(["scontrol", "show", "job", self._json_flag()]))
        else:
            # 22.05: `squeue --json` ignores -j/-u/-t/-p: filter client-side.
            result = ad.parse_jobs_json(self._json(["squeue", self._json_flag()]))
        if job_ids is None:
            return result
        wanted = {int(j) for j in job_ids}
        return [j for j in result if j.job_id in wanted]

    def _some_nodes(self, nodes: NodeSet) -> list[Node]:
        # Only the wanted nodes: scontrol still loads slurmctld's whole node table (one RPC)
        # but prints only these, where 22.05's `sinfo --json` prints every node (6.2 MB at
        # 5,004 nodes) for us to parse. 1,000 of 5,004 nodes: 0.04 s + 0.06 s of parsing
        # instead of 0.26 s + 1.5 s. Both forms take a hostlist expression.
        if not nodes:
            return []
        if self._modern():
            # 23.02+ prints the matching nodes and silently leaves out unknown names.
            found = ad.parse_nodes_json(self._json(["scontrol", "show", "node", str(nodes), self._json_flag()]))
            return select_nodes(found, nodes)
        res = self.runner.run(["scontrol", "-o", "show", "node", str(nodes)], check=False)
        # An unknown name gets "Node x9 not found" on stdout and exit status 1; select_nodes
        # names every such node in one NotFound.
        records = [line for line in res.stdout.splitlines() if line.startswith("NodeName=")]
        if res.returncode != 0 and " not found" not in res.stdout:
            self._raise_failure(res.argv, res.returncode, res.stderr or res.stdout)
        return select_nodes(ad.parse_nodes_text("\n".join(records)), nodes)

    def _some_jobs(self, job_ids: Sequence[int]) -> list[Job]:
        # A few ids: one `scontrol show job <id>` each, slurmctld's single-job RPC (7-18 ms
        # with 20,000 jobs queued). More: every job's record once, in the text form (0.9 s,
        # 19 MB at 20,000 jobs, where 22.05's `squeue --json` takes 6.7 s and 940 MB), and
        # only the wanted lines parsed.
        wanted = sorted({int(j) for j in job_ids})
        if not wanted:
            return []
        if len(wanted) > _SINGLE_JOB_READS:
            text = self.runner.run(["scontrol", "-o", "show", "job"]).stdout
            prefixes = tuple(f"JobId={j} " for j in wanted)
            found = ad.parse_jobs_text("\n".join(line for line in text.splitlines() if line.startswith(prefixes)))
        else:
            found = []
            for job_id in wanted:
                found += self._one_job(job_id)
        return [j for j in found if j.job_id in set(wanted)]

    def _one_job(self, job_id: int) -> list[Job]:
        """The records of one job id (every task of an array, for the array's id); none when
        slurmctld does not know it."""
        modern = self._modern()
        argv = ["scontrol", "show", "job", str(job_id), self._json_flag()] if modern else \
            ["scontrol", "-o", "show", "job", str(job_id)]
        res = self.runner.run(argv, check=False)
        if res.returncode != 0:
            if "invalid job id" in (res.stderr + res.stdout).lower():
                return []
            self._raise_failure(res.argv, res.returncode, res.stderr or res.stdout)
        if modern:
            return ad.parse_jobs_json(json.loads(res.stdout)) if res.stdout.strip() else []
        return ad.parse_jobs_text(res.stdout)

    def _raise_failure(self, argv: Sequence[str], returncode: int, message: str) -> NoReturn:
        """Raise the error for a failed read; an unanswered ping makes it :class:`SlurmUnavailable`."""
        err = classify_failure(list(argv), returncode, message)
        if not isinstance(err, SlurmUnavailable) and not self.ping():
            raise SlurmUnavailable(f"slurmctld is not responding ({argv[0]}: {message.strip()[:200]})",
                                   argv=list(argv), returncode=returncode, stderr=message)
        raise err

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
        # The text form honours every filter on all releases and prints only ids.
        argv = ["squeue", "-h", "-o", "%i", *_squeue_filters(users=users, accounts=accounts, partitions=partitions,
                                                            states=states, names=names, nodes=nodes,
                                                            job_ids=job_ids)]
        res = self.runner.run(argv, check=False)
        if res.returncode != 0:
            low = res.stderr.lower()
            if "invalid job id" in low:
                return []
            raise classify_failure(res.argv, res.returncode, res.stderr)
        ids: list[int] = []
        for line in res.stdout.split():
            base = line.split("_")[0].split("+")[0]
            if base.isdigit():
                ids.append(int(base))
        return sorted(set(ids))

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
        # The ids as squeue prints them (123_[1-1000%10] for an array's pending tasks), each
        # counted as its record's job_count.
        argv = ["squeue", "-h", "-o", "%i", *_squeue_filters(
            users=users, accounts=accounts, partitions=partitions, states=states, names=names, nodes=nodes,
            job_ids=job_ids)]
        res = self.runner.run(argv, check=False)
        if res.returncode != 0:
            if "invalid job id" in res.stderr.lower():
                return 0
            raise classify_failure(res.argv, res.returncode, res.stderr)
        return sum(array_task_count(line.partition("_[")[2].rstrip("]") or None) for line in res.stdout.split())

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
        # squeue filters (a single user even inside slurmctld), then prints the text form:
        # 0.05 s for one user's and name's 667 of 20,000 jobs, 0.39 s for all of them.
        argv = ["squeue", "-h", "-O", ad.queue_format(),
                *_squeue_filters(users=users, accounts=accounts, partitions=partitions, states=states, names=names,
                                 nodes=nodes, job_ids=job_ids)]
        res = self.runner.run(argv, check=False)
        if res.returncode != 0:
            if "invalid job id" in res.stderr.lower():
                return []
            self._raise_failure(res.argv, res.returncode, res.stderr)
        return [ad.parse_queue_line(line) for line in res.stdout.split("\n") if line]

    def job_table(self) -> JobTable:
        with self._lock:
            table = self._queue_table
        delta = self.job_queue_delta(full=table is None)
        table = JobTable.from_delta(delta) if table is None else table.apply(delta)
        with self._lock:
            self._queue_table = table
        return table

    def job_queue_delta(self, *, full: bool = False) -> QueueDelta:
        # The text form on every release (see adapters._queue for what it costs and lacks).
        # Only lines that differ from the previous read are parsed: a queue of held or
        # waiting jobs costs the squeue call and a dictionary lookup per line. The memo keeps
        # each line's hash and job id, not its row: the rows live with whoever applies the
        # deltas (and a new worker can start from their hashes: resume_queue).
        res = self.runner.run(["squeue", "-h", "--states=all", "-O", ad.queue_format()], check=False)
        if res.returncode != 0:
            self._raise_failure(res.argv, res.returncode, res.stderr)
        digest = hashlib.blake2b(res.stdout.encode("utf-8", "surrogateescape"), digest_size=16).digest()
        with self._lock:
            base = self._queue_seq
            self._queue_seq += 1
            if not full and digest == self._queue_digest:
                return QueueDelta(keys=(), rows={}, unchanged=True, seq=self._queue_seq, base=base)
            memo = {} if full else self._queue_memo
            fresh: dict[int, int] = {}
            rows: dict[int, tuple[bytes, tuple[Any, ...]]] = {}
            for line in res.stdout.split("\n"):
                if not line:
                    continue
                key = ad.line_hash(line)
                job_id = memo.get(key)
                if job_id is None:
                    job_id, fragment, columns = self._rows.row(line)
                    rows[job_id] = (fragment, columns)
                fresh[key] = job_id
            self._queue_memo, self._queue_digest = fresh, digest
            return QueueDelta(keys=tuple(sorted(fresh.values())), rows=rows, full=full,
                              seq=self._queue_seq, base=base)

    def job_state_delta(self, *, full: bool = False) -> StateDelta:
        """The job states alone, as they changed since this client's previous read (every
        job's when ``full``): 23.11's ``squeue --only-job-state`` (``REQUEST_JOB_STATE``:
        slurmctld packs each job's id and state only, not its record).

        Raises :class:`Unsupported` where squeue has no such option (22.05).
        """
        res = self.runner.run(["squeue", "--only-job-state", "-h", "--states=all", "-O",
                               f"JobID:{ad.SEP},State:{ad.SEP}"], check=False)
        if res.returncode != 0:
            if "only-job-state" in res.stderr:
                raise Unsupported("this squeue cannot read job states alone: "
                                  f"{(res.stderr.strip().splitlines() or [''])[0][:120]}")
            self._raise_failure(res.argv, res.returncode, res.stderr)
        now: dict[int, str] = {}
        for line in res.stdout.split("\n"):
            job_id, sep, rest = line.partition(ad.SEP)
            if sep and job_id.isdigit():
                now[int(job_id)] = rest.partition(ad.SEP)[0]
        with self._lock:
            before, self._job_states = self._job_states, now
        if full or not before:
            return StateDelta(states=now, full=True, count=len(now))
        changed = {k: v for k, v in now.items() if before.get(k) != v}
        return StateDelta(states=changed, count=len(now))

    def resume_queue(self, memo: dict[int, int], seq: int) -> None:
        """Go on from the deltas another client made (in this run or an earlier one: the line
        hash is the same everywhere): ``memo`` is the table's :meth:`~JobTable.line_memo`,
        ``seq`` its last delta."""
        with self._lock:
            self._queue_memo, self._queue_seq, self._queue_digest = dict(memo), seq, None

    def node_states(self) -> list[Node]:
        # `sinfo -O` folds nodes that share a state and reason into one line: at 5,000 nodes a
        # poll prints a few lines instead of 6 MB of JSON. The same list object comes back
        # while the output does not change, so a caller can skip its diff (`is`).
        res = self.runner.run(["sinfo", "-h", "--all", "-O", ad.state_format()], check=False)
        if res.returncode != 0:
            self._raise_failure(res.argv, res.returncode, res.stderr)
        # sinfo does not keep its lines in one order from call to call: compare them sorted,
        # and keep each line's nodes (a line of n[5-5000] is 4,996 nodes to build).
        lines = sorted(line for line in res.stdout.split("\n") if line.strip())
        text = "\n".join(lines)
        with self._lock:
            if text == self._states_text and self._states is not None:
                return self._states
            memo, fresh = self._state_lines, {}
            seen: dict[str, Node] = {}
            for line in lines:
                nodes = memo.get(line)
                fresh[line] = nodes if nodes is not None else ad.parse_node_state_line(line)
                for node in fresh[line]:
                    seen.setdefault(node.name, node)
            states = list(seen.values())
            self._states_text, self._states, self._state_lines = text, states, fresh
            return states

    def job_steps(self, job_ids: Sequence[int] | None = None) -> list[JobStep]:
        text = self.runner.run(["scontrol", "-o", "show", "steps"]).stdout
        steps = ad.parse_steps_text(text)
        if job_ids is None:
            return steps
        wanted = {int(j) for j in job_ids}
        return [s for s in steps if s.job_id in wanted]

    def partitions(self) -> list[Partition]:
        # 23.11-25.11's JSON (v0.0.40-44) does not say which partition is the default or hidden;
        # their text form does (one RPC either way).
        if self._modern() and ad.json_marks_default(self.json_forms().data_parser):
            return ad.parse_partitions_json(self._json(["scontrol", "show", "partition", self._json_flag()]))
        return ad.parse_partitions_text(self.runner.run(["scontrol", "-o", "show", "partition"]).stdout)

    def reservations(self) -> list[Reservation]:
        if self._modern():
            return ad.parse_reservations_json(self._json(["scontrol", "show", "reservation", self._json_flag()]))
        res = self.runner.run(["scontrol", "-o", "show", "reservation"])
        return ad.parse_reservations_text(res.stdout)

    def config(self) -> ClusterConfig:
        # The text form even where `show config --json` exists (26.05): it holds nine settings
        # the JSON leaves out, the controllers' ping status, and the same notation on every
        # release (the JSON writes "60" for "60 sec", "non_responsive_only" for "1" ...). The
        # JSON (GET /conf) is what the REST backend reads, with no Slurm command needed.
        return ad.parse_config_text(self.runner.run(["scontrol", "show", "config"]).stdout)

    def stats(self) -> ControllerStats:
        if self.json_forms().sdiag:
            return ad.parse_sdiag_json(self._json(["sdiag", self._json_flag()]))
        return ad.parse_sdiag_text(self.runner.run(["sdiag"]).stdout)

    def submit_batch(self, args: Sequence[str], command: str) -> int:
        if any(a == "--wrap" or a.startswith("--wrap=") for a in args):
            raise InvalidInput("submit_batch takes the command apart from the sbatch options", param="args")
        res = self.runner.run(["sbatch", "--parsable", *args, "--wrap", command], check=False)
        if res.returncode != 0:
            self._raise_failure(res.argv, res.returncode, res.stderr or res.stdout)
        return int(res.stdout.strip().split(";")[0])

    def cancel_jobs(self, job_ids: Sequence[int]) -> None:
        if job_ids:
            res = self.runner.run(["scancel", *(str(int(j)) for j in job_ids)], check=False)
            if res.returncode != 0 and "invalid job id" not in (res.stderr + res.stdout).lower():
                self._raise_failure(res.argv, res.returncode, res.stderr or res.stdout)

    def triggers(self) -> list[Trigger]:
        res = self.runner.run(["strigger", "--get"], check=False)
        if res.returncode != 0 and "no triggers" in (res.stderr + res.stdout).lower():
            return []
        if res.returncode != 0:
            raise classify_failure(res.argv, res.returncode, res.stderr)
        return ad.parse_triggers_text(res.stdout)

    # -- acts -------------------------------------------------------------------------
    def update_nodes(self, nodes: NodeSet, *, state: str | None = None, reason: str | None = None,
                     **fields: str) -> None:
        if not nodes:
            raise InvalidInput("nodes: empty node set", param="nodes")
        argv = ["scontrol", "update", f"nodename={nodes}"]
        for key, value in fields.items():
            keyword = NODE_UPDATE_FIELDS.get(key)
            if keyword is None or key in {"state", "reason"}:
                raise InvalidInput(f"node field {key!r} cannot be updated", param=key)
            argv.append(f"{keyword}={value}")
        if state is not None:
            argv.append(f"state={state.upper()}")
        if reason is not None:
            argv.append(f"reason={reason}")
        if len(argv) == 3:
            raise InvalidInput("nothing to update", param="infos")
        self.runner.run(argv)

    def drain(self, nodes: NodeSet, *, reason: str) -> None:
        self.update_nodes(nodes, state="DRAIN", reason=reason)

    def down(self, nodes: NodeSet, *, reason: str) -> None:
        self.update_nodes(nodes, state="DOWN", reason=reason)

    def resume(self, nodes: NodeSet) -> None:
        self.update_nodes(nodes, state="RESUME")

    def undrain(self, nodes: NodeSet) -> None:
        self.update_nodes(nodes, state="UNDRAIN")

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
        argv = ["scontrol", "create", "reservation", f"reservationname={name}", f"starttime={_fmt_time(start_time)}"]
        # Slurm takes an end or a duration (an end given wins: no "infinite" beside it).
        argv.append(f"endtime={_fmt_time(end_time)}" if end_time is not None
                    else f"duration={_fmt_duration(duration)}")
        if nodes is not None:
            argv.append(f"nodes={nodes}")
        if node_count is not None:
            argv.append(f"nodecnt={node_count}")
        if partition is not None:
            argv.append(f"partitionname={partition}")
        if features is not None:
            argv.append(f"features={features}")
        if users:
            argv.append(f"users={','.join(users)}")
        if accounts:
            argv.append(f"accounts={','.join(accounts)}")
        if flags:
            argv.append(f"flags={','.join(f.upper() for f in flags)}")
        if tres is not None:
            argv.append(f"tres={tres}")
        if comment is not None and self._reservation_comments():
            argv.append(f"comment={comment}")
        out = self.runner.run(argv).stdout
        created = out.strip().rsplit(":", 1)[-1].strip()
        return created or name

    def _reservation_comments(self) -> bool:
        # A reservation's Comment= exists from 23.02 (22.05's scontrol: "Unknown parameter").
        return self.version() >= SlurmVersion(major=23, minor=2)

    def update_reservation(self, name: str, *, nodes: NodeSet | None = None,
                           duration: timedelta | None = None, users: Sequence[str] | None = None,
                           flags: Sequence[str] | None = None, start_time: datetime | None = None,
                           end_time: datetime | None = None, accounts: Sequence[str] | None = None,
                           remove_flags: Sequence[str] | None = None, comment: str | None = None) -> None:
        # Slurm 22.05 has no `nodes+=`: callers pass the full node list. ``flags`` are added to
        # the reservation's (Slurm's update semantics), ``remove_flags`` taken away.
        argv = ["scontrol", "update", f"reservationname={name}"]
        if nodes is not None:
            argv.append(f"nodes={nodes}")
        if start_time is not None:
            argv.append(f"starttime={_fmt_time(start_time)}")
        if end_time is not None:
            argv.append(f"endtime={_fmt_time(end_time)}")
        if duration is not None:
            argv.append(f"duration={_fmt_duration(duration)}")
        if users is not None:
            argv.append(f"users={','.join(users)}")
        if accounts is not None:
            argv.append(f"accounts={','.join(accounts)}")
        if flags:
            argv.append(f"flags={','.join(f.upper() for f in flags)}")
        if remove_flags:
            argv.append(f"flags-={','.join(f.upper() for f in remove_flags)}")
        if comment is not None and self._reservation_comments():
            argv.append(f"comment={comment}")
        if len(argv) == 3:
            raise InvalidInput("nothing to update", param="props")
        self.runner.run(argv)

    def delete_reservation(self, name: str) -> None:
        self.runner.run(["scontrol", "delete", f"reservationname={name}"])

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
        if event not in TRIGGER_EVENTS:
            raise InvalidInput(f"event {event!r} is not one of {', '.join(TRIGGER_EVENTS)}", param="event")
        argv = ["strigger", "--set"]
        if job_id is not None:
            if event not in {"fini", "time"}:
                raise InvalidInput(f"event {event!r} is not a job event (fini, time)", param="event")
            argv += [f"--jobid={int(job_id)}", f"--{event}"]
        elif event in {"fini", "time"}:
            raise InvalidInput(f"event {event!r} needs a jobid", param="jobid")
        elif event == "reconfig":
            argv.append("--reconfig")
        elif event == "burst_buffer":
            argv.append("--burst_buffer")
        else:
            argv += [f"--node={nodes}" if nodes else "--node", f"--{event}"]
        if offset:
            argv.append(f"--offset={int(offset)}")
        if perm:
            argv.append("--flags=PERM")
        argv.append(f"--program={program}")
        self.runner.run(argv, as_user=self.slurm_user)
        # strigger --set prints no id: find the newest matching trigger of SlurmUser.
        candidates = [
            t for t in self.triggers()
            if t.program == program and t.user == self.slurm_user and (t.type == event or event == "burst_buffer")
        ]
        if not candidates:
            raise SlurmError("strigger accepted the trigger but it is not listed by strigger --get",
                             argv=argv)
        return max(t.trigger_id for t in candidates)

    def clear_triggers(self, trigger_ids: Sequence[int], *, user: str | None = None) -> None:
        for tid in trigger_ids:
            argv = ["strigger", "--clear", f"--id={int(tid)}"]
            if user:
                argv.append(f"--user={user}")
            self.runner.run(argv)
