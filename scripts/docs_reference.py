"""The documentation site's reference pages, generated from the code at build time.

An MkDocs hook (``mkdocs.yml``: ``hooks``): :func:`on_files` adds the pages below to the site
without writing them into ``docs/``, so they cannot drift from the code they describe:

- ``reference/cli.md``: every command, argument and option of the Typer app;
- ``reference/settings.md``: every setting of :mod:`slurmtower.settings`' models, with its
  type, default, environment variable and description (the attribute docstrings);
- ``reference/api.md``: every route of the OpenAPI document (``create_app(settings).openapi()``);
- ``reference/actions.md``: every action of the catalogue with its parameters' JSON Schema;
- ``reference/events.md``: every event type the code records, with its payload's keys (read
  from the places that record them);
- ``reference/metrics.md``: every metric family of ``/metrics``.

``python scripts/docs_reference.py DIR`` writes the same pages into DIR (to read them, or to
diff two versions). ``tests/test_docs.py`` compares each page's list with the code's own.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import re
import sys
import tempfile
import textwrap
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
if str(SRC) not in sys.path:  # a checkout's build, whether or not slurmtower is installed
    sys.path.insert(0, str(SRC))

__all__ = ["PAGES", "event_types", "metric_families", "on_files", "pages", "setting_rows"]

ENV_PREFIX = "SLURMTOWER_"


def _cell(text: Any) -> str:
    """``text`` fit for one cell of a Markdown table (one line, pipes escaped)."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(text: Any) -> str:
    """``text`` as inline code in a table cell (backticks inside kept readable)."""
    value = _cell(text)
    if not value:
        return ""
    fence = "``" if "`" in value else "`"
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{fence}{pad}{value}{pad}{fence}"


def _prose(text: str | None) -> str:
    """A docstring as Markdown: reST's double backticks as single ones, paragraphs kept."""
    if not text:
        return ""
    text = inspect.cleandoc(text)
    text = re.sub(r":(?:func|class|mod|meth|attr|data|exc):`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def _anchor(text: str) -> str:
    """The id MkDocs' toc gives a heading (its default slugify)."""
    text = re.sub(r"[^\w\s-]", "", text.lower()).strip()
    return re.sub(r"[-\s]+", "-", text)


# -- CLI ------------------------------------------------------------------------------------


@dataclass
class CliCommand:
    path: str
    help: str
    params: list[dict[str, Any]]
    group: bool


def cli_commands() -> list[CliCommand]:
    """Every command of ``slurmtower`` (groups too), walked through click's own interface
    (``list_commands``/``get_command``), so a lazily loaded command is listed as well."""
    import typer

    from slurmtower.cli.main import app

    out: list[CliCommand] = []

    def walk(cmd: Any, path: list[str], parent: Any) -> None:
        ctx = cmd.context_class(cmd, info_name=path[-1], parent=parent)
        params = [_cli_param(p, ctx) for p in cmd.params]
        is_group = hasattr(cmd, "list_commands")
        out.append(CliCommand(" ".join(path), _prose(cmd.help or ""), [p for p in params if p], is_group))
        if is_group:
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                if sub is not None and not getattr(sub, "hidden", False):
                    walk(sub, [*path, name], ctx)

    walk(typer.main.get_command(app), ["slurmtower"], None)
    return out


def _cli_param(p: Any, ctx: Any) -> dict[str, Any] | None:
    """One argument or option as ``--help`` shows it (its usage form, and its help with the
    default, range and environment variable)."""
    if getattr(p, "hidden", False):
        return None
    kind = "argument" if type(p).__name__.endswith("Argument") else "option"
    record = p.get_help_record(ctx)
    usage, help_text = record if record else (" ".join(p.opts), "")
    if kind == "argument":
        usage = (p.name or usage).upper() + ("" if p.required else " (optional)") + (" ..." if p.nargs == -1 else "")
    return {"kind": kind, "names": [*p.opts, *getattr(p, "secondary_opts", [])], "name": p.name,
            "usage": usage, "required": bool(p.required), "help": help_text or getattr(p, "help", "") or ""}


def _render_cli() -> str:
    cmds = cli_commands()
    lines = ["# CLI reference", "",
             "Every command of `slurmtower`, generated from its Typer application at build time "
             "(`slurmtower COMMAND --help` prints the same). Exit codes: 0 success, 2 bad input, 3 a safety "
             "rule refused, 4 a partial outcome, 5 an outcome not recorded, 6 a request made instead of the "
             "act, 69 the store unavailable, 78 configuration or schema to fix.", ""]
    for cmd in cmds:
        title = "`slurmtower`" if cmd.path == "slurmtower" else f"`{cmd.path}`"
        lines += [f"## {title}", ""]
        if cmd.help:
            lines += [cmd.help, ""]
        if cmd.group:
            subs = [c for c in cmds if c.path.startswith(cmd.path + " ")
                    and c.path.count(" ") == cmd.path.count(" ") + 1]
            lines += ["Commands: " + ", ".join(f"[`{c.path.split()[-1]}`](#{_anchor(c.path)})" for c in subs), ""]
        if cmd.params:
            lines += ["| argument / option | description |", "|---|---|"]
            for p in cmd.params:
                lines.append(f"| {_code(p['usage'])} | {_cell(p['help'])} |")
            lines.append("")
    return "\n".join(lines)


# -- settings -------------------------------------------------------------------------------


@dataclass
class SettingRow:
    key: str
    type: str
    default: str
    env: str
    description: str
    section: str


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(_type_name(a) for a in args)}]"
    if annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", str(annotation))


