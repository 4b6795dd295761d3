"""Every recorded Slurm output of every release parses, and means the same in each release.

Release folders under ``tests/fixtures/slurm/`` are found at collection time: a new folder
(say ``26.11/``) is tested without code changes. A file kind without a parser fails.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Callable
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

import pytest

from slurmtower.errors import SlurmtowerError, Unsupported
from slurmtower.models import (
    ClusterConfig,
    ControllerStats,
    ExitCode,
    Job,
    JobState,
    JobStep,
    Node,
    NodeFlag,
    NodeReason,
    NodeState,
    Partition,
    Reservation,
    SlurmVersion,
    Trigger,
)
from slurmtower.models.accounting import AccountingUser, Association
from slurmtower.slurm import adapters as ad

FIXTURES = Path(__file__).parent / "fixtures" / "slurm"
RELEASES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir() and not p.name.startswith("_"))
TZ = UTC  # the fixtures were recorded on UTC machines; text times are local time there

# Fixture file kinds -> the parser for them. Node names in file names are generalised.
JSON_PARSERS: dict[str, Callable[[Any], object]] = {
    "sinfo.json": ad.parse_nodes_json,
    "scontrol-show-node.json": ad.parse_nodes_json,
    "rest-slurm-nodes.json": ad.parse_nodes_json,
    "squeue.json": ad.parse_jobs_json,
    "scontrol-show-job.json": ad.parse_jobs_json,
    "rest-slurm-jobs.json": ad.parse_jobs_json,
    "sacct.json": ad.parse_sacct_json,
    "sacct-steps.json": ad.parse_sacct_json,
    "rest-slurmdb-jobs.json": ad.parse_sacct_json,
    "scontrol-show-partition.json": ad.parse_partitions_json,
    "rest-slurm-partitions.json": ad.parse_partitions_json,
    "scontrol-show-reservation.json": ad.parse_reservations_json,
    "rest-slurm-reservations.json": ad.parse_reservations_json,
    "sdiag.json": ad.parse_sdiag_json,
    "rest-slurm-diag.json": ad.parse_sdiag_json,
    "rest-slurm-ping.json": ad.parse_ping_json,
    "rest-slurm-node-NODE-post-drain.json": ad.raise_for_errors,
    "sacctmgr-show-assoc.json": ad.parse_associations_json,
    "rest-slurmdb-associations.json": ad.parse_associations_json,
    "rest-slurmdb-users.json": ad.parse_users_json,
    "openapi-v3.json.gz": lambda spec: _served_by_spec(spec),  # slurmrestd's GET /openapi/v3
    # 26.05+: scontrol show config --json prints JSON (24.11/25.11 print the text form).
    "scontrol-show-config.json": lambda d: ad.parse_config_json(d, tz=TZ),
}
TEXT_PARSERS: dict[str, Callable[[str], object]] = {
    "scontrol-o-show-node.txt": lambda t: ad.parse_nodes_text(t, tz=TZ),
    "scontrol-o-show-node-NODE-after-post.txt": lambda t: ad.parse_nodes_text(t, tz=TZ),
    "scontrol-o-show-job.txt": lambda t: ad.parse_jobs_text(t, tz=TZ),
    "scontrol-o-show-partition.txt": ad.parse_partitions_text,
    "scontrol-o-show-reservation.txt": lambda t: ad.parse_reservations_text(t, tz=TZ),
    "scontrol-show-config.txt": lambda t: ad.parse_config_text(t, tz=TZ),
    "sdiag.txt": ad.parse_sdiag_text,
    "strigger-get.txt": ad.parse_triggers_text,
    "sacct-P.txt": lambda t: ad.parse_sacct_text(t, tz=TZ),
    "sinfo.txt": ad.parse_sinfo_text,
    "sinfo-R.txt": lambda t: ad.parse_sinfo_reasons_text(t, tz=TZ),
    "squeue.txt": ad.parse_squeue_text,
    "sacctmgr-show-assoc.txt": ad.parse_associations_text,
    # slurmrestd's text/plain answer to a method it does not have (22.05: POST /node).
    "rest-slurm-node-NODE-post-drain.txt": lambda t: ad.error_from_rest_response(405, t),
}
#: Recorded but not copied into the tests (2 MB of OpenAPI schema nothing here reads).
DROPPED = {"openapi-v3.json.gz"}


def _kind(name: str) -> str:
    return re.sub(r"-node-[a-z]+\d+-", "-node-NODE-", name)


def _files(release: str) -> list[Path]:
    return sorted(p for p in (FIXTURES / release).iterdir() if p.name not in ("index.json", "README.md"))


def _all_files() -> list[Any]:
    return [pytest.param(r, p.name, id=f"slurm-{r}-{p.name}") for r in RELEASES for p in _files(r)]


def _load(release: str, name: str) -> Any:
    path = FIXTURES / release / name
    if name.endswith(".json.gz"):
        return json.loads(gzip.decompress(path.read_bytes()))
    return json.loads(path.read_text()) if name.endswith(".json") else path.read_text()


def _served_by_spec(spec: dict[str, Any]) -> list[int]:
    """The data_parser versions an OpenAPI document's ``/slurm/v0.0.N/`` paths serve."""
    return sorted({int(m[1]) for p in spec["paths"] if (m := re.match(r"^/slurm/v0\.0\.(\d+)/", p))})


def _index(release: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / release / "index.json").read_text())
    return data


def _sample(release: str, key: str) -> int:
    return int(_index(release)["sample_jobs"][key])


def _releases() -> list[Any]:
    return [pytest.param(r, id=f"slurm-{r}") for r in RELEASES]


# ------------------------------------------------------------------------------- every file


def test_there_are_release_folders() -> None:
    assert len(RELEASES) >= 3


