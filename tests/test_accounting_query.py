"""The /history query language and the decoders of slurmdbd's raw values (no database)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmtower.accounting import (
    Cursor,
    HistoryQuery,
    decode_wait_status,
    parse_history_query,
    parse_job_state,
    parse_tres,
)
from slurmtower.errors import InvalidInput

# Every example URL of the Flask seed's README, as its raw query string.
SEED_EXAMPLES = [
    "",
    "limit=25",
    "limit=25&offset=25",
    "user=galaxy",
    "partition=high",
    "jobid<=987654",
    "jobname=g12345_bcftools",
    "state=1",
]


def test_defaults_match_the_seed() -> None:
    q = parse_history_query("")
    assert (q.limit, q.offset, q.cursor, q.order) == (10, 0, None, "submit")


@pytest.mark.parametrize("raw", SEED_EXAMPLES, ids=lambda r: r or "bare")
def test_every_seed_example_parses(raw: str) -> None:
    assert isinstance(parse_history_query(raw), HistoryQuery)
    assert parse_history_query("?" + raw) == parse_history_query(raw)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("jobid=5", (("=", 5),)),
        ("jobid>5", ((">", 5),)),
        ("jobid<5", (("<", 5),)),
        ("jobid>=5", ((">=", 5),)),
        ("jobid<=987654", (("<=", 987654),)),
        ("jobid>=5&jobid<10", ((">=", 5), ("<", 10))),
        ("jobid%3C%3D7", (("<=", 7),)),  # a client that percent-encodes the comparator
    ],
    ids=["eq", "gt", "lt", "ge", "le", "range", "encoded"],
)
def test_jobid_takes_every_comparator(raw: str, expected: tuple[tuple[str, int], ...]) -> None:
    q = parse_history_query(raw)
    assert q.jobid == expected
    assert q.order == "jobid"


def test_equality_filters_are_read() -> None:
    q = parse_history_query(
        "user=alice&partition=debug&jobname=g12345_bcftools&associd=5&account=physics&limit=25&offset=50"
    )
    assert (q.user, q.partition, q.jobname, q.associd, q.account, q.limit, q.offset) == (
        "alice",
        "debug",
        "g12345_bcftools",
        5,
        "physics",
        25,
        50,
    )


def test_values_are_percent_decoded_after_splitting_on_ampersand() -> None:
    q = parse_history_query("jobname=a%26b%3Dc&user=x+y")
    assert q.jobname == "a&b=c"
    assert q.user == "x y"


@pytest.mark.parametrize(
    ("value", "code"),
    [
        ("0", 0),
        ("3", 3),
        ("11", 11),
        ("FAILED", 5),
        ("failed", 5),
        ("JOB_FAILED", 5),
        ("JOB_COMPLETE", 3),
        ("completed", 3),
        ("OUT_OF_MEMORY", 11),
        ("oom", 11),
        ("CA", 4),
        ("cancelled", 4),
        ("node_fail", 7),
    ],
)
def test_state_takes_numbers_and_names(value: str, code: int) -> None:
    assert parse_history_query(f"state={value}").state == code
    assert parse_job_state(value) == code


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-01-02T03:04:05Z", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2026-01-02T03:04:05+02:00", datetime(2026, 1, 2, 1, 4, 5, tzinfo=UTC)),
        ("2026-01-02T03:04:05", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2026-01-02", datetime(2026, 1, 2, tzinfo=UTC)),
        ("1767225600", datetime(2026, 1, 1, tzinfo=UTC)),
    ],
    ids=["zulu", "offset", "naive-is-utc", "date", "epoch"],
)
def test_time_filters_take_iso_8601_or_epoch(value: str, expected: datetime) -> None:
    for name in ("submitted_after", "submitted_before", "started_after", "ended_before"):
        got = getattr(parse_history_query(f"{name}={value.replace('+', '%2B')}"), name)
        assert got == expected
        assert got.tzinfo is not None


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        ("bogus=1", "bogus"),
        ("limit=ten", "limit"),
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=-5", "limit"),
        ("offset=-1", "offset"),
        ("offset=1.5", "offset"),
        ("state=99", "state"),
        ("state=12", "state"),
        ("state=RUNNINGISH", "state"),
        ("user>x", "user"),
        ("partition<debug", "partition"),
        ("limit>=5", "limit"),
        ("state>3", "state"),
        ("jobid=abc", "jobid"),
        ("jobid=-3", "jobid"),
        ("jobid==5", "jobid"),
        ("jobid=99999999999", "jobid"),
        ("associd=x", "associd"),
        ("user=", "user"),
        ("user=a&user=b", "user"),
        ("submitted_after=yesterday", "submitted_after"),
        ("ended_before=2026-13-01", "ended_before"),
        ("cursor=notbase64!!", "cursor"),
        ("cursor=e30", "cursor"),  # base64 of {}
        ("jobname", "jobname"),
        ("limit=%C2%B2", "limit"),  # a Unicode digit
        ("jobname=" + "x" * 300, "jobname"),
    ],
)
def test_bad_input_names_its_parameter(raw: str, param: str) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_history_query(raw)
    assert err.value.param == param
    assert err.value.to_problem()["param"] == param


def test_a_cursor_round_trips_as_the_position_of_a_row() -> None:
    c = Cursor(inx=42, job_id=700000, submit=1795991896)
    assert c.encode() == "42.700000.1795991896"
    assert Cursor.decode(c.encode()) == c
    assert parse_history_query(f"jobid<=800000&cursor={c.encode()}").cursor == c


def test_any_cursor_continues_any_query_and_offset_skips_after_it() -> None:
    """Issue 41, item 9: what the document calls a cursor is one. A row's position in both
    orders continues a query of either order (it was refused: "belongs to a query with other
    filters"), and offset counts after it (it was refused with a cursor)."""
    c = Cursor(inx=42, job_id=5, submit=1795991896).encode()
    assert parse_history_query(f"jobid<5&cursor={c}").cursor == Cursor(42, 5, 1795991896)
    q = parse_history_query(f"offset=10&cursor={c}")
    assert (q.offset, q.cursor) == (10, Cursor(42, 5, 1795991896))
    for bad in ("", "42", "42.5", "a.b.c", "42.5.6.7", "-1.5.6", "%C2%B2.5.6"):
        with pytest.raises(InvalidInput) as err:
            parse_history_query(f"cursor={bad}")
        assert err.value.param == "cursor"


@given(st.text(max_size=120))
def test_any_query_string_parses_or_raises_invalid_input(raw: str) -> None:
    try:
        parse_history_query(raw)
    except InvalidInput as exc:
        assert exc.param is not None


@pytest.mark.parametrize(
    ("status", "decoded"),
    [
        (0, (0, 0)),
        (768, (3, 0)),
        (256, (1, 0)),
        (15, (0, 15)),
        (9, (0, 9)),
        (143 << 8, (15, 0)),
        (255 << 8, (127, 0)),
        (-2, (None, None)),
        (4294967294, (None, None)),
        (None, (None, None)),
    ],
    ids=["ok", "exit3", "exit1", "sigterm", "sigkill", "exit143", "exit255", "nodefail-step", "no-val", "null"],
)
def test_wait_status_is_decoded_like_sacct(
    status: int | None, decoded: tuple[int | None, int | None]
) -> None:
    assert decode_wait_status(status) == decoded


def test_tres_strings_are_parsed_and_sentinels_dropped() -> None:
    assert parse_tres("1=2,2=200,3=18446744073709551614,4=1,5=2") == {
        "cpu": 2,
        "mem": 200,
        "node": 1,
        "billing": 2,
    }
    assert parse_tres("") == {}
    assert parse_tres("1=4,1001=2,junk,=3", {1: "cpu", 1001: "gres/gpu"}) == {"cpu": 4, "gres/gpu": 2}
    assert parse_tres("77=1") == {"tres/77": 1}


def test_a_cursor_holds_26_05_row_ids() -> None:
    """From 26.05 on slurmdbd's job_db_inx is the run's sluid (a bigint unsigned above 2**63)."""
    from slurmtower.accounting.query import Cursor

    inx = 15913056731698157568  # a real 26.05 row id
    assert Cursor.decode(Cursor(inx=inx, job_id=7, submit=1).encode()).inx == inx
    # Past what the columns hold: their largest value, a position after every row.
    assert Cursor.decode(f"{2**64}.{2**32}.1") == Cursor(2**64 - 1, 2**32 - 1, 1)
