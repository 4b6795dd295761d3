"""The compact queue table: squeue's text form parsed into rows that read back as the same
jobs as Slurm's JSON, filters over its indexes, keyset paging and hidden partitions."""

from __future__ import annotations

import json
import pickle

import pytest

from slurmtower.models import Job, JobState, Node, NodeState
from slurmtower.models.table import JobTable, NodeTable
from slurmtower.slurm import CliSlurmClient, CommandRunner
from slurmtower.slurm import adapters as ad
from tests.conftest import sh


def _jobs() -> list[Job]:
    return [
        Job(job_id=1, user_name="alice", account="physics", partition="batch", state=JobState.RUNNING,
            name="a", nodes="n[1-2]", cpus=4, memory_mib=400),
        Job(job_id=2, user_name="bob", account="chemistry", partition="short,batch", state=JobState.PENDING,
            name="b"),
        Job(job_id=3, user_name="alice", account="physics", partition="short", state=JobState.PENDING,
            name="a"),
        Job(job_id=10, user_name="carol", account="biology", partition="hidden", state=JobState.PENDING,
            name="c"),
    ]


def test_table_rows_read_back_as_the_jobs() -> None:
    jobs = _jobs()
    table = JobTable.from_jobs(reversed(jobs))
    assert table.keys == (1, 2, 3, 10)
    assert table.jobs() == jobs
    assert json.loads(table.all_json()) == [json.loads(j.model_dump_json(exclude_defaults=True)) for j in jobs]
    assert table.active() == [jobs[0]]


@pytest.mark.parametrize(("filters", "want"), [
    ({"user": {"alice"}}, [1, 3]),
    ({"user": {"alice", "bob"}}, [1, 2, 3]),
    ({"partition": {"batch"}}, [1, 2]),  # a pending job naming two partitions is in both
    ({"partition": {"short"}, "user": {"bob"}}, [2]),
    ({"state": {"PENDING"}, "account": {"physics"}}, [3]),
    ({"nodes": {"n2"}}, [1]),
    ({"name": {"nope"}}, []),
    ({}, [1, 2, 3, 10]),
], ids=lambda v: str({k: sorted(s) for k, s in v.items()}) if isinstance(v, dict) else str(v))
def test_table_filters(filters: dict[str, set[str]], want: list[int]) -> None:
    table = JobTable.from_jobs(_jobs())
    assert [table.keys[r] for r in table.select(**filters)] == want


def test_table_keyset_paging_and_pickling() -> None:
    table = pickle.loads(pickle.dumps(JobTable.from_jobs(_jobs())))
    rows = table.select()
    assert table.after(rows, None) == 0
    assert table.after(rows, 2) == 2  # the first job after id 2 is the third row
    assert table.after(rows, 5) == 3  # an id that left the queue still pages on
    assert table.after(rows, 99) == 4
    assert table.select(user={"alice"}) == [0, 2]  # indexes are rebuilt after unpickling


def test_hidden_partitions_leave_the_table() -> None:
    table = JobTable.from_jobs(_jobs()).hiding({"hidden", "short"})
    assert table.keys == (1, 2)
    assert table.jobs()[1].partition == "batch"  # the visible one of "short,batch"
    assert table.columns["partition"] == ("batch", "batch")
    assert table.select(partition={"short"}) == []


def test_node_table_in_natural_order_with_states_and_flags() -> None:
    nodes = [Node(name=f"n{i}", state=NodeState.IDLE, flags=frozenset({"DRAIN"}) if i % 2 else frozenset(),
                  partitions=["debug", "gpu"] if i > 8 else ["debug"]) for i in (10, 2, 9, 1)]
    table = NodeTable.from_nodes(nodes)
    assert table.keys == ("n1", "n2", "n9", "n10")
    assert [table.keys[r] for r in table.select(state={"DRAIN"})] == ["n1", "n9"]
    assert [table.keys[r] for r in table.select(state={"IDLE"}, partition={"gpu"})] == ["n9", "n10"]
    assert table.after(table.select(), "n9") == 3
    assert table.rows_of(["n10", "x", "n2"]) == [1, 3]


