"""What a caller may see: the one visibility policy of every route, action, page and metric.

Two rules, both from the settings (``api.*``):

* **Hidden partitions** (``api.hidden_partitions``) are hidden from everyone: their jobs
  leave every list (a pending job that names several partitions keeps the visible ones),
  their names leave node and association partition lists, and a node that belongs to hidden
  partitions only is left out. They are applied where snapshots and records are read (the
  refresh worker's queue and node tables, the accounting reader, the read actions), so a
  view built on them cannot forget them.
* **Private job fields** (``api.private_job_fields``: submit line, command, work dir, output
  paths by default), like Slurm's ``PrivateData=jobs``: readers and users see them only on
  their own jobs, i.e. jobs whose ``user_name`` equals the principal's name (the token's
  ``name`` or the JWT's subject); operators and admins see them on every job
  (``api.readers_see_private_job_fields`` opens them to the ``reader`` role too, not to
  ``user``: a person's token sees their own jobs). They are applied per caller, on the way
  out: the queue keeps one cached, private-free view for readers.

What a snapshot cannot cut, because it is a record *about* nodes and partitions rather than a
node or a job, is cut on the way out by :class:`Hidden` (:meth:`Visibility.hiding`): events and
their payloads (a breaker's scopes, a trigger's node list), audit records, rule runs and
envelopes, whatever route, stream or page sends them; the circuit breaker's refusal (its 409)
is made through it. It is the same for every role: hidden from everyone means operators and
admins too. One thing is not hidden from a caller: the nodes it named itself, in the answer
to its own execution (an operator may act on a hidden node by name; hiding its own words from
it would only tell it which of them are hidden). Names go, counts stay: a breaker's
``already_out_count`` or a scope's node total still counts the hidden nodes it decided on.
Problem bodies in general are not searched: they echo what the caller sent.
"""

from __future__ import annotations

import bisect
import functools
import re
import threading
import weakref
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pydantic import BaseModel

from slurmtower.errors import NodeSetError, PermissionDenied
from slurmtower.models import Job, Node, Partition
from slurmtower.models.event import Event
from slurmtower.models.table import JobTable
from slurmtower.nodeset import NodeSet
from slurmtower.principal import READER, USER, Perm, role_perm

if TYPE_CHECKING:
    from slurmtower.settings import Settings

__all__ = ["DEFAULT_PRIVATE_JOB_FIELDS", "HIDDEN_TEXT", "NOTHING_HIDDEN", "Hidden", "PrivateFreeRows", "Viewer",
           "Visibility"]

DEFAULT_PRIVATE_JOB_FIELDS: frozenset[str] = frozenset(
    {"submit_line", "command", "work_dir", "standard_output", "standard_error"})

#: Roles that own jobs: they see the private fields of jobs whose user name is theirs.
_OWNERS = frozenset({READER, USER})


