"""A way off StackStorm (issue 15 items 5 and 6): action results in the slurm pack's shape.

Each of the pack's documented examples (tests/data/st2_pack_examples.yaml, copied from the
pack's documentation) is run on the devcluster with ``--output st2``: the output has the
example's keys and value types (the values differ: another cluster), the full key set of the
pyslurm dict the pack returns, and the values Slurm itself prints (``scontrol show node n1``,
``scontrol show job <id>``). Over HTTP, ``?format=st2`` gives the same shape, with a reader's
private job fields null; an unknown format is refused in one line.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurmtower.actions import Envelope, st2
from slurmtower.api import create_app
from slurmtower.api.security import hash_token
from slurmtower.runtime import Services
from slurmtower.settings import Settings, TokenEntry
from slurmtower.slurm import CliSlurmClient
from slurmtower.slurm import adapters as ad

from .conftest import sh, wait_for
from .test_actions_api import Http

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = str(ROOT / ".venv" / "bin" / "slurmtower")
DATA = yaml.safe_load((ROOT / "tests" / "data" / "st2_pack_examples.yaml").read_text())
EXAMPLES = {e["action"]: e for e in DATA["examples"]}
TOKENS = {"reader": "st2-reader-token", "operator": "st2-operator-token"}


def _auth(role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[role]}"}


# -- the mapping, without a cluster -----------------------------------------------------------


@pytest.mark.parametrize("resource", ["node", "job", "step", "config"])
def test_each_mapping_has_exactly_the_keys_of_the_pyslurm_dict(resource: str) -> None:
    assert sorted(st2.TABLES[resource]) == sorted(DATA["pyslurm_keys"][resource])


@pytest.mark.parametrize("resource", ["node", "job", "step", "config"])
def test_the_docs_show_each_mapping_as_declared(resource: str) -> None:
    docs = (ROOT / "docs" / "stackstorm.md").read_text()
    assert st2.markdown_table(resource) in docs
    for key, source in st2.TABLES[resource].items():
        if isinstance(source, st2.NotRead):
            assert f"| `{key}` | not available: {source.why} |" in docs


def test_the_execution_as_st2_prints_it() -> None:
    body = {"execution_id": "e1", "action": "slurm.node.drain", "status": "partial", "exit_code": 4,
            "parameters": {"nodes": "n[1-2]", "reason": "x", "force": False, "dry_run": False},
            "result": {"outcome": {"drained": "n1", "unchanged": "n2"}}, "stdout": "drain: n1", "stderr": "n2 ..."}
    out = st2.execution(body)
    # st2 has no partial outcome; exit code 4 and stderr still say what changed
    assert out == {"id": "e1", "status": "failed", "parameters": {"nodes": ["n1", "n2"], "reason": "x"},
                   "result": {"exit_code": 4, "result": {"outcome": {"drained": "n1", "unchanged": "n2"}},
                              "stderr": "n2 ...", "stdout": "drain: n1"}}
    # slurmtower's own options stay when they are not at their default
    dry = st2.execution({**body, "status": "succeeded", "parameters": {"nodes": "n1", "dry_run": True}})
    assert dry["status"] == "succeeded" and dry["parameters"] == {"nodes": ["n1"], "dry_run": True}


def test_the_packs_names_are_taken_as_parameters() -> None:
    assert st2.pack_params("slurm.config.get", {"item": "schedtype"}) == {"item": "scheduler_type"}
    assert st2.pack_params("slurm.config.get", {"item": "SlurmUserName"}) == {"item": "slurm_user"}
    assert st2.pack_params("slurm.config.get", {"item": "topology_plugin"}) == {"item": "topology_plugin"}
    found = st2.pack_params("slurm.job.find", {"criterias": {"num_nodes": 1, "std_out": "/x", "job_state": "R"}})
    assert found == {"criterias": {"node_count": 1, "standard_output": "/x", "job_state": "R"}}


def test_an_accounting_job_and_step_map_too() -> None:
    row = {"job_db_inx": 7, "job_id": 30, "name": "j", "user_id": 0, "user_name": "root", "partition": "debug",
           "association_id": 2, "state": "FAILED", "state_code": 5, "exit_code": 3, "exit_signal": 0,
           "node_count": 1, "nodes": "n1", "cpus": 1, "start_time": "2026-01-01T10:00:00Z",
           "end_time": "2026-01-01T10:01:30Z", "time_limit": "PT5M", "from_accounting": True}
    job = st2.job(row)
    assert (job["job_state"], job["exit_code"], job["run_time"], job["time_limit"]) == ("FAILED", "3:0", 90, 5)
    assert job["state_reason"] is None and job["num_nodes"] == 1 and job["alloc_node"] is None
    step = st2.step({"job_db_inx": 7, "job_id": 30, "step_id": -5, "step_name": "batch", "state": "FAILED",
                     "state_code": 5, "exit_code": 3, "node_count": 1, "task_count": 1,
                     "user_cpu_time": "PT0S", "system_cpu_time": "PT0S", "from_accounting": True})
    assert (step["name"], step["state"], step["num_tasks"], step["time_limit"]) == ("batch", "FAILED", 1, None)


def test_the_format_parameter_is_in_the_openapi_document(tmp_path: Path) -> None:
    doc = create_app(Settings(state_dir=tmp_path)).openapi()  # its own store, not the machine's
    # each action at its own path (under /clusters/{cluster} too), and an execution read again
    actions = [(path, "post") for path in doc["paths"] if path.startswith(("/actions/", "/clusters/{cluster}/actions/"))]
    assert ("/actions/slurm.node.drain", "post") in actions and len(actions) >= 2 * 20
    for path, method in (*actions, ("/executions/{execution_id}", "get")):
        (param,) = [p for p in doc["paths"][path][method]["parameters"] if p["name"] == "format"]
        assert param["in"] == "query" and param["schema"]["enum"] == ["slurmtower", "st2"], path
        assert "st2" in param["description"]
        assert "400" in doc["paths"][path][method]["responses"], path


@pytest.mark.parametrize("release", ["22.05", "24.11", "25.11", "26.05"])
def test_the_fields_read_for_the_pack_agree_between_json_and_text(release: str) -> None:
    fixtures = ROOT / "tests" / "fixtures" / "slurm" / release
    text_nodes = {n.name: n for n in ad.parse_nodes_text((fixtures / "scontrol-o-show-node.txt").read_text())}
    json_nodes = ad.parse_nodes_json(json.loads((fixtures / "rest-slurm-nodes.json").read_text()))
    for node in json_nodes:
        assert node.boards == text_nodes[node.name].boards == 1
        if release != "22.05":  # v0.0.38 has no specialized_* keys
            assert (node.specialized_cores, node.specialized_cpus, node.specialized_memory_mib) == (0, None, 0)
        assert (text_nodes[node.name].specialized_cores, text_nodes[node.name].specialized_memory_mib) == (0, 0)
    text_jobs = {j.job_key: j for j in ad.parse_jobs_text((fixtures / "scontrol-o-show-job.txt").read_text())}
    for job in ad.parse_jobs_json(json.loads((fixtures / "rest-slurm-jobs.json").read_text())):
        text = text_jobs[job.job_key]
        assert job.accrue_time == text.accrue_time and job.array_max_tasks == text.array_max_tasks, job.job_key
        assert text.alloc_node == "localhost" and text.alloc_sid is not None
        assert job.alloc_node == (None if release == "22.05" else "localhost")  # v0.0.38: no allocating_node


# -- on the devcluster ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def jobs(devcluster: Any) -> Iterator[dict[str, int]]:
    """A running job and a held (pending, stepless) one of root's."""
    def submit(*extra: str) -> int:
        out = sh("sbatch", "--parsable", "-J", "st2-shape", "-o", "/dev/null", "-D", "/tmp", "-t", "10", *extra,
                 "--wrap", "sleep 600")
        return int(out.strip().split(";")[0])

    running, held = submit(), submit("--hold")
    wait_for(lambda: sh("squeue", "-h", "-j", str(running), "-o", "%T").strip() == "RUNNING", 60,
             what=f"job {running} to run")
    wait_for(lambda: f"StepId={running}.batch" in sh("scontrol", "-o", "show", "steps"), 30,
             what=f"job {running}'s batch step")
    yield {"running": running, "held": held}
    subprocess.run(["scancel", str(running), str(held)], capture_output=True, check=False)