def test_a_node_table_from_the_worker_keeps_its_models_only_when_asked_to() -> None:
    """``nodes()`` builds the models once and keeps them (pages read them again and again);
    ``fresh_nodes()`` (the load archiver, once a minute) builds the same and keeps nothing."""
    nodes = [Node(name=f"n{i}", state=NodeState.IDLE, cpus=4) for i in (2, 1)]
    crossed = pickle.loads(pickle.dumps(NodeTable.from_nodes(nodes)))  # as from the refresh worker
    fresh = crossed.fresh_nodes()
    assert fresh == sorted(nodes, key=lambda n: n.name) and crossed._models is None
    assert crossed.fresh_nodes() is not fresh
    kept = crossed.nodes()
    assert kept == fresh and crossed.nodes() is kept and crossed.fresh_nodes() is kept


def test_queue_rows_fill_exactly_the_fields_they_promise(sample_jobs: dict[str, int],
                                                         runner: CommandRunner) -> None:
    text = runner.run(["squeue", "-h", "--states=all", "-O", ad.queue_format()]).stdout
    lines = [line for line in text.split("\n") if line]
    assert len(lines) >= 2
    parser = ad.QueueRowParser()
    filled: set[str] = set()
    for line in lines:
        job_id, fragment, columns = parser.row(line)
        doc = json.loads(fragment)
        filled |= set(doc)
        job = Job.model_validate_json(fragment)
        assert job_id == job.job_id == int(line.split(ad.SEP)[0])
        assert columns[:5] == (job.user_name, job.account, job.partition, job.state.value, job.name)
        assert columns[6] == ad.line_hash(line)  # the same in every process and run
    assert filled <= ad.QUEUE_JOB_FIELDS
    assert {"job_id", "user_name", "account", "partition", "state", "submit_time", "nodes"} <= filled


def test_the_text_queue_agrees_with_squeue_json(sample_jobs: dict[str, int], client: CliSlurmClient) -> None:
    # Text, JSON, text again: a job whose text did not change across the JSON read was in one
    # state for both (the sample's short jobs start, fail and complete meanwhile).
    before = client.job_table()
    by_json = {j.job_id: j for j in ad.parse_jobs_json(json.loads(sh("squeue", "--json")))}
    after = CliSlurmClient(client.runner).job_table()
    was = dict(zip(before.keys, before.fragments, strict=True))
    stable = {k for k, f in zip(after.keys, after.fragments, strict=True) if was.get(k) == f}
    text = {j.job_id: j for j in before.jobs() if j.job_id in stable and j.job_id in by_json}
    # The held and the long-running sample jobs stay put.
    assert {sample_jobs["pending"], sample_jobs["running"]} <= set(text)
    fields = ("array_job_id", "array_task_id", "name", "user_name", "account", "partition", "qos", "state",
              "state_reason", "nodes", "node_count", "cpus", "time_limit", "submit_time", "start_time",
              "batch_host", "work_dir", "priority", "standard_output")
    mine_ids = set(sample_jobs.values()) & set(text)  # other tests' jobs may be changing meanwhile
    assert mine_ids
    for job_id in mine_ids:
        job, other = text[job_id], by_json[job_id]
        for name in fields:
            mine, theirs = getattr(job, name), getattr(other, name)
            if name == "start_time" and job.state is JobState.PENDING:
                continue  # squeue's expected start for a pending job moves with every pass
            if name == "state" and job.state is JobState.COMPLETING:
                # squeue's text shows a completing job as COMPLETING, its base state hidden
                assert mine == theirs or "COMPLETING" in other.state_flags, (job_id, other.state_flags)
                continue
            if name == "state_reason" and theirs is None:
                assert mine in (None, "None")
                continue
            assert mine == theirs, (job_id, name, mine, theirs)


