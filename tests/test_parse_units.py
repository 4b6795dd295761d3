"""The pieces of the parsing layer: state words, Key=Value splitting, exit codes, durations,
the adapter chain's per-format steps, and the 22.05 lab's extra samples."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmtower.errors import AuthenticationError, SlurmError, SlurmRequestError, Unsupported
from slurmtower.models import (
    ExitCode,
    JobState,
    Node,
    NodeFlag,
    NodeState,
    SlurmVersion,
    config_key,
    parse_job_state,
    parse_node_state,
)
from slurmtower.models.job import Job, array_task_count
from slurmtower.slurm import adapters as ad

LAB = Path(__file__).parent / "fixtures" / "slurm" / "_lab-22.05"

# --------------------------------------------------------------------------- node state words


@pytest.mark.parametrize(
    ("given_state", "flags", "expected"),
    [
        pytest.param("idle", ["DRAIN"], (NodeState.IDLE, {"DRAIN"}), id="slurm-22.05-json"),
        pytest.param(
            "mixed",
            ["MAINTENANCE", "RESERVED"],
            (NodeState.MIXED, {"MAINTENANCE", "RESERVED"}),
            id="22.05-two",
        ),
        pytest.param(["IDLE", "DRAIN"], [], (NodeState.IDLE, {"DRAIN"}), id="slurm-24.11-json"),
        pytest.param(
            ["IDLE", "RESERVED", "MAINTENANCE"],
            [],
            (NodeState.IDLE, {"MAINTENANCE", "RESERVED"}),
            id="24.11-maint",
        ),
        pytest.param("IDLE+DRAIN", [], (NodeState.IDLE, {"DRAIN"}), id="text"),
        pytest.param("IDLE+MAINTENANCE+RESERVED", [], (NodeState.IDLE, {"MAINTENANCE", "RESERVED"}), id="text-maint"),
        pytest.param("DOWN+NOT_RESPONDING", [], (NodeState.DOWN, {"NOT_RESPONDING"}), id="text-down"),
        pytest.param("IDLE+DRAIN+FAIL", [], (NodeState.IDLE, {"DRAIN", "FAIL"}), id="text-fail"),
        pytest.param("idle*", [], (NodeState.IDLE, {"NOT_RESPONDING"}), id="sinfo-idle*"),
        pytest.param("drain", [], (NodeState.IDLE, {"DRAIN"}), id="sinfo-drain"),
        pytest.param("drng", [], (NodeState.MIXED, {"DRAIN"}), id="sinfo-drng"),
        pytest.param("down*", [], (NodeState.DOWN, {"NOT_RESPONDING"}), id="sinfo-down*"),
        pytest.param("mix-", [], (NodeState.MIXED, {"PLANNED"}), id="sinfo-mix-"),
        pytest.param("maint", [], (NodeState.IDLE, {"MAINTENANCE", "RESERVED"}), id="sinfo-maint"),
        pytest.param("alloc", [], (NodeState.ALLOCATED, set()), id="sinfo-alloc"),
        pytest.param("idle~", [], (NodeState.IDLE, {"POWERED_DOWN"}), id="sinfo-idle~"),
        pytest.param("drain*", [], (NodeState.IDLE, {"DRAIN", "NOT_RESPONDING"}), id="sinfo-drain*"),
        pytest.param("IDLE+SOMETHING_NEW", [], (NodeState.IDLE, {"SOMETHING_NEW"}), id="unknown-flag-kept"),
        pytest.param("", [], (NodeState.UNKNOWN, set()), id="empty"),
    ],
)
def test_parse_node_state_accepts_every_form(
    given_state: str | list[str], flags: list[str], expected: tuple[NodeState, set[str]]
) -> None:
    assert parse_node_state(given_state, flags) == (expected[0], frozenset(expected[1]))


_FLAGS = st.frozensets(st.sampled_from([f.value for f in NodeFlag]), max_size=5)


@given(base=st.sampled_from(list(NodeState)), flags=_FLAGS, data=st.data())
def test_node_state_forms_agree_whatever_the_flag_order(
    base: NodeState, flags: frozenset[str], data: st.DataObject
) -> None:
    ordered = data.draw(st.permutations(sorted(flags)))
    expected = (base, flags)
    assert parse_node_state("+".join([base.value, *ordered])) == expected
    assert parse_node_state([base.value, *ordered]) == expected
    assert parse_node_state(base.value.lower(), ordered) == expected
    node = Node(name="n1", state=base, flags=flags)
    assert parse_node_state(node.state_text) == expected


@given(suffixes=st.text(alphabet="*~#%$@^-", min_size=1, max_size=3))
def test_sinfo_suffixes_become_flags(suffixes: str) -> None:
    state, flags = parse_node_state(f"idle{suffixes}")
    assert state is NodeState.IDLE
    assert flags and all(f in {m.value for m in NodeFlag} for f in flags)


def test_node_properties_follow_state_and_flags() -> None:
    drained = Node(name="n4", state=NodeState.IDLE, flags=frozenset({"drain"}))
    draining = Node(name="n1", state=NodeState.MIXED, flags=frozenset({"DRAIN"}))
    dead = Node(name="n3", state=NodeState.DOWN, flags=frozenset({"NOT_RESPONDING"}))
    assert drained.flags == {"DRAIN"} and drained.is_drained and not drained.is_draining
    assert draining.is_draining and not draining.is_drained
    assert dead.is_down and not dead.is_responding and dead.state_text == "DOWN+NOT_RESPONDING"


def test_node_flags_must_be_names() -> None:
    with pytest.raises(ValueError, match="flag"):
        Node(name="n1", state=NodeState.IDLE, flags=frozenset({"not a flag!"}))


# ---------------------------------------------------------------------------------- job state


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("FAILED", (JobState.FAILED, set())),
        (["FAILED"], (JobState.FAILED, set())),
        (["RUNNING", "COMPLETING"], (JobState.RUNNING, {"COMPLETING"})),
        ("CANCELLED by 0", (JobState.CANCELLED, set())),
        ("COMPLETING", (JobState.COMPLETING, set())),
        ("PD", (JobState.PENDING, set())),
        ("OUT_OF_MEMORY", (JobState.OUT_OF_MEMORY, set())),
        ("WHATEVER", (JobState.UNKNOWN, {"WHATEVER"})),
    ],
)
def test_parse_job_state(text: str | list[str], expected: tuple[JobState, set[str]]) -> None:
    assert parse_job_state(text) == (expected[0], frozenset(expected[1]))


@pytest.mark.parametrize(("text", "jobs"), [
    ("1-1000%10", 1000),  # the throttle is not a count
    ("[1-5,7]", 6),
    ("1-199:3", 67),  # 1, 4 ... 199 (22.05's squeue -r lists 66)
    ("1-2,4,7,11-19:4", 7),
    ("1-2,4,7,11,16,22,29,37,46,56,67,79,92,106,121,137,154,172,19...", 19),  # cut: what is shown
    ("", 1),
    (None, 1),
], ids=["throttled", "brackets", "stepped", "mixed", "cut", "empty", "none"])
def test_an_array_record_counts_its_pending_tasks(text: str | None, jobs: int) -> None:
    assert array_task_count(text) == jobs
    assert Job(job_id=7, array_job_id=7, array_task_str=text, state=JobState.PENDING).job_count == jobs
    assert Job(job_id=8, array_job_id=7, array_task_id=3, array_task_str=text, state=JobState.RUNNING).job_count == 1


# ---------------------------------------------------------------------------------- exit codes


def test_exit_code_from_wait_status() -> None:
    assert ExitCode.from_wait_status(768) == ExitCode(return_code=3)
    assert ExitCode.from_wait_status(0).succeeded
    assert ExitCode.from_wait_status(15) == ExitCode(signal=15)
    assert ExitCode.from_wait_status(0x80 | 11) == ExitCode(signal=11, core_dumped=True)


def test_exit_code_from_text() -> None:
    assert ExitCode.from_text("3:0") == ExitCode(return_code=3)
    assert ExitCode.from_text("0:15") == ExitCode(signal=15)
    assert str(ExitCode.from_text("1:0")) == "1:0"
    with pytest.raises(ValueError, match="exit code"):
        ExitCode.from_text("three")


@given(code=st.integers(0, 255))
def test_exit_code_return_codes_round_trip(code: int) -> None:
    assert ExitCode.from_wait_status(code << 8) == ExitCode.from_text(f"{code}:0") == ExitCode(return_code=code)


@given(signal=st.integers(1, 127))
def test_exit_code_signals_round_trip(signal: int) -> None:
    assert ExitCode.from_wait_status(signal) == ExitCode.from_text(f"0:{signal}") == ExitCode(signal=signal)


# --------------------------------------------------------------------------- Key=Value splitting

_KEY = st.from_regex(r"[A-Za-z][A-Za-z0-9_:/.]{0,12}", fullmatch=True)
# Values may hold spaces and most punctuation; only a " Word=" inside would start a new key.
_VALUE = st.text(
    alphabet=st.characters(codec="ascii", categories=["L", "N", "P", "S"], exclude_characters="="),
    max_size=20,
).map(lambda v: v.strip()) | st.lists(st.text(alphabet="abcXYZ019[]@:-,()#", min_size=1, max_size=8), max_size=4).map(
    " ".join
)


@given(fields=st.dictionaries(_KEY, _VALUE, min_size=1, max_size=8))
def test_split_key_values_round_trips(fields: dict[str, str]) -> None:
    line = " ".join(f"{key}={value}" for key, value in fields.items())
    assert ad.split_key_values(line) == fields


def test_split_key_values_keeps_spaces_and_inner_equals() -> None:
    line = (
        "NodeName=n4 OS=Linux 6.1.0 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=2000 CfgTRES=cpu=2,mem=2000M "
        "AllocTRES= Reason=disk replace [root@2026-11-29T10:00:00]"
    )
    fields = ad.split_key_values(line)
    assert fields["OS"] == "Linux 6.1.0 #1 SMP PREEMPT_DYNAMIC @0"
    assert fields["CfgTRES"] == "cpu=2,mem=2000M"
    assert fields["AllocTRES"] == ""
    assert fields["Reason"] == "disk replace [root@2026-11-29T10:00:00]"


def test_reason_suffix_gives_user_and_time() -> None:
    (node,) = ad.parse_nodes_text("NodeName=n4 State=IDLE+DRAIN Reason=disk replace [root@2026-11-29T10:00:00]", tz=UTC)
    assert node.reason == "disk replace"
    assert node.reason_set_by_user == "root"
    assert node.reason_changed_at == datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def test_text_times_use_the_cluster_timezone() -> None:
    cest = timezone(timedelta(hours=2))
    assert ad.parse_text_time("2026-06-01T12:00:00", cest) == datetime(2026, 6, 1, 10, 0, tzinfo=UTC)
    assert ad.parse_text_time("Unknown") is None and ad.parse_text_time("None") is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("00:05:00", timedelta(minutes=5)),
        ("5:00", timedelta(minutes=5)),
        ("5", timedelta(minutes=5)),
        ("1:00:00", timedelta(hours=1)),
        ("1-00:00:00", timedelta(days=1)),
        ("365-00:00:00", timedelta(days=365)),
        ("2-12", timedelta(days=2, hours=12)),
        ("UNLIMITED", None),
        ("infinite", None),
        ("NONE", None),
    ],
)
def test_parse_duration(text: str, expected: timedelta | None) -> None:
    assert ad.parse_duration(text) == expected


def test_config_keys_are_snake_case() -> None:
    assert config_key("TopologyPlugin") == "topology_plugin"
    assert config_key("SLURM_VERSION") == "slurm_version"
    assert config_key("SlurmctldHost[0]") == "slurmctld_host_0"
    assert config_key("AccountingStorageTRES") == "accounting_storage_tres"
    assert config_key("MaxCPUsPerNode") == "max_cpus_per_node"


# ------------------------------------------------------------------------------ versions, meta


def test_versions_compare() -> None:
    old, new = SlurmVersion.parse("22.05.8"), ad.parse_sinfo_version("slurm 24.11.7\n")
    assert old < new and new >= (24, 11) and old == (22, 5) and str(new) == "24.11.7"
    assert ad.parse_sinfo_version("slurm-wlm 22.05.8") == old
    with pytest.raises(SlurmError):
        ad.parse_sinfo_version("command not found")


def test_detect_version_reads_both_meta_shapes() -> None:
    old = {
        "meta": {
            "plugin": {"type": "openapi/v0.0.38"},
            "Slurm": {"version": {"major": 22, "minor": 5, "micro": 8}, "release": "22.05.8"},
        }
    }
    new = {
        "meta": {
            "plugin": {"type": "", "data_parser": "data_parser/v0.0.42"},
            "slurm": {"version": {"major": "24", "minor": "11", "micro": "7"}, "release": "24.11.7"},
        }
    }
    assert ad.detect_version(old) == SlurmVersion(major=22, minor=5, micro=8)
    assert ad.detect_version(old).data_parser == "v0.0.38"
    assert ad.detect_version(new).data_parser == "v0.0.42" and ad.format_version(new) == 42
    with pytest.raises(SlurmError):
        ad.detect_version({"nodes": []})


# --------------------------------------------------------------------- adapter chain, per step


_META_2205 = {
    "plugin": {"type": "openapi/v0.0.38"},
    "Slurm": {"version": {"major": 22, "minor": 5, "micro": 8}, "release": "22.05.8"},
}


def test_v0038_unlimited_and_unset_numbers_become_none() -> None:
    job = {
        "job_id": 1,
        "job_state": "RUNNING",
        "time_limit": 4294967295,
        "array_job_id": 0,
        "array_task_id": 4294967294,
        "exit_code": 256,
        "memory_per_node": None,
    }
    (parsed,) = ad.parse_jobs_json({"meta": _META_2205, "errors": [], "jobs": [job]})
    assert parsed.time_limit is None and parsed.array_job_id is None and parsed.array_task_id is None
    assert parsed.exit_code == ExitCode(return_code=1) and parsed.memory_per_node_mib is None


def test_v0038_partition_flat_keys_and_infinite_minus_one() -> None:
    part = {
        "name": "p",
        "state": "UP",
        "flags": ["default", "hidden"],
        "nodes": "n[1-2]",
        "total_nodes": 2,
        "max_time_limit": -1,
        "maximum_nodes_per_job": -1,
        "min nodes per job": 1,
        "default_time_limit": None,
    }
    (parsed,) = ad.parse_partitions_json({"meta": _META_2205, "errors": [], "partitions": [part]})
    assert (parsed.max_time, parsed.max_nodes, parsed.min_nodes, parsed.default_time) == (None, None, 1, None)
    assert parsed.is_default is True and parsed.hidden is True and parsed.state == "UP"


def test_v0038_sacct_exit_codes_are_dropped_as_wrong() -> None:
    job = {
        "job_id": 4,
        "state": {"current": "FAILED", "reason": "None"},
        "exit_code": {"status": "SUCCESS", "return_code": 0},
        "time": {"limit": 5, "start": 1, "end": 2, "submission": 1, "eligible": 1, "elapsed": 1},
        "required": {"CPUs": 1, "memory": 100},
    }
    (parsed,) = ad.parse_sacct_json({"meta": _META_2205, "errors": [], "jobs": [job]})
    assert parsed.state is JobState.FAILED and parsed.exit_code is None and parsed.from_accounting
    assert parsed.memory_per_node_mib == 100 and parsed.time_limit == timedelta(minutes=5)


def test_epoch_zero_is_none_in_every_format() -> None:
    old = {"name": "n1", "state": "idle", "state_flags": [], "boot_time": 0, "last_busy": 1795996012}
    new = {
        "name": "n1",
        "state": ["IDLE"],
        "boot_time": {"set": True, "infinite": False, "number": 0},
        "last_busy": {"set": True, "infinite": False, "number": 1795996012},
    }
    meta_new = {
        "plugin": {"data_parser": "data_parser/v0.0.44"},
        "slurm": {"version": {"major": "25", "minor": "11", "micro": "7"}},
    }
    (a,) = ad.parse_nodes_json({"meta": _META_2205, "nodes": [old]})
    (b,) = ad.parse_nodes_json({"meta": meta_new, "nodes": [new]})
    assert a.boot_time is None and b.boot_time is None and a.last_busy == b.last_busy is not None


def _meta(fmt: int, release: str) -> dict[str, Any]:
    major, minor, micro = release.split(".")
    return {
        "plugin": {"data_parser": f"data_parser/v0.0.{fmt}"},
        "slurm": {"version": {"major": major, "minor": minor, "micro": micro}, "release": release},
    }


def _n(value: int, *, infinite: bool = False, set_: bool = True) -> dict[str, Any]:
    return {"set": set_, "infinite": infinite, "number": value}


def test_v0045_sinfo_reason_user_moved_up_a_level() -> None:
    group = {
        "node": {"state": ["IDLE", "DRAIN"]},
        "nodes": {"nodes": ["q4"], "total": 1},
        "partition": {"name": "debug"},
    }
    old = {**group, "reason": {"description": "disk replace", "time": 1796113410, "user": "root"}}
    new = {**group, "reason": {"description": "disk replace", "time": 1796113410}, "reason_set_by_user": "root"}
    (a,) = ad.parse_nodes_json({"meta": _meta(44, "25.11.7"), "sinfo": [old]})
    (b,) = ad.parse_nodes_json({"meta": _meta(45, "26.05.3"), "sinfo": [new]})
    assert a == b and b.reason_set_by_user == "root" and b.reason == "disk replace" and b.is_drained
    # A v0.0.45 record's own reason_set_by_user is not overwritten by the older key.
    (c,) = ad.parse_nodes_json({"meta": _meta(45, "26.05.3"), "sinfo": [{**new, "reason": old["reason"]}]})
    assert c.reason_set_by_user == "root"


def test_v0045_partition_flags_give_default_and_hidden() -> None:
    base = {"name": "p", "partition": {"state": ["UP"]}, "maximums": {"time": _n(60)}}
    older = {**base, "cpus": {"task_binding": 0, "total": 8}, "select_type": []}
    newer = {**base, "cpus": {"task_binding": [], "total": 8}, "select_type": ["NONE"]}
    (a,) = ad.parse_partitions_json({"meta": _meta(44, "25.11.7"), "partitions": [older]})
    (b,) = ad.parse_partitions_json({"meta": _meta(45, "26.05.3"), "partitions": [{**newer, "flags": []}]})
    (c,) = ad.parse_partitions_json(
        {"meta": _meta(45, "26.05.3"), "partitions": [{**newer, "flags": ["DEFAULT", "HIDDEN"]}]}
    )
    assert (a.is_default, a.hidden) == (None, None)  # v0.0.40-44 do not say
    assert (b.is_default, b.hidden, c.is_default, c.hidden) == (False, False, True, True)
    assert a.model_dump(exclude={"is_default", "hidden"}) == b.model_dump(exclude={"is_default", "hidden"})
    assert a.total_cpus == 8 and a.max_time == timedelta(hours=1)


def test_node_suspend_time_from_json_and_text() -> None:
    def node(suspend: dict[str, Any]) -> Node:
        (parsed,) = ad.parse_nodes_json(
            {"meta": _meta(45, "26.05.3"), "nodes": [{"name": "q1", "state": ["IDLE"], "suspend_time": suspend}]}
        )
        return parsed

    assert node(_n(600)).suspend_time == timedelta(minutes=10)
    assert node(_n(0, infinite=True, set_=False)).suspend_time is None  # INFINITE: never
    assert node(_n(0, set_=False)).suspend_time is None

    def text(value: str) -> timedelta | None:
        (parsed,) = ad.parse_nodes_text(f"NodeName=q1 State=IDLE ResumeAfterTime=None SuspendTime={value} CfgTRES=")
        return parsed.suspend_time

    # Only INFINITE was recorded; a number is read as seconds, slurm.conf's unit.
    assert (text("INFINITE"), text("600"), text("600 sec"), text("00:10:00")) == (
        None,
        timedelta(minutes=10),
        timedelta(minutes=10),
        timedelta(minutes=10),
    )
    (older,) = ad.parse_nodes_text("NodeName=p1 State=IDLE ResumeAfterTime=None CfgTRES=")
    assert older.suspend_time is None


def test_sluid_from_slurmctld_and_accounting_json() -> None:
    ctl = {"job_id": 3, "job_state": ["FAILED"], "step_id": {"sluid": "sBC9M8RB4JCW00", "step_id": "entire"}}
    (job,) = ad.parse_jobs_json({"meta": _meta(45, "26.05.3"), "jobs": [ctl]})
    assert (job.sluid, job.original_sluid) == ("sBC9M8RB4JCW00", None)
    acct = {"job_id": 3, "state": {"current": ["FAILED"]}, "sluid": "sBC9M8RB4JCW01", "original_sluid": "sBC9M8RB4JCW00"}
    (run,) = ad.parse_sacct_json({"meta": _meta(45, "26.05.3"), "jobs": [acct]})
    assert (run.sluid, run.original_sluid, run.from_accounting) == ("sBC9M8RB4JCW01", "sBC9M8RB4JCW00", True)
    (older,) = ad.parse_sacct_json(
        {"meta": _meta(44, "25.11.7"), "jobs": [{"job_id": 3, "state": {"current": ["FAILED"]}}]}
    )
    assert older.sluid is None and older.original_sluid is None


def test_sdiag_json_average_unset_is_total_over_count() -> None:
    def stats(rpc: dict[str, Any]) -> int | None:
        doc = {"meta": _meta(45, "26.05.3"), "statistics": {"rpcs_by_message_type": [rpc], "rpcs_by_user": []}}
        return ad.parse_sdiag_json(doc).rpcs_by_type[0].average_time_us

    persist = {"type_id": 6500, "message_type": "REQUEST_PERSIST_INIT", "count": 1, "total_time": 0}
    assert stats({**persist, "average_time": _n(0, set_=False)}) == 0  # sdiag prints ave_time:0
    assert stats({**persist, "count": 3, "total_time": 10, "average_time": _n(0, set_=False)}) == 3
    assert stats({**persist, "count": 0, "average_time": _n(0, set_=False)}) is None
    assert stats({**persist, "count": 4, "total_time": 100, "average_time": _n(24)}) == 24  # Slurm's own wins


def test_config_json_values_in_the_text_notation() -> None:
    conf = {
        "ClusterName": "c1",
        "SlurmUser": "slurm",
        "SlurmUserId": 64030,
        "controllers": [{"machine": "ctl1", "address": "10.0.0.1"}, {"machine": "ctl2"}],
        "AccountingStorageTRES": ["cpu", "mem"],
        "JobDefaults": [{"type": "DefCpuPerGPU", "value": 2}, {"type": "DefMemPerGPU", "value": 1024}],
        "SrunPortRange": {"minimum": 60001, "maximum": 63000, "set": True},
        "SuspendTime": _n(0, infinite=True, set_=False),
        "EpilogTimeout": _n(0, set_=False),
        "MinJobAge": 300,
        "JobRequeue": True,
        "PriorityFavorSmall": False,
        "PriorityWeightFairshare": 1000,
        "MailDomain": "",
        "DebugFlags": [],
    }
    meta = {"LastUpdate": 1796113420, "BOOT_TIME": 1796113318, "SLURM_VERSION": "26.05.3", "NEXT_JOB_ID": _n(16)}
    doc = {"meta": _meta(45, "26.05.3"), "slurm_conf": conf, "slurm_conf_meta": meta, "errors": [], "warnings": []}
    config = ad.parse_config_json(doc, tz=timezone(timedelta(hours=1)))
    assert config.items == {
        "cluster_name": "c1",
        "slurm_user": "slurm(64030)",
        "slurmctld_host_0": "ctl1(10.0.0.1)",
        "slurmctld_host_1": "ctl2",
        "accounting_storage_tres": "cpu,mem",
        "job_defaults": "DefCpuPerGPU=2,DefMemPerGPU=1024",
        "srun_port_range": "60001-63000",
        "suspend_time": "INFINITE",
        "epilog_timeout": "(null)",
        "min_job_age": "300",
        "job_requeue": "1",
        "priority_favor_small": "no",
        "priority_weight_fair_share": "1000",
        "mail_domain": "(null)",
        "debug_flags": "(null)",
        "boot_time": "2026-12-01T09:21:58",  # local time in the cluster's zone, as the text prints it
        "slurm_version": "26.05.3",
        "next_job_id": "16",
    }
    assert config.as_of == datetime(2026, 12, 1, 8, 23, 40, tzinfo=UTC) and config.controllers == {}
    assert (config.cluster_name, config.slurm_user, config.min_job_age, str(config.version)) == (
        "c1", "slurm", 300, "26.05.3"
    )
    assert config.get("MailDomain") is None and config.get("EpilogTimeout") is None
    with pytest.raises(SlurmRequestError, match="Invalid"):
        ad.parse_config_json({"meta": {}, "errors": [{"error": "Invalid request"}], "warnings": []})
    with pytest.raises(SlurmError, match="slurm_conf"):
        ad.parse_config_json({"meta": {}, "errors": [], "slurm_conf": ["not", "an", "object"]})


# ---------------------------------------------------------------- data_parser versions, chain


def test_known_data_parsers_and_the_chain_come_from_one_list() -> None:
    from slurmtower.slurm.adapters import _chain, _envelope

    assert set(range(36, 46)) == ad.KNOWN_DATA_PARSERS
    assert _chain.NEWEST == 45 == max(p.number for p in ad.DATA_PARSERS if p.parsed)
    assert [p.number for p in ad.DATA_PARSERS] == list(range(36, 47))
    v46 = ad.data_parser("data_parser/v0.0.46")
    assert v46 is not None and not v46.parsed and v46.releases == ("26.11",)
    assert ad.data_parser(47) is None
    v42 = ad.data_parser("v0.0.42")
    assert v42 is not None and v42.releases == ("24.11", "25.05", "25.11", "26.05")
    # A document whose meta names a release but no format gets that release's default.
    for release, fmt in (("22.05.8", 38), ("25.11.7", 44), ("26.05.3", 45), ("26.11.0", 46)):
        major, minor, micro = release.split(".")
        doc = {"meta": {"slurm": {"version": {"major": major, "minor": minor, "micro": micro}}}}
        assert _envelope.format_version(doc) == fmt, release
    with pytest.raises(ValueError, match="not a data_parser version"):
        ad.data_parser("v1")


def test_deprecated_parsers_says_since_when_until_when_and_what_instead() -> None:
    on_2605 = ad.deprecated_parsers(["v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"])
    assert on_2605 == {42: "v0.0.42 is deprecated since Slurm 26.05 and removed in 26.11; slurmtower reads v0.0.45"}
    assert ad.deprecated_parsers([41, 42, 43, 44]) == {
        41: "v0.0.41 is deprecated since Slurm 25.11 and removed in 26.05; slurmtower reads v0.0.44"
    }
    assert ad.deprecated_parsers([40, 41, 42]) == {}  # 24.11
    # The release can be given (a pinned older version on 26.05), and formats slurmtower does
    # not read yet are offered but never read instead.
    assert set(ad.deprecated_parsers([42, 43], release="26.05.3")) == {42}
    assert ad.deprecated_parsers([43, 44, 45, 46]) == {}
    assert ad.newest_known(["data_parser/v0.0.45", "data_parser/v0.0.46"]) == 45
    assert ad.newest_known([]) is None and ad.deprecated_parsers([]) == {}
    # The short form, for "slurmrestd marks API v0.0.42 deprecated (<note>)".
    assert ad.data_parser_note(42) == "since Slurm 26.05, removed in 26.11"
    assert ad.data_parser_note("v0.0.40") == "removed in Slurm 25.05"
    assert ad.data_parser_note(45) is None and ad.data_parser_note(99) is None


def test_a_step_into_an_unknown_format_or_a_second_one_is_refused() -> None:
    from slurmtower.slurm.adapters import _chain

    with pytest.raises(ValueError, match="no known data format"):
        _chain.step("node", 46)
    with pytest.raises(ValueError, match="two steps"):
        _chain.step("node", 40)(lambda record, version: record)


def test_rest_responses_map_to_the_exception_tree() -> None:
    assert isinstance(ad.error_from_rest_response(405, "Requested REST method is not defined at URL."), Unsupported)
    assert isinstance(ad.error_from_rest_response(401, "Authentication failure"), AuthenticationError)
    envelope = {"errors": [{"description": "Invalid node name specified", "error": "Invalid node name"}]}
    assert isinstance(ad.error_from_rest_response(200, envelope), SlurmRequestError)
    assert ad.error_from_rest_response(200, {"errors": [], "warnings": []}) is None


# ----------------------------------------------------------------- 22.05 lab's extra samples


def test_multi_line_scontrol_output_parses_like_one_line() -> None:
    nodes = {n.name: n for n in ad.parse_nodes_text((LAB / "scontrol-show-node.txt").read_text(), tz=UTC)}
    assert nodes["n1"].state_text == "IDLE+MAINTENANCE+RESERVED"
    assert nodes["n3"].is_down and nodes["n4"].is_drained
    assert nodes["n1"].operating_system == "Linux 6.18.44-fc-v782 #1 SMP PREEMPT_DYNAMIC @0"
    jobs = {j.job_key: j for j in ad.parse_jobs_text((LAB / "scontrol-show-job.txt").read_text(), tz=UTC)}
    assert jobs["1"].command == "hostname" and jobs["1"].time_limit is None  # TimeLimit=UNLIMITED
    assert jobs["13"].exit_code == ExitCode(return_code=3) and jobs["7_2"].array_task_id == 2
    (debug, *_rest) = ad.parse_partitions_text((LAB / "scontrol-show-partition.txt").read_text())
    assert debug.is_default and debug.nodes == "n[1-4]"


def test_lab_reservation_reads_the_same_from_rest_and_text() -> None:
    (text,) = ad.parse_reservations_text((LAB / "scontrol-show-reservation.txt").read_text(), tz=UTC)
    (rest,) = ad.parse_reservations_json(json.loads((LAB / "rest-slurm-reservations.json").read_text()))
    assert rest.model_dump(exclude={"state"}) == text.model_dump(exclude={"state"})
    assert text.flags == ["MAINT", "IGNORE_JOBS", "SPEC_NODES"] and text.duration == timedelta(days=365)


def test_no_job_steps_in_the_system_is_an_empty_list() -> None:
    assert ad.parse_steps_text((LAB / "scontrol-show-steps.txt").read_text()) == []


def test_steps_text_parses_batch_extern_and_numbered_steps() -> None:
    # Hand-written in scontrol 22.05's layout (the lab had no running step when recorded).
    text = (
        "StepId=2025.0 UserId=1001 StartTime=2026-11-29T23:45:51 TimeLimit=UNLIMITED State=RUNNING "
        "Partition=batch NodeList=n1 Nodes=1 CPUs=1 Tasks=1 Name=sleep Network=(null) "
        "TRES=cpu=1,mem=100M,node=1 ResvPorts=(null) CPUFreqReq=Default Dist=Block "
        "SrunHost:Pid=localhost:4321\n"
        "StepId=2025.batch UserId=1001 StartTime=2026-11-29T23:45:51 TimeLimit=UNLIMITED State=RUNNING "
        "Partition=batch NodeList=n1 Nodes=1 CPUs=1 Tasks=1 Name=batch Network=(null) "
        "TRES=cpu=1,mem=100M,node=1\n"
        "StepId=2025.extern UserId=1001 StartTime=2026-11-29T23:45:51 TimeLimit=UNLIMITED State=RUNNING "
        "Partition=batch NodeList=n1 Nodes=1 CPUs=1 Tasks=1 Name=extern Network=(null) "
        "TRES=cpu=1,mem=100M,node=1\n"
    )
    steps = ad.parse_steps_text(text, tz=UTC)
    assert [s.full_id for s in steps] == ["2025.0", "2025.batch", "2025.extern"]
    step = steps[0]
    assert (step.state, step.user_id, step.nodes, step.tasks, step.name) == (
        JobState.RUNNING,
        1001,
        "n1",
        1,
        "sleep",
    )
    assert step.time_limit is None and step.start_time == datetime(2026, 11, 29, 23, 45, 51, tzinfo=UTC)


def test_sacct_with_jobidraw_gives_array_tasks_their_own_ids() -> None:
    jobs = {j.job_key: j for j in ad.parse_sacct_text((LAB / "sacct-P-all.txt").read_text(), tz=UTC)}
    assert (jobs["7_1"].job_id, jobs["7_2"].job_id, jobs["7_3"].job_id) == (11, 12, 7)
    assert jobs["13"].exit_code == ExitCode(return_code=3) and jobs["13"].state is JobState.FAILED
    assert jobs["14"].state is JobState.TIMEOUT and jobs["14"].time_limit == timedelta(minutes=1)


def test_lab_triggers_include_slurmdbd_ones() -> None:
    triggers = ad.parse_triggers_text((LAB / "strigger-get.txt").read_text())
    assert {t.res_type for t in triggers} == {"node", "slurmdbd"}
    assert all(t.is_permanent for t in triggers)


def test_one_shot_trigger_without_flags_keeps_its_program() -> None:
    text = (
        "TRIG_ID RES_TYPE   RES_ID TYPE                                OFFSET USER     FLAGS PROGRAM\n"
        "      1 node            * down                                     0 slurm          "
        "/opt/lab/a.sh down now\n"
        "      5 job            17 time                                  -300 slurm    PERM  /opt/lab/b.sh\n"
    )
    one, two = ad.parse_triggers_text(text)
    assert one.flags == [] and one.program == "/opt/lab/a.sh down now" and not one.is_permanent
    assert two.offset == -300 and two.flags == ["PERM"] and two.program == "/opt/lab/b.sh"


def test_public_names_exist() -> None:
    import slurmtower.models as models

    for module in (models, ad):
        for name in module.__all__:
            assert hasattr(module, name), (module.__name__, name)


def test_a_job_without_an_id_is_an_error() -> None:
    with pytest.raises(SlurmError, match="job_id"):
        ad.parse_jobs_json({"meta": _META_2205, "jobs": [{"job_state": "RUNNING"}]})
