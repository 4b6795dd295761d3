"""The scheduler's outputs (``sprio``, ``sprio -w``, ``squeue --start``, ``sshare``, ``scontrol show
assoc_mgr``) as recorded on 22.05 and 26.05 (tests/fixtures/slurm/_why, README there), their
parsers on made-up lines (hypothesis), and the catalogue of reason codes against Slurm's own list."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmtower.errors import SlurmError
from slurmtower.models.reasons import CATEGORIES, REASONS, reason_info, split_reason
from slurmtower.slurm.adapters import SEP
from slurmtower.slurm.adapters import scheduling as sc

WHY = Path(__file__).parent / "fixtures" / "slurm" / "_why"
RELEASES = ("22.05", "26.05")
CODES = Path(__file__).parent / "data" / "slurm-reason-codes.txt"


def _read(release: str, name: str) -> str:
    return (WHY / f"{release}-{name}").read_text()


# ------------------------------------------------------------------------------------- sprio


@pytest.mark.parametrize("release", RELEASES)
def test_sprio_gives_each_pending_job_its_factors_summing_to_its_priority(release: str) -> None:
    jobs = sc.parse_sprio_text(_read(release, "sprio.txt"))
    assert len(jobs) >= 5 and len({j.job_id for j in jobs}) == len(jobs)
    for job in jobs:
        assert set(job.weighted) == {"site", "age", "association", "fairshare", "job_size", "partition", "qos"}
        assert job.partition and job.user_name in ("alice", "bob")
        # sprio prints each weighted factor rounded: the sum is the priority give or take one each.
        total = sum(job.weighted.values()) + sum(job.tres.values()) - job.nice
        assert abs(total - job.priority) <= len(job.weighted) + len(job.tres), job
        assert all(0 <= v <= 1 for k, v in job.normalized.items() if k != "priority")
        assert set(job.tres) == {"cpu", "mem"}


def test_sprio_on_2205_names_the_nice_value_and_the_normalized_factors() -> None:
    by_id = {j.job_id: j for j in sc.parse_sprio_text(_read("22.05", "sprio.txt"))}
    assert by_id[11].nice == 100 and by_id[10].nice == 0  # --nice=100
    assert by_id[11].weighted["partition"] == 1000 and by_id[11].normalized["partition"] == 1.0
    assert by_id[11].tres == {"cpu": 250, "mem": 25} and by_id[11].tres_normalized == {"cpu": 0.25, "mem": 0.03}


@pytest.mark.parametrize("release", RELEASES)
def test_sprio_weights_are_the_configured_ones(release: str) -> None:
    weights = sc.parse_sprio_weights_text(_read(release, "sprio-w.txt"))
    assert weights.weights == {"site": 1, "age": 1000, "association": 0, "fairshare": 10000, "job_size": 1000,
                               "partition": 1000, "qos": 1000}
    assert {k.lower(): v for k, v in weights.tres.items()} == {"cpu": 1000, "mem": 1000}


def test_a_held_job_has_no_factors_and_no_error() -> None:
    assert "Unable to find jobs" in _read("22.05", "sprio-held.txt")
    assert sc.parse_sprio_text(_read("22.05", "sprio-held.txt")) == []


def test_sprio_without_a_weights_line_is_an_error_naming_it() -> None:
    with pytest.raises(SlurmError, match="no Weights line"):
        sc.parse_sprio_weights_text("something else\n")


@given(st.lists(st.integers(0, 10**9), min_size=13, max_size=13), st.integers(-10**4, 10**4),
       st.lists(st.floats(0, 1, allow_nan=False), min_size=7, max_size=7))
def test_any_sprio_line_reads_back(numbers: list[int], nice: int, normalized: list[float]) -> None:
    job_id, priority, *factors = numbers[:9]
    cells = [str(job_id), "debug", "alice", str(priority), *map(str, factors[:7]), str(nice),
             f"cpu={numbers[9]},mem={numbers[10]}", *(f"{x:.7f}" for x in normalized), "cpu=0.25,mem=0.03"]
    (job,) = sc.parse_sprio_text(SEP.join(cells) + SEP + "\n")
    assert (job.job_id, job.priority, job.nice) == (job_id, priority, nice)
    assert list(job.weighted.values()) == factors[:7]
    assert job.tres == {"cpu": numbers[9], "mem": numbers[10]}
    assert [round(v, 7) for v in job.normalized.values()] == [round(x, 7) for x in normalized]


def test_a_short_sprio_line_is_an_error_naming_it() -> None:
    with pytest.raises(SlurmError, match="sprio printed 3 fields"):
        sc.parse_sprio_text(SEP.join(["12", "debug", "alice"]))


# ----------------------------------------------------------------------------- squeue --start


@pytest.mark.parametrize("release", RELEASES)
def test_expected_starts_and_their_nodes(release: str) -> None:
    starts = {s.job_id: s for s in sc.parse_start_text(_read(release, "squeue-start.txt"), tz=UTC)}
    planned = [s for s in starts.values() if s.start_time is not None and s.scheduled_nodes]
    assert planned, "a job waiting for resources has an expected start on planned nodes"
    assert all(s.start_time is None or s.start_time.tzinfo is not None for s in starts.values())
    asked = [s for s in starts.values() if s.reason and s.reason.startswith("ReqNodeNotAvail")]
    assert asked and all(s.required_nodes for s in asked)
    assert all(not (s.reason or "").startswith("(") for s in starts.values())


def test_start_of_2205_recording() -> None:
    starts = {s.job_id: s for s in sc.parse_start_text(_read("22.05", "squeue-start.txt"), tz=UTC)}
    assert starts[13].reason == "ReqNodeNotAvail, UnavailableNodes:n4" and starts[13].required_nodes == "n4"
    assert starts[13].start_time is None  # N/A
    assert starts[9].reason == "BeginTime" and starts[9].start_time == datetime(2026, 12, 7, 16, 11, 43, tzinfo=UTC)
    assert {starts[10].scheduled_nodes, starts[11].scheduled_nodes} == {"n1", "n2"}


# ------------------------------------------------------------------------------------- sshare


@pytest.mark.parametrize("release", RELEASES)
def test_the_fairshare_tree_keeps_its_shape(release: str) -> None:
    rows = sc.parse_sshare_text(_read(release, "sshare.txt"))
    assert rows[0].account == "root" and rows[0].depth == 0 and rows[0].parent is None and rows[0].user is None
    accounts = {r.account: r for r in rows if r.user is None}
    assert accounts["physics"].parent == "root" and accounts["chemistry"].parent == "root"
    for row in rows:
        if row.user is not None:
            assert row.parent == row.account and row.depth == accounts[row.account].depth + 1
            assert row.fairshare is not None and 0 <= row.fairshare <= 1
    users = {(r.account, r.user) for r in rows if r.user}
    assert {("physics", "alice"), ("physics", "bob"), ("chemistry", "bob")} <= users
    assert all(r.id is not None for r in rows)
    unused = [r for r in rows if r.user and r.raw_usage == 0]
    assert unused and all(r.level_fs_infinite and r.level_fs is None for r in unused)


def test_sshare_of_2205_has_usage_and_running_tres_minutes() -> None:
    rows = {(r.account, r.user): r for r in sc.parse_sshare_text(_read("22.05", "sshare.txt"))}
    alice = rows[("physics", "alice")]
    assert alice.raw_usage and alice.raw_usage > 0 and alice.level_fs is not None and not alice.level_fs_infinite
    assert alice.tres_run_minutes["cpu"] > 0 and "pages" in alice.tres_run_minutes
    assert rows[("st_why_acct", None)].parent == "root"


_NAMES = st.text("abcdefghij", min_size=1, max_size=6)


@given(st.lists(st.tuples(_NAMES, st.lists(_NAMES, max_size=3, unique=True), st.integers(0, 2)), min_size=1,
                max_size=6, unique_by=lambda t: t[0]))
def test_any_tree_reads_back_with_its_parents(tree: list[tuple[str, list[str], int]]) -> None:
    # root, then accounts: each under the account before it when its "nest" says so (depth <= 3)
    lines = ["1|root||||0.0|0||1.0|||||"]
    expected: dict[tuple[str, str | None], tuple[int, str | None]] = {("root", None): (0, None)}
    branch = ["root"]
    for i, (account, users, nest) in enumerate(tree):
        name = f"a{i}{account}"
        del branch[1 + min(nest, len(branch) - 1):]
        depth = len(branch)
        expected[(name, None)] = (depth, branch[-1])
        lines.append(f"{10 + i}|{' ' * depth}{name}|||1|0.5|3|0.1|0.1||1.5||cpu=1|cpu=2")
        for user in users:
            expected[(name, user)] = (depth + 1, name)
            lines.append(f"0|{' ' * (depth + 1)}{name}|{user}||1|0.5|3|0.1|0.1|0.5|inf||cpu=1|cpu=2")
        branch.append(name)
    rows = sc.parse_sshare_text("\n".join(lines))
    assert {(r.account, r.user): (r.depth, r.parent) for r in rows} == expected


# ---------------------------------------------------------------------------------- assoc_mgr


@pytest.mark.parametrize("release", RELEASES)
def test_limits_and_their_use(release: str) -> None:
    state = sc.parse_assoc_mgr_text(_read(release, "assoc_mgr.txt"))
    capped = state.qos["capped"]
    wall = [lim for lim in capped.limits if lim.name == "MaxWallPJ"]
    assert wall and wall[0].value == 30 and wall[0].used is None
    per_user = {uid: {lim.name: lim for lim in limits} for uid, limits in capped.per_user.items()}
    assert per_user and all(u["MaxJobsPU"].value == 1 for u in per_user.values())
    assert set(per_user) <= {"1001", "1002"}  # by uid (26.05 prints "alice(1001)")
    assert any(u["MaxJobsPU"].reached for u in per_user.values())  # alice runs one capped job
    assert "normal" in state.qos
    accounts = {a.account: a for a in state.associations if a.user is None}
    assert accounts["physics"].parent_account == "root" and accounts["root"].parent_account is None
    users = [a for a in state.associations if a.user is not None]
    assert users and all(a.user_id is not None for a in users)
    limited = {lim.name: lim for lim in accounts["st_why_acct"].limits}
    assert limited["GrpJobs"].value == 1 and limited["GrpJobs"].reached


@given(st.sampled_from(["GrpJobs", "GrpSubmitJobs", "MaxJobsPU", "MaxWallPJ"]),
       st.one_of(st.none(), st.integers(0, 10**6)), st.one_of(st.none(), st.integers(0, 10**6)),
       st.dictionaries(st.sampled_from(["cpu", "mem", "node", "gres/gpu"]),
                       st.tuples(st.one_of(st.none(), st.integers(0, 10**6)), st.integers(0, 10**6)), max_size=4))
def test_any_limit_reads_back(name: str, value: int | None, used: int | None,
                              tres: dict[str, tuple[int | None, int]]) -> None:
    cell = ("N" if value is None else str(value)) + ("" if used is None else f"({used})")
    tres_cell = ",".join(f"{k}={'N' if v is None else v}({u})" for k, (v, u) in tres.items())
    text = f"QOS Records\n\nQOS=q1(7)\n    {name}={cell}\n    GrpTRES={tres_cell}\n    Priority=3\n"
    qos = sc.parse_assoc_mgr_text(text).qos["q1"]
    assert (qos.id, qos.priority) == (7, 3)
    plain = [lim for lim in qos.limits if lim.name == name]
    if value is None and used is None:
        assert plain == []
    else:
        assert [(lim.value, lim.used) for lim in plain] == [(value, None if used is None else float(used))]
    assert {lim.tres: (lim.value, lim.used) for lim in qos.limits if lim.name == "GrpTRES"} == {
        k: (v, float(u)) for k, (v, u) in tres.items()}


def test_a_line_outside_any_record_is_an_error_naming_it() -> None:
    with pytest.raises(SlurmError, match="unexpected line"):
        sc.parse_assoc_mgr_text("    GrpJobs=1(0)\n")


# ------------------------------------------------------------------------------- reason codes


def _codes() -> list[str]:
    return [line.split()[0] for line in CODES.read_text().splitlines() if line and not line.startswith("#")]


def test_every_reason_slurm_gives_is_described() -> None:
    codes = _codes()
    assert len(codes) >= 200  # 23.11-26.05's job_state_reason_string()
    missing = [c for c in codes if c not in REASONS]
    assert missing == []
    for code in codes:
        info = REASONS[code]
        assert info.known and info.category in CATEGORIES
        text = info.sentence({})
        assert "{" not in text and text[0].isupper() and text.endswith("."), code
    limits = [c for c in codes if REASONS[c].limit is not None]
    assert len(limits) > 150 and all(REASONS[c].category == "limit" for c in limits)


@pytest.mark.parametrize(("code", "scope", "key", "tres", "per"), [
    ("QOSMaxJobsPerUserLimit", "qos", "MaxJobsPU", None, "user"),
    ("AssocGrpJobsLimit", "association", "GrpJobs", None, "all"),
    ("QOSGrpCPURunMinutesLimit", "qos", "GrpTRESRunMins", "cpu", "all"),
    ("AssocGrpMemMinutes", "association", "GrpTRESMins", "mem", "all"),
    ("QOSMaxWallDurationPerJobLimit", "qos", "MaxWallPJ", None, "job"),
    ("AssocMaxNodePerJobLimit", "association", "MaxTRESPJ", "node", "job"),
    ("QOSMaxGRESPerNode", "qos", "MaxTRESPN", "gres", "node"),
    ("MaxCpuRunMinsPerUser", "qos", "MaxTRESRunMinsPU", "cpu", "user"),
    ("MaxSubmitJobsPerAccount", "qos", "MaxSubmitJobsPA", None, "account"),
    ("QOSMinCpuNotSatisfied", "qos", "MinTRESPJ", "cpu", "job"),
    ("AssocMaxSubmitJobLimit", "association", "MaxSubmitJobs", None, "user"),
], ids=lambda v: str(v))
def test_a_limit_reason_names_its_limit(code: str, scope: str, key: str, tres: str | None, per: str) -> None:
    limit = REASONS[code].limit
    assert limit is not None and (limit.scope, limit.key, limit.tres, limit.per) == (scope, key, tres, per)


def test_a_sentence_names_the_jobs_qos_account_and_user() -> None:
    text = REASONS["QOSMaxJobsPerUserLimit"].sentence({"qos": "capped", "user": "alice"})
    assert text == "User alice already runs as many jobs in QOS capped as it allows per user (MaxJobsPerUser)."
    assert REASONS["PartitionDown"].sentence({"partition": "short"}).startswith("Partition short is down")


def test_an_unknown_code_is_shown_as_itself() -> None:
    info = reason_info("WaitingForQuantumAnnealer")
    assert not info.known and info.category == "unknown" and "WaitingForQuantumAnnealer" in info.sentence({})
    guessed = reason_info("QOSGrpWidgetLimit")  # not a TRES this slurmtower knows: still unknown, no error
    assert not guessed.known
    newer = reason_info("AssocGrpGRESRunMinutesLimit")  # a spelling Slurm may adopt: read as the family's
    assert not newer.known and newer.limit is not None and newer.limit.key == "GrpTRESRunMins"


@pytest.mark.parametrize(("text", "code", "detail"), [
    ("ReqNodeNotAvail, UnavailableNodes:n4", "ReqNodeNotAvail", "UnavailableNodes:n4"),
    ("ReqNodeNotAvail,_UnavailableNodes:n4", "ReqNodeNotAvail", "UnavailableNodes:n4"),  # scontrol -o
    ("Priority", "Priority", None),
    ("BeginTime,JobHeldAdmin", "BeginTime", "JobHeldAdmin"),
    (None, None, None),
    ("", None, None),
])
def test_a_reason_splits_into_its_code_and_details(text: str | None, code: str | None, detail: str | None) -> None:
    assert split_reason(text) == (code, detail)