@pytest.mark.parametrize(("release", "name"), _all_files())
def test_every_fixture_file_has_a_parser_and_parses(release: str, name: str) -> None:
    kind = _kind(name)
    if kind in JSON_PARSERS:
        result = JSON_PARSERS[kind](_load(release, name))
    elif kind in TEXT_PARSERS:
        result = TEXT_PARSERS[kind](_load(release, name))
    else:
        pytest.fail(f"no parser for fixture kind {kind!r} ({release}/{name})")
    if isinstance(result, list):
        assert result or name in _may_be_empty(release), f"{release}/{name} parsed to nothing"


def _may_be_empty(release: str) -> set[str]:
    """Files recorded on a cluster without any: 22.05's lab had no reservation."""
    return (
        {"scontrol-o-show-reservation.txt", "rest-slurm-reservations.json"} if release == "22.05" else set()
    )


@pytest.mark.parametrize("release", _releases())
def test_every_recorded_file_is_in_the_fixtures(release: str) -> None:
    for entry in _index(release)["files"]:
        if entry.get("recorded", True) and entry["file"] not in DROPPED:
            assert (FIXTURES / release / entry["file"]).is_file(), entry["file"]


@pytest.mark.parametrize("release", _releases())
def test_json_meta_gives_the_release(release: str) -> None:
    expected = ad.parse_sinfo_version(_index(release)["slurm_version"])
    for path in _files(release):
        if path.suffix == ".json":
            version = ad.detect_version(json.loads(path.read_text()))
            assert version == expected, path.name
            assert version.data_parser is not None and version.data_parser.startswith("v0.0."), path.name


def _offered(release: str) -> tuple[int, list[int], set[int]]:
    """From index.json's ``data_parser`` note: the default format, every format slurmrestd
    serves, and those it marks deprecated (``... also serves v0.0.41 (deprecated), v0.0.42``)."""
    note = _index(release)["data_parser"]
    numbers = [int(n) for n in re.findall(r"v0\.0\.(\d+)", note)]
    deprecated = {int(n) for n in re.findall(r"v0\.0\.(\d+) \(deprecated\)", note)}
    return numbers[0], sorted(set(numbers)), deprecated


@pytest.mark.parametrize("release", _releases())
def test_the_one_list_of_data_parsers_matches_what_each_release_serves(release: str) -> None:
    default, served, deprecated = _offered(release)
    slurm = ad.parse_sinfo_version(_index(release)["slurm_version"])
    entry = ad.data_parser(default)
    assert entry is not None and entry.default_in == f"{slurm.major}.{slurm.minor:02d}"
    assert [p.number for p in ad.served_by(slurm)] == served
    assert {p.number for p in ad.served_by(slurm) if p.deprecated_on(slurm)} == deprecated
    assert set(ad.deprecated_parsers(served)) == deprecated  # the release inferred from the newest
    assert ad.newest_known(served) == default and default in ad.KNOWN_DATA_PARSERS
    assert _served_by_spec(_load(release, "openapi-v3.json.gz")) == served  # what GET /openapi/v3 lists
    for path in _files(release):
        if path.suffix == ".json":
            assert ad.format_version(json.loads(path.read_text())) == default, path.name


# ------------------------------------------------------------------------------------ nodes


def _nodes_by_name(nodes: list[Node]) -> dict[str, Node]:
    return {node.name: node for node in nodes}


def _node_sources(release: str) -> dict[str, list[Node]]:
    sources = {
        "rest": ad.parse_nodes_json(_load(release, "rest-slurm-nodes.json")),
        "sinfo-json": ad.parse_nodes_json(_load(release, "sinfo.json")),
        "text": ad.parse_nodes_text(_load(release, "scontrol-o-show-node.txt"), tz=TZ),
    }
    if (FIXTURES / release / "scontrol-show-node.json").exists():
        sources["scontrol-json"] = ad.parse_nodes_json(_load(release, "scontrol-show-node.json"))
    return sources


@pytest.mark.parametrize("release", _releases())
def test_node_states_and_flags_agree_between_json_and_text(release: str) -> None:
    sources = _node_sources(release)
    text = _nodes_by_name(sources.pop("text"))
    for source, nodes in sources.items():
        by_name = _nodes_by_name(nodes)
        assert by_name.keys() == text.keys(), source
        for name, node in by_name.items():
            assert (node.state, node.flags) == (text[name].state, text[name].flags), (source, name)
            assert node.partitions == text[name].partitions, (source, name)
            assert node.reason == text[name].reason, (source, name)
            assert node.reason_set_by_user == text[name].reason_set_by_user, (source, name)
            assert node.reason_changed_at == text[name].reason_changed_at, (source, name)


@pytest.mark.parametrize("release", _releases())
def test_sinfo_text_agrees_with_scontrol_on_the_base_state_and_drain(release: str) -> None:
    text = _nodes_by_name(ad.parse_nodes_text(_load(release, "scontrol-o-show-node.txt"), tz=TZ))
    for node in ad.parse_sinfo_text(_load(release, "sinfo.txt")):
        full = text[node.name]
        assert node.state == full.state
        assert node.is_drained == full.is_drained
        assert node.partitions == full.partitions
        # sinfo's compact words cannot show every flag (22.05 n4 is DRAIN+PLANNED: "drain").
        assert node.flags <= full.flags


@pytest.mark.parametrize("release", _releases())
def test_the_drained_node_reads_the_same_in_every_form(release: str) -> None:
    for source, nodes in _node_sources(release).items():
        drained = [n for n in nodes if n.is_drained]
        assert [n.name[-1] for n in drained] == ["4"], source
        node = drained[0]
        assert node.state is NodeState.IDLE and NodeFlag.DRAIN in node.flags
        assert node.reason == "disk replace" and node.reason_set_by_user == "root"
        assert node.reason_changed_at is not None and node.reason_changed_at.tzinfo is not None
        assert node.partitions == ["debug", "short"]
        assert node.state_text.startswith("IDLE+DRAIN")


