"""The documentation site (``make docs``) and the README, its front door.

The site is built once for the module, strictly, as ``make docs`` builds it; its reference
pages (generated from the code at build time by ``scripts/docs_reference.py``) must list every
action, setting, route, CLI command and option, event type and metric the code has, each
list compared with the code's own: a new action, route or setting without its reference fails
here. The README stays a front door (at most 200 lines) whose every link resolves: the files
exist, and the anchors exist in the built site.
"""

from __future__ import annotations

import ast
import html
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MKDOCS = Path(sys.executable).with_name("mkdocs")


@pytest.fixture(scope="module")
def site() -> Iterator[Path]:
    """The site, built strictly (a broken link, anchor or reference is an error) into a folder
    of the test's own."""
    with tempfile.TemporaryDirectory(prefix="slurmtower-site-") as out:
        done = subprocess.run([str(MKDOCS), "build", "--strict", "--quiet", "--site-dir", out], cwd=ROOT,
                              capture_output=True, text=True, timeout=240,
                              env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
        assert done.returncode == 0, f"make docs fails:\n{done.stdout}\n{done.stderr}"
        yield Path(out)


def _page(site: Path, rel: str) -> str:
    path = site / rel
    assert path.exists(), f"the site has no {rel}"
    return path.read_text()


def _codes(text: str, tag: str) -> list[str]:
    """The inline code of every ``<tag ...>`` that starts with one (a heading, a table cell)."""
    return [html.unescape(m) for m in re.findall(rf"<{tag}[^>]*><code>(.*?)</code>", text, re.S)]


def _section(text: str, tag: str, code: str) -> str:
    """The part of a page under the ``<tag>`` heading whose code is ``code``, to the next one."""
    found = re.search(rf"<{tag}[^>]*><code>{re.escape(html.escape(code, quote=False))}</code>.*?</{tag}>(.*?)(?=<{tag}|\Z)",
                      text, re.S)
    assert found, f"no heading {code!r}"
    return found.group(1)


def _ids(text: str) -> set[str]:
    return set(re.findall(r'\sid="([^"]+)"', text))


# -- the build --------------------------------------------------------------------------------


def test_the_site_is_strict_about_links_and_anchors() -> None:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)  # its !tags are MkDocs'
    assert config["strict"] == "true"
    for check in ("not_found", "anchors", "unrecognized_links", "absolute_links", "omitted_files"):
        assert config["validation"][check] == "warn", f"validation.{check} must be a warning (strict: an error)"


def test_the_reference_pages_are_generated_not_committed(site: Path) -> None:
    assert not (ROOT / "docs" / "reference").exists(), "docs/reference/ is generated at build time: remove it"
    for page in ("cli", "settings", "api", "actions", "events", "metrics"):
        assert "generated" in _page(site, f"reference/{page}.html")


def test_every_page_of_docs_is_in_the_navigation(site: Path) -> None:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)

    def walk(node: object) -> Iterator[str]:
        if isinstance(node, str):
            yield node
        elif isinstance(node, list):
            for item in node:
                yield from walk(item)
        elif isinstance(node, dict):
            for value in node.values():
                yield from walk(value)

    listed = set(walk(config["nav"]))
    pages = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert pages - listed == set(), "pages of docs/ no one reaches from the navigation"
    assert {p for p in listed if not p.startswith("reference/")} - pages == set()


# -- the reference against the code -----------------------------------------------------------


def test_the_actions_reference_lists_every_action_with_its_parameters(site: Path) -> None:
    from slurmtower.actions import REGISTRY

    text = _page(site, "reference/actions.html")
    assert set(_codes(text, "h2")) == set(REGISTRY)
    for name, spec in REGISTRY.items():
        section = _section(text, "h2", name)
        for param in spec.params.model_fields:
            assert f"<code>{param}</code>" in section, f"{name}: parameter {param} missing"


def test_the_settings_reference_lists_every_setting(site: Path) -> None:
    from slurmtower.settings import Settings, describe

    text = _page(site, "reference/settings.html")
    listed = set(_codes(text, "td"))
    keys = {key for key, _value, _source in describe(Settings())}
    assert keys - listed == set(), "settings without a row"
    extra = {k for k in listed if re.fullmatch(r"[a-z_.]+", k) and "." in k and not k.startswith("SLURMTOWER")}
    assert extra - keys == set(), "rows of settings the code does not have"
    # each with its environment variable
    assert "SLURMTOWER_API__PORT" in listed and "SLURMTOWER_STATE_DIR" in listed


def test_the_api_reference_lists_every_route_of_the_openapi_document(site: Path, tmp_path: Path) -> None:
    from slurmtower.api import create_app
    from slurmtower.settings import Settings

    doc = create_app(Settings(state_dir=tmp_path)).openapi()
    operations = {f"{method.upper()} {path}" for path, item in doc["paths"].items() for method in item
                  if method in ("get", "put", "post", "delete", "patch")}
    assert len(operations) > 50
    text = _page(site, "reference/api.html")
    listed = set(_codes(text, "h3")) | set(_codes(text, "td"))
    assert operations - listed == set(), "routes of the OpenAPI document without a reference entry"
    assert {op for op in listed if re.fullmatch(r"(GET|PUT|POST|DELETE|PATCH) /\S*", op)} - operations == set()


