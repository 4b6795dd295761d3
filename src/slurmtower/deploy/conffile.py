"""A commented ``slurmtower.toml`` generated from the settings' own schema: every section and
key of :class:`~slurmtower.settings.Settings` with its description (the attribute docstrings)
and default, the values ``slurmtower init`` found set, the others commented out."""

from __future__ import annotations

import ast
import functools
import inspect
import json
import re
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from slurmtower.settings import Settings

__all__ = ["field_docs", "render_config", "toml_value"]

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


@functools.cache
def field_docs(model: type[BaseModel]) -> dict[str, str]:
    """``{field: docstring}`` of ``model``'s attributes (the string under each annotated
    field, as the settings module documents them), read from its source."""
    docs: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or cls is BaseModel:
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, after in zip(body, [*body[1:], None], strict=True):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)):
                docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs


def toml_value(value: Any) -> str:
    """``value`` as a TOML value (strings, paths, numbers, booleans, lists, inline tables).

    Raises:
        TypeError: a value TOML cannot hold (None, a model).
    """
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str | Path):
        return json.dumps(str(value))  # JSON's escapes are TOML basic-string escapes
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        items = (f"{k if _BARE_KEY.match(k) else json.dumps(k)} = {toml_value(v)}" for k, v in value.items())
        return "{ " + ", ".join(items) + " }" if value else "{}"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def _default(info: FieldInfo) -> Any:
    if info.default_factory is not None:
        return info.default_factory()  # type: ignore[call-arg]
    return None if info.default is PydanticUndefined else info.default


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _comment(text: str, width: int = 96) -> list[str]:
    plain = text.replace("``", "`")
    lines: list[str] = []
    for para in plain.split("\n\n"):
        lines += textwrap.wrap(" ".join(para.split()), width - 2, break_on_hyphens=False) or [""]
    return [f"# {line}".rstrip() for line in lines]


def _field_lines(key: str, info: FieldInfo, doc: str | None, values: Mapping[str, Any], name: str) -> list[str]:
    out = _comment(doc) if doc else []
    if key in values:
        out.append(f"{name} = {toml_value(values[key])}")
        return out
    default = _default(info)
    if isinstance(default, BaseModel) or (isinstance(default, list) and default and isinstance(default[0], BaseModel)):
        return []
    if default is None:
        out.append(f"# {name} =   (unset)")
    elif default == [] and "[" in str(info.annotation) and "BaseModel" not in str(info.annotation):
        out.append(f"# {name} = []")
    else:
        try:
            out.append(f"# {name} = {toml_value(default)}")
        except TypeError:
            out.append(f"# {name} =   (unset)")
    return out


def _section(model: type[BaseModel], prefix: str, values: Mapping[str, Any]) -> list[str]:
    """The lines of one section: its scalar keys, then its sub-sections."""
    docs = field_docs(model)
    lines: list[str] = []
    subsections: list[str] = []
    for name, info in model.model_fields.items():
        key = f"{prefix}{name}"
        annotation = info.annotation
        if _is_model(annotation):
            assert isinstance(annotation, type)
            subsections += ["", f"[{key}]", *(_comment(docs[name]) if name in docs else []),
                            *_section(annotation, key + ".", values)]
            continue
        text = str(annotation)
        if "OidcSettings" in text:
            subsections += ["", f"# [{key}]   single sign-on (OpenID Connect): docs/how-to/sign-on.md"]
            continue
        if "TokenEntry" in text:
            subsections += ["", f"# [[{key}]]   one per token: `slurmtower token create` prints the entry"]
            continue
        if "ForwardTarget" in text:
            subsections += ["", f"# [[{key}]]   one per receiver of forwarded events: docs/how-to/events.md, "
                                "\"Alerts in and out\""]
            continue
        lines += ["", *_field_lines(key, info, docs.get(name), values, name)]
    return lines + subsections


def render_config(values: Mapping[str, Any], *, header: str = "") -> str:
    """The whole configuration file: ``values`` (dotted keys, ``"api.port"``) set, every other
    key of the schema commented out at its default, each under its description.

    Raises:
        KeyError: a key of ``values`` the settings do not have.
    """
    _check_keys(values)
    lines = [*_comment(header)] if header else []
    lines += _section(Settings, "", values)
    return "\n".join(lines).lstrip("\n") + "\n"


def _check_keys(values: Mapping[str, Any]) -> None:
    for key in values:
        model: type[BaseModel] = Settings
        *parents, leaf = key.split(".")
        for part in parents:
            info = model.model_fields.get(part)
            if info is None or not _is_model(info.annotation):
                raise KeyError(key)
            model = info.annotation  # type: ignore[assignment]
        if leaf not in model.model_fields:
            raise KeyError(key)