def _constraints(info: Any) -> str:
    words = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<", "min_length": "min length", "max_length": "max length",
             "pattern": "pattern"}
    out = []
    for m in info.metadata:
        for attr, word in words.items():
            value = getattr(m, attr, None)
            if value is not None:
                out.append(f"{word} {value}")
    return ", ".join(out)


def _hash_comments(model: type) -> dict[str, str]:
    """``#:`` comments above a field (the form some settings use instead of a docstring)."""
    out: dict[str, str] = {}
    try:
        lines, _ = inspect.getsourcelines(model)
    except (OSError, TypeError):
        return out
    pending: list[str] = []
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#:"):
            pending.append(stripped[2:].strip())
            continue
        m = re.match(r"^(\w+)\s*:", stripped)
        if m and pending:
            out[m.group(1)] = " ".join(pending)
        pending = []
    return out


def setting_rows() -> list[SettingRow]:
    """Every key of :class:`~slurmtower.settings.Settings`, sections walked, the items of a list
    of tables (``[[clusters]]``, ``auth.tokens`` ...) under ``key[]``."""
    from pydantic import BaseModel
    from pydantic_core import PydanticUndefined

    from slurmtower.deploy.conffile import field_docs
    from slurmtower.settings import Settings

    rows: list[SettingRow] = []

    def item_model(annotation: Any) -> type[BaseModel] | None:
        if typing.get_origin(annotation) is list:
            (arg,) = typing.get_args(annotation) or (None,)
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                return arg
        return None

    def walk(model: type[BaseModel], prefix: str, env: str | None, section: str) -> None:
        docs = {**_hash_comments(model), **field_docs(model)}
        for name, info in model.model_fields.items():
            key = f"{prefix}{name}"
            annotation = info.annotation
            doc = _prose(docs.get(name) or info.description or "")
            env_name = f"{env}{name.upper()}" if env is not None else ""
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                walk(annotation, key + ".", f"{env_name}__" if env is not None else None, key)
                continue
            if info.default_factory is not None:
                default: Any = info.default_factory()  # type: ignore[call-arg]
            else:
                default = None if info.default is PydanticUndefined else info.default
            item = item_model(annotation)
            if info.is_required():
                shown = "(required)"
            elif default is None:
                shown = "unset"
            elif hasattr(default, "get_secret_value"):
                shown = "(secret)"
            else:
                shown = _code(json.dumps(default, default=str))
            type_text = _type_name(annotation)
            limits = _constraints(info)
            rows.append(SettingRow(key, type_text + (f" ({limits})" if limits else ""), shown,
                                   env_name, doc + (f" Each item: see `{key}[]` below." if item else ""), section))
            if item is not None:
                walk(item, key + "[].", None, key + "[]")

    walk(Settings, "", ENV_PREFIX, "")
    return rows


