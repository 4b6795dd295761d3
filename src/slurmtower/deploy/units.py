"""The files a site installs beside slurmtower, rendered from one place: the systemd units of
the API and the sensor, ``sysusers.d`` and ``tmpfiles.d`` entries, and an nginx snippet.

``examples/systemd/`` holds the units as :func:`api_unit` and :func:`sensor_unit` render them
with their defaults (``tests/test_deploy.py`` checks they agree); ``slurmtower init`` writes
them with the site's paths.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "UnitParams",
    "api_unit",
    "nginx_snippet",
    "sensor_unit",
    "sysusers_entry",
    "tmpfiles_entry",
]


@dataclass(frozen=True)
class UnitParams:
    """What the rendered files depend on (defaults: the documented deployment)."""

    slurmtower: Path = Path("/opt/slurmtower/venv/bin/slurmtower")
    """The ``slurmtower`` console script the units start."""
    config: Path = Path("/etc/slurmtower/slurmtower.toml")
    """The API's configuration file."""
    sensor_config: Path = Path("/etc/slurmtower/sensor.toml")
    """The sensor's configuration file."""
    service_user: str = "slurmtower"
    """The API's unprivileged user (and group)."""
    slurm_user: str = "slurm"
    """SlurmUser: the sensor's user, the only one strigger takes node triggers from."""
    port: int = 8642
    """The API's loopback port (``api.port``)."""
    state_dir: Path = Path("/var/lib/slurmtower")
    sensor_state_dir: Path = Path("/var/lib/slurmtower-sensor")
    server_name: str = "tower.example.org"
    """The proxy's public host name."""


def api_unit(p: UnitParams = UnitParams()) -> str:
    """``slurmtower-api.service``."""
    return f"""\
# slurmtower's HTTP API and dashboard (/ui). Runs as the unprivileged "{p.service_user}" user:
# reads come from Slurm's client commands (any user may run sinfo/squeue/scontrol show), and
# node actions need that user to be a Slurm operator (see docs/deployment.md).
# The node sensor runs in slurmtower-sensor.service, so the API has events.sensor_enabled = false.
[Unit]
Description=slurmtower API and dashboard
Documentation=file:///usr/share/doc/slurmtower/deployment.md
After=network-online.target munge.service slurmctld.service
Wants=network-online.target

[Service]
Type=simple
User={p.service_user}
Group={p.service_user}
Environment=SLURMTOWER_CONFIG={p.config}
Environment=SLURMTOWER_EVENTS__SENSOR_ENABLED=false
# Bind to loopback only: TLS and the public address belong to the reverse proxy (nginx).
ExecStart={p.slurmtower} serve --host 127.0.0.1 --port {p.port}
Restart=on-failure
RestartSec=5
StateDirectory={p.state_dir.name}
StateDirectoryMode=0750
# Hardening: nothing here needs more than the state directory and the network.
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectControlGroups=yes
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6
LockPersonality=yes
MemoryDenyWriteExecute=yes
SystemCallArchitectures=native
CapabilityBoundingSet=
UMask=0027

[Install]
WantedBy=multi-user.target
"""


def sensor_unit(p: UnitParams = UnitParams()) -> str:
    """``slurmtower-sensor.service``."""
    return f"""\
# slurmtower's node sensor: arms Slurm triggers (strigger) and receives their signed callbacks,
# polls node states, writes events and runs rules. It runs as SlurmUser ("{p.slurm_user}"), the only
# user strigger accepts for node triggers; the notify program it installs runs as that user
# on the controller. Run exactly one per cluster, on the slurmctld host.
[Unit]
Description=slurmtower node sensor
Documentation=file:///usr/share/doc/slurmtower/deployment.md
After=network-online.target munge.service slurmctld.service
Wants=network-online.target
# Triggers die with slurmctld's state; restart together.
PartOf=slurmctld.service

[Service]
Type=simple
User={p.slurm_user}
Group={p.slurm_user}
Environment=SLURMTOWER_CONFIG={p.sensor_config}
ExecStart={p.slurmtower} sensor --host 127.0.0.1
# A clean stop (SIGTERM) clears the sensor's triggers.
KillSignal=SIGTERM
TimeoutStopSec=30
Restart=on-failure
RestartSec=5
StateDirectory={p.sensor_state_dir.name}
StateDirectoryMode=0700
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectControlGroups=yes
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6
LockPersonality=yes
SystemCallArchitectures=native
CapabilityBoundingSet=
UMask=0077

[Install]
WantedBy=multi-user.target
"""


def sysusers_entry(p: UnitParams = UnitParams()) -> str:
    """``/usr/lib/sysusers.d/slurmtower.conf`` (sysusers.d(5)): the API's system user."""
    return f"""\
# slurmtower's API user: a system account, no login (systemd-sysusers creates it).
u {p.service_user} - "slurmtower control tower" {p.state_dir} /usr/sbin/nologin
"""


def tmpfiles_entry(p: UnitParams = UnitParams()) -> str:
    """``/usr/lib/tmpfiles.d/slurmtower.conf`` (tmpfiles.d(5)): the state directories, for the
    CLI run before the units first start (the units' StateDirectory= makes them too)."""
    return f"""\
# slurmtower's state: the API's store and snapshots; the sensor's notify program and key.
d {p.state_dir} 0750 {p.service_user} {p.service_user} -
d {p.sensor_state_dir} 0700 {p.slurm_user} {p.slurm_user} -
"""


def nginx_snippet(p: UnitParams = UnitParams()) -> str:
    """An nginx server terminating TLS in front of the API (``api.trusted_proxies`` must name
    it: ``127.0.0.1`` on the same host)."""
    upstream = f"http://127.0.0.1:{p.port}"
    return f"""\
# slurmtower behind nginx (docs/deployment.md section 4). Copy to /etc/nginx/sites-available/,
# set the certificate paths, link it into sites-enabled and reload nginx.
server {{
    listen 443 ssl http2;
    server_name {p.server_name};
    ssl_certificate     /etc/ssl/certs/{p.server_name}.pem;
    ssl_certificate_key /etc/ssl/private/{p.server_name}.key;
    ssl_protocols TLSv1.2 TLSv1.3;
    add_header Strict-Transport-Security "max-age=31536000" always;

    location / {{
        proxy_pass {upstream};
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header Host $host;
        proxy_set_header X-Forwarded-For $remote_addr;
        proxy_set_header X-Forwarded-Proto $scheme;
    }}
    # The live event feed is Server-Sent Events: no buffering, long reads.
    location = /events/stream {{
        proxy_pass {upstream};
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header X-Forwarded-For $remote_addr;
        proxy_set_header X-Forwarded-Proto $scheme;
        proxy_buffering off;
        proxy_read_timeout 1h;
    }}
}}
server {{ listen 80; server_name {p.server_name}; return 301 https://$host$request_uri; }}
"""