def test_the_cli_reference_lists_every_command_and_option(site: Path) -> None:
    import typer

    from slurmtower.cli.main import app

    text = _page(site, "reference/cli.html")
    headings = set(_codes(text, "h2"))

    def commands(group: typer.Typer, prefix: str) -> Iterator[str]:
        # Typer's own registrations, not the click walk the generator makes
        for cmd in group.registered_commands:
            yield f"{prefix} {cmd.name or cmd.callback.__name__.replace('_', '-')}"  # type: ignore[union-attr]
        for sub in group.registered_groups:
            name = sub.name or sub.typer_instance.info.name  # type: ignore[union-attr]
            yield f"{prefix} {name}"
            yield from commands(sub.typer_instance, f"{prefix} {name}")  # type: ignore[arg-type]

    expected = set(commands(app, "slurmtower"))
    assert len(expected) > 30
    assert expected - headings == set(), "commands without a reference entry"
    command = typer.main.get_command(app)
    for path in expected:
        cmd = command
        ctx = cmd.context_class(cmd, info_name="slurmtower")
        for part in path.split()[1:]:
            cmd = cmd.get_command(ctx, part)
            ctx = cmd.context_class(cmd, info_name=part, parent=ctx)
        section = html.unescape(_section(text, "h2", path))
        for param in cmd.params:
            if getattr(param, "hidden", False):
                continue
            names = param.opts if type(param).__name__.endswith("Option") else [(param.name or "").upper()]
            assert all(n in section for n in names), f"{path}: {names} missing"


def _event_types_in_code() -> set[str]:
    """Event types as the code declares them (the constants) and as it records them with a
    literal (``record_event("...")``, ``Event(type="...")``), read independently of the
    generator."""
    from slurmtower.actions import breaker, maintain
    from slurmtower.events import alerts
    from slurmtower.models import event

    found = {getattr(event, n) for n in event.__all__
             if n.isupper() and isinstance(getattr(event, n), str) and "." in getattr(event, n)}
    found |= {breaker.TRIPPED, breaker.OVERRIDDEN, alerts.ALERT_FIRING, alerts.ALERT_RESOLVED, *maintain.TYPES}
    for path in (ROOT / "src" / "slurmtower").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            arg = None
            if name == "record_event" and node.args:
                arg = node.args[0]
            elif name == "Event":
                arg = next((k.value for k in node.keywords if k.arg == "type"), None)
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.add(arg.value)
    return found


def test_the_events_reference_lists_every_event_type_with_its_payload(site: Path) -> None:
    from slurmtower.models.event import NodeTransition

    text = _page(site, "reference/events.html")
    listed = set(_codes(text, "h3"))
    assert _event_types_in_code() - listed == set(), "event types without a reference entry"
    # the job actions' outcomes, recorded as f"slurmtower.job.{outcome}"
    assert {"slurmtower.job.cancelled", "slurmtower.job.held", "slurmtower.job.refused"} <= listed
    section = _section(text, "h3", "slurm.node.state")
    assert all(f"<code>{f}</code>" in section for f in NodeTransition.model_fields)
    breaker = _section(text, "h3", "slurmtower.breaker.tripped")
    assert "<code>scopes</code>" in breaker and "<code>execution_id</code>" in breaker


def test_the_metrics_reference_lists_every_metric_family(site: Path) -> None:
    made = set()
    for path in (ROOT / "src" / "slurmtower").rglob("*.py"):
        made |= set(re.findall(r"(?:Gauge|Counter|Histogram|Summary)\w*\(\s*\"(slurmtower_\w+)\"", path.read_text()))
    assert len(made) > 10
    listed = set(_codes(_page(site, "reference/metrics.html"), "td"))
    assert made - listed == set(), "metrics without a reference entry"


def test_the_architecture_page_draws_the_import_contracts(site: Path) -> None:
    text = html.unescape(_page(site, "explanation/architecture.html"))
    assert "&lt;!-- generated" not in text and "<!-- generated" not in text
    for layer in ("cli", "runtime", "live", "actions : events : rules", "models"):
        assert f"│ {layer}" in text


# -- the README ---------------------------------------------------------------------------------


def test_the_readme_is_a_front_door() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: move the rest into docs/"
    text = "\n".join(lines)
    for must in ("make run", "make test", "make slurm-releases", "demo-tokens.json", "/ui", "docs/tutorial.md",
                 "docs/screenshots/"):
        assert must in text, f"the README lost {must!r}"


def test_every_link_of_the_readme_resolves(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from slurmtower.devcluster.cluster import DevCluster

    text = README.read_text()
    links = re.findall(r"!?\[[^\]]*\]\(([^)\s]+)\)", text)
    assert len(links) > 20
    for link in links:
        if re.match(r"https?://", link):
            continue
        target, _, anchor = link.partition("#")
        path = (ROOT / target).resolve() if target else README
        assert path.exists(), f"README links to {link}: no such file"
        if anchor or (target.startswith("docs/") and target.endswith(".md")):
            assert target.startswith("docs/"), f"README: {link}: anchors are checked in the site's pages only"
            built = site / Path(target).relative_to("docs").with_suffix(".html")
            assert built.exists(), f"README links to {link}: not a page of the site"
            if anchor:
                assert anchor in _ids(built.read_text()), f"README links to {link}: no such anchor in the site"
    # the URLs to open after `make run` are the local cluster's (as a shell without this worker's
    # cluster settings sees it: an xdist worker's own devcluster has ports of its own)
    for name in ("SLURMTOWER_DEVCLUSTER_DIR", "SLURMTOWER_DEVCLUSTER_NAME", "SLURMTOWER_DEVCLUSTER_PORT_BASE"):
        monkeypatch.delenv(name, raising=False)
    port = DevCluster(log=lambda _m: None).api_port
    for url in re.findall(r"<(http://127\.0\.0\.1:\d+[^>]*)>", text):
        assert url.startswith(f"http://127.0.0.1:{port}/"), f"README: {url} is not where `make run` serves"
