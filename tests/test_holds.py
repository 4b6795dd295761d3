"""Drain holds on the real cluster: several owners hold one node, it resumes when the last lets go.

Two owners (a person and a rule, two people, an ``scontrol`` drain outside slurmtower) on one
node; resume releases the caller's hold only, ``force`` every hold; the reason Slurm shows
names every holder; the store follows Slurm when someone resumes behind slurmtower's back;
``slurm.node.get``, ``GET /nodes/holds``, the CLI and the HTTP API show the same holds; two
drains at once both keep their hold (SQLite and PostgreSQL).
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurmtower.actions import ActionStore, Catalogue, rule_dispatcher
from slurmtower.actions.hold_store import HoldStore
from slurmtower.actions.holds import node_holds
from slurmtower.api import create_app
from slurmtower.errors import Conflict
from slurmtower.runtime import Services
from slurmtower.settings import Settings
from slurmtower.slurm import CliSlurmClient

from .auth_helpers import ADMIN, OPERATOR, READER, bearer, with_tokens
from .conftest import node_states, reason_of, sh
from .test_actions_api import Http

pytestmark = pytest.mark.cluster

SCRIPT = str(Path(__file__).resolve().parents[1] / ".venv" / "bin" / "slurmtower")


@pytest.fixture()
def catalogue(settings: Settings, client: CliSlurmClient, clean_nodes: Any) -> Iterator[Catalogue]:
    cat = Catalogue.from_settings(settings, client=client)
    yield cat
    cat.store.close()


def run(cat: Catalogue, name: str, params: dict[str, Any], who: str = "alice", via: str = "cli") -> Any:
    return cat.execute(name, params, principal=who, via=via)  # type: ignore[arg-type]


def holders(cat: Catalogue, node: str) -> list[str]:
    """The holders ``slurm.node.get`` lists for ``node``."""
    return [h["holder"] for h in run(cat, "slurm.node.get", {"nodes": node}).result[node]["holds"]]


def stored(cat: Catalogue) -> dict[str, list[str]]:
    """The store's rows: node -> holders."""
    return {node: sorted(rows) for node, rows in HoldStore(cat.store.engine).rows().items()}


def drained(node: str) -> bool:
    return "DRAIN" in node_states()[node]


def test_two_owners_the_node_resumes_when_the_last_one_lets_go(catalogue: Catalogue) -> None:
    drain = run(catalogue, "slurm.node.drain", {"nodes": "n2", "reason": "disk swap"}, who="alice")
    assert drain.status == "succeeded" and drain.result["outcome"] == {"drained": "n2"}
    # a rule drains the same node: no refusal, its hold joins alice's
    dispatch = rule_dispatcher(catalogue)
    out = dispatch("slurm.node.drain", {"nodes": "n2", "reason": "ecc errors"}, {"origin": "rule", "rule": "ecc-check"})
    assert out["status"] == "succeeded", out["stderr"]
    assert out["result"]["held_with"] == {"n2": ["slurmtower:alice@cli"]}
    assert reason_of("n2") == "disk swap [slurmtower:alice@cli]; ecc errors [slurmtower:ecc-check@rule]"
    got = run(catalogue, "slurm.node.get", {"nodes": "n2"}).result["n2"]
    assert [(h["holder"], h["reason"], h["state"], h["outside"]) for h in got["holds"]] == [
        ("slurmtower:alice@cli", "disk swap", "DRAIN", False), ("slurmtower:ecc-check@rule", "ecc errors", "DRAIN", False)]
    assert got["holds"][0]["execution_id"] == drain.execution_id
    assert got["holds"][1]["execution_id"] == out["execution_id"]
    assert got["reason_owner"] == "slurmtower:ecc-check@rule"  # the newest holder, as before for one
    since = [datetime.fromisoformat(h["since"]) for h in got["holds"]]
    assert since[0] <= since[1] <= datetime.now(UTC)

    # alice resumes: her hold goes, the rule's stays, so n2 stays drained
    resume = run(catalogue, "slurm.node.resume", {"nodes": "n2"}, who="alice")
    assert resume.status == "succeeded" and resume.exit_code == 0
    assert resume.result["nodes"] == "" and resume.result["stays_out"] == "n2"
    assert resume.result["released"] == {"n2": ["slurmtower:alice@cli"]}
    assert [h["holder"] for h in resume.result["still_held"]["n2"]] == ["slurmtower:ecc-check@rule"]
    assert resume.result["outcome"] == {"still_held": "n2"}
    assert "n2 stays out of service: still held by slurmtower:ecc-check@rule ('ecc errors')" in resume.stdout
    assert drained("n2") and reason_of("n2") == "ecc errors [slurmtower:ecc-check@rule]"
    assert holders(catalogue, "n2") == ["slurmtower:ecc-check@rule"]
    assert stored(catalogue) == {"n2": ["slurmtower:ecc-check@rule"]}
    record = catalogue.store.list_audit(limit=1)[0]
    assert record.outcome == "succeeded" and record.after["n2"]["outcome"] == "still_held"

    # the rule resumes: no hold left, n2 is back in service
    out = dispatch("slurm.node.resume", {"nodes": "n2"}, {"origin": "rule", "rule": "ecc-check"})
    assert out["status"] == "succeeded" and out["result"]["outcome"] == {"resumed": "n2"}
    assert not drained("n2") and reason_of("n2") == ""
    assert holders(catalogue, "n2") == [] and stored(catalogue) == {}


