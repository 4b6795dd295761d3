"""A real OpenID provider on loopback for the sign-on tests: panva's ``oidc-provider``
(``tests/oidc/provider.mjs``, installed by ``scripts/test.sh`` with ``npm ci``), run by Node.js.

:class:`OidcProvider` starts it with one confidential client for a slurmtower served at a
port chosen beforehand, and the people the tests sign in as, with their groups.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from slurmtower.settings import OidcSettings

HERE = Path(__file__).with_name("oidc")
CLIENT_ID = "slurmtower"
CLIENT_SECRET = "slurmtower-test-client-secret-0123456789"  # noqa: S105 - the test provider's client
#: The people of the test provider and their groups.
PEOPLE = {
    "alice": ["hpc-users"],
    "otto": ["hpc-staff", "hpc-users"],
    "ada": ["hpc-admins"],
    "carol": ["finance"],  # no group slurmtower maps: refused
}
#: auth.oidc.roles of the tests.
ROLES = {"hpc-users": "user", "hpc-staff": "operator", "hpc-admins": "admin"}


@dataclass
class OidcProvider:
    """``oidc-provider`` on ``port``, its client redirecting to slurmtower at ``tower_port``."""

    port: int
    tower_port: int
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def tower(self) -> str:
        return f"http://127.0.0.1:{self.tower_port}"

    def settings(self) -> OidcSettings:
        """``auth.oidc`` for the slurmtower at :attr:`tower`."""
        return OidcSettings(issuer=self.issuer, client_id=CLIENT_ID, client_secret=CLIENT_SECRET,  # type: ignore[arg-type]
                            redirect_url=f"{self.tower}/ui/login/oidc/callback", roles=ROLES,  # type: ignore[arg-type]
                            label="Log in with the test provider")

    def start(self, log: Path) -> None:
        node = shutil.which("node")
        if node is None or not (HERE / "node_modules" / "oidc-provider").is_dir():
            pytest.fail("Node.js or tests/oidc/node_modules is missing (scripts/test.sh installs both)")
        env = {**os.environ, "OIDC_PORT": str(self.port),
               "OIDC_ACCOUNTS": json.dumps({name: {"groups": groups} for name, groups in PEOPLE.items()}),
               "OIDC_CLIENTS": json.dumps([{
                   "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET,
                   "redirect_uris": [f"{self.tower}/ui/login/oidc/callback"],
                   "post_logout_redirect_uris": [f"{self.tower}/ui/login"]}])}
        with log.open("wb") as out:
            self.proc = subprocess.Popen([node, str(HERE / "provider.mjs")], cwd=HERE, env=env,  # noqa: S603
                                         stdout=out, stderr=subprocess.STDOUT)
        end = time.monotonic() + 30
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the OpenID provider exited: {log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.issuer}/.well-known/openid-configuration", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("the OpenID provider did not answer within 30 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
