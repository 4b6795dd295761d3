"""Reservations in the catalogue, requests and approvals, on the local cluster over real HTTP.

One server for the module: tokens of each role, two users (alice, bob: Slurm users of the
devcluster) and a second operator (olga); the partition ``short`` hidden; a two-person rule on
drains of more than two nodes. Every check of Slurm's state is Slurm's own (``scontrol show
reservation``, ``sinfo``), of the store the API's answers.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from slurmtower.actions import Approvals, Policy
from slurmtower.api import create_app
from slurmtower.api.security import hash_token
from slurmtower.devcluster import DevCluster
from slurmtower.errors import ConfigError
from slurmtower.settings import Settings, TokenEntry, TwoPersonRule, load_settings
from tests.auth_helpers import ADMIN, OPERATOR, READER, bearer, module_app_settings, running_server
from tests.conftest import reason_of, sh, submit, wait_for
from tests.sensor_helpers import SLURMTOWER

pytestmark = pytest.mark.cluster

ALICE = "stw_test_alice_user"
BOB = "stw_test_bob_user"
OLGA = "stw_test_olga_operator"


@dataclass
class Tower:
    url: str
    app: FastAPI
    settings: Settings

    def http(self, token: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=bearer(token), timeout=60)

    @property
    def approvals(self) -> Approvals:
        return self.app.state.services.action_catalogue().approvals()


@pytest.fixture(scope="module")
def tower(cluster_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tower]:
    settings = module_app_settings(cluster_settings, tmp_path_factory.mktemp("reservations"))
    settings.auth.tokens += [TokenEntry(name="alice", role="user", sha256=hash_token(ALICE)),
                             TokenEntry(name="bob", role="user", sha256=hash_token(BOB)),
                             TokenEntry(name="olga", role="operator", sha256=hash_token(OLGA))]
    settings.api.hidden_partitions = ["short"]
    settings.approvals.two_person = [TwoPersonRule(action="slurm.node.drain", more_than_nodes=2)]
    app = create_app(settings)
    with running_server(app) as url:
        yield Tower(url, app, settings)


def reservations() -> dict[str, dict[str, str]]:
    """``scontrol -o show reservation``: name -> its fields."""
    out = {}
    for line in sh("scontrol", "-o", "show", "reservation", check=False).splitlines():
        if line.startswith("ReservationName="):
            fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
            out[fields["ReservationName"]] = fields
    return out


def clear_reservations() -> None:
    for name in reservations():
        sh("scontrol", "delete", f"reservationname={name}", check=False)


@pytest.fixture()
def clean(devcluster: DevCluster, tower: Tower) -> Iterator[None]:
    """No reservation before and after, no request pending before (the earlier tests' expire)."""
    clear_reservations()
    tower.approvals.expire(now=datetime.now(UTC) + timedelta(days=365))
    yield
    clear_reservations()


def at(hours: float) -> str:
    """An ISO time ``hours`` from now, to the second."""
    return (datetime.now(UTC) + timedelta(hours=hours)).replace(microsecond=0).isoformat()


def ask(http: httpx.Client, params: dict[str, Any], **query: Any) -> httpx.Response:
    return http.post("/actions/slurm.reservation.create", json=params, params=query)


def events(http: httpx.Client, kind: str) -> list[dict[str, Any]]:
    answer = http.get("/events", params={"type": kind, "limit": 1000})
    assert answer.status_code == 200, answer.text
    return list(answer.json())


def window(hours: float, nodes: str = "n1", minutes: int = 60, **more: Any) -> dict[str, Any]:
    return {"nodes": nodes, "start_time": at(hours), "duration": minutes, **more}


def test_a_users_request_waits_changes_nothing_and_only_an_operator_other_than_them_approves(
        tower: Tower, clean: None) -> None:
    with tower.http(ALICE) as alice, tower.http(BOB) as bob, tower.http(OPERATOR) as otto, \
            tower.http(READER) as rita:
        asked = ask(alice, window(3, users="alice", comment="thesis runs"), request_reason="deadline friday")
        assert asked.status_code == 202, asked.text
        req = asked.json()
        assert req["state"] == "pending" and req["requester"] == "alice" and req["via"] == "api"
        assert req["requester_role"] == "user" and req["reason"] == "deadline friday"
        assert req["parameters"]["nodes"] == "n1" and req["parameters"]["users"] == ["alice"]
        name = req["plan"]["result"]["name"]
        assert name.startswith("alice_") and req["plan"]["result"]["conflicts"] == []
        expires = datetime.fromisoformat(req["expires_at"]) - datetime.fromisoformat(req["created_at"])
        assert expires == timedelta(hours=24)
        assert name not in reservations()  # nothing in Slurm until someone approves
        created = [e for e in events(otto, "slurmtower.request.created") if e["payload"]["request_id"] == req["id"]]
        assert created and created[0]["payload"]["requester"] == "alice"
        # the requester and operators see it; another user and a reader do not
        mine = alice.get("/requests").json()["requests"]
        assert req["id"] in [r["id"] for r in mine] and {r["requester"] for r in mine} == {"alice"}
        assert alice.get("/requests", params={"state": "pending"}).json()["pending"] == 1
        assert bob.get("/requests").json() == {"requests": [], "next_before": None, "pending": 0}
        assert bob.get(f"/requests/{req['id']}").status_code == 404
        assert bob.get("/requests", params={"requester": "alice"}).status_code == 403
        assert rita.get(f"/requests/{req['id']}").status_code == 404
        assert req["id"] in [r["id"] for r in otto.get("/requests", params={"state": "pending"}).json()["requests"]]
        # a user, a reader and bob cannot decide it
        assert alice.post(f"/requests/{req['id']}/approve").status_code == 403
        assert bob.post(f"/requests/{req['id']}/approve").status_code == 403
        assert rita.post(f"/requests/{req['id']}/withdraw").status_code == 403
        # an operator approves: the reservation exists for alice, the audit names both
        done = otto.post(f"/requests/{req['id']}/approve", json={"comment": "enjoy"})
        assert done.status_code == 200, done.text
        body = done.json()
        assert body["request"]["state"] == "approved" and body["request"]["decided_by"] == "otto"
        assert body["request"]["comment"] == "enjoy"
        execution = body["execution"]
        assert execution["principal"] == "alice" and execution["approved_by"] == "otto"
        assert execution["request_id"] == req["id"] and execution["status"] == "succeeded"
        made = reservations()[name]
        assert made["Users"] == "alice" and made["Nodes"] == "n1"
        audit = otto.get("/audit", params={"execution_id": execution["execution_id"]}).json()["records"]
        assert {(r["outcome"], r["who"], r["approved_by"], r["request_id"]) for r in audit} == {
            ("intent", "alice", "otto", req["id"]), ("succeeded", "alice", "otto", req["id"])}
        approved = [e for e in events(otto, "slurmtower.request.approved") if e["payload"]["request_id"] == req["id"]]
        assert approved and approved[0]["payload"]["decided_by"] == "otto"
        calendar = alice.get("/reservations").json()
        entry = next(r for r in calendar["reservations"] if r["name"] == name)
        assert entry["owner"] == "slurmtower:alice@api" and entry["approved_by"] == "otto"
        assert entry["request_id"] == req["id"] and calendar["requests"] == []
        # decided: a second approval, a denial and a withdrawal are refused, naming it
        again = otto.post(f"/requests/{req['id']}/approve")
        assert again.status_code == 409 and "already approved" in again.json()["detail"]
        assert alice.post(f"/requests/{req['id']}/withdraw").status_code == 409


def test_a_denied_request_does_nothing(tower: Tower, clean: None) -> None:
    with tower.http(ALICE) as alice, tower.http(ADMIN) as ada:
        req = ask(alice, window(4, users="alice")).json()
        denied = ada.post(f"/requests/{req['id']}/deny", json={"comment": "n1 is for the course"})
        assert denied.status_code == 200 and denied.json()["state"] == "denied"
        assert denied.json()["decided_by"] == "ada" and denied.json()["comment"] == "n1 is for the course"
        assert reservations() == {}
        assert ada.post(f"/requests/{req['id']}/approve").status_code == 409
        assert reservations() == {}
        assert any(e["payload"]["request_id"] == req["id"] for e in events(ada, "slurmtower.request.denied"))


def test_the_requester_withdraws_and_no_one_else_does(tower: Tower, clean: None) -> None:
    with tower.http(ALICE) as alice, tower.http(BOB) as bob, tower.http(OPERATOR) as otto:
        req = ask(alice, window(5, users="alice")).json()
        assert bob.post(f"/requests/{req['id']}/withdraw").status_code == 404
        refused = otto.post(f"/requests/{req['id']}/withdraw")
        assert refused.status_code == 403 and "only its requester" in refused.json()["detail"]
        gone = alice.post(f"/requests/{req['id']}/withdraw", json={"comment": "found another slot"})
        assert gone.status_code == 200 and gone.json()["state"] == "withdrawn"
        assert otto.post(f"/requests/{req['id']}/approve").status_code == 409
        assert reservations() == {}
        assert any(e["payload"]["request_id"] == req["id"] for e in events(otto, "slurmtower.request.withdrawn"))


def test_a_request_expires_and_cannot_be_approved_then(tower: Tower, clean: None) -> None:
    with tower.http(ALICE) as alice, tower.http(OPERATOR) as otto:
        req = ask(alice, window(6, users="alice")).json()
        assert tower.approvals.expire() == []  # not yet
        # a day and a bit later, as the expiry sweep sees it
        swept = tower.approvals.expire(now=datetime.now(UTC) + timedelta(hours=24, minutes=1))
        assert [r.id for r in swept] == [req["id"]] and swept[0].state == "expired"
        assert alice.get(f"/requests/{req['id']}").json()["state"] == "expired"
        late = otto.post(f"/requests/{req['id']}/approve")
        assert late.status_code == 409 and "expired" in late.json()["detail"]
        assert reservations() == {}
        expired = [e for e in events(otto, "slurmtower.request.expired") if e["payload"]["request_id"] == req["id"]]
        assert len(expired) == 1 and expired[0]["source"] == "approvals"


def test_a_user_asks_only_for_itself_or_its_accounts(tower: Tower, clean: None) -> None:
    with tower.http(ALICE) as alice:
        for params, param in ((window(3, users="bob"), "users"), (window(3, users="alice,bob"), "users"),
                              (window(3, accounts="chemistry"), "accounts")):
            refused = ask(alice, params)
            assert refused.status_code == 403 and refused.json()["param"] == param, refused.text
        # its own account: a request
        assert ask(alice, window(3, accounts="physics")).status_code == 202
        # a user may not do (or ask for) what the policy does not list
        drain = alice.post("/actions/slurm.node.drain", json={"nodes": "n1", "reason": "mine"})
        assert drain.status_code == 403
    assert reservations() == {}


def test_conflicts_are_named_before_acting(tower: Tower, clean: None, clean_nodes: DevCluster) -> None:
    with tower.http(OPERATOR) as otto, tower.http(ALICE) as alice:
        made = otto.post("/actions/slurm.reservation.create",
                         json=window(3, nodes="n2", minutes=120, users="bob", name="st_first"))
        assert made.status_code == 200 and made.json()["result"]["created"] is True, made.text
        # an overlapping one on the same node: refused, the conflict named, dry run too
        for query in ({"dry_run": "true"}, {}):
            clash = otto.post("/actions/slurm.reservation.create",
                              json=window(4, nodes="n[2-3]", users="alice", name="st_second"), params=query)
            assert clash.status_code == 409, clash.text
            conflict = clash.json()["conflicts"]
            assert [(c["kind"], c["reservation"], c["nodes"]) for c in conflict] == [("overlap", "st_first", "n2")]
            assert "reservation st_first holds n2" in clash.json()["detail"]
        assert set(reservations()) == {"st_first"}
        # MAINT may overlap: accepted, named
        maint = otto.post("/actions/slurm.reservation.create", params={"dry_run": "true"},
                          json=window(4, nodes="n[2-3]", users="root", flags="MAINT"))
        assert maint.status_code == 200 and maint.json()["result"]["accepted"][0]["accepted_by"] == "MAINT"
        # a drained node in the window
        sh("scontrol", "update", "nodename=n3", "state=DRAIN", "reason=fan")
        down = otto.post("/actions/slurm.reservation.create", params={"dry_run": "true"},
                         json=window(10, nodes="n3", users="bob"))
        assert down.status_code == 409 and down.json()["conflicts"][0]["kind"] == "unavailable"
        assert "n3 is IDLE+DRAIN (fan)" in down.json()["detail"]
        # a running job that would still run when it starts
        job = submit("alice", "-w", "n4", "-t", "30", "--wrap", "sleep 600")
        try:
            wait_for(lambda: sh("squeue", "-h", "-j", str(job), "-o", "%T").strip() == "RUNNING", 60,
                     what=f"job {job} to run")
            hit = otto.post("/actions/slurm.reservation.create", params={"dry_run": "true"},
                            json=window(0.1, nodes="n4", users="bob"))
            assert hit.status_code == 409 and hit.json()["conflicts"][0]["kind"] == "jobs"
            assert hit.json()["conflicts"][0]["jobs"] == [job]
            ignore = otto.post("/actions/slurm.reservation.create", params={"dry_run": "true"},
                               json=window(0.1, nodes="n4", users="bob", flags="IGNORE_JOBS"))
            assert ignore.status_code == 200 and ignore.json()["result"]["accepted"][0]["jobs"] == [job]
        finally:
            sh("scancel", str(job), check=False)
        # a request's plan is checked: a conflicting request is not made
        before = alice.get("/requests").json()["pending"]
        refused = ask(alice, window(4, nodes="n2", users="alice"))
        assert refused.status_code == 409 and refused.json()["conflicts"][0]["reservation"] == "st_first"
        assert alice.get("/requests").json()["pending"] == before
        # and checked again when approved: a reservation made meanwhile refuses the approval
        req = ask(alice, window(8, nodes="n1", users="alice")).json()
        otto.post("/actions/slurm.reservation.create", json=window(8.5, nodes="n1", users="bob", name="st_meanwhile"))
        late = otto.post(f"/requests/{req['id']}/approve")
        assert late.status_code == 409 and late.json()["conflicts"][0]["reservation"] == "st_meanwhile"
        assert alice.get(f"/requests/{req['id']}").json()["state"] == "pending"
        assert set(reservations()) == {"st_first", "st_meanwhile"}


def test_update_and_delete(tower: Tower, clean: None) -> None:
    with tower.http(OPERATOR) as otto:
        made = otto.post("/actions/slurm.reservation.create",
                         json=window(5, nodes="n[1-2]", users="alice", accounts="physics", name="st_upd"))
        assert made.status_code == 200, made.text
        dry = otto.post("/actions/slurm.reservation.update", params={"dry_run": "true"},
                        json={"name": "st_upd", "duration": 90, "add_flags": "IGNORE_JOBS", "users": "bob"})
        assert dry.status_code == 200 and set(dry.json()["result"]["changes"]) == {"end_time", "add_flags", "users"}
        assert reservations()["st_upd"]["Duration"] == "01:00:00"
        done = otto.post("/actions/slurm.reservation.update",
                         json={"name": "st_upd", "duration": 90, "add_flags": "IGNORE_JOBS", "users": "bob"})
        assert done.status_code == 200, done.text
        shown = reservations()["st_upd"]
        assert shown["Duration"] == "01:30:00" and shown["Users"] == "bob" and "IGNORE_JOBS" in shown["Flags"]
        moved = otto.post("/actions/slurm.reservation.update", json={"name": "st_upd", "start_time": at(6)})
        assert moved.status_code == 200 and reservations()["st_upd"]["Duration"] == "01:30:00"
        assert otto.post("/actions/slurm.reservation.update",
                         json={"name": "st_nothere", "duration": 5}).status_code == 404
        assert otto.post("/actions/slurm.reservation.delete", params={"dry_run": "true"},
                         json={"name": "st_upd"}).status_code == 200
        assert "st_upd" in reservations()
        gone = otto.post("/actions/slurm.reservation.delete", json={"name": "st_upd"})
        assert gone.status_code == 200 and gone.json()["result"]["deleted"] is True
        assert reservations() == {}
        records = otto.get("/audit", params={"action": "slurm.reservation.update"}).json()["records"]
        assert records[0]["outcome"] == "rejected" and "st_nothere" in records[0]["message"]
        last = next(r for r in records if r["outcome"] == "succeeded")  # the move
        assert last["who"] == "otto" and last["before"]["reservation"]["name"] == "st_upd"
        assert last["after"]["reservation"]["duration"] == "PT1H30M" and last["nodes"] == "n[1-2]"


def test_a_large_drain_needs_a_second_person(tower: Tower, clean_nodes: DevCluster) -> None:
    with tower.http(OPERATOR) as otto, tower.http(OLGA) as olga:
        # two nodes: under the rule, done at once
        small = otto.post("/actions/slurm.node.drain", json={"nodes": "n[1-2]", "reason": "two"})
        assert small.status_code == 200 and small.json()["status"] == "succeeded"
        assert otto.post("/actions/slurm.node.resume", json={"nodes": "n[1-2]"}).status_code == 200
        wait_for(lambda: "DRAIN" not in sh("scontrol", "show", "node", "n1"), 20, what="n1 resumed")
        big = otto.post("/actions/slurm.node.drain", json={"nodes": "n[1-3]", "reason": "rack 4 power"},
                        params={"request_reason": "electrician at 9"})
        assert big.status_code == 202, big.text
        req = big.json()
        assert req["two_person"] is True and "3 nodes, more than 2" in req["why"]
        assert req["plan"]["result"]["dry_run"] is True and req["nodes"] == "n[1-3]"
        assert not any("DRAIN" in sh("scontrol", "show", "node", n) for n in ("n1", "n2", "n3"))
        own = otto.post(f"/requests/{req['id']}/approve")
        assert own.status_code == 403 and "never decides its own" in own.json()["detail"]
        done = olga.post(f"/requests/{req['id']}/approve")
        assert done.status_code == 200, done.text
        assert done.json()["execution"]["principal"] == "otto"
        for node in ("n1", "n2", "n3"):
            assert reason_of(node) == "rack 4 power (approved by olga) [slurmtower:otto@api]"
        # the requester owns the drain: otto's resume releases it
        assert otto.post("/actions/slurm.node.resume", json={"nodes": "n[1-3]"}).json()["status"] == "succeeded"


@pytest.mark.parametrize(("params", "param", "words", "asks"), [
    (window(-2, users="alice"), "start_time", "in the past", True),
    ({"nodes": "n1", "start_time": at(3), "end_time": at(2), "users": "alice"}, "end_time", "before it starts", True),
    (window(3, nodes="n[1,9]", users="alice"), "nodes", "unknown node(s): n9", True),
    ({"partition": "nosuch", "start_time": at(3), "duration": 30, "users": "alice"}, "partition", "unknown partition",
     True),
    ({"partition": "short", "start_time": at(3), "duration": 30, "users": "alice"}, "partition", "unknown partition",
     True),
    (window(3, users="nosuchuser"), "users", "unknown user", False),
    (window(3, accounts="nosuchacct"), "accounts", "unknown account", False),
    (window(3, minutes=32 * 24 * 60, users="alice"), "duration", "reservation_max_days", True),
    ({"nodes": "n1", "start_time": at(3), "users": "alice"}, "duration", "give end_time or duration", True),
    (window(3, users="alice", flags="NOSUCH"), "flags", "unknown reservation flag", True),
], ids=["past", "end-before-start", "unknown-node", "unknown-partition", "hidden-partition", "unknown-user",
        "unknown-account", "too-long", "no-end", "bad-flag"])
def test_bad_input_is_a_400_naming_it_and_changes_nothing(tower: Tower, clean: None, params: dict[str, Any],
                                                          param: str, words: str, asks: bool) -> None:
    """The act and, where a user may ask for it, the request for it (a user naming another
    user or an account not its own is refused first: 403)."""
    with tower.http(OPERATOR) as otto, tower.http(ALICE) as alice:
        pending = otto.get("/requests").json()["pending"]
        for http in (otto, alice) if asks else (otto,):
            answer = ask(http, params)
            assert answer.status_code == 400, answer.text
            problem = answer.json()
            assert words in problem["detail"] and problem["param"] == param, problem
            assert "Traceback" not in answer.text and "sqlalchemy" not in answer.text.lower()
        assert reservations() == {}
        assert otto.get("/requests").json()["pending"] == pending


def test_decisions_on_requests_that_are_not_there_or_not_pending(tower: Tower) -> None:
    with tower.http(OPERATOR) as otto, tower.http(ALICE) as alice:
        assert otto.post("/requests/999999/approve").status_code == 404
        assert otto.post("/requests/0/approve").status_code == 404
        assert otto.get("/requests/no-such-thing").status_code == 404
        assert otto.get("/requests", params={"state": "nosuch"}).status_code == 400
        too_long = otto.post("/requests/999999/deny", json={"comment": "x" * 20_000})
        assert too_long.status_code == 400 and too_long.json()["param"] == "comment"
        assert alice.get("/reservations", params={"start": "2026-01-02T00:00:00"}).status_code == 400
        for bad in ("0.5", "1767312000", "20260102T000000Z", "2026-01-02T00:00:00Zjunk"):  # RFC 3339 only
            refused = alice.get("/reservations", params={"end": bad})
            assert refused.status_code == 400 and refused.json()["param"] == "end", bad
        assert alice.get("/reservations", params={"start": "2026-01-02T00:00:00.5+01:00"}).status_code == 200


def test_the_calendar_lists_reservations_and_pending_requests_without_hidden_partitions(
        tower: Tower, clean: None) -> None:
    # one of the hidden partition's, made outside slurmtower: never shown
    sh("scontrol", "create", "reservation", "reservationname=st_hidden", "partitionname=short", "nodecnt=1",
       f"starttime={(datetime.now() + timedelta(hours=2)):%Y-%m-%dT%H:%M:%S}", "duration=30", "users=root")
    with tower.http(OPERATOR) as otto, tower.http(ALICE) as alice, tower.http(BOB) as bob:
        otto.post("/actions/slurm.reservation.create", json=window(2, nodes="n1", users="root", flags="MAINT",
                                                                    name="st_maint"))
        req = ask(alice, window(30, nodes="n2", users="alice")).json()
        for http, sees_request in ((otto, True), (alice, True), (bob, False)):
            calendar = http.get("/reservations").json()
            assert set(calendar["partitions"]) == {"debug", "batch"}
            names = {r["name"]: r for r in calendar["reservations"]}
            assert set(names) == {"st_maint"} and names["st_maint"]["maintenance"] is True
            assert names["st_maint"]["partitions"] == ["batch", "debug"]
            assert [r["request_id"] for r in calendar["requests"]] == ([req["id"]] if sees_request else [])
        # a range that ends before the request's window leaves it out
        soon = otto.get("/reservations", params={"start": at(0), "end": at(24)}).json()
        assert soon["requests"] == [] and [r["name"] for r in soon["reservations"]] == ["st_maint"]


def test_the_cli_lists_decides_and_asks(tower: Tower, devcluster: DevCluster, clean_nodes: DevCluster,
                                        tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", **devcluster.command_env(), "SLURMTOWER_STATE_DIR": str(tower.settings.state_dir),
           "SLURMTOWER_ACTIONS__BREAKER_ENABLED": "false",
           "SLURMTOWER_APPROVALS__TWO_PERSON": json.dumps([{"action": "slurm.node.drain", "more_than_nodes": 2}])}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([SLURMTOWER, *args], env=env, capture_output=True, text=True, timeout=60, check=False)

    with tower.http(ALICE) as alice, tower.http(OPERATOR) as otto:
        req = ask(alice, window(7, users="alice")).json()
        listed = cli("requests", "list", "--state", "pending", "-o", "json")
        assert listed.returncode == 0, listed.stderr
        assert req["id"] in [r["id"] for r in json.loads(listed.stdout)["requests"]]
        shown = cli("requests", "show", str(req["id"]))
        assert shown.returncode == 0 and "alice@api" in shown.stdout and "plan: dry run" in shown.stdout
        approved = cli("requests", "approve", str(req["id"]), "-m", "from the shell")
        assert approved.returncode == 0, approved.stderr
        assert reservations()[req["plan"]["result"]["name"]]["Users"] == "alice"
        again = cli("requests", "deny", str(req["id"]))
        assert again.returncode == 3 and again.stderr.startswith("slurmtower: error: request") \
            and len(again.stderr.splitlines()) == 1
        # a drain past the two-person rule from the CLI is a request (exit 6), not approved by its asker
        asked = cli("run", "slurm.node.drain", "nodes=n[2-4]", "reason=cli rack", "--request-reason", "power", "-o",
                    "json")
        assert asked.returncode == 6, asked.stderr
        drain = json.loads(asked.stdout)
        assert drain["via"] == "cli" and drain["reason"] == "power" and "requested" in asked.stderr
        assert not any("DRAIN" in sh("scontrol", "show", "node", n) for n in ("n2", "n3", "n4"))
        own = cli("requests", "approve", str(drain["id"]))
        assert own.returncode == 77 and "never decides its own" in own.stderr
        assert otto.post(f"/requests/{drain['id']}/approve").status_code == 200
        assert reason_of("n2").endswith("cli rack (approved by otto) [slurmtower:root@cli]")
        assert cli("requests", "show", "nosuch").returncode == 2
    clear_reservations()


@pytest.mark.parametrize(("text", "key"), [
    ('[approvals]\nrequest_ttl = 3\n', "approvals.request_ttl"),
    ('[approvals]\nrequestable = { wizard = ["slurm.node.drain"] }\n', "approvals.requestable.wizard"),
    ('[approvals]\nrequestable = { user = ["rm -rf"] }\n', "approvals.requestable"),
    ('[[approvals.two_person]]\naction = "slurm.node.drain"\nmore_than = 3\n', "approvals.two_person.0.more_than"),
    ('[[approvals.two_person]]\naction = "slurm.node.drain"\napprover_role = "user"\n',
     "approvals.two_person.0.approver_role"),
], ids=["unknown-key", "unknown-role", "not-an-action", "unknown-rule-key", "user-approves"])
def test_the_approvals_section_refuses_unknown_keys(tmp_path: Path, text: str, key: str) -> None:
    conf = tmp_path / "slurmtower.toml"
    conf.write_text(text)
    with pytest.raises(ConfigError) as refused:
        load_settings(conf, environ={})
    assert refused.value.extra["key"].startswith(key)  # a dict key: ".[key]" after it


@pytest.mark.parametrize("text", ['[approvals]\nrequestable = { user = ["slurm.node.dran"] }\n',
                                  '[[approvals.two_person]]\naction = "slurm.trigger.*x"\n'])
def test_a_policy_naming_no_action_refuses_to_start(tmp_path: Path, text: str) -> None:
    conf = tmp_path / "slurmtower.toml"
    conf.write_text(f'state_dir = "{tmp_path}"\n' + text)
    settings = load_settings(conf, environ={})
    with pytest.raises(ConfigError, match="no action is"):
        Policy.from_settings(settings)
    with pytest.raises(ConfigError, match="no action is"):
        create_app(settings)