def _render_settings() -> str:
    from slurmtower import settings as mod

    rows = setting_rows()
    lines = ["# Settings reference", "",
             "Every setting, generated from the pydantic models of `slurmtower/settings.py` at build time. "
             "The module's own words:", "", textwrap.indent(_prose(mod.__doc__), "> ").replace("\n\n", "\n>\n"), "",
             "A key `a.b` is `b = ...` under `[a]` in the TOML file (`a: {b: ...}` in YAML). The environment "
             "variable of a key overrides the file; a list or table is given as JSON or YAML "
             "(`SLURMTOWER_API__HIDDEN_PARTITIONS='[\"admin\"]'`). The items of a list of tables (`[[clusters]]`, "
             "`auth.tokens`) have no variable of their own: set the whole list. `slurmtower config show` prints "
             "the effective value of each key and where it came from; `slurmtower init` writes a commented "
             "file with all of them.", ""]
    sections: dict[str, list[SettingRow]] = {}
    for row in rows:
        sections.setdefault(row.section, []).append(row)
    for section, items in sections.items():
        title = "Top level" if not section else (f"`[[{section[:-2]}]]` items" if section.endswith("[]")
                                                 else f"`[{section}]`")
        lines += [f"## {title}", "", "| key | type | default | environment variable | description |",
                  "|---|---|---|---|---|"]
        for r in items:
            lines.append(f"| `{r.key}` | {_cell(r.type)} | {r.default} | {_code(r.env)} | {_cell(r.description)} |")
        lines.append("")
    return "\n".join(lines)


# -- routes ---------------------------------------------------------------------------------


def openapi_document() -> dict[str, Any]:
    """The service's OpenAPI document, as ``GET /openapi.json`` serves it with default settings
    (a throwaway state directory: nothing is started)."""
    from slurmtower.api import create_app
    from slurmtower.settings import Settings

    with tempfile.TemporaryDirectory() as state:
        return create_app(Settings(state_dir=Path(state))).openapi()


METHODS = ("get", "put", "post", "delete", "patch", "head", "options")


def _schema_type(schema: dict[str, Any] | None) -> str:
    if not schema:
        return ""
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in schema or "oneOf" in schema:
        return " | ".join(_schema_type(s) for s in schema.get("anyOf", schema.get("oneOf", [])))
    if "enum" in schema:
        return " | ".join(json.dumps(v) for v in schema["enum"])
    if "const" in schema:
        return json.dumps(schema["const"])
    kind = schema.get("type", "")
    if kind == "array":
        return f"array of {_schema_type(schema.get('items')) or 'any'}"
    if isinstance(kind, list):
        return " | ".join(kind)
    if schema.get("format"):
        return f"{kind} ({schema['format']})"
    return str(kind) or "any"


def routes(doc: dict[str, Any] | None = None) -> list[tuple[str, str, dict[str, Any]]]:
    """(METHOD, path, operation) of every operation of the OpenAPI document."""
    doc = doc if doc is not None else openapi_document()
    return [(m.upper(), path, op) for path, item in doc["paths"].items() for m in METHODS if m in item
            for op in [item[m]]]


def _route_heading(method: str, path: str) -> str:
    return f"`{method} {path}`"


