"""The container image (``Containerfile``): its steps checked on every run, the image itself
when one is built.

Building takes minutes (Debian packages and every Python dependency in a fresh base), so the
suite does not build: ``make image`` does (scripts/image.sh, Debian's podman). Every run
checks the Containerfile's parts: Slurm's client commands come from Debian's package at the
version given as a build argument (no Slurm built here), the service runs as a non-root
user, and its install steps, run here as written in a clean virtual environment, give a
``slurmtower serve`` that answers from the local cluster as that user, with the image's
environment. When an image is there (``SLURMTOWER_TEST_IMAGE``, default
``localhost/slurmtower:latest``), it runs against the local cluster with the site's
``slurm.conf``, the munge socket, a config and a state volume mounted as the README says.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from slurmtower.devcluster import DevCluster
from tests.conftest import ALL_NODES, wait_for
from tests.sensor_helpers import free_port

REPO = Path(__file__).resolve().parents[1]
CONTAINERFILE = REPO / "Containerfile"
IMAGE = os.environ.get("SLURMTOWER_TEST_IMAGE", "localhost/slurmtower:latest")
#: scripts/image.sh's podman flags (the same storage the image was built in).
PODMAN = ["podman", "--storage-driver", os.environ.get("STORAGE_DRIVER", "vfs")]


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str


def instructions(text: str) -> list[Instruction]:
    """The Containerfile's instructions, continuation lines joined, comments left out."""
    out: list[Instruction] = []
    pending = ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, args = (pending + line).strip().partition(" ")
        out.append(Instruction(keyword.upper(), " ".join(args.split())))
        pending = ""
    return out


STEPS = instructions(CONTAINERFILE.read_text())
STAGE = STEPS[[s.keyword for s in STEPS].index("FROM") + 1:]  # ARGs before FROM are not seen after it


def arg_default(name: str) -> str:
    (value,) = [s.args.split("=", 1)[1] for s in STAGE if s.keyword == "ARG" and s.args.split("=")[0] == name]
    return value


def expand(text: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), text)


def image_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for step in STAGE:
        if step.keyword == "ENV":
            env.update(item.split("=", 1) for item in shlex.split(step.args))
    return env


def test_slurm_client_commands_are_debians_package_at_the_version_given_as_a_build_argument() -> None:
    version = arg_default("SLURM_CLIENT_VERSION")
    assert re.fullmatch(r"\d+\.\d+\.\d+-[\w.+~]+", version), version  # a Debian package version
    installs = [s.args for s in STAGE if s.keyword == "RUN" and "apt-get install" in s.args]
    assert installs and '"slurm-client=${SLURM_CLIENT_VERSION}"' in installs[0]
    # Nothing of Slurm is built: no source, no build script, in the image or the repository.
    text = CONTAINERFILE.read_text().lower()
    assert not any(word in text for word in ("./configure", "make install", "schedmd.com", "slurm-wlm-source"))
    assert not list(REPO.glob("scripts/*slurm*build*"))


def test_the_service_runs_as_a_non_root_user() -> None:
    (user,) = [s.args for s in STAGE if s.keyword == "USER"][-1:]
    uid, _, gid = expand(user, {"SLURMTOWER_UID": arg_default("SLURMTOWER_UID")}).partition(":")
    assert uid.isdigit() and int(uid) != 0, user  # numeric: runAsNonRoot can check it
    assert gid.isdigit() and int(gid) != 0, user
    assert [s.args for s in STAGE if s.keyword == "ENTRYPOINT"] == ['["slurmtower"]']


def test_the_build_context_holds_what_the_containerfile_copies_and_no_more() -> None:
    rules = [line for line in (REPO / ".containerignore").read_text().splitlines() if line and not line.startswith("#")]
    assert rules[0] == "*"
    kept = {line[1:] for line in rules if line.startswith("!")}
    copied = {src for s in STAGE if s.keyword == "COPY" for src in s.args.split()[:-1]}
    assert copied == kept