@pytest.mark.parametrize("release", [r for r in RELEASES if r != "22.05"])
def test_down_and_maintenance_nodes_of_the_new_releases(release: str) -> None:
    for source, nodes in _node_sources(release).items():
        by_suffix = {n.name[-1]: n for n in nodes}
        assert by_suffix["3"].is_down and by_suffix["3"].reason == "bad dimm", source
        assert by_suffix["2"].flags == {NodeFlag.MAINTENANCE, NodeFlag.RESERVED}, source
        assert by_suffix["2"].state_text == "IDLE+MAINTENANCE+RESERVED"
        assert by_suffix["2"].reservation == "maint1", source
        assert by_suffix["1"].state is NodeState.MIXED and not by_suffix["1"].is_draining


@pytest.mark.parametrize("release", _releases())
def test_node_details_from_json_and_text(release: str) -> None:
    for source, nodes in _node_sources(release).items():
        node = _nodes_by_name(nodes)[sorted(n.name for n in nodes)[0]]
        assert node.cpus == 2 and node.real_memory_mib == 2000, source
        assert node.features == ["lab"], source
        assert node.cpu_load is not None and 0 < node.cpu_load < 10, source
        if source == "sinfo-json":
            continue  # 24.11+ sinfo JSON is per group, not per node
        assert node.slurmd_version == _index(release)["slurm_version"].split()[-1], source
        assert node.port is not None and node.boot_time is not None, source
        assert node.operating_system is not None and node.operating_system.startswith("Linux "), source


@pytest.mark.parametrize("release", _releases())
def test_node_suspend_time_is_read_where_the_release_reports_it(release: str) -> None:
    raw = _load(release, "rest-slurm-nodes.json")["nodes"]
    lines = [ad.split_key_values(line) for line in _load(release, "scontrol-o-show-node.txt").splitlines() if line]
    in_json = {"suspend_time" in node for node in raw}
    in_text = {"SuspendTime" in fields for fields in lines}
    assert in_json == in_text and len(in_json) == 1  # 26.05+ has it in both forms, older in neither
    if in_json == {True}:
        # The recorded cluster has no power saving: every node is INFINITE (never suspended).
        assert all(node["suspend_time"]["infinite"] for node in raw)
        assert {fields["SuspendTime"] for fields in lines} == {"INFINITE"}
    for source, nodes in _node_sources(release).items():
        assert all(node.suspend_time is None for node in nodes), source


@pytest.mark.parametrize("release", _releases())
def test_the_node_drained_by_rest_shows_drain_after_the_post(release: str) -> None:
    (after,) = (FIXTURES / release).glob("scontrol-o-show-node-*-after-post.txt")
    (node,) = ad.parse_nodes_text(after.read_text(), tz=TZ)
    if release == "22.05":
        # v0.0.38 has no node update: the POST was refused with 405 and the node unchanged.
        (post,) = (FIXTURES / release).glob("rest-slurm-node-*-post-drain.txt")
        error = ad.error_from_rest_response(405, post.read_text())
        assert isinstance(error, Unsupported)
        assert NodeFlag.DRAIN not in node.flags
    else:
        (post,) = (FIXTURES / release).glob("rest-slurm-node-*-post-drain.json")
        assert ad.error_from_rest_response(200, json.loads(post.read_text())) is None
        assert node.is_draining and node.state_text == "MIXED+DRAIN"
        assert node.reason == "x" and node.reason_set_by_user == "root"


# ------------------------------------------------------------------------------------- jobs


def _job_sources(release: str) -> dict[str, list[Job]]:
    sources = {
        "rest": ad.parse_jobs_json(_load(release, "rest-slurm-jobs.json")),
        "text": ad.parse_jobs_text(_load(release, "scontrol-o-show-job.txt"), tz=TZ),
        "sacct": ad.parse_sacct_json(_load(release, "sacct.json")),
        "sacct-steps": ad.parse_sacct_json(_load(release, "sacct-steps.json")),
        "slurmdb": ad.parse_sacct_json(_load(release, "rest-slurmdb-jobs.json")),
        "sacct-P": ad.parse_sacct_text(_load(release, "sacct-P.txt"), tz=TZ),
    }
    if (FIXTURES / release / "scontrol-show-job.json").exists():
        sources["scontrol-json"] = ad.parse_jobs_json(_load(release, "scontrol-show-job.json"))
    return sources


def _accounting_exit_codes_are_wrong(release: str, source: str) -> bool:
    # Slurm 22.05.8's sacct --json and /slurmdb report every exit code as 0: parsed as None.
    return release == "22.05" and source in ("sacct", "sacct-steps", "slurmdb")


def _one(jobs: list[Job], job_id: int) -> Job:
    found = [j for j in jobs if j.job_id == job_id]
    assert len(found) == 1, job_id
    return found[0]


@pytest.mark.parametrize("release", _releases())
def test_the_failed_job_is_failed_with_exit_3_everywhere(release: str) -> None:
    job_id = _sample(release, "failed_exit3")
    for source, jobs in _job_sources(release).items():
        job = _one(jobs, job_id)
        assert job.state is JobState.FAILED, source
        assert (job.name, job.user_name, job.partition, job.account) == (
            "fail-bob",
            "bob",
            "debug",
            "chemistry",
        )
        if _accounting_exit_codes_are_wrong(release, source):
            assert job.exit_code is None, source
        else:
            assert job.exit_code == ExitCode(return_code=3), source
            assert str(job.exit_code) == "3:0"
        if source != "sacct-P":  # the -o list has no Timelimit
            assert job.time_limit == timedelta(minutes=5), source
        assert job.from_accounting == (source in ("sacct", "sacct-steps", "slurmdb", "sacct-P"))
        assert job.submit_time is not None and job.start_time is not None and job.end_time is not None


@pytest.mark.parametrize("release", _releases())
def test_the_timeout_job_times_out_after_its_one_minute_limit(release: str) -> None:
    job_id = _sample(release, "timeout")
    for source, jobs in _job_sources(release).items():
        job = _one(jobs, job_id)
        assert job.state is JobState.TIMEOUT, source
        assert (job.user_name, job.partition) == ("alice", "short"), source
        if source in ("rest", "text", "scontrol-json"):
            # slurmctld keeps the batch script's signal; accounting stores 0:0 for the job.
            assert job.exit_code == ExitCode(signal=15), source
        if source != "sacct-P":
            assert job.time_limit == timedelta(minutes=1), source
        assert job.end_time is not None and job.start_time is not None
        assert job.end_time - job.start_time >= timedelta(minutes=1)