def _render_api(doc: dict[str, Any] | None = None) -> str:
    doc = doc if doc is not None else openapi_document()
    ops = routes(doc)
    plain = {(m, p) for m, p, _ in ops}
    lines = ["# HTTP API reference", "",
             f"Every route of the OpenAPI document of `slurmtower serve` ({doc['info'].get('title', '')} "
             f"{doc['info'].get('version', '')}), generated from `create_app(settings).openapi()` at build "
             "time. The running service serves the same document at `/openapi.json` and a browsable form at "
             "`/docs`. Every route but `/health` needs a bearer token (`Authorization: Bearer ...`) or a "
             "dashboard session; errors are `application/problem+json` documents naming the bad part.", ""]
    groups: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for method, path, op in ops:
        if path.startswith("/clusters/{cluster}/") and (method, path.removeprefix("/clusters/{cluster}")) in plain:
            tag = "Per cluster"
        else:
            tag = (op.get("tags") or [path.strip("/").split("/")[0] or "service"])[0]
        groups.setdefault(tag, []).append((method, path, op))
    for tag, items in groups.items():
        lines += [f"## {tag[:1].upper() + tag[1:]}", ""]
        if tag == "Per cluster":
            lines += ["Each of these is the route without `/clusters/{cluster}` for the cluster named in the "
                      "path (several clusters: `[[clusters]]`); an unknown cluster is a 404 naming it.", "",
                      "| route | summary | same as |", "|---|---|---|"]
            for method, path, op in items:
                twin = path.removeprefix("/clusters/{cluster}")
                lines.append(f"| `{method} {path}` | {_cell(op.get('summary', ''))} | "
                             f"[`{method} {twin}`](#{_anchor(method + ' ' + twin)}) |")
            lines.append("")
            continue
        for method, path, op in items:
            lines += [f"### {_route_heading(method, path)}", ""]
            if op.get("summary"):
                lines += [f"**{op['summary']}**", ""]
            if op.get("description"):
                lines += [op["description"].strip(), ""]
            params = op.get("parameters", [])
            if params:
                lines += ["| parameter | in | type | required | description |", "|---|---|---|---|---|"]
                for prm in params:
                    lines.append(f"| `{prm['name']}` | {prm.get('in', '')} | {_cell(_schema_type(prm.get('schema')))} "
                                 f"| {'yes' if prm.get('required') else ''} | {_cell(prm.get('description', ''))} |")
                lines.append("")
            body = op.get("requestBody")
            if body:
                kinds = ", ".join(f"`{ct}` ({_schema_type(c.get('schema')) or 'any'})"
                                  for ct, c in body.get("content", {}).items())
                lines += [f"Body{' (required)' if body.get('required') else ''}: {kinds}", ""]
            responses = op.get("responses", {})
            if responses:
                lines += ["| status | description | content |", "|---|---|---|"]
                for code, resp in responses.items():
                    kinds = ", ".join(f"`{ct}` {_schema_type(c.get('schema'))}".strip()
                                      for ct, c in (resp.get("content") or {}).items())
                    lines.append(f"| {code} | {_cell(resp.get('description', ''))} | {_cell(kinds)} |")
                lines.append("")
    schemas = doc.get("components", {}).get("schemas", {})
    if schemas:
        lines += ["## Schemas", "", "The request and response bodies the routes above name (their full JSON "
                  "Schema is in `/openapi.json`).", "", "| schema | fields |", "|---|---|"]
        for name, schema in sorted(schemas.items()):
            fields = ", ".join(f"`{k}`" for k in (schema.get("properties") or {}))
            lines.append(f"| `{name}` | {fields or _cell(_schema_type(schema))} |")
        lines.append("")
    return "\n".join(lines)


# -- actions --------------------------------------------------------------------------------


def actions() -> list[dict[str, Any]]:
    """Every action of the catalogue as ``GET /actions/{name}`` describes it."""
    from slurmtower.actions import Catalogue

    return [Catalogue.spec(name).describe() for name in Catalogue.names()]


def _render_actions() -> str:
    items = actions()
    lines = ["# Actions reference", "",
             "Every action of the catalogue, generated from `slurmtower.actions` at build time: the same "
             "description and parameters as `slurmtower actions show NAME` and `GET /actions/{name}`. Run one "
             "with `slurmtower run NAME key=value ...`, `POST /actions/{name}` (a JSON body of the parameters) or "
             "a rule's `action`. Every mutating action takes `dry_run` and is recorded in the audit log.", "",
             "| action | mutating | permission | description |", "|---|---|---|---|"]
    for a in items:
        lines.append(f"| [`{a['name']}`](#{_anchor(a['name'])}) | {'yes' if a['mutating'] else 'no'} | "
                     f"{a['permission']}{' (own jobs: user)' if a.get('own_jobs') else ''} | "
                     f"{_cell(a['description'])} |")
    lines.append("")
    for a in items:
        schema = a["parameters"]
        lines += [f"## `{a['name']}`", "", a["description"], "",
                  f"Mutating: {'yes' if a['mutating'] else 'no'}; permission: `{a['permission']}`"
                  + ("; the `user` role may run it on its own jobs." if a.get("own_jobs") else "."), ""]
        props = schema.get("properties", {})
        required = set(schema.get("required", []))
        if props:
            lines += ["| parameter | type | required | default | description |", "|---|---|---|---|---|"]
            for name, prop in props.items():
                default = _code(json.dumps(prop["default"])) if "default" in prop else ""
                lines.append(f"| `{name}` | {_cell(_schema_type(prop))} | {'yes' if name in required else ''} | "
                             f"{default} | {_cell(prop.get('description', ''))} |")
            lines.append("")
        else:
            lines += ["No parameters.", ""]
        for rule in ("oneOf", "anyOf", "allOf"):
            if rule in schema:
                lines += [f"The parameters must match {rule} of: "
                          + "; ".join(_code(json.dumps(s, sort_keys=True)) for s in schema[rule]), ""]
    return "\n".join(lines)


# -- event types ----------------------------------------------------------------------------


@dataclass
class EventType:
    type: str
    declared: str
    description: str = ""
    payload: list[str] = field(default_factory=list)
    sources: set[str] = field(default_factory=set)