@pytest.fixture()
def cli(devcluster: Any, tmp_path: Path):  # type: ignore[no-untyped-def]
    env = {**os.environ, "SLURM_CONF": str(devcluster.slurm_conf), "SLURMTOWER_CONFIG": str(devcluster.tower_conf),
           "SLURMTOWER_STATE_DIR": str(tmp_path)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([SCRIPT, *args], capture_output=True, text=True, env=env, timeout=60, check=False)

    return run


@pytest.fixture()
def http(settings: Settings, client: CliSlurmClient) -> Http:
    settings.auth.tokens = [TokenEntry(name=f"{role}-st2", role=role, sha256=hash_token(tok))  # type: ignore[arg-type]
                            for role, tok in TOKENS.items()]
    return Http(create_app(services=Services(settings=settings, client=client)))


def _scontrol(kind: str, name: str) -> dict[str, str]:
    return ad.split_key_values(sh("scontrol", "-o", "show", kind, name).strip())


def _epoch(text: str) -> int:
    return int(datetime.fromisoformat(text).astimezone().timestamp())


def _same_shape(example: Any, got: Any, where: str, *, exact: bool) -> None:
    """``got`` has the example's keys (all of them, and only them unless the example is cut
    short) and, key by key, the same value types."""
    if isinstance(example, dict):
        assert isinstance(got, dict), where
        if len(example) == 1 and not set(example) & set(got):  # keyed by a job id or a node name
            ((_, value),) = example.items()
            assert len(got) == 1, where
            for key, item in got.items():
                _same_shape(value, item, f"{where}.{key}", exact=exact)
            return
        if exact:
            assert set(got) == set(example), where
        else:
            assert set(example) <= set(got), (where, sorted(set(example) - set(got)))
        for key, value in example.items():
            _same_shape(value, got[key], f"{where}.{key}", exact=exact)
    elif isinstance(example, list):
        assert isinstance(got, list), where
        for item in got if example else []:
            _same_shape(example[0], item, f"{where}[]", exact=exact)
    else:
        assert type(got) is type(example), (where, example, got)


def _args(action: str, jobs: dict[str, int]) -> list[str]:
    """The example's parameters, on the devcluster."""
    return {
        "slurm.config.get": ["item=topology_plugin"],
        "slurm.job.find": ['criterias={"batch_host": "n1"}'],
        "slurm.job.get": [f"jobids={jobs['running']}"],
        "slurm.job.step.get": [f"jobids={jobs['held']}"],  # no step yet: {} as in the example
        "slurm.node.get": ["nodes=n1"],
    }[action]


@pytest.mark.cluster
@pytest.mark.parametrize("action", sorted(EXAMPLES))
def test_each_documented_example_has_the_packs_shape(cli: Any, jobs: dict[str, int], action: str) -> None:
    example = EXAMPLES[action]
    proc = cli("run", action, *_args(action, jobs), "--output", "st2")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    truncated = bool(example.get("truncated"))
    # The envelope exactly as `st2 run` prints it; a cut-short example only inside its records.
    assert set(out) == set(example["execution"]) and set(out["result"]) == set(example["execution"]["result"])
    _same_shape({k: v for k, v in example["execution"].items() if k != "result"},
                {k: v for k, v in out.items() if k != "result"}, action, exact=True)
    _same_shape(example["execution"]["result"], out["result"], action, exact=not truncated)
    got = out["result"]["result"]
    if action == "slurm.node.get":  # every key of pyslurm's dicts, not only the example's
        assert [sorted(node) for node in got.values()] == [sorted(DATA["pyslurm_keys"]["node"])]
    if action == "slurm.job.get":
        assert [sorted(job) for job in got[str(jobs["running"])]] == [sorted(DATA["pyslurm_keys"]["job"])]
    if action == "slurm.job.find":
        assert jobs["running"] in got
    if action == "slurm.job.step.get":
        assert got == {str(jobs["held"]): {}}


@pytest.mark.cluster
def test_the_node_has_the_values_scontrol_shows(cli: Any) -> None:
    proc = cli("run", "slurm.node.get", "nodes=n1", "--output", "st2")
    assert proc.returncode == 0, proc.stderr
    node = json.loads(proc.stdout)["result"]["result"]["n1"]
    f = _scontrol("node", "n1")
    assert node["name"] == f["NodeName"] and node["arch"] == f["Arch"] and node["version"] == f["Version"]
    assert node["boards"] == int(f["Boards"]) and node["sockets"] == int(f["Sockets"])
    assert node["cores"] == node["cores_per_socket"] == int(f["CoresPerSocket"])
    assert node["threads"] == int(f["ThreadsPerCore"]) and node["cpus"] == int(f["CPUTot"])
    assert node["core_spec_cnt"] == int(f.get("CoreSpecCount", 0))  # scontrol prints it only when set
    assert node["cpu_spec_list"] == f.get("CPUSpecList", [])
    assert node["mem_spec_limit"] == int(f.get("MemSpecLimit", 0))
    assert node["real_memory"] == int(f["RealMemory"]) and node["tmp_disk"] == int(f["TmpDisk"])
    assert node["alloc_cpus"] == int(f["CPUAlloc"]) and node["alloc_mem"] == int(f["AllocMem"])
    assert node["weight"] == int(f["Weight"]) and node["state"] == f["State"]
    assert node["boot_time"] == _epoch(f["BootTime"])
    assert node["slurmd_start_time"] == _epoch(f["SlurmdStartTime"])
    assert node["partitions"] == f["Partitions"].split(",")
    assert node["features"] == f["AvailableFeatures"] and node["features_active"] == f["ActiveFeatures"]
    assert (node["node_addr"], node["node_hostname"], node["os"]) == (f["NodeAddr"], f["NodeHostName"], f["OS"])
    assert node["tres_fmt_str"] == f["CfgTRES"]
    assert isinstance(node["cpu_load"], int)  # hundredths, as Slurm keeps it (the load itself moves)
    assert node["reason"] is None and node["reason_time"] is None and node["owner"] is None


@pytest.mark.cluster
def test_the_job_and_its_step_have_the_values_scontrol_shows(cli: Any, jobs: dict[str, int]) -> None:
    job_id = jobs["running"]
    proc = cli("run", "slurm.job.get", f"jobids={job_id}", "--output", "st2")
    assert proc.returncode == 0, proc.stderr
    (job,) = json.loads(proc.stdout)["result"]["result"][str(job_id)]
    f = _scontrol("job", str(job_id))
    alloc_node, alloc_sid = f["AllocNode:Sid"].rsplit(":", 1)
    assert job["accrue_time"] == f["AccrueTime"]  # local time, as Slurm prints it
    assert (job["alloc_node"], job["alloc_sid"]) == (alloc_node, int(alloc_sid))
    assert job["job_id"] == job_id and job["name"] == f["JobName"] == "st2-shape"
    assert job["job_state"] == f["JobState"] == "RUNNING" and job["state_reason"] == f["Reason"]
    assert job["user_id"] == int(f["UserId"].split("(")[1].rstrip(")")) == 0
    assert job["group_id"] == int(f["GroupId"].split("(")[1].rstrip(")"))
    assert (job["account"], job["qos"], job["partition"]) == (f["Account"], f["QOS"], f["Partition"])
    assert (job["nodes"], job["batch_host"]) == (f["NodeList"], f["BatchHost"])
    assert (job["num_nodes"], job["num_cpus"]) == (int(f["NumNodes"]), int(f["NumCPUs"]))
    assert job["priority"] == int(f["Priority"]) and job["restart_cnt"] == int(f["Restarts"])
    assert job["exit_code"] == f["ExitCode"] and job["time_limit"] == 10 and f["TimeLimit"] == "00:10:00"
    assert job["time_limit_str"] == f["TimeLimit"]
    assert job["submit_time"] == _epoch(f["SubmitTime"]) and job["start_time"] == _epoch(f["StartTime"])
    assert job["eligible_time"] == _epoch(f["EligibleTime"])
    assert (job["work_dir"], job["std_out"], job["std_err"]) == (f["WorkDir"], f["StdOut"], f["StdErr"])
    memory = f.get("MinMemoryCPU") or f["MinMemoryNode"]
    assert job["pn_min_memory"] == int(memory.rstrip("M")) and job["mem_per_cpu"] is ("MinMemoryCPU" in f)
    assert job["array_job_id"] is None and job["array_max_tasks"] is None and job["admin_comment"] is None
    assert 0 <= job["run_time"] < 600 and job["run_time_str"].count(":") == 2

    proc = cli("run", "slurm.job.step.get", f"jobids={job_id}", "--output", "st2")
    assert proc.returncode == 0, proc.stderr
    steps = json.loads(proc.stdout)["result"]["result"][str(job_id)]
    batch = steps[str(0xFFFFFFFE)]  # pyslurm 18.08's id of the batch step
    (line,) = [x for x in sh("scontrol", "-o", "show", "steps").splitlines() if x.startswith(f"StepId={job_id}.batch ")]
    s = ad.split_key_values(line)
    assert sorted(batch) == sorted(DATA["pyslurm_keys"]["step"])
    assert (batch["name"], batch["state"], batch["nodes"]) == ("batch", s["State"], s["NodeList"])
    assert (batch["num_tasks"], batch["num_cpus"]) == (int(s["Tasks"]), int(s["CPUs"]))
    assert batch["time_limit"] == s["TimeLimit"] == "UNLIMITED" and batch["start_time"] == _epoch(s["StartTime"])


@pytest.mark.cluster
def test_the_configuration_under_the_packs_names(cli: Any) -> None:
    proc = cli("run", "slurm.config.get", "--output", "st2")
    assert proc.returncode == 0, proc.stderr
    conf = json.loads(proc.stdout)["result"]["result"]
    assert set(DATA["pyslurm_keys"]["config"]) <= set(conf)
    text = {line.split("=", 1)[0].strip(): line.split("=", 1)[1].strip()
            for line in sh("scontrol", "show", "config").splitlines() if " = " in line}
    assert conf["topology_plugin"] == text["TopologyPlugin"] and conf["schedtype"] == text["SchedulerType"]
    assert conf["version"] == text["SLURM_VERSION"] and conf["cluster_name"] == text["ClusterName"]
    user = text["SlurmUser"]  # slurm(64030)
    assert (conf["slurm_user_name"], conf["slurm_user_id"]) == (user.split("(")[0], pwd.getpwnam("slurm").pw_uid)
    assert conf["min_job_age"] == int(text["MinJobAge"].split()[0]) and conf["msg_timeout"] == int(
        text["MessageTimeout"].split()[0])
    assert conf["job_requeue"] is (text["JobRequeue"] == "1") and conf["slurmctld_port_count"] >= 1
    assert conf["accounting_storage_pass"] is None and conf["checkpoint_type"] is None
    # the pack's item names (pyslurm's) are taken as they are
    proc = cli("run", "slurm.config.get", "item=schedtype", "--output", "st2")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["parameters"] == {"item": "schedtype"} and out["result"]["result"] == {"schedtype": text["SchedulerType"]}


@pytest.mark.cluster
def test_an_unknown_output_is_one_line_and_exit_2(cli: Any) -> None:
    proc = cli("run", "slurm.node.get", "nodes=n1", "--output", "st3")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().count("\n") == 0 and "'st3'" in proc.stderr and "st2" in proc.stderr


@pytest.mark.cluster
def test_over_http_the_format_parameter_gives_the_same_shape(http: Http, cli: Any) -> None:
    resp = http.post("/actions/slurm.node.get?format=st2", json={"nodes": "n1"}, headers=_auth("reader"))
    assert resp.status_code == 200, resp.text
    over_http = resp.json()
    assert set(over_http) == {"id", "status", "parameters", "result"} and over_http["parameters"] == {"nodes": ["n1"]}
    from_cli = json.loads(cli("run", "slurm.node.get", "nodes=n1", "--output", "st2").stdout)
    for volatile in ("cpu_load", "free_mem"):
        from_cli["result"]["result"]["n1"].pop(volatile)
        over_http["result"]["result"]["n1"].pop(volatile)
    assert over_http["result"] == from_cli["result"]
    # slurmtower's envelope stays the default
    plain = http.post("/actions/slurm.node.get", json={"nodes": "n1"}, headers=_auth("reader")).json()
    assert "execution_id" in plain and "alloc_memory_mib" in plain["result"]["n1"]
    # a recorded execution, read again in the pack's shape
    drain = http.post("/actions/slurm.node.drain?format=st2", json={"nodes": "n2", "dry_run": True},
                      headers=_auth("operator")).json()
    again = http.get(f"/executions/{drain['id']}?format=st2", headers=_auth("reader"))
    assert again.status_code == 200 and again.json() == drain
    assert drain["status"] == "succeeded" and drain["parameters"]["dry_run"] is True
    # each answer is the shape the OpenAPI document declares for it (Envelope | St2Execution)
    schema = http.get("/openapi.json").json()
    for action in ("slurm.node.get", "slurm.node.drain"):
        declared = schema["paths"][f"/actions/{action}"]["post"]["responses"]["200"]["content"]["application/json"]
        assert {r["$ref"].rsplit("/", 1)[1] for r in declared["schema"]["anyOf"]} == {"Envelope", "St2Execution"}
    st2.St2Execution.model_validate(over_http)
    st2.St2Execution.model_validate(drain)
    Envelope.model_validate(plain)


@pytest.mark.cluster
def test_options_and_405_name_every_method_of_the_path(http: Http) -> None:
    options = http.request("OPTIONS", "/actions/slurm.node.get")
    assert options.status_code == 204 and options.headers["allow"] == "GET, POST, OPTIONS"
    refused = http.request("PUT", "/actions/slurm.node.get", headers=_auth("reader"))
    assert refused.status_code == 405 and refused.headers["allow"] == "GET, POST, OPTIONS"
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert http.request("OPTIONS", "/no/such/route/here").status_code == 404


@pytest.mark.cluster
@pytest.mark.parametrize("url", ["/actions/slurm.node.get?format=xml", "/executions/any?format=xml"])
def test_over_http_an_unknown_format_is_a_400_problem_naming_it(http: Http, url: str) -> None:
    resp = (http.post(url, json={"nodes": "n1"}, headers=_auth("reader")) if url.startswith("/actions")
            else http.get(url, headers=_auth("reader")))
    assert resp.status_code == 400 and resp.headers["content-type"].startswith("application/problem+json")
    problem = resp.json()
    assert problem["param"] == "format" and "'xml'" in problem["detail"] and "st2" in problem["detail"]


@pytest.mark.cluster
def test_a_readers_st2_job_has_its_private_fields_null(http: Http, jobs: dict[str, int]) -> None:
    job_id = jobs["running"]  # root's: neither bot's own job
    body = {"jobids": [job_id]}
    (seen,) = http.post("/actions/slurm.job.get?format=st2", json=body,
                        headers=_auth("reader")).json()["result"]["result"][str(job_id)]
    assert seen["command"] is None and seen["work_dir"] is None
    assert seen["std_out"] is None and seen["std_err"] is None
    assert seen["job_id"] == job_id and seen["nodes"] == "n1"
    (full,) = http.post("/actions/slurm.job.get?format=st2", json=body,
                        headers=_auth("operator")).json()["result"]["result"][str(job_id)]
    assert full["work_dir"] == "/tmp" and full["std_out"] == "/dev/null"
    # searching by a private field under the pack's name is refused too
    refused = http.post("/actions/slurm.job.find?format=st2", json={"criterias": {"std_out": "/dev/null"}},
                        headers=_auth("reader"))
    assert refused.status_code == 403 and refused.json()["param"] == "criterias.standard_output"
    # and the pack's field names find jobs
    found = http.post("/actions/slurm.job.find?format=st2",
                      json={"criterias": {"num_nodes": 1, "batch_host": "n1", "job_state": "RUNNING"}},
                      headers=_auth("reader")).json()
    assert job_id in found["result"]["result"] and found["parameters"]["criterias"]["num_nodes"] == 1