def test_an_unchanged_queue_gives_the_same_table_back(sample_jobs: dict[str, int], runner: CommandRunner) -> None:
    client = CliSlurmClient(runner)
    first = client.job_table()
    sh("scontrol", "hold", str(sample_jobs["pending"]), check=False)
    second = client.job_table()
    third = client.job_table()
    assert third is second  # nothing changed between the two reads: no line parsed, same object
    assert second.keys == first.keys


def test_a_delta_patches_changed_rows_and_merges_new_and_gone_jobs() -> None:
    from slurmtower.models.table import QueueDelta

    table = JobTable.from_jobs(_jobs())
    cols = [table.columns[c] for c in JobTable._COLUMNS]
    renamed = Job(job_id=2, user_name="bob", account="chemistry", partition="short,batch",
                  state=JobState.RUNNING, name="b2", nodes="n3")
    row2 = (renamed.model_dump_json(exclude_defaults=True).encode(),
            ("bob", "chemistry", "short,batch", "RUNNING", "b2", frozenset({"n3"}), 7))
    same = table.apply(QueueDelta(keys=table.keys, rows={2: row2}, seq=1, base=0))
    assert same.keys == table.keys and [j.name for j in same.jobs()] == ["a", "b2", "a", "c"]
    assert same.select(state={"RUNNING"}) == [0, 1] and table.select(state={"RUNNING"}) == [0]
    new = Job(job_id=11, user_name="dave", account="astro", partition="gpu", state=JobState.PENDING, name="d")
    row11 = (new.model_dump_json(exclude_defaults=True).encode(),
             ("dave", "astro", "gpu", "PENDING", "d", frozenset(), 8))
    merged = same.apply(QueueDelta(keys=(1, 2, 10, 11), rows={11: row11}, seq=2, base=1))
    assert merged.keys == (1, 2, 10, 11)  # job 3 left, 11 came
    assert [j.name for j in merged.jobs()] == ["a", "b2", "c", "d"]
    assert merged.select(user={"alice"}) == [0]
    assert table.apply(QueueDelta(keys=(), rows={}, unchanged=True)) is table
    with pytest.raises(ValueError):
        table.apply(QueueDelta(keys=(1, 99), rows={}))
    assert cols == [table.columns[c] for c in JobTable._COLUMNS]  # the old table is untouched


def test_a_delta_over_other_jobs_gives_the_table_a_full_read_would() -> None:
    """Random arrivals, departures and changes over 2,000 rows: applying the delta gives
    the table built from every row, whatever the mix (one row, none kept, the queue emptied)."""
    import random

    from slurmtower.models.table import QueueDelta

    rng = random.Random(7)

    def row(key: int, version: int) -> tuple[bytes, tuple[object, ...]]:
        user = f"u{key % 7}"
        return (f'{{"job_id":{key},"v":{version}}}'.encode(),
                (user, f"a{key % 3}", "batch", "PENDING", f"n{version}", frozenset(), key * 31 + version))

    for case in range(40):
        before = sorted(rng.sample(range(1, 5000), rng.choice((0, 1, 50, 2000))))
        table = JobTable.from_rows(before, [row(k, 0) for k in before])
        kept = [k for k in before if rng.random() < (0.0 if case == 0 else 0.9)]
        arrived = rng.sample(range(5000, 9000), rng.choice((0, 1, 30)))
        after = sorted(kept + arrived)
        changed = {k for k in kept if rng.random() < 0.05}
        rows = {k: row(k, 1) for k in [*arrived, *changed]}
        got = table.apply(QueueDelta(keys=tuple(after), rows=rows, seq=1, base=0))
        want = JobTable.from_rows(after, [rows.get(k) or row(k, 0) for k in after])
        assert got.keys == want.keys and got.fragments == want.fragments, case
        assert got.columns == want.columns, case
        assert got.select(user={"u3"}) == want.select(user={"u3"}), case