#: Where event types are declared: module -> the names of its constants (a str, or a tuple of
#: them). The emitting places are found by :func:`_emit_sites`; these give names and words.
DECLARED = {
    "slurmtower.models.event": ("NODE_STATE", "SENSOR_UP", "SENSOR_DOWN", "SENSOR_TRIGGERED", "SECURITY",
                                "REQUEST_CREATED", "REQUEST_APPROVED", "REQUEST_FAILED", "REQUEST_DENIED",
                                "REQUEST_WITHDRAWN", "REQUEST_EXPIRED"),
    "slurmtower.actions.breaker": ("TRIPPED", "OVERRIDDEN"),
    "slurmtower.actions.maintain": ("TYPES",),
    "slurmtower.events.alerts": ("ALERT_FIRING", "ALERT_RESOLVED"),
}


def _module_constant_docs(module: Any) -> dict[str, str]:
    """Docstrings under, and ``#:`` comments above, the module-level constants of ``module``."""
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError):
        return {}
    tree = ast.parse(source)
    out: dict[str, str] = {}
    lines = source.splitlines()
    body = tree.body
    for node, after in zip(body, [*body[1:], None], strict=True):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            name = node.target.id
        else:
            continue
        if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str):
            out[name] = _prose(after.value.value)
            continue
        comments = []
        i = node.lineno - 2
        while i >= 0 and lines[i].strip().startswith("#:"):
            comments.insert(0, lines[i].strip()[2:].strip())
            i -= 1
        if comments:
            out[name] = " ".join(comments)
    return out


def _module_bullets(module: Any) -> dict[str, str]:
    """``- ``type``: words`` bullets of a module docstring (models/event.py lists its types so)."""
    out: dict[str, str] = {}
    for m in re.finditer(r"^- ``([\w.]+)``(?: / ``\.(\w+)``)*[^:]*: (.+?)(?=^- |\Z)", module.__doc__ or "",
                         re.M | re.S):
        out[m.group(1)] = " ".join(_prose(m.group(3)).split())
    return out


@dataclass
class EmitSite:
    """One place that records events: its type expression resolved to types or a pattern."""

    module: str
    function: str
    types: list[str]
    pattern: str | None
    payload: list[str]
    source: str | None
    via_param: bool = False


def _dict_keys(node: ast.AST | None) -> list[str]:
    if isinstance(node, ast.Dict):
        keys = []
        for k, v in zip(node.keys, node.values, strict=True):
            if isinstance(k, ast.Constant) and isinstance(k.value, str):
                keys.append(k.value)
            elif k is None:  # {**other, ...}: its keys, or "..." when they are not literal
                keys += _dict_keys(v) or ["..."]
        return keys
    return []


def _keys_in(func: ast.AST, value: ast.AST | None) -> list[str]:
    """The keys a payload expression has: a dict literal, or a name assigned one in ``func``
    (with the keys set on it afterwards)."""
    if isinstance(value, ast.Dict):
        return _dict_keys(value)
    if isinstance(value, ast.Name):
        keys: list[str] = []
        for node in ast.walk(func):
            if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(t, ast.Name) and t.id == value.id:
                        keys += [k for k in _dict_keys(node.value) if k not in keys]
                    if (isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == value.id
                            and isinstance(t.slice, ast.Constant) and isinstance(t.slice.value, str)
                            and t.slice.value not in keys):
                        keys.append(t.slice.value)
        return keys
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "model_dump":
        return ["<model>"]
    return []