@pytest.mark.parametrize("release", _releases())
def test_the_completed_array_has_tasks_1_to_3(release: str) -> None:
    array_id = _sample(release, "array_completed")
    for source, jobs in _job_sources(release).items():
        tasks = sorted((j.array_task_id, j.state) for j in jobs if j.array_job_id == array_id)
        assert tasks == [(i, JobState.COMPLETED) for i in (1, 2, 3)], source
        # The last task keeps the array's own id; the others got new ids.
        last = next(j for j in jobs if j.array_job_id == array_id and j.array_task_id == 3)
        assert last.job_id == array_id and last.job_key == f"{array_id}_3"
        assert {j.user_name for j in jobs if j.array_job_id == array_id} == {"alice"}


@pytest.mark.parametrize("release", _releases())
def test_the_held_jobs_are_pending_on_job_held_user(release: str) -> None:
    held, held_array = _sample(release, "pending_held"), _sample(release, "array_pending_held")
    squeue = ad.parse_jobs_json(_load(release, "squeue.json"))
    for source, jobs in {**_job_sources(release), "squeue": squeue}.items():
        if source in ("sacct", "sacct-steps", "slurmdb", "sacct-P"):
            continue  # sacct -S leaves out jobs that never became eligible
        job = _one(jobs, held)
        assert (job.state, job.state_reason, job.user_name) == (JobState.PENDING, "JobHeldUser", "root")
        assert job.time_limit == timedelta(minutes=5) and job.nodes is None and job.start_time is None
        array = _one(jobs, held_array)
        assert (array.array_job_id, array.array_task_id, array.array_task_str) == (held_array, None, "1-5%2")
        assert array.job_key == f"{held_array}_[1-5%2]"
        assert array.state is JobState.PENDING and array.user_name == "bob"


@pytest.mark.parametrize("release", _releases())
def test_squeue_json_and_text_list_the_same_queued_jobs(release: str) -> None:
    queued = {
        (j.job_key, j.state)
        for j in ad.parse_jobs_json(_load(release, "squeue.json"))
        if not j.state.is_finished
    }
    table = {(j.job_key, j.state) for j in ad.parse_squeue_text(_load(release, "squeue.txt"))}
    assert table == queued


@pytest.mark.parametrize("release", _releases())
def test_the_same_job_has_the_same_times_in_json_and_text(release: str) -> None:
    job_id = _sample(release, "failed_exit3")
    sources = _job_sources(release)
    reference = _one(sources["rest"], job_id)
    for source, jobs in sources.items():
        job = _one(jobs, job_id)
        assert (job.submit_time, job.start_time, job.end_time) == (
            reference.submit_time,
            reference.start_time,
            reference.end_time,
        ), source


@pytest.mark.parametrize("release", _releases())
def test_each_run_of_a_job_has_its_sluid_in_slurmctld_and_accounting(release: str) -> None:
    sources = _job_sources(release)
    raw_ctl = _load(release, "rest-slurm-jobs.json")["jobs"]
    raw_acct = _load(release, "sacct.json")["jobs"]
    ctl_has = {"sluid" in (job.get("step_id") or {}) for job in raw_ctl}  # v0.0.44+ (25.11)
    acct_has = {"sluid" in job for job in raw_acct}  # v0.0.45+ (26.05)
    assert len(ctl_has) == len(acct_has) == 1
    for source, jobs in sources.items():
        accounting = source in ("sacct", "sacct-steps", "slurmdb", "sacct-P")
        # No text form prints a sluid (scontrol -o show job, sacct -P without asking).
        if source in ("text", "sacct-P") or (acct_has if accounting else ctl_has) != {True}:
            assert all(j.sluid is None and j.original_sluid is None for j in jobs), source
            continue
        sluids = [j.sluid for j in jobs]
        assert None not in sluids and len(set(sluids)) == len(jobs), source  # one per run
        array = _sample(release, "array_completed")
        assert len({j.sluid for j in jobs if j.array_job_id == array}) == 3, source  # each task its own
        if accounting:
            assert all(j.original_sluid == j.sluid for j in jobs), source  # nothing was requeued
        else:
            assert all(j.original_sluid is None for j in jobs), source
    if ctl_has == acct_has == {True}:
        # slurmctld and slurmdbd name the same run alike.
        ctl = {j.job_id: j.sluid for j in sources["rest"]}
        for source in ("sacct", "sacct-steps", "slurmdb"):
            assert {j.job_id: j.sluid for j in sources[source]} == {
                j.job_id: ctl[j.job_id] for j in sources[source]
            }, source


@pytest.mark.parametrize("release", _releases())
def test_accounting_steps_include_the_failed_step(release: str) -> None:
    job_id = _sample(release, "steps_with_failed_step")
    for source, steps in {
        "sacct-json": ad.parse_sacct_steps_json(_load(release, "sacct-steps.json")),
        "sacct-P": ad.parse_sacct_steps_text(_load(release, "sacct-P.txt"), tz=TZ),
    }.items():
        mine = {s.step_id: s for s in steps if s.job_id == job_id}
        assert {"batch", "0", "1", "2"} <= mine.keys(), source
        assert mine["1"].state is JobState.FAILED and mine["1"].full_id == f"{job_id}.1"
        if not _accounting_exit_codes_are_wrong(release, "sacct") or source == "sacct-P":
            assert mine["1"].exit_code == ExitCode(return_code=1), source
        assert mine["0"].node_count == 2


# ------------------------------------------------------------------- partitions, reservations


