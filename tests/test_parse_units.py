"""The pieces of the parsing layer: state words, Key=Value splitting, exit codes, durations,
the adapter chain's per-format steps, and the 22.05 lab's extra samples."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

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
