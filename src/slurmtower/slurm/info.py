"""What ``slurmtower info`` reports: the release, the backend in use and what it can do here,
slurmrestd's API versions (where one is configured), and warnings an admin should act on."""

from __future__ import annotations

from typing import Any

from slurmtower.errors import SlurmtowerError
from slurmtower.settings import Settings
from slurmtower.slurm import make_rest_client
from slurmtower.slurm.adapters import data_parser_note
from slurmtower.slurm.cli_backend import CliSlurmClient
from slurmtower.slurm.client import SlurmClient
from slurmtower.slurm.rest_backend import RestSlurmClient

__all__ = ["cluster_info"]


def _rest(settings: Settings, client: SlurmClient) -> RestSlurmClient | None:
    if isinstance(client, RestSlurmClient):
        return client
    if not settings.slurm.rest_url:
        return None

    return make_rest_client(settings, settings.slurm.rest_url)


def deprecation_warning(status: dict[str, Any]) -> str | None:
    """The warning for a REST API version slurmrestd marks deprecated, naming what to use."""
    api = status["api"]
    if api not in status["deprecated"]:
        return None

    note = data_parser_note(str(api))
    head = f"slurmrestd marks API {api} deprecated{f' ({note})' if note else ''}"
    newest = status["newest_known"]
    if status["pinned"] and newest != api:
        return f"{head}: slurm.rest_api_version pins it; without the pin slurmtower uses {newest}"
    newer = [v for v in status["offered"] if int(v.rsplit(".", 1)[1]) > int(api.rsplit(".", 1)[1])]
    return f"{head}, and this slurmtower parses no newer one" + \
        (f" (slurmrestd also offers {', '.join(newer)}): upgrade slurmtower" if newer else "")


def cluster_info(settings: Settings, client: SlurmClient) -> tuple[dict[str, Any], list[str]]:
    """``(facts, warnings)``: the backend's capabilities, plus ``rest`` (API in use, offered,
    deprecated, newest known) where slurmrestd is configured."""
    info: dict[str, Any] = client.capabilities().as_dict()
    warnings: list[str] = []
    cli = client if isinstance(client, CliSlurmClient) else getattr(client, "fallback", None)
    if isinstance(cli, CliSlurmClient):
        forms = cli.json_forms()
        info["cli_json_option"] = forms.json_flag
        if forms.json_flag != "--json":
            asked = forms.json_flag.split("=", 1)[1]
            warnings.append(f"Slurm's commands print data_parser {forms.data_parser} by default, newer than "
                            f"this slurmtower parses: it asks for {asked} ({forms.json_flag}); upgrade slurmtower")
    rest = _rest(settings, client)
    if rest is not None:
        try:
            status = rest.api_status()
        except SlurmtowerError as exc:
            info["rest"] = {"url": settings.slurm.rest_url, "error": exc.message}
            warnings.append(f"slurmrestd at {settings.slurm.rest_url}: {exc.message}")
        else:
            info["rest"] = {"url": settings.slurm.rest_url, **status}
            warning = deprecation_warning(status)
            if warning:
                warnings.append(warning)
        finally:
            if rest is not client:
                rest.close()
    return info, warnings