PARTITION_FIELDS = (
    "state",
    "nodes",
    "total_nodes",
    "total_cpus",
    "max_time",
    "default_time",
    "min_nodes",
    "max_nodes",
    "max_cpus_per_node",
    "allow_accounts",
    "allow_groups",
    "allow_qos",
    "priority_tier",
    "tres",
)


@pytest.mark.parametrize("release", _releases())
def test_partitions_agree_between_json_and_text(release: str) -> None:
    text = {p.name: p for p in ad.parse_partitions_text(_load(release, "scontrol-o-show-partition.txt"))}
    assert text["debug"].is_default and not text["batch"].is_default and text["debug"].hidden is False
    assert text["debug"].max_time is None  # UNLIMITED
    assert text["batch"].max_time == timedelta(hours=1)
    assert text["short"].max_time == timedelta(minutes=5)
    assert text["short"].default_time == timedelta(minutes=1)
    for name in ("rest-slurm-partitions.json", "scontrol-show-partition.json"):
        if not (FIXTURES / release / name).exists():
            continue
        doc = _load(release, name)
        parsed = ad.parse_partitions_json(doc)
        for part in parsed:
            other = text[part.name]
            fields = PARTITION_FIELDS
            assert {f: getattr(part, f) for f in fields} == {f: getattr(other, f) for f in fields}, name
        # 22.05 (v0.0.38) and 26.05+ (v0.0.45) JSON have partition flags; v0.0.40-44 have none.
        if all("flags" in raw for raw in doc["partitions"]):
            for part in parsed:
                other = text[part.name]
                assert (part.is_default, part.hidden) == (other.is_default, other.hidden), (name, part.name)
            assert [p.name for p in parsed if p.is_default] == ["debug"], name
        else:
            assert all(p.is_default is None and p.hidden is None for p in parsed), name


@pytest.mark.parametrize("release", _releases())
def test_reservations_agree_between_json_and_text(release: str) -> None:
    text = {
        r.name: r
        for r in ad.parse_reservations_text(_load(release, "scontrol-o-show-reservation.txt"), tz=TZ)
    }
    for name in ("rest-slurm-reservations.json", "scontrol-show-reservation.json"):
        if not (FIXTURES / release / name).exists():
            continue
        parsed = {r.name: r for r in ad.parse_reservations_json(_load(release, name))}
        assert parsed.keys() == text.keys(), name
        for key, resv in parsed.items():
            assert resv.model_dump(exclude={"state"}) == text[key].model_dump(exclude={"state"}), name
    if release != "22.05":
        maint = text["maint1"]
        assert maint.is_maintenance and maint.flags == ["MAINT", "IGNORE_JOBS", "SPEC_NODES"]
        assert maint.duration == timedelta(days=365)  # duration=infinite is stored as a year
        assert maint.state == "ACTIVE" and text["future1"].users == ["alice"]


# ----------------------------------------------------------------- config, sdiag, triggers


def _config_sources(release: str) -> dict[str, ClusterConfig]:
    sources = {"text": ad.parse_config_text(_load(release, "scontrol-show-config.txt"), tz=TZ)}
    if (FIXTURES / release / "scontrol-show-config.json").exists():
        sources["json"] = ad.parse_config_json(_load(release, "scontrol-show-config.json"), tz=TZ)
    return sources


@pytest.mark.parametrize("release", _releases())
def test_config_gives_typed_values(release: str) -> None:
    for source, config in _config_sources(release).items():
        assert isinstance(config, ClusterConfig)
        assert config.cluster_name == _index(release)["cluster"], source
        assert config.slurm_user == "slurm"
        assert config.items["slurm_user"] == "slurm(64030)", source
        assert config.version == ad.parse_sinfo_version(_index(release)["slurm_version"]), source
        assert isinstance(config.min_job_age, int) and config.min_job_age > 0, source
        assert config.items["slurmctld_host_0"].startswith("vm"), source
        assert (config.get("TopologyPlugin") or "").startswith("topology/"), source
        assert config.as_of is not None, source
        # The controller's status is a ping scontrol adds to the text; the JSON has none.
        assert config.controllers == ({"vm": "UP"} if source == "text" else {}), source


#: How 26.05's JSON writes a setting its text writes otherwise (DIFFERENCES.md): JSON value names
#: (ReturnToService, PreemptMode, PropagatePrioProcess), defaults the text spells out and the
#: JSON leaves empty (or the reverse: PriorityFlags), and a duration the text prints as H:M:S.
CONFIG_JSON_VALUES = {
    "return_to_service": ("non_responsive_only", "1"),
    "preempt_mode": ("DISABLED", "OFF"),
    "propagate_prio_process": ("off", "0"),
    "priority_flags": ("FAIR_TREE", ""),
    "cpu_freq_governors": ("(null)", "OnDemand,Performance,UserSpace"),
    "private_data": ("(null)", "none"),
    "task_plugin_param": ("(null)", "(null type)"),
    "preempt_exempt_time": ("0", "00:00:00"),
}
#: Text settings the JSON has under other names or not at all: memory defaults per node (the JSON
#: has them per CPU), PrologEpilogTimeout (JSON: PrologTimeout/EpilogTimeout), HASH_VAL (the
#: text's "Match" of the config hash; the JSON gives hash_value), and five the JSON leaves out.
CONFIG_TEXT_ONLY = {
    "def_mem_per_node", "max_mem_per_node", "prolog_epilog_timeout", "hash_val", "job_comp_pass",
    "allow_spec_resources_usage", "disable_root_jobs", "track_wc_key", "use_pam",
}
_UNIT = re.compile(r"^(\d+) (?:sec|usec|min|nodes/min|percent)$")