def test_force_releases_every_hold(catalogue: Catalogue) -> None:
    sh("scontrol", "update", "nodename=n3", "state=drain", "reason=bad fan")
    for who in ("alice", "bob"):
        assert run(catalogue, "slurm.node.drain", {"nodes": "n3", "reason": f"{who}'s test"}, who=who).status == \
            "succeeded"
    assert reason_of("n3") == "bad fan [user:root]; alice's test [slurmtower:alice@cli]; bob's test [slurmtower:bob@cli]"
    assert holders(catalogue, "n3") == ["user:root", "slurmtower:alice@cli", "slurmtower:bob@cli"]
    env = run(catalogue, "slurm.node.resume", {"nodes": "n3", "force": True}, who="bob")
    assert env.status == "succeeded" and env.result["outcome"] == {"resumed": "n3"}
    assert env.result["released"] == {"n3": ["user:root", "slurmtower:alice@cli", "slurmtower:bob@cli"]}
    assert env.result["forced"] == ["n3"]
    assert not drained("n3") and stored(catalogue) == {}


def test_an_outside_drain_is_a_hold_that_resume_releases_only_with_force(catalogue: Catalogue) -> None:
    sh("scontrol", "update", "nodename=n4", "state=drain", "reason=memtest failed")
    (outside,) = run(catalogue, "slurm.node.get", {"nodes": "n4"}).result["n4"]["holds"]
    assert outside["holder"] == "user:root" and outside["outside"] and outside["execution_id"] is None
    assert outside["reason"] == "memtest failed"
    with pytest.raises(Conflict, match=r"n4 is held by user:root \('memtest failed'\)"):
        run(catalogue, "slurm.node.resume", {"nodes": "n4"})
    assert catalogue.store.list_audit(limit=1)[0].outcome == "refused" and drained("n4")
    # alice adds her hold; the outside one is kept, in Slurm's reason and in the store
    run(catalogue, "slurm.node.drain", {"nodes": "n4", "reason": "dimm swap"})
    assert reason_of("n4") == "memtest failed [user:root]; dimm swap [slurmtower:alice@cli]"
    assert stored(catalogue) == {"n4": ["slurmtower:alice@cli", "user:root"]}
    kept = run(catalogue, "slurm.node.get", {"nodes": "n4"}).result["n4"]["holds"][0]
    assert kept["holder"] == "user:root" and kept["since"] == outside["since"]  # Slurm's time, not the rewrite's
    # her resume releases hers: the outside drain still holds n4
    env = run(catalogue, "slurm.node.resume", {"nodes": "n4"})
    assert env.status == "succeeded" and env.result["stays_out"] == "n4"
    assert drained("n4") and reason_of("n4") == "memtest failed [user:root]"
    assert holders(catalogue, "n4") == ["user:root"]
    with pytest.raises(Conflict, match="n4 is held by user:root"):
        run(catalogue, "slurm.node.resume", {"nodes": "n4"})
    assert run(catalogue, "slurm.node.resume", {"nodes": "n4", "force": True}).result["outcome"] == {
        "resumed": "n4"}
    assert not drained("n4")