def _resolve(module: Any, expr: ast.AST) -> tuple[list[str], str | None]:
    """The event types an expression stands for, and a glob when only its prefix is known."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return [expr.value], None
    if isinstance(expr, ast.Name):
        value = getattr(module, expr.id, None)
        if isinstance(value, str):
            return [value], None
        return [], None
    if isinstance(expr, ast.IfExp):
        a, pa = _resolve(module, expr.body)
        b, pb = _resolve(module, expr.orelse)
        return a + b, pa or pb
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        prefix, _ = _resolve(module, expr.left)
        return [], (prefix[0] + "*") if prefix else None
    if isinstance(expr, ast.JoinedStr):
        head = expr.values[0] if expr.values else None
        if isinstance(head, ast.Constant) and isinstance(head.value, str):
            return [], head.value + "*"
    return [], None


def _emit_sites() -> list[EmitSite]:
    """Every place under ``src/slurmtower`` that makes an :class:`~slurmtower.models.event.Event`
    with a type of its own (``Event(type=...)``), or hands one to a helper that does
    (``record_event(TYPE, payload)``, ``self._event(TYPE, ...)``): found in the source, so a new
    event type is listed without anyone adding it here."""
    sites: list[EmitSite] = []
    helpers: dict[str, tuple[int, list[str]]] = {}  # helper name -> (type arg position, payload keys)
    calls: list[tuple[Any, str, ast.Call, ast.AST]] = []
    for path in sorted((SRC / "slurmtower").rglob("*.py")):
        modname = ".".join(path.relative_to(SRC).with_suffix("").parts)
        if modname.endswith("__init__"):
            modname = modname.rsplit(".", 1)[0]
        text = path.read_text()
        if "Event(" not in text and "record_event(" not in text and "_event(" not in text:
            continue
        tree = ast.parse(text)
        module = importlib.import_module(modname)
        for func in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]:
            params = [a.arg for a in func.args.args]
            for call in [n for n in ast.walk(func) if isinstance(n, ast.Call)]:
                name = call.func.id if isinstance(call.func, ast.Name) else (
                    call.func.attr if isinstance(call.func, ast.Attribute) else "")
                if name != "Event":
                    calls.append((module, func.name, call, func))
                    continue
                kw = {k.arg: k.value for k in call.keywords if k.arg}
                if "type" not in kw:
                    continue
                source = kw.get("source")
                src_text = source.value if isinstance(source, ast.Constant) else None
                type_expr = kw["type"]
                if isinstance(type_expr, ast.Name) and type_expr.id in params:
                    # a helper: its callers name the type (and maybe the payload)
                    payload = kw.get("payload")
                    keys = _keys_in(func, payload)
                    pos = params.index(type_expr.id) - (1 if params and params[0] == "self" else 0)
                    if isinstance(payload, ast.Name) and payload.id in params:
                        keys = [f"<arg:{params.index(payload.id) - (1 if params[0] == 'self' else 0)}>"]
                    helpers[func.name] = (pos, keys)
                    continue
                types, pattern = _resolve(module, type_expr)
                if not types and pattern is None:
                    continue  # a row read back from the store: no type of its own
                sites.append(EmitSite(modname, func.name, types, pattern, _keys_in(func, kw.get("payload")), src_text))
    for module, fname, call, func in calls:
        name = call.func.id if isinstance(call.func, ast.Name) else call.func.attr  # type: ignore[union-attr]
        if name not in helpers:
            continue
        pos, keys = helpers[name]
        if pos >= len(call.args):
            continue
        types, pattern = _resolve(module, call.args[pos])
        if not types and pattern is None:
            continue
        if keys and keys[0].startswith("<arg:"):
            at = int(keys[0][5:-1])
            keys = _keys_in(func, call.args[at]) if at < len(call.args) else []
        sites.append(EmitSite(module.__name__, fname, types, pattern, keys, None, via_param=True))
    return sites


def event_types() -> list[EventType]:
    """Every event type: those declared (:data:`DECLARED`) and those the code records
    (:func:`_emit_sites`), each with its words and its payload's keys."""
    from slurmtower.actions import jobs
    from slurmtower.models import event as event_mod
    from slurmtower.models.event import NodeTransition

    found: dict[str, EventType] = {}
    for modname, names in DECLARED.items():
        module = importlib.import_module(modname)
        words = {**_module_bullets(module), **_module_constant_docs(module)}
        for name in names:
            value = getattr(module, name)
            for t in (value,) if isinstance(value, str) else value:
                found.setdefault(t, EventType(t, f"{modname}.{name}", words.get(name) or words.get(t, "")))
    sites = _emit_sites()
    # A type known only by its prefix (f"slurmtower.job.{outcome}"): its members from the code.
    members = {"slurmtower.job.*": sorted({*jobs._DONE.values(), "refused", "gone"})}
    for site in sites:
        concrete = list(site.types)
        if site.pattern:
            expanded = [t for t in found if t.startswith(site.pattern[:-1])]
            concrete += expanded or [site.pattern[:-1] + m for m in members.get(site.pattern, [])]
        for t in concrete:
            entry = found.setdefault(t, EventType(t, f"{site.module}.{site.function}"))
            entry.payload += [k for k in site.payload if k not in entry.payload]
            if site.source:
                entry.sources.add(site.source)
    node_state = found[event_mod.NODE_STATE]
    node_state.payload = list(NodeTransition.model_fields)
    for entry in found.values():
        entry.payload = [k for k in entry.payload if k != "<model>"]
    job_words = ("A job action's outcome for some of its jobs (one event per outcome of a call): the action, "
                 "who, through what, the execution and the jobs.")
    for t, entry in found.items():
        if t.startswith("slurmtower.job.") and not entry.description:
            entry.description = job_words
        if t.startswith("slurmtower.maintain.") and not entry.description:
            entry.description = f"One step of a maintenance run (`slurm.node.maintain`): {t.rsplit('.', 1)[1]}."
    return sorted(found.values(), key=lambda e: e.type)