@pytest.mark.parametrize("release", [r for r in RELEASES if (FIXTURES / r / "scontrol-show-config.json").exists()])
def test_config_json_and_text_hold_the_same_settings(release: str) -> None:
    sources = _config_sources(release)
    text, js = sources["text"], sources["json"]
    assert js.as_of == text.as_of
    for name in ("cluster_name", "slurm_user", "min_job_age", "version"):
        assert getattr(js, name) == getattr(text, name), name
    assert set(text.items) - set(js.items) == CONFIG_TEXT_ONLY
    differing = {}
    for key in sorted(set(text.items) & set(js.items)):
        written = text.items[key]
        unit = _UNIT.match(written)  # the JSON has plain numbers: "60" for "60 sec"
        if unit and js.items[key] == unit[1]:
            if written.endswith(" sec"):
                assert js.seconds(key) == text.seconds(key) is not None, key
            continue
        if js.items[key] != written:
            differing[key] = (js.items[key], written)
    assert differing == CONFIG_JSON_VALUES
    assert len(set(text.items) & set(js.items)) > 0.9 * len(text.items)
    # The settings the text prints in notations of its own agree in meaning.
    assert js.items["slurmctld_host_0"] == text.items["slurmctld_host_0"] == "vm(127.0.0.1)"
    assert js.items["slurmd_user"] == text.items["slurmd_user"] == "root(0)"
    assert js.items["boot_time"] == text.items["boot_time"] and js.items["next_job_id"] == text.items["next_job_id"]
    assert js.get("SuspendTime") == text.get("SuspendTime") == "INFINITE"
    assert js.get("AccountingStorageTRES") == text.get("AccountingStorageTRES")
    assert js.items["job_requeue"] == text.items["job_requeue"] == "1"
    assert js.items["priority_favor_small"] == text.items["priority_favor_small"] == "no"
    assert js.get("PriorityWeightFairShare") == text.get("PriorityWeightFairShare") == "0"


@pytest.mark.parametrize("release", _releases())
def test_sdiag_text_and_json_give_the_same_counters(release: str) -> None:
    text = ad.parse_sdiag_text(_load(release, "sdiag.txt"))
    names = ["rest-slurm-diag.json"] + (
        ["sdiag.json"] if (FIXTURES / release / "sdiag.json").exists() else []
    )
    for name in names:
        stats = ad.parse_sdiag_json(_load(release, name))
        assert isinstance(stats, ControllerStats)
        assert stats.data_since == text.data_since, name
        for field in ("jobs_submitted", "jobs_started", "jobs_completed", "jobs_canceled", "jobs_failed"):
            assert getattr(stats, field) == getattr(text, field), (name, field)
        assert stats.slurm_time is not None and text.slurm_time is not None
        assert timedelta(0) <= stats.slurm_time - text.slurm_time < timedelta(minutes=1)
        assert {r.name for r in stats.rpcs_by_type} >= {"REQUEST_PING", "REQUEST_NODE_INFO"}
        assert "root" in {u.user for u in stats.rpcs_by_user}
        assert all(r.average_time_us is not None for r in stats.rpcs_by_type)
        assert stats.raw
    assert text.rpcs_by_type and text.rpcs_by_user and text.server_thread_count is not None


def _rpcs(stats: ControllerStats) -> dict[tuple[str, int | None], tuple[str, int, int | None, int | None]]:
    return {
        **{("type", r.type_id): (r.name, r.count, r.average_time_us, r.total_time_us) for r in stats.rpcs_by_type},
        **{("user", u.user_id): (u.user, u.count, u.average_time_us, u.total_time_us) for u in stats.rpcs_by_user},
    }


@pytest.mark.parametrize("release", [r for r in RELEASES if (FIXTURES / r / "sdiag.json").exists()])
def test_sdiag_json_and_the_text_recorded_after_it_agree_rpc_by_rpc(release: str) -> None:
    """sdiag --json was recorded first, then sdiag, then REST /diag: each RPC has the same name
    in all three, its count only grows, and where the count did not move neither did its times."""
    first = ad.parse_sdiag_json(_load(release, "sdiag.json"))
    text = ad.parse_sdiag_text(_load(release, "sdiag.txt"))
    last = ad.parse_sdiag_json(_load(release, "rest-slurm-diag.json"))
    scalars = set(ControllerStats.model_fields) - {"raw", "rpcs_by_type", "rpcs_by_user"}
    # The text prints no backfill mean before the first backfill cycle; the JSON prints 0.
    if text.backfill_cycle_count == 0:
        scalars.discard("backfill_cycle_mean_us")
    assert {f: getattr(first, f) for f in scalars} == {f: getattr(text, f) for f in scalars}
    for earlier, later in ((_rpcs(first), _rpcs(text)), (_rpcs(text), _rpcs(last))):
        assert earlier.keys() <= later.keys()
        for key, (name, count, average, total) in earlier.items():
            assert later[key][0] == name and later[key][1] >= count, key
            if later[key][1] == count:
                assert later[key][2:] == (average, total), key


@pytest.mark.parametrize("release", _releases())
def test_triggers_keep_flags_and_program_arguments(release: str) -> None:
    triggers = ad.parse_triggers_text(_load(release, "strigger-get.txt"))
    assert triggers and all(isinstance(t, Trigger) for t in triggers)
    for trigger in triggers:
        assert trigger.program.startswith("/") and " " in trigger.program
        assert trigger.offset == 0 and trigger.user == "slurm"
    if release != "22.05":
        by_id = {t.trigger_id: t for t in triggers}
        assert (
            by_id[1].flags == ["PERM"]
            and by_id[1].type == "down"
            and by_id[1].program == "/bin/true node_down"
        )
        assert by_id[3].flags == [] and by_id[3].program == "/bin/true node_up"
        assert (by_id[4].res_type, by_id[4].res_id, by_id[4].type) == ("job", "10", "fini")


@pytest.mark.parametrize("release", _releases())
def test_sinfo_reasons(release: str) -> None:
    reasons = {r.nodes[-1]: r for r in ad.parse_sinfo_reasons_text(_load(release, "sinfo-R.txt"), tz=TZ)}
    assert isinstance(reasons["4"], NodeReason)
    assert reasons["4"].reason == "disk replace" and reasons["4"].user == "root"


# ------------------------------------------------------------------- associations, users