class Viewer(Protocol):
    """Who reads (:class:`slurmtower.principal.Principal` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def role(self) -> str: ...


def _split(partition: str | None) -> list[str]:
    return [p for p in (partition or "").split(",") if p]


@dataclass(frozen=True)
class Visibility:
    """The policy; build it with :meth:`from_settings` (cheap: no I/O)."""

    hidden_partitions: frozenset[str] = frozenset()
    private_job_fields: frozenset[str] = DEFAULT_PRIVATE_JOB_FIELDS
    readers_see_private: bool = False
    reports_for_readers: str = "totals"
    reports_for_users: str = "own"
    _strip: re.Pattern[bytes] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.private_job_fields:
            keys = b"|".join(re.escape(f.encode()) for f in sorted(self.private_job_fields))
            # A table row is a flat JSON object whose first key is job_id, so a private key
            # always follows a comma; a raw `,"` never occurs inside a JSON string.
            pattern = re.compile(rb',"(?:' + keys + rb')":(?:"(?:[^"\\]|\\.)*"|null)')
            object.__setattr__(self, "_strip", pattern)

    @classmethod
    def from_settings(cls, settings: Settings) -> Visibility:
        api = settings.api
        return cls(hidden_partitions=frozenset(api.hidden_partitions),
                   private_job_fields=frozenset(api.private_job_fields),
                   readers_see_private=api.readers_see_private_job_fields,
                   reports_for_readers=api.reports_for_readers, reports_for_users=api.reports_for_users)

    # -- hidden partitions -----------------------------------------------------------------
    def shows_partition(self, name: str | None) -> bool:
        """False for a hidden partition (a name list such as ``"batch,short"`` shows when
        any of its partitions does)."""
        parts = _split(name)
        return not parts or any(p not in self.hidden_partitions for p in parts)

    def partition_names(self, names: Iterable[str]) -> list[str]:
        return [n for n in names if n not in self.hidden_partitions]

    def job(self, job: Job) -> Job | None:
        """``job`` without hidden partition names; None when it runs in hidden ones only."""
        if not self.hidden_partitions:
            return job
        parts = _split(job.partition)
        shown = [p for p in parts if p not in self.hidden_partitions]
        if parts and not shown:
            return None
        return job if shown == parts else job.model_copy(update={"partition": ",".join(shown)})

    def jobs(self, jobs: Iterable[Job]) -> list[Job]:
        """Jobs outside hidden partitions (see :meth:`job`)."""
        return [j for j in (self.job(job) for job in jobs) if j is not None]

    def job_table(self, table: JobTable) -> JobTable:
        """The queue table without hidden partitions."""
        return table.hiding(self.hidden_partitions)

    def node(self, node: Node) -> Node | None:
        """``node`` without hidden partition names; None when it is in hidden ones only."""
        if not self.hidden_partitions:
            return node
        shown = self.partition_names(node.partitions)
        if node.partitions and not shown:
            return None
        return node if len(shown) == len(node.partitions) else node.model_copy(update={"partitions": shown})

    def nodes(self, nodes: Iterable[Node]) -> list[Node]:
        return [n for n in (self.node(node) for node in nodes) if n is not None]

    def partitions(self, partitions: Iterable[Partition]) -> list[Partition]:
        return [p for p in partitions if p.name not in self.hidden_partitions]

    def hidden_nodes(self, partitions: Iterable[Partition]) -> frozenset[str]:
        """The nodes that belong to hidden partitions only (their events are hidden too)."""
        if not self.hidden_partitions:
            return frozenset()

        hidden: set[str] = set()
        shown: set[str] = set()
        for part in partitions:
            if part.nodes:
                (hidden if part.name in self.hidden_partitions else shown).update(NodeSet(part.nodes))
        return frozenset(hidden - shown)

    def hiding(self, partitions: Iterable[Partition]) -> Hidden:
        """What a cluster whose partitions are ``partitions`` (every one, as Slurm gives them)
        hides from every caller: the filter of every record that leaves the service."""
        if not self.hidden_partitions:
            return NOTHING_HIDDEN
        return Hidden(self.hidden_partitions, self.hidden_nodes(partitions))

    def hiding_nodes(self, nodes: Iterable[Node]) -> Hidden:
        """:meth:`hiding` from every node of a cluster (each names its partitions), where the
        nodes are at hand (an action that read them)."""
        if not self.hidden_partitions:
            return NOTHING_HIDDEN
        return Hidden(self.hidden_partitions, frozenset(
            n.name for n in nodes if n.partitions and all(p in self.hidden_partitions for p in n.partitions)))

    # -- usage reports -------------------------------------------------------------------------
    def report_access(self, viewer: Viewer) -> str:
        """``all``, ``own``, ``totals`` or ``none``: what ``viewer`` sees of the usage reports
        (operators and admins every figure; readers and users as ``api.reports_for_*`` say)."""
        if role_perm(viewer.role) >= Perm.OPERATE:
            return "all"
        return self.reports_for_users if viewer.role == USER else self.reports_for_readers

    def report_filters(self, viewer: Viewer, *, group_by: str | None, users: Sequence[str],
                       accounts: Sequence[str], own_accounts: Callable[[], Sequence[str]]
                       ) -> tuple[list[str], list[str]]:
        """The users and accounts a report for ``viewer`` covers: what was asked, narrowed to
        what the viewer may see. ``totals``: no one user's figures (no ``group_by`` of users,
        no ``users`` filter). ``own``: the viewer's own usage (users narrowed to the viewer)
        and their accounts' totals (accounts narrowed to ``own_accounts()``, the accounts of
        the viewer's associations in slurmdbd, asked only when needed).

        Raises:
            PermissionDenied: naming ``group_by``, ``users`` or ``accounts`` when the viewer
                asked for more than they may see (nothing is narrowed silently).
        """
        access = self.report_access(viewer)
        users, accounts = list(users), list(accounts)
        setting = "api.reports_for_users" if viewer.role == USER else "api.reports_for_readers"
        if access == "none":
            raise PermissionDenied(f"usage reports are not open to {viewer.role}s ({setting})")
        if access == "all":
            return users, accounts
        personal = group_by in ("user", "account+user")
        if access == "totals":
            if personal:
                raise PermissionDenied(f"{viewer.role}s see totals only, not group_by={group_by} ({setting})",
                                       param="group_by")
            if users:
                raise PermissionDenied(f"{viewer.role}s see totals only, not a user's usage ({setting})",
                                       param="users")
            return users, accounts
        others = [u for u in users if u != viewer.name]
        if others:
            raise PermissionDenied(f"{viewer.name} may see only their own usage, not {others[0][:60]!r}",
                                   param="users")
        if personal:
            users = [viewer.name]
        if personal and not accounts:
            return users, accounts
        mine = list(own_accounts())
        foreign = [a for a in accounts if a not in mine]
        if foreign:
            raise PermissionDenied(f"{viewer.name} may see only their accounts' totals, not {foreign[0][:60]!r}",
                                   param="accounts")
        if not accounts and group_by not in ("cluster", "partition", "qos"):
            if not mine:
                raise PermissionDenied(f"{viewer.name} has no account in slurmdbd: no account totals to show",
                                       param="accounts")
            accounts = mine
        return users, accounts

    # -- private job fields ------------------------------------------------------------------
    def sees_all_private(self, viewer: Viewer) -> bool:
        """The viewer sees private fields on every job (operators, admins; readers when
        ``api.readers_see_private_job_fields``)."""
        return (not self.private_job_fields or role_perm(viewer.role) >= Perm.OPERATE
                or (self.readers_see_private and viewer.role == READER))

    def owns(self, viewer: Viewer, user_name: str | None) -> bool:
        """``user_name``'s jobs are the viewer's own: a reader or a user of that name."""
        # Only an authenticated reader or user owns jobs: anonymous readers (auth.anonymous_read,
        # role "anonymous") are named "anonymous", which may be a Slurm user's name too.
        return viewer.role in _OWNERS and user_name is not None and user_name == viewer.name

    def sees_private(self, viewer: Viewer, user_name: str | None) -> bool:
        """The viewer sees the private fields of a job of ``user_name``: the viewer's own
        job (:meth:`owns`), or :meth:`sees_all_private`."""
        return self.sees_all_private(viewer) or self.owns(viewer, user_name)

    def check_search(self, params: Mapping[str, Any] | None, viewer: Viewer) -> None:
        """Refuse a search (an action's ``criterias``) by private fields from a viewer who
        does not see them on every job: its answer would tell them.

        Raises:
            PermissionDenied: naming the criterion (``criterias.submit_line``).
        """
        criterias = (params or {}).get("criterias")
        if not isinstance(criterias, Mapping) or self.sees_all_private(viewer):
            return
        for key in criterias:
            if key in self.private_job_fields:
                raise PermissionDenied(f"criterias.{key} is a private job field: {viewer.role}s may not "
                                       "search by it", param=f"criterias.{key}")

    def job_record(self, record: Mapping[str, Any], viewer: Viewer) -> dict[str, Any]:
        """A job as a dict (a live job or an accounting row dumped) with its private fields
        null unless the viewer may see them."""
        out = dict(record)
        if not self.sees_private(viewer, out.get("user_name")):
            for name in self.private_job_fields:
                if name in out:
                    out[name] = None
        return out

    def records(self, value: Any, viewer: Viewer) -> Any:
        """``value`` (JSON data: an action's result) with :meth:`job_record` applied to every
        job in it, i.e. every object with a ``job_id`` and a ``user_name``, however deep."""
        if self.sees_all_private(viewer):
            return value
        if isinstance(value, list):
            return [self.records(v, viewer) for v in value]
        if isinstance(value, dict):
            out = {k: self.records(v, viewer) for k, v in value.items()}
            return self.job_record(out, viewer) if "job_id" in out and "user_name" in out else out
        return value

    def redact(self, job: Any, viewer: Viewer) -> Any:
        """A pydantic job (:class:`Job`, :class:`~slurmtower.models.accounting.HistoryJob`)
        with its private fields set to None unless the viewer may see them."""
        if self.sees_private(viewer, getattr(job, "user_name", None)):
            return job
        update = {f: None for f in self.private_job_fields if f in type(job).model_fields}
        return job.model_copy(update=update) if update else job

    def private_free_table(self, table: JobTable, owner: str | None = None) -> JobTable | PrivateFreeRows:
        """``table``'s rows with the private fields left out of every row but those of
        ``owner``'s jobs (``table`` itself when no field is private). Each row's private
        fields are found once (memo by fragment: a refresh that changed a few jobs costs a
        few regex searches) and kept as their byte offsets; the rows are cut out when
        rendered, so readers' views cost no second copy of the queue (40 MB at 100,000 jobs)."""
        strip = self._strip
        if strip is None:
            return table
        variant = (owner, strip.pattern)
        with _memo_lock:
            made = _TABLES.get(id(table))
            done = made[1].get(variant) if made is not None and made[0]() is table else None
        if done is not None:
            return done
        own = frozenset(table.rows_where("user", {owner})) if owner is not None else frozenset()
        spans: list[bytes] = []
        with _memo_lock:
            for frag in table.fragments:
                found = _SPANS.get(id(frag))
                if found is None or found[0] is not frag:
                    cuts = array("I", [i for m in strip.finditer(frag) for i in m.span()]).tobytes()
                    found = (frag, _LAYOUTS.setdefault(cuts, cuts))  # a bulk submission's rows cut alike
                    _SPANS[id(frag)] = found
                spans.append(found[1])
            if len(_SPANS) > 3 * len(spans) + 1000:  # forget rows no longer read
                keep = {id(f) for f in table.fragments}
                for key in [k for k in _SPANS if k not in keep]:
                    del _SPANS[key]
                if len(_LAYOUTS) > 2 * len(spans) + 1000:
                    _LAYOUTS.clear()
        out = PrivateFreeRows(table, spans, own)
        with _memo_lock:
            made = _TABLES.get(id(table))
            if made is None or made[0]() is not table:
                key = id(table)
                made = _TABLES[key] = (weakref.ref(table, functools.partial(_forget_table, key)), {})
            made[1][variant] = out
        return out

    def owns_jobs(self, table: JobTable, viewer: Viewer) -> bool:
        """The viewer has jobs in ``table`` whose private fields it sees (its private-free
        view is then its own)."""
        return viewer.role in _OWNERS and bool(table.rows_where("user", {viewer.name}))


#: What stands in free text for a hidden node or partition name.
HIDDEN_TEXT = "(hidden)"
#: Keys whose value (a node set or a list of node names) names nodes, in any record.
_NODE_KEYS = frozenset({"node", "nodes", "node_name", "nodelist", "already_out", "requested"})
#: Keys whose value (``"a,b"`` or a list) names partitions, in any record.
_PARTITION_KEYS = frozenset({"partition", "partitions"})
#: A node name or node set in free text (``n1``, ``n[1-4]``, ``gpu[01-02],cpu7``); a token ends on
#: a word character or a bracket, not on the full stop or hyphen of the prose around it.
_ATOM = r"\w(?:[\w.\-]|\[[\d,\-]+\])*(?<=[\w\]])"
_TOKEN = re.compile(rf"(?<![\w.\-\[\]]){_ATOM}(?:,{_ATOM})*")
_HEAD = re.compile(r"^[^\d\[]*")

_M = TypeVar("_M", bound=BaseModel)


@dataclass(frozen=True)
class Hidden:
    """What one cluster hides from every caller (:meth:`Visibility.hiding`): its hidden
    partitions and the nodes only in them. Applied on the way out to every record about
    nodes or partitions (events, audit records, rule runs, envelopes, the breaker's refusal),
    by structure first, then in free text:

    * a key that is a hidden node or partition name goes (``before: {"n1": ...}``);
    * a node key (``node``, ``nodes``, ``already_out``, ``requested`` ...) keeps its visible
      nodes, folded (``n[1-4]`` -> ``n[3-4]``), or becomes null (``[]`` for a list);
    * a partition key (``partition``, ``partitions``) keeps its visible partitions, or
      becomes null;
    * an object *about hidden things only* (every partition it names hidden, or every node it
      names hidden) leaves a list it is in (a breaker's scope of a hidden partition, a job of
      one); where it is a value it stays, cut as above; a whole record about hidden things
      only is left out (:meth:`event`, :meth:`item`);
    * any other text has hidden node names (also inside node sets) and hidden partition names
      replaced by :data:`HIDDEN_TEXT` (a refusal's message, a reason, a trigger's argument).
    """

    partitions: frozenset[str] = frozenset()
    nodes: frozenset[str] = frozenset()
    _words: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)
    _probe: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.partitions:
            words = "|".join(re.escape(p) for p in sorted(self.partitions, key=len, reverse=True))
            object.__setattr__(self, "_words", re.compile(rf"(?<![\w.\-])(?:{words})(?![\w\-])"))
        if self.nodes:
            # What any text naming a hidden node holds (n1, n[1-2]: "n" then a digit or a
            # bracket): text without it is not searched node set by node set.
            probes = set()
            for name in self.nodes:
                head = _HEAD.match(name).group(0)  # type: ignore[union-attr]  # (matches every string)
                probes.add(re.escape(name) if head == name else re.escape(head) + r"[\d\[]")
            object.__setattr__(self, "_probe", re.compile("|".join(sorted(probes))))

    def __bool__(self) -> bool:
        return bool(self.partitions or self.nodes)

    def but(self, nodes: str | None) -> Hidden:
        """What is hidden from a caller who named ``nodes`` (a node set) itself: its own words
        are not hidden from it (hiding them would tell which of them are hidden)."""
        if not nodes or not self.nodes:
            return self
        try:
            named = set(NodeSet(nodes)) & self.nodes
        except NodeSetError:
            return self
        return Hidden(self.partitions, self.nodes - named) if named else self

    # -- names -------------------------------------------------------------------------------
    def node_set(self, expr: str) -> str | None:
        """The visible nodes of a node set, folded (``expr`` itself when it names no hidden
        node); None when every node it names is hidden. Text that is no node set is cut as
        :meth:`text`."""
        if not self.nodes:
            return expr
        if "[" not in expr and "," not in expr:
            return None if expr in self.nodes else self.text(expr)
        try:
            nodes = list(NodeSet(expr))
        except NodeSetError:
            return self.text(expr)
        shown = [n for n in nodes if n not in self.nodes]
        if len(shown) == len(nodes):
            return expr
        return str(NodeSet(",".join(shown))) if shown else None

    def partition_names(self, names: str) -> str | None:
        """The visible partitions of ``"a,b"``; None when every one is hidden."""
        parts = _split(names)
        shown = [p for p in parts if p not in self.partitions]
        return names if len(shown) == len(parts) else ",".join(shown) or None

    def text(self, text: str) -> str:
        """``text`` with each hidden node (a node set keeps its visible nodes: ``n[1-4]`` ->
        ``n[3-4]``) and each hidden partition name replaced by :data:`HIDDEN_TEXT`."""
        if self._probe is not None and self._probe.search(text):
            text = _TOKEN.sub(self._token, text)
        if self._words is not None:
            text = self._words.sub(HIDDEN_TEXT, text)
        return text

    def _token(self, match: re.Match[str]) -> str:
        token = match.group(0)
        if "[" not in token and "," not in token:
            return HIDDEN_TEXT if token in self.nodes else token
        try:
            nodes = list(NodeSet(token))
        except NodeSetError:
            return token
        shown = [n for n in nodes if n not in self.nodes]
        if len(shown) == len(nodes):
            return token
        return str(NodeSet(",".join(shown))) if shown else HIDDEN_TEXT

    # -- records -----------------------------------------------------------------------------
    def scrub(self, value: Any) -> Any:
        """``value`` (JSON data: a payload, an envelope, a problem body) as callers see it
        (the rules of the class); ``value`` itself when nothing is hidden."""
        return self._walk(value)[0] if self else value

    def event(self, event: Event) -> Event | None:
        """``event`` as callers see it; None when it is about hidden things only: its node is
        hidden, or its payload names hidden nodes or partitions only (a trigger on hidden
        nodes, a breaker refusing a drain of hidden nodes)."""
        if not self:
            return event
        if event.node is not None and event.node in self.nodes:
            return None
        payload, gone = self._dict(event.payload)
        if gone:
            return None
        return event if payload == event.payload else event.model_copy(update={"payload": payload})

    def item(self, item: _M) -> _M | None:
        """A record (an audit record, a rule run) as callers see it; None when it is about
        hidden things only (its ``nodes``, ``node`` or ``partition`` hidden)."""
        if not self:
            return item
        raw = item.model_dump(mode="json")
        shown, gone = self._dict(raw)
        if gone:
            return None
        return item if shown == raw else type(item).model_validate(shown)

    def _walk(self, value: Any) -> tuple[Any, bool]:
        """(``value`` as shown, whether it is about hidden things only)."""
        if isinstance(value, str):
            return self.text(value), False
        if isinstance(value, dict):
            return self._dict(value)
        if isinstance(value, list):
            out = []
            for each in value:
                shown, gone = self._walk(each)
                if not gone:
                    out.append(shown)
            return out, False
        return value, False

    def _dict(self, value: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        out: dict[str, Any] = {}
        named = hidden_only = 0
        hidden_partition = False
        for key, each in value.items():
            if key in self.nodes or key in self.partitions:
                continue
            if key in _NODE_KEYS and _names(each):
                shown: Any = (self.node_set(each) if isinstance(each, str)
                              else [n for n in map(self.node_set, each) if n is not None])
                named += 1
                hidden_only += not shown
                out[key] = shown
            elif key in _PARTITION_KEYS and _names(each):
                shown = (self.partition_names(each) if isinstance(each, str)
                         else [p for p in each if p not in self.partitions])
                hidden_partition = hidden_partition or not shown
                out[key] = shown or (None if isinstance(each, str) else [])
            else:
                out[key] = self._walk(each)[0]
        return out, hidden_partition or (named > 0 and hidden_only == named)


NOTHING_HIDDEN = Hidden()


def _names(value: Any) -> bool:
    """``value`` is a name or a list of names (not a count, not empty)."""
    return (isinstance(value, str) and bool(value)) or (
        isinstance(value, list) and bool(value) and all(isinstance(v, str) for v in value))


class PrivateFreeRows:
    """A queue table's rows as a reader sees them (:meth:`Visibility.private_free_table`):
    what a page or the whole queue renders (``keys``, ``after``, ``json_array``,
    ``all_json``), with each row's private fields cut out as it is rendered. It has no
    ``fragments``: a row's stored JSON holds the private fields."""

    __slots__ = ("_fragments", "_own", "_spans", "keys")

    def __init__(self, table: JobTable, spans: Sequence[bytes], own: frozenset[int]) -> None:
        # The table's tuples, not the table: the memo of these views must not keep it alive.
        self._fragments, self._spans, self._own, self.keys = table.fragments, spans, own, table.keys

    def __len__(self) -> int:
        return len(self.keys)

    def after(self, rows: Sequence[int], key: Any) -> int:
        """Position in ``rows`` of the first row whose job id sorts after ``key`` (as
        :meth:`JobTable.after <slurmtower.models.table.JobTable.after>`)."""
        keys = self.keys
        return 0 if key is None else bisect.bisect_right(rows, key, key=lambda r: keys[r])

    def row(self, r: int) -> bytes:
        """Row ``r``'s JSON without its private fields (all of it for the owner's jobs)."""
        frag, cuts = self._fragments[r], self._spans[r]
        if not cuts or r in self._own:
            return frag
        at = memoryview(cuts).cast("I")
        pieces, start = [], 0
        for i in range(0, len(at), 2):
            pieces.append(frag[start:at[i]])
            start = at[i + 1]
        pieces.append(frag[start:])
        return b"".join(pieces)

    def json_array(self, rows: Iterable[int]) -> bytes:
        """``[row, row, ...]`` as JSON bytes."""
        row = self.row
        return b"[" + b",".join([row(r) for r in rows]) + b"]"

    def all_json(self) -> bytes:
        return self.json_array(range(len(self.keys)))


#: id(fragment) -> (fragment, the byte offsets of its private fields: start, end, ... as
#: array('I') bytes; b"" when it has none): unchanged rows are the same bytes objects round
#: after round, so each is searched once.
_SPANS: dict[int, tuple[bytes, bytes]] = {}
#: One bytes object per distinct set of offsets (rows of one bulk submission are cut alike).
_LAYOUTS: dict[bytes, bytes] = {}
#: The private-free tables made of each table still alive (by its id), by (owner, pattern):
#: filtered reads of one snapshot share them, and they go with their table (a memo that held
#: the last eight tables kept seven old snapshots of 100,000 jobs alive).
_TABLES: dict[int, tuple[weakref.ref[JobTable], dict[tuple[str | None, bytes], PrivateFreeRows]]] = {}
_memo_lock = threading.Lock()


def _forget_table(key: int, _gone: object, tables: dict[int, Any] = _TABLES) -> None:
    # (Bound where it is used, with the dict: at exit the module's names are gone.)
    # Runs where the table is freed (the event loop, when a round replaces a snapshot): never
    # waits for _memo_lock, which a thread holds while it strips 100,000 rows. The dict's own
    # operations are atomic; the id cannot be reused before the table's memory is freed, after this.
    made = tables.get(key)
    if made is not None and made[0]() is None:
        tables.pop(key, None)