def _render_events() -> str:
    from slurmtower.models import event as event_mod
    from slurmtower.models.event import Event, NodeTransition

    items = event_types()
    lines = ["# Event types reference", "",
             "Every event type slurmtower records in its event log, generated at build time from where the "
             "code declares and records them (`slurmtower/models/event.py` and the modules named below). Events "
             "are what `GET /events`, `GET /events/stream`, `slurmtower events` and the dashboard's feed show, "
             "and what rules match on ([Node events and rules](../rules.md)).", "",
             "## The event", "", _prose(event_mod.__doc__).split("\n\n")[0], "",
             "| field | type | description |", "|---|---|---|"]
    from slurmtower.deploy.conffile import field_docs

    docs = field_docs(Event)
    for name, info in Event.model_fields.items():
        lines.append(f"| `{name}` | {_cell(_type_name(info.annotation))} | {_cell(_prose(docs.get(name, '')))} |")
    lines += ["", "The payload of a `slurm.node.state` event is a node transition:", "",
              _prose(NodeTransition.__doc__), "", "| field | type |", "|---|---|"]
    for name, info in NodeTransition.model_fields.items():
        lines.append(f"| `{name}` | {_cell(_type_name(info.annotation))} |")
    lines += ["", "## Types", "", "| type | payload keys | declared or recorded in |", "|---|---|---|"]
    for e in items:
        keys = ", ".join(f"`{k}`" for k in e.payload) or "(none)"
        lines.append(f"| [`{e.type}`](#{_anchor(e.type)}) | {keys} | `{e.declared}` |")
    lines.append("")
    for e in items:
        lines += [f"### `{e.type}`", ""]
        if e.description:
            lines += [e.description, ""]
        lines += [f"Payload: {', '.join(f'`{k}`' for k in e.payload) or 'none'}."
                  + (f" Source: {', '.join(f'`{s}`' for s in sorted(e.sources))}." if e.sources else ""), ""]
    lines += ["## On the event stream only", "",
              "`GET /events/stream` (server-sent events) ends with one `slurmtower.stream.ended` event "
              "(`{\"reason\": ...}`) when the session or credential behind it ends; it is not stored.", ""]
    return "\n".join(lines)


# -- metrics --------------------------------------------------------------------------------

METRIC_MODULES = ("slurmtower.runtime.metrics", "slurmtower.events.forward")
_METRIC_KINDS = {"GaugeMetricFamily": "gauge", "CounterMetricFamily": "counter", "Gauge": "gauge",
                 "Histogram": "histogram", "PromCounter": "counter", "Counter": "counter", "Summary": "summary"}


def metric_families() -> list[dict[str, Any]]:
    """Every metric family created in :data:`METRIC_MODULES` (read from their source: the
    collectors need a running service), with its kind, help and labels."""
    out: dict[str, dict[str, Any]] = {}
    for modname in METRIC_MODULES:
        module = importlib.import_module(modname)
        tree = ast.parse(inspect.getsource(module))
        for call in [n for n in ast.walk(tree) if isinstance(n, ast.Call)]:
            name = call.func.id if isinstance(call.func, ast.Name) else (
                call.func.attr if isinstance(call.func, ast.Attribute) else "")
            if name not in _METRIC_KINDS or not call.args:
                continue
            first = call.args[0]
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                continue
            help_expr = call.args[1] if len(call.args) > 1 else next(
                (k.value for k in call.keywords if k.arg in ("documentation", "help")), None)
            help_text = ""
            if isinstance(help_expr, ast.Constant):
                help_text = str(help_expr.value)
            elif isinstance(help_expr, ast.Name):
                help_text = str(getattr(module, help_expr.id, ""))
            elif help_expr is not None:
                try:
                    help_text = str(ast.literal_eval(help_expr))
                except ValueError:
                    help_text = ""
            labels: list[str] = []
            for k in call.keywords:
                if k.arg in ("labels", "labelnames"):
                    try:
                        labels = list(ast.literal_eval(k.value))
                    except ValueError:
                        labels = ["..."]
            kind = _METRIC_KINDS[name]
            entry = out.setdefault(first.value, {"name": first.value, "kind": kind, "help": help_text,
                                                 "labels": labels, "module": modname})
            entry["help"] = entry["help"] or help_text
            entry["labels"] = entry["labels"] or labels
    return sorted(out.values(), key=lambda m: m["name"])