#: What every lab cluster was given: accounts physics (alice, bob, root) and chemistry (bob)
#: under root, and root's own user association under root.
ACCOUNTS = {("root", None), ("physics", None), ("chemistry", None)}
USER_ASSOCIATIONS = {("physics", "alice"), ("chemistry", "bob"), ("physics", "bob"), ("physics", "root"), ("root", "root")}
DEFAULT_ACCOUNTS = {"alice": "physics", "bob": "chemistry", "root": "root"}


def _association_sources(release: str) -> dict[str, list[Association]]:
    sources = {
        "text": ad.parse_associations_text(_load(release, "sacctmgr-show-assoc.txt")),
        "rest": ad.parse_associations_json(_load(release, "rest-slurmdb-associations.json")),
    }
    if (FIXTURES / release / "sacctmgr-show-assoc.json").exists():
        sources["sacctmgr-json"] = ad.parse_associations_json(_load(release, "sacctmgr-show-assoc.json"))
    return sources


@pytest.mark.parametrize("release", _releases())
def test_the_same_associations_come_out_of_text_and_json(release: str) -> None:
    sources = _association_sources(release)
    assert len(sources) == (2 if release == "22.05" else 3)  # 22.05's sacctmgr has no --json
    for source, associations in sources.items():
        pairs = [(a.account, a.user) for a in associations]
        assert len(pairs) == len(set(pairs)) == 8, source
        assert {p for p in pairs if p[1] is None} == ACCOUNTS, source
        assert {p for p in pairs if p[1] is not None} == USER_ASSOCIATIONS, source
        for association in associations:
            assert isinstance(association, Association)
            assert association.cluster == _index(release)["cluster"], source
            assert association.partition is None and association.shares == 1, source
            assert association.qos == ["normal"] and association.default_qos is None, source
            assert association.priority is None, source
            assert association.limits.model_dump() == Association(account="x").limits.model_dump(), source
    # sacctmgr's default text has no id and no default mark. The JSON numbers them where
    # slurmdbd prints ids (25.11+); 24.11.7 prints 0 for every one (read as unknown) and 22.05
    # none at all: which it is comes from the recorded files themselves.
    assert all(a.id is None and not a.is_default for a in sources["text"])
    numbered = {
        name: {(r["account"], r.get("user") or None): r.get("id") for r in _load(release, name)["associations"]}
        for name in ("rest-slurmdb-associations.json", "sacctmgr-show-assoc.json")
        if (FIXTURES / release / name).exists()
    }
    for source, name in (("rest", "rest-slurmdb-associations.json"), ("sacctmgr-json", "sacctmgr-show-assoc.json")):
        if source not in sources:
            continue
        ids = {(a.account, a.user): a.id for a in sources[source]}
        if any(numbered[name].values()):
            assert ids == numbered[name], source
            assert len(set(ids.values())) == 8 and ids[("root", None)] == 1, source  # root's comes first
        else:
            assert set(numbered[name].values()) <= {0, None} and set(ids.values()) == {None}, source
        # REST and sacctmgr read the same slurmdbd: the same ids.
        assert ids == {(a.account, a.user): a.id for a in sources.get("rest", sources[source])}, source
        defaults = {(a.account, a.user) for a in sources[source] if a.is_default}
        assert defaults == {(acct, user) for user, acct in DEFAULT_ACCOUNTS.items()}, source
        parents = {a.account: a.parent_account for a in sources[source] if a.user is None}
        assert parents == {"root": None, "physics": "root", "chemistry": "root"}, source
        assert all(a.parent_account is None for a in sources[source] if a.user is not None), source


@pytest.mark.parametrize("release", _releases())
def test_users_come_out_of_every_release_with_admin_level(release: str) -> None:
    users = {u.name: u for u in ad.parse_users_json(_load(release, "rest-slurmdb-users.json"))}
    assert sorted(users) == ["alice", "bob", "root"]
    assert all(isinstance(u, AccountingUser) and u.uid is None for u in users.values())
    assert {name: u.admin_level for name, u in users.items()} == {
        "alice": "none",
        "bob": "none",
        "root": "administrator",
    }
    if release == "22.05":
        # v0.0.38 lists each user's associations (short: no shares, no limits) and default.
        assert {(a.account, name) for name, u in users.items() for a in u.associations} == USER_ASSOCIATIONS
        assert {name: u.default_account for name, u in users.items()} == DEFAULT_ACCOUNTS
        for name, user in users.items():
            assert [a.account for a in user.associations if a.is_default] == [DEFAULT_ACCOUNTS[name]]
            assert all(a.user == name and a.cluster == "lab" and a.shares is None for a in user.associations)
    else:
        # v0.0.4x leaves associations and the default account out unless asked.
        assert all(u.associations == [] and u.default_account is None for u in users.values())