@pytest.fixture()
def install_root() -> Iterator[Path]:
    """A directory the service's user can read (pytest's tmp is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="slurmtower-image-steps.", dir="/var/tmp"))
    os.chmod(path, 0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.cluster
def test_the_install_steps_give_a_service_that_reads_the_local_cluster_as_the_images_user(
        devcluster: DevCluster, install_root: Path) -> None:
    """The Containerfile's COPY and RUN steps of the service, as written, with the image's paths
    moved under a temporary directory; then its ENTRYPOINT and CMD as its USER and ENV."""
    moved = {"/tmp/slurmtower": str(install_root / "context"), "/opt/slurmtower/venv": str(install_root / "venv")}

    def here(text: str) -> str:
        for image_path, path in moved.items():
            text = text.replace(image_path, path)
        return text

    for step in STAGE:
        if step.keyword == "COPY":
            *sources, dest = step.args.split()
            target = Path(here(dest))
            target.mkdir(parents=True, exist_ok=True)
            for source in sources:
                if (REPO / source).is_dir():
                    shutil.copytree(REPO / source, target if dest.endswith("/src") else target / source,
                                    ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
                else:
                    shutil.copy(REPO / source, target)
    (run,) = [s.args for s in STAGE if s.keyword == "RUN" and "/opt/slurmtower/venv" in s.args]
    # The image's python3 is Debian's /usr/bin/python3; the one first on this PATH may live
    # where the image's user may not enter (pyenv's under /root), and the venv links to it.
    build_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    build_env["PATH"] = "/usr/bin:/bin:" + build_env.get("PATH", "")
    done = subprocess.run(["/bin/sh", "-c", here(run)], capture_output=True, text=True, timeout=400,
                          env=build_env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not (install_root / "context").exists()  # the step cleans up after itself

    uid = int(arg_default("SLURMTOWER_UID"))
    state_dir = install_root / "state"
    state_dir.mkdir()
    os.chown(state_dir, uid, uid)
    config = install_root / "slurmtower.toml"
    config.write_text(re.sub(r'(?m)^state_dir = .*$', f'state_dir = "{state_dir}"', devcluster.tower_conf.read_text()))
    os.chmod(config, 0o644)
    port = free_port()
    env = {"HOME": str(state_dir), "LANG": "C.UTF-8", **image_env()}
    env["PATH"] = here(env["PATH"])
    env.update(SLURM_CONF=str(devcluster.slurm_conf), SLURMTOWER_CONFIG=str(config))
    (entrypoint,) = [json.loads(s.args) for s in STAGE if s.keyword == "ENTRYPOINT"]
    (cmd,) = [json.loads(s.args) for s in STAGE if s.keyword == "CMD"]
    argv = [*entrypoint, *cmd]
    argv[argv.index("--port") + 1] = str(port)
    argv[argv.index("--host") + 1] = "127.0.0.1"
    assert shutil.which(argv[0], path=env["PATH"]) == str(install_root / "venv/bin/slurmtower")
    log = install_root / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env=env, cwd=state_dir, user=uid, group=uid, extra_groups=[],
                                stdout=out, stderr=out, start_new_session=True,
                                executable=shutil.which(argv[0], path=env["PATH"]))
    try:
        token = devcluster.demo_tokens()["reader"]

        def nodes() -> list[str] | None:
            assert proc.poll() is None, log.read_text()[-3000:]
            return listed_nodes(port, token)

        assert wait_for(nodes, 60, 0.3, what="serve from the installed venv") == list(ALL_NODES)
        assert (state_dir / "slurmtower.db").stat().st_uid == uid
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(30)


def listed_nodes(port: int, token: str) -> list[str] | None:
    """The node names a service on ``port`` lists with ``token``; None until it answers 200."""
    try:
        answer = httpx.get(f"http://127.0.0.1:{port}/nodes", headers={"Authorization": f"Bearer {token}"}, timeout=5)
    except httpx.HTTPError:
        return None
    return [n["name"] for n in answer.json()["nodes"]] if answer.status_code == 200 else None


def _podman_image_gap() -> str | None:
    if shutil.which("podman") is None:
        return "podman is not installed (Debian's `apt-get install podman`; `make image` installs it)"
    if subprocess.run([*PODMAN, "image", "exists", IMAGE], capture_output=True, timeout=60, check=False).returncode:
        return (f"no image {IMAGE} in podman's storage: `make image` builds it (minutes, so not in make test), "
                "then `bash scripts/test.sh tests/test_image.py`")
    return None


@pytest.mark.cluster
def test_the_image_serves_the_local_cluster_with_the_sites_slurm_conf_and_munge_socket(
        devcluster: DevCluster, install_root: Path) -> None:
    gap = _podman_image_gap()
    if gap:
        pytest.skip(gap)
    uid = int(arg_default("SLURMTOWER_UID"))
    state_dir = install_root / "state"
    state_dir.mkdir()
    os.chown(state_dir, uid, uid)
    config = install_root / "slurmtower.toml"
    # The local cluster's config with the container's paths, as a site writes it for the image:
    # its state volume and the slurm.conf mounted at /etc/slurm (the host's paths are not there:
    # scontrol with no slurm.conf would look for slurmctld by DNS and hang).
    text = re.sub(r'(?m)^state_dir = .*$', 'state_dir = "/var/lib/slurmtower"', devcluster.tower_conf.read_text())
    text = re.sub(r'(?m)^slurm_conf = .*$', 'slurm_conf = "/etc/slurm/slurm.conf"', text)
    text = re.sub(r'(?m)^rest_jwt_key_file = .*\n', '', text)  # slurmrestd's key: the REST backend's, not used here
    config.write_text(text + "\n[events]\nsensor_enabled = false  # the sensor runs on the slurmctld host\n")
    os.chmod(config, 0o644)
    port = free_port()
    name = f"slurmtower-test-{port}"
    # Limits of the container's own, below a VM's hard ones (podman's defaults are above them:
    # "setrlimit RLIMIT_NOFILE: Operation not permitted"), and runc where installed (crun refuses
    # a host with cgroup v1 and v2 mounted side by side); the README says both.
    runtime = ["--runtime", "runc"] if shutil.which("runc") else []
    run = [*PODMAN, *runtime, "run", "--rm", "-d", "--name", name, "--network", "host",
           "--ulimit", "nofile=16384:16384", "--ulimit", "nproc=8192:8192",
           "-v", f"{devcluster.slurm_conf}:/etc/slurm/slurm.conf:ro",
           "-v", "/run/munge:/run/munge",
           "-v", f"{config}:/etc/slurmtower/slurmtower.toml:ro",
           "-v", f"{state_dir}:/var/lib/slurmtower",
           IMAGE, "serve", "--host", "127.0.0.1", "--port", str(port)]
    started = subprocess.run(run, capture_output=True, text=True, timeout=120, check=False)
    assert started.returncode == 0, started.stderr
    try:
        token = devcluster.demo_tokens()["reader"]
        assert wait_for(lambda: listed_nodes(port, token), 90, 0.5, what=f"{IMAGE} serving") == list(ALL_NODES)
        who = subprocess.run([*PODMAN, *runtime, "exec", name, "id", "-u"], capture_output=True, text=True, timeout=60,
                             check=True).stdout.strip()
        assert who == str(uid)
        assert (state_dir / "slurmtower.db").stat().st_uid == uid
        sinfo = subprocess.run([*PODMAN, *runtime, "exec", name, "sinfo", "-h", "-o", "%N"], capture_output=True, text=True,
                               timeout=60, check=True).stdout.strip()
        assert sinfo == str(ALL_NODES)
    finally:
        logs = subprocess.run([*PODMAN, *runtime, "logs", name], capture_output=True, text=True, timeout=60, check=False)
        subprocess.run([*PODMAN, *runtime, "rm", "-f", "-t", "10", name], capture_output=True, timeout=120, check=False)
        print(logs.stdout[-2000:], logs.stderr[-2000:])