def _render_metrics() -> str:
    from slurmtower.runtime import metrics as mod

    items = metric_families()
    lines = ["# Metrics reference", "",
             "Every metric family of `GET /metrics` (Prometheus text), generated at build time from "
             "`slurmtower/runtime/metrics.py` and the modules that count on their own. A counter `x` is "
             "exposed as `x_total` (and `x_created`); a histogram as `x_bucket`, `x_sum` and `x_count`. Every "
             "cluster gauge is labelled `cluster=\"...\"` where several clusters are served.", "",
             "## How they are collected", "", _prose(mod.__doc__), "",
             "## Families", "", "| metric | kind | labels | help | from |", "|---|---|---|---|---|"]
    for m in items:
        labels = ", ".join(f"`{label}`" for label in m["labels"])
        lines.append(f"| `{m['name']}` | {m['kind']} | {labels} | {_cell(m['help'])} | `{m['module']}` |")
    lines += ["", "A Grafana dashboard over these: [grafana-dashboard.json](../grafana-dashboard.json) "
              "([Deploying](../deployment.md#5-prometheus-and-grafana)).", ""]
    return "\n".join(lines)


# -- the layer picture ----------------------------------------------------------------------


def import_contracts() -> list[dict[str, Any]]:
    """The import-linter contracts of ``pyproject.toml``."""
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts: list[dict[str, Any]] = data["tool"]["importlinter"]["contracts"]
    return contracts


def layers_picture() -> str:
    """The layers contract drawn as a stack of boxes (top imports bottom), then the other
    contracts as a table: what ``lint-imports`` checks, as Markdown."""
    contracts = import_contracts()
    layered = next(c for c in contracts if c["type"] == "layers")
    rows = []
    for layer in layered["layers"]:
        sep = " | " if "|" in layer else " : "
        names = [n.strip().removeprefix("slurmtower.") for n in re.split(r"[|:]", layer)]
        rows.append((sep.join(names), "independent" if "|" in layer else ("may import each other" if ":" in layer
                                                                             else "")))
    texts = [f" {names}" + (f"   ({note})" if note else "") for names, note in rows]
    width = max(len(t) for t in texts) + 2
    out = ["```text", f"{layered['name']}", "┌" + "─" * width + "┐"]
    for i, text in enumerate(texts):
        out.append("│" + text.ljust(width) + "│")
        out.append(("├" + "─" * width + "┤") if i < len(rows) - 1 else ("└" + "─" * width + "┘"))
    out += ["  each box imports only from the boxes below it", "```", "",
            "| contract | modules | may not import |", "|---|---|---|"]
    for c in contracts:
        if c["type"] == "forbidden":
            src = ", ".join(f"`{m.removeprefix('slurmtower.')}`" for m in c["source_modules"])
            bad = ", ".join(f"`{m.removeprefix('slurmtower.')}`" for m in c["forbidden_modules"])
            out.append(f"| {_cell(c['name'])} | {src} | {bad} |")
    return "\n".join(out)


#: Markers in hand-written pages, replaced by generated text when the site is built.
GENERATED_BLOCKS: dict[str, Callable[[], str]] = {"<!-- generated: layers -->": layers_picture}


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs hook: the generated blocks of a hand-written page filled in."""
    for marker, render in GENERATED_BLOCKS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, render())
    return markdown


# -- the pages and the hook -----------------------------------------------------------------

PAGES: dict[str, Callable[[], str]] = {
    "reference/cli.md": _render_cli,
    "reference/settings.md": _render_settings,
    "reference/api.md": _render_api,
    "reference/actions.md": _render_actions,
    "reference/events.md": _render_events,
    "reference/metrics.md": _render_metrics,
}


def pages() -> Iterator[tuple[str, str]]:
    """(path under docs/, Markdown) of every generated page."""
    for path, render in PAGES.items():
        yield path, render()


def on_files(files: Any, config: Any) -> Any:
    """MkDocs hook: the generated reference pages join the site's files."""
    from mkdocs.structure.files import File

    for path, text in pages():
        files.append(File.generated(config, path, content=text))
    return files


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "build/docs-reference")
    for rel, text in pages():
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        print(target)
