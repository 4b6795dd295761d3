"""The slurmrestd backend against the devcluster's real slurmrestd (22.05: API v0.0.36-38;
23.11: v0.0.38-40; 24.11: v0.0.40-42; 25.11: v0.0.41-44; 26.05: v0.0.42 (deprecated) to
v0.0.45), what it can do there read from its OpenAPI document."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest

from slurmtower.devcluster import DevCluster
from slurmtower.errors import NotFound, SlurmRequestError, SlurmUnavailable, Unsupported
from slurmtower.nodeset import parse_nodeset
from slurmtower.settings import Settings
from slurmtower.slurm import CliSlurmClient, RestSlurmClient, make_client

from .conftest import node_states, sh, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.release]


@pytest.fixture()
def rest(devcluster: DevCluster) -> RestSlurmClient:
    client = RestSlurmClient(f"http://127.0.0.1:{devcluster.rest_port}", user="root",
                             jwt_key_file=devcluster.jwt_key)
    yield client  # type: ignore[misc]
    client.close()


#: What each release's slurmrestd offers: API versions, node updates, GET conf.
OFFERS = {(22, 5): (("v0.0.36", "v0.0.37", "v0.0.38"), False, False),
          (23, 11): (("v0.0.38", "v0.0.39", "v0.0.40"), True, False),
          (24, 11): (("v0.0.40", "v0.0.41", "v0.0.42"), True, False),
          (25, 11): (("v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44"), True, False),
          (26, 5): (("v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"), True, True)}


def _release(client: CliSlurmClient) -> tuple[int, int]:
    version = client.version()
    return version.major, version.minor


def test_detects_the_newest_api_version_the_server_offers(rest: RestSlurmClient, client: CliSlurmClient) -> None:
    caps = rest.capabilities()
    assert caps.backend == "rest"
    assert (caps.version.major, caps.version.minor) == _release(client)
    versions, node_update, conf = OFFERS[_release(client)]
    assert caps.rest_api_versions == versions
    assert rest.api_status()["api"] == versions[-1]
    assert caps.rest_node_update is node_update and caps.config_json is conf
    assert ("update_nodes" in caps.unsupported) is not node_update
    assert ("config" in caps.unsupported) is not conf


def test_reads_give_the_same_models_as_the_cli(rest: RestSlurmClient, client: CliSlurmClient) -> None:
    rest_nodes = {n.name: n for n in rest.nodes()}
    cli_nodes = {n.name: n for n in client.nodes()}
    assert rest_nodes.keys() == cli_nodes.keys()
    for name, node in cli_nodes.items():
        assert rest_nodes[name].cpus == node.cpus
        assert rest_nodes[name].real_memory_mib == node.real_memory_mib
        assert rest_nodes[name].state == node.state
        assert rest_nodes[name].flags == node.flags
    assert {p.name for p in rest.partitions()} == {p.name for p in client.partitions()}
    assert {j.job_id for j in rest.jobs()} >= {j.job_id for j in client.jobs() if j.state and
                                                j.state.value in ("PENDING", "RUNNING")}
    assert rest.stats().server_thread_count is not None
    assert rest.ping() is True
    with pytest.raises(NotFound):
        rest.nodes(parse_nodeset("n[4-5]"))


def test_says_clearly_what_slurmrestd_cannot_do(rest: RestSlurmClient, client: CliSlurmClient) -> None:
    _versions, node_update, conf = OFFERS[_release(client)]
    if not node_update:
        with pytest.raises(Unsupported, match="cannot update nodes"):
            rest.drain(parse_nodeset("n1"), reason="x")
    if not conf:
        with pytest.raises(Unsupported, match="configuration"):
            rest.config()
    else:  # 26.05's GET /slurm/v0.0.45/conf: the same configuration the CLI reads
        assert rest.config().cluster_name == client.config().cluster_name
        assert rest.config().get("select_type") == client.config().get("select_type")
    if _release(client) < (25, 5):  # 25.05+ makes reservations (test_reservations_over_rest_where_...)
        with pytest.raises(Unsupported, match="reservations"):
            rest.create_reservation("x", nodes=parse_nodeset("n1"))
    assert "ReservationName=x " not in sh("scontrol", "-o", "show", "reservation", check=False)


def test_make_client_rest_falls_back_to_the_cli_for_writes(devcluster: DevCluster, settings: Settings) -> None:
    settings.slurm.backend = "rest"
    client = make_client(settings)
    assert isinstance(client, RestSlurmClient)
    try:
        assert client.config().cluster_name == devcluster.cluster_name  # GET conf (26.05+), else the CLI fallback
    finally:
        client.close()


def test_bad_token_is_a_refused_request_and_a_closed_port_unavailable(devcluster: DevCluster) -> None:
    bad = RestSlurmClient(f"http://127.0.0.1:{devcluster.rest_port}", token="not-a-jwt")
    with pytest.raises(SlurmRequestError):
        bad.nodes()
    closed = RestSlurmClient("http://127.0.0.1:9", token="x", timeout=2)
    with pytest.raises(SlurmUnavailable):
        closed.nodes()


def test_recorded_transport_seam_parses_newer_releases() -> None:
    """The transport seam lets a test serve a recorded 24.11 slurmrestd without patching."""
    import gzip
    import json
    from pathlib import Path

    base = Path(__file__).parent / "fixtures" / "slurm" / "24.11"
    if not (base / "rest-slurm-nodes.json").exists():
        pytest.skip("24.11 fixtures not copied")
    nodes_doc = (base / "rest-slurm-nodes.json").read_bytes()
    # the part of 24.11's OpenAPI document the backend reads: paths and their methods
    spec_paths = {"paths": {"/slurm/v0.0.42/nodes": {"get": {}}, "/slurm/v0.0.41/nodes": {"get": {}},
                            "/slurm/v0.0.42/node/{node_name}": {"get": {}, "post": {}, "delete": {}}}}
    if (base / "openapi-v3.json.gz").exists():
        spec_paths = json.loads(gzip.decompress((base / "openapi-v3.json.gz").read_bytes()))

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/openapi/v3":
            return httpx.Response(200, json=spec_paths)
        if request.url.path == "/slurm/v0.0.42/nodes":
            return httpx.Response(200, content=nodes_doc)
        return httpx.Response(404, json={"errors": [{"error": "not recorded"}]})

    rest = RestSlurmClient("http://recorded", token="t", transport=httpx.MockTransport(handler))
    nodes = rest.nodes()
    assert [n.name for n in nodes] == ["m1", "m2", "m3", "m4"]
    assert rest.capabilities().rest_node_update is True


def test_node_updates_over_rest_where_slurmrestd_has_them(devcluster: DevCluster, client: CliSlurmClient,
                                                          clean_nodes: DevCluster) -> None:
    """23.02+ (here 26.05): drain and resume are one POST /slurm/<v>/node/<nodes> each, and
    slurmctld shows them; 22.05's slurmrestd has no such operation, so they go to the CLI
    fallback (and without one are refused: the test above)."""
    rest = RestSlurmClient(f"http://127.0.0.1:{devcluster.rest_port}", user="root",
                           jwt_key_file=devcluster.jwt_key, fallback=client)
    calls: list[str] = []
    rest.observers.append(lambda kind, _s, ok: calls.append(f"{kind}:{ok}"))
    try:
        rest.drain(parse_nodeset("n[2-3]"), reason="st rest drain")
        states = node_states()
        assert all("DRAIN" in states[n] for n in ("n2", "n3")) and "DRAIN" not in states["n1"]
        assert {n.name: n.reason for n in client.nodes(parse_nodeset("n[2-3]"))} == \
            {"n2": "st rest drain", "n3": "st rest drain"}
        rest.resume(parse_nodeset("n[2-3]"))
        wait_for(lambda: not any("DRAIN" in s for s in node_states().values()), 20, what="n[2-3] resumed")
    finally:
        rest.close()
    updates = [c for c in calls if c.startswith("rest node_update")]
    if OFFERS[_release(client)][1]:
        assert updates == ["rest node_update:True", "rest node_update:True"]  # one request each, no CLI
    else:
        assert updates == []  # the CLI did both


def test_reservations_over_rest_where_slurmrestd_has_them(rest: RestSlurmClient, client: CliSlurmClient) -> None:
    """25.05+ (here 25.11 and 26.05): a reservation is created, updated and deleted over REST
    (POST reservation, DELETE reservation/{name}), as slurmctld then shows it; before, the
    backend says it cannot (and hands it to a CLI fallback when it has one)."""
    offered = _release(client) >= (25, 5)
    caps = rest.capabilities()
    assert caps.rest_reservations is offered and ("create_reservation" in caps.unsupported) is not offered
    calls: list[str] = []
    rest.observers.append(lambda kind, _s, ok: calls.append(f"{kind}:{ok}"))
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=5)
    if not offered:
        with pytest.raises(Unsupported, match="reservations"):
            rest.create_reservation("st_rest", nodes=parse_nodeset("n1"), start_time=start,
                                    duration=timedelta(minutes=30), users=["alice"])
        assert "st_rest" not in sh("scontrol", "-o", "show", "reservation", check=False)
        return

    def shown() -> dict[str, str]:
        line = sh("scontrol", "-o", "show", "reservation", "st_rest").strip()
        comment = line.partition(" Comment=")[2]
        return {**dict(f.split("=", 1) for f in line.partition(" Comment=")[0].split() if "=" in f),
                "Comment": comment}

    try:
        assert rest.create_reservation("st_rest", nodes=parse_nodeset("n[1-2]"), start_time=start,
                                       end_time=start + timedelta(minutes=90), users=["alice"], accounts=["physics"],
                                       flags=["MAINT", "IGNORE_JOBS"], comment="over rest [slurmtower:alice@api]") \
            == "st_rest"
        made = shown()
        assert (made["Nodes"], made["Users"], made["Accounts"], made["Duration"]) == ("n[1-2]", "alice", "physics",
                                                                                       "01:30:00")
        assert {"MAINT", "IGNORE_JOBS"} <= set(made["Flags"].split(",")) and made["Comment"] == "over rest " \
            "[slurmtower:alice@api]"
        rest.update_reservation("st_rest", duration=timedelta(minutes=45), users=["bob"], flags=["DAILY"],
                                remove_flags=["MAINT"])
        changed = shown()
        assert (changed["Duration"], changed["Users"]) == ("00:45:00", "bob")
        assert "MAINT" not in changed["Flags"] and "DAILY" in changed["Flags"]
        with pytest.raises(SlurmRequestError, match="overlaps"):
            rest.create_reservation("st_rest2", nodes=parse_nodeset("n2"), start_time=start,
                                    duration=timedelta(minutes=10), users=["bob"])
        rest.delete_reservation("st_rest")
        assert "st_rest" not in sh("scontrol", "-o", "show", "reservation", check=False)
        with pytest.raises(SlurmRequestError, match="invalid"):
            rest.delete_reservation("st_rest")
    finally:
        sh("scontrol", "delete", "reservationname=st_rest", check=False)
    assert calls.count("rest reservation:True") == 3  # create, update, delete: over REST, no CLI