def test_association_limits_from_text_and_json_agree() -> None:
    text = (
        "Cluster|Account|User|Partition|Share|Priority|GrpJobs|GrpTRES|GrpSubmit|GrpWall|GrpTRESMins|"
        "MaxJobs|MaxTRES|MaxTRESPerNode|MaxSubmit|MaxWall|MaxTRESMins|QOS|Def QOS|GrpTRESRunMins\n"
        "lab|physics|alice|short|parent|7|5|cpu=8,mem=2G|20|2-00:00:00|cpu=6000|"
        "3|cpu=4,mem=1000M,gres/gpu=1|cpu=2|10|01:30:00|cpu=120|high,normal|normal|cpu=100\n"
    )
    (from_text,) = ad.parse_associations_text(text)
    tres = [
        {"type": "cpu", "name": "", "id": 1, "count": 4},
        {"type": "mem", "name": "", "id": 2, "count": 1000},
        {"type": "gres", "name": "gpu", "id": 1001, "count": 1},
    ]

    def num(n: int) -> dict[str, Any]:
        return {"set": True, "infinite": False, "number": n}

    record = {
        "account": "physics", "cluster": "lab", "user": "alice", "partition": "short", "id": 12,
        "is_default": False, "parent_account": "", "shares_raw": 0x7FFFFFFF, "priority": num(7),
        "qos": ["high", "normal"], "default": {"qos": "normal"},
        "max": {
            "jobs": {
                "per": {"count": num(5), "submitted": num(20), "wall_clock": num(90)},
                "active": num(3), "total": num(10), "accruing": {"set": False, "infinite": True, "number": 0},
            },
            "tres": {
                "total": [{"type": "cpu", "count": 8}, {"type": "mem", "count": 2048}],
                "group": {"minutes": [{"type": "cpu", "count": 6000}], "active": [{"type": "cpu", "count": 100}]},
                "minutes": {"per": {"job": [{"type": "cpu", "count": 120}]}, "total": []},
                "per": {"job": tres, "node": [{"type": "cpu", "count": 2}]},
            },
            "per": {"account": {"wall_clock": num(2880)}},
        },
    }
    doc = {"meta": {"plugin": {"data_parser": "data_parser/v0.0.42"}}, "associations": [record]}
    (from_json,) = ad.parse_associations_json(doc)
    limits = from_text.limits
    assert limits.max_tres_per_job == {"cpu": 4, "mem": 1000, "gres/gpu": 1}
    assert limits.grp_tres == {"cpu": 8, "mem": 2048}  # 2G in MiB
    assert (limits.max_wall_minutes, limits.grp_wall_minutes) == (90, 2 * 24 * 60)
    assert (limits.max_jobs, limits.grp_jobs, limits.max_submit_jobs, limits.grp_submit_jobs) == (3, 5, 10, 20)
    assert limits.max_tres_per_node == {"cpu": 2} and limits.max_tres_minutes_per_job == {"cpu": 120}
    assert limits.grp_tres_minutes == {"cpu": 6000} and limits.max_jobs_accrue is None
    assert (from_text.shares, from_text.priority, from_text.qos, from_text.default_qos) == (
        0x7FFFFFFF, 7, ["high", "normal"], "normal"
    )
    assert from_json.id == 12 and from_text.id is None
    assert from_json.model_dump(exclude={"id"}) == from_text.model_dump(exclude={"id"})


def test_22_05_association_numbers_go_through_the_chain() -> None:
    """22.05 prints plain numbers and null where v0.0.40+ prints number objects."""
    record = {
        "account": "physics", "user": "bob", "cluster": "lab", "partition": None, "parent_account": None,
        "is_default": 1, "flags": ["DEFAULT"], "shares_raw": 5, "priority": None, "qos": ["normal"],
        "default": {"qos": None},
        "max": {
            "jobs": {"per": {"count": 4, "wall_clock": 4294967295}, "active": None, "total": 7},
            "tres": {"per": {"job": [{"type": "node", "name": "", "id": 4, "count": 2}]}},
            "per": {"account": {"wall_clock": 60}},
        },
    }
    doc = {"meta": {"plugin": {"type": "openapi/dbv0.0.38"}}, "associations": [record]}
    (assoc,) = ad.parse_associations_json(doc)
    assert (assoc.is_default, assoc.shares, assoc.partition, assoc.default_qos) == (True, 5, None, None)
    assert (assoc.limits.grp_jobs, assoc.limits.max_submit_jobs, assoc.limits.max_jobs) == (4, 7, None)
    assert assoc.limits.max_wall_minutes is None  # INFINITE
    assert assoc.limits.grp_wall_minutes == 60 and assoc.limits.max_tres_per_job == {"node": 2}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        pytest.param("Cluster|User\nlab|alice\n", "without an Account column", id="no-account-column"),
        pytest.param("Account|User|MaxJobs\nphysics|alice|lots\n", "maxjobs is not a count: 'lots'", id="count"),
        pytest.param("Account|MaxTRES\nphysics|cpu\n", "bad TRES value: 'cpu'", id="tres-pair"),
        pytest.param("Account|GrpTRES\nphysics|mem=2X\n", "bad TRES value: 'mem=2X'", id="tres-unit"),
        pytest.param("Account|MaxWall\nphysics|soon\n", "maxwall is not a duration", id="wall"),
        pytest.param("Account|Share\nphysics|half\n", "Share is not a number", id="share"),
    ],
)
def test_bad_sacctmgr_text_names_the_bad_part(text: str, fragment: str) -> None:
    with pytest.raises(SlurmtowerError, match=re.escape(fragment)):
        ad.parse_associations_text(text)


def test_unknown_admin_level_and_missing_lists_raise() -> None:
    meta = {"plugin": {"data_parser": "data_parser/v0.0.42"}}
    with pytest.raises(SlurmtowerError, match="administrator level"):
        ad.parse_users_json({"meta": meta, "users": [{"name": "eve", "administrator_level": ["Wizard"]}]})
    with pytest.raises(SlurmtowerError):
        ad.parse_users_json({"meta": meta, "associations": []})
    with pytest.raises(SlurmtowerError):
        ad.parse_associations_json({"meta": meta, "users": []})


def test_parsed_models_are_the_public_ones() -> None:
    release = RELEASES[0]
    assert all(isinstance(n, Node) for n in ad.parse_nodes_json(_load(release, "sinfo.json")))
    assert all(
        isinstance(p, Partition)
        for p in ad.parse_partitions_text(_load(release, "scontrol-o-show-partition.txt"))
    )
    assert all(
        isinstance(r, Reservation)
        for r in ad.parse_reservations_json(_load(RELEASES[-1], "rest-slurm-reservations.json"))
    )
    assert all(isinstance(s, JobStep) for s in ad.parse_steps_json(_load(release, "sacct-steps.json")))
    assert isinstance(ad.detect_version(_load(release, "sinfo.json")), SlurmVersion)


def test_errors_in_the_envelope_raise() -> None:
    doc = {"meta": {}, "errors": [{"error": "Invalid job id specified", "error_number": 2017}]}
    with pytest.raises(SlurmtowerError, match="Invalid job id"):
        ad.parse_jobs_json(doc)
    with pytest.raises(SlurmtowerError):
        ad.raise_for_errors(doc)