def test_a_resume_behind_slurmtowers_back_clears_the_stored_holds_on_the_next_read(catalogue: Catalogue) -> None:
    run(catalogue, "slurm.node.drain", {"nodes": "n1", "reason": "a"}, who="alice")
    run(catalogue, "slurm.node.down", {"nodes": "n1", "reason": "b"}, who="bob")
    assert stored(catalogue) == {"n1": ["slurmtower:alice@cli", "slurmtower:bob@cli"]}
    assert [h["state"] for h in run(catalogue, "slurm.node.get", {"nodes": "n1"}).result["n1"]["holds"]] == [
        "DRAIN", "DOWN"]
    # a read of Slurm made before the rows were written cannot drop them (a cached snapshot)
    store = HoldStore(catalogue.store.engine)
    sh("scontrol", "update", "nodename=n1", "state=resume")
    in_service = catalogue.client.nodes()
    early = node_holds(store, in_service, read_at=datetime.now(UTC) - timedelta(hours=1))
    assert early["n1"] == [] and stored(catalogue) == {"n1": ["slurmtower:alice@cli", "slurmtower:bob@cli"]}
    # slurm.node.get of nodes all in service answers from Slurm alone: no hold, the store unopened
    assert holders(catalogue, "n1") == [] and len(stored(catalogue)["n1"]) == 2
    # the next read through the store does (GET /nodes/holds, a drain, a resume): no hold any more
    assert node_holds(store, in_service, read_at=datetime.now(UTC))["n1"] == [] and stored(catalogue) == {}
    # someone replaces the reason with scontrol: the holders it names are the holds
    run(catalogue, "slurm.node.drain", {"nodes": "n1", "reason": "a"}, who="alice")
    sh("scontrol", "update", "nodename=n1", "state=drain", "reason=taken over by hand")
    assert holders(catalogue, "n1") == ["user:root"] and stored(catalogue) == {}
    with pytest.raises(Conflict, match="n1 is held by user:root"):
        run(catalogue, "slurm.node.resume", {"nodes": "n1"}, who="alice")


def test_two_drains_at_once_both_keep_their_hold(settings: Settings, client: CliSlurmClient,
                                                 clean_nodes: Any) -> None:
    """Two processes (two catalogues on one store) drain n2 at the same moment, many times."""
    cats = [Catalogue.from_settings(settings, client=client) for _ in range(2)]
    try:
        for attempt in range(3):
            barrier = threading.Barrier(2)
            results: dict[str, Any] = {}

            def drain(cat: Catalogue, who: str, barrier: threading.Barrier, results: dict[str, Any],
                      attempt: int) -> None:
                barrier.wait()
                results[who] = run(cat, "slurm.node.drain", {"nodes": "n2", "reason": f"try {attempt}"}, who=who)

            threads = [threading.Thread(target=drain, args=(c, w, barrier, results, attempt))
                       for c, w in zip(cats, ("alice", "bob"), strict=True)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert {w: e.status for w, e in results.items()} == {"alice": "succeeded", "bob": "succeeded"}
            assert sorted(holders(cats[0], "n2")) == ["slurmtower:alice@cli", "slurmtower:bob@cli"]
            for who in ("alice", "bob"):
                run(cats[0], "slurm.node.resume", {"nodes": "n2"}, who=who)
            assert not drained("n2")
    finally:
        for cat in cats:
            cat.store.close()


def test_holds_on_a_postgresql_store(settings: Settings, client: CliSlurmClient, pg_store: str,
                                     clean_nodes: Any) -> None:
    settings.store_url = pg_store  # type: ignore[assignment]
    cat = Catalogue(client, ActionStore(pg_store), settings=settings)
    other = Catalogue(client, ActionStore(pg_store), settings=settings)
    try:
        barrier = threading.Barrier(2)
        done: list[str] = []

        def drain(c: Catalogue, who: str) -> None:
            barrier.wait()
            done.append(run(c, "slurm.node.drain", {"nodes": "n3", "reason": "pg"}, who=who).status)

        threads = [threading.Thread(target=drain, args=(c, w)) for c, w in ((cat, "alice"), (other, "bob"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert done == ["succeeded", "succeeded"]
        assert stored(cat) == {"n3": ["slurmtower:alice@cli", "slurmtower:bob@cli"]}
        assert run(cat, "slurm.node.resume", {"nodes": "n3"}, who="alice").result["stays_out"] == "n3"
        assert stored(cat) == {"n3": ["slurmtower:bob@cli"]} and drained("n3")
        assert run(other, "slurm.node.resume", {"nodes": "n3"}, who="bob").result["outcome"] == {"resumed": "n3"}
        assert stored(cat) == {}
    finally:
        cat.store.close()
        other.store.close()


def test_holds_over_http_and_get_nodes_holds(settings: Settings, client: CliSlurmClient, clean_nodes: Any) -> None:
    http = Http(create_app(services=Services(settings=with_tokens(settings), client=client)))
    first = http.post("/actions/slurm.node.drain", json={"nodes": "n2", "reason": "fan"}, headers=bearer(OPERATOR))
    assert first.status_code == 200 and first.json()["status"] == "succeeded", first.text
    second = http.post("/actions/slurm.node.drain", json={"nodes": "n2", "reason": "bios"}, headers=bearer(ADMIN))
    assert second.status_code == 200 and second.json()["result"]["held_with"] == {"n2": ["slurmtower:otto@api"]}
    listed = http.get("/nodes/holds", headers=bearer(READER))
    assert listed.status_code == 200 and "X-Data-Age" in listed.headers
    body = listed.json()
    assert body["count"] == 1 and body["stale"] is False
    (n2,) = body["nodes"]
    assert n2["name"] == "n2" and "DRAIN" in n2["state"]
    assert n2["reason"] == "fan [slurmtower:otto@api]; bios [slurmtower:ada@api]"
    assert [(h["holder"], h["reason"], h["execution_id"]) for h in n2["holds"]] == [
        ("slurmtower:otto@api", "fan", first.json()["execution_id"]),
        ("slurmtower:ada@api", "bios", second.json()["execution_id"])]
    assert http.get("/nodes/holds?nodes=n[3-4]", headers=bearer(READER)).json() | {
        "fetched_at": None, "state_fetched_at": None} == {
        "fetched_at": None, "state_fetched_at": None, "stale": False, "count": 0, "nodes": []}
    bad = http.get("/nodes/holds?node=n2", headers=bearer(READER))
    assert bad.status_code == 400 and "(known: nodes)" in bad.json()["detail"]
    # /nodes stays the cached bytes: its node carries the reason that names both holders
    nodes = http.get("/nodes", headers=bearer(READER)).json()["nodes"]
    assert next(n for n in nodes if n["name"] == "n2")["reason"] == n2["reason"]
    assert all("holds" not in n for n in nodes)
    # ?holds=true joins them into the rows (and pages like any /nodes query)
    joined = http.get("/nodes?holds=true&nodes=n[2-3]", headers=bearer(READER))
    assert joined.status_code == 200 and "X-Data-Age" in joined.headers
    page = joined.json()
    assert (page["count"], page["returned"], page["next_cursor"]) == (2, 2, None)
    assert [(n["name"], [h["holder"] for h in n["holds"]]) for n in page["nodes"]] == [
        ("n2", ["slurmtower:otto@api", "slurmtower:ada@api"]), ("n3", [])]
    assert page["nodes"][0]["holds"] == n2["holds"] and page["nodes"][0]["reason"] == n2["reason"]
    one = http.get("/nodes?holds=1&limit=1", headers=bearer(READER)).json()
    assert one["returned"] == 1 and one["next_cursor"] and "holds" in one["nodes"][0]
    everything = http.get("/nodes?holds=true", headers=bearer(READER)).json()
    assert [n["name"] for n in everything["nodes"]] == [n["name"] for n in nodes]
    assert [n["name"] for n in everything["nodes"] if n["holds"]] == ["n2"]
    bad = http.get("/nodes?holds=maybe", headers=bearer(READER))
    assert bad.status_code == 400 and bad.json()["param"] == "holds", bad.text
    gone = http.post("/actions/slurm.node.resume", json={"nodes": "n2"}, headers=bearer(OPERATOR)).json()
    assert gone["status"] == "succeeded" and gone["result"]["stays_out"] == "n2"
    got = http.post("/actions/slurm.node.get", json={"nodes": "n2"}, headers=bearer(READER)).json()["result"]["n2"]
    assert [h["holder"] for h in got["holds"]] == ["slurmtower:ada@api"]
    assert http.post("/actions/slurm.node.resume", json={"nodes": "n2"}, headers=bearer(ADMIN)).json()["result"][
        "outcome"] == {"resumed": "n2"}


def test_holds_from_the_cli(devcluster: Any, tmp_path: Path, clean_nodes: Any) -> None:
    env = {**os.environ, "SLURM_CONF": str(devcluster.slurm_conf), "SLURMTOWER_CONFIG": str(devcluster.tower_conf),
           "SLURMTOWER_STATE_DIR": str(tmp_path)}
    env.pop("SUDO_USER", None)

    def cli(*args: str, user: str | None = None) -> subprocess.CompletedProcess[str]:
        argv = [SCRIPT, *args]
        extra = {"SUDO_USER": user} if user else {}  # cli_principal: the user behind sudo
        return subprocess.run(argv, capture_output=True, text=True, env={**env, **extra}, timeout=60, check=False)

    assert cli("run", "slurm.node.drain", "nodes=n1", "reason=disk", user="alice").returncode == 0
    added = cli("run", "slurm.node.drain", "nodes=n1", "reason=ecc", user="bob")
    assert added.returncode == 0, added.stderr
    assert yaml.safe_load(added.stdout)["result"]["held_with"] == {"n1": ["slurmtower:alice@cli"]}
    assert reason_of("n1") == "disk [slurmtower:alice@cli]; ecc [slurmtower:bob@cli]"
    shown = yaml.safe_load(cli("run", "slurm.node.get", "nodes=n1").stdout)["result"]["n1"]["holds"]
    assert [h["holder"] for h in shown] == ["slurmtower:alice@cli", "slurmtower:bob@cli"]
    released = cli("run", "slurm.node.resume", "nodes=n1", user="alice")
    assert released.returncode == 0, released.stderr
    assert "n1 stays out of service: still held by slurmtower:bob@cli ('ecc')" in yaml.safe_load(released.stdout)[
        "stdout"]
    assert drained("n1")
    refused = cli("run", "slurm.node.resume", "nodes=n1", user="carol")
    assert refused.returncode == 3 and refused.stderr.count("\n") == 1
    assert "n1 is held by slurmtower:bob@cli ('ecc')" in refused.stderr
    assert cli("run", "slurm.node.resume", "nodes=n1", user="bob").returncode == 0
    assert not drained("n1")


def test_a_store_gone_under_the_server_leaves_holds_from_slurms_reasons(
        settings: Settings, client: CliSlurmClient, pg_store: str, clean_nodes: Any) -> None:
    """The store's database dropped while the API runs: /nodes/holds answers (200) with the
    holds Slurm's reasons name, never a 500 carrying the database's text."""
    from sqlalchemy import create_engine, text

    from .conftest import PG_SERVER

    settings.store_url = pg_store  # type: ignore[assignment]
    sh("scontrol", "update", "nodename=n4", "state=drain", "reason=outside [slurmtower:otto@api]")
    http = Http(create_app(services=Services(settings=with_tokens(settings), client=client)))
    assert http.get("/nodes/holds", headers=bearer(READER)).status_code == 200  # the store opened
    name = pg_store.rsplit("/", 1)[1]
    admin = create_engine(f"{PG_SERVER}/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"))
        conn.execute(text(f'DROP DATABASE "{name}"'))
    admin.dispose()
    resp = http.get("/nodes/holds", headers=bearer(READER))
    assert resp.status_code == 200, resp.text
    assert "does not exist" not in resp.text and name not in resp.text
    (n4,) = [n for n in resp.json()["nodes"] if n["name"] == "n4"]
    assert [h["holder"] for h in n4["holds"]] == ["slurmtower:otto@api"]
