"""Rendering of rule action parameters with Jinja2 in a sandbox.

Rule files are data written by administrators, but the values they template come from
events, and events come from Slurm (node names, reasons typed by any operator with
``scontrol``). Templates therefore run in Jinja2's :class:`ImmutableSandboxedEnvironment`
(no attribute access to dunder names, no mutation of context objects) with
:class:`StrictUndefined` (a typo is an error, not an empty string).

A string that is exactly one expression (``"{{ trigger.nodes }}"``) renders to the
expression's native value (a list stays a list, a number a number); any other string
renders to a string. Dicts and lists are rendered recursively.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from jinja2 import StrictUndefined, TemplateError, Undefined
from jinja2.sandbox import ImmutableSandboxedEnvironment

from slurmtower.errors import InvalidInput
from slurmtower.nodeset import NodeSet

__all__ = ["RenderError", "compile_templates", "make_environment", "render_value"]

_SINGLE_EXPR = re.compile(r"^\s*\{\{(?P<expr>.*)\}\}\s*$", re.DOTALL)


class RenderError(Exception):
    """A template failed to render (undefined name, sandbox refusal, bad filter input).

    Internal to the rules engine: it records the failure as the run's outcome.
    """


def _nodeset(value: Any) -> str:
    if isinstance(value, str):
        return str(NodeSet(value))
    if isinstance(value, Iterable):
        return str(NodeSet([str(v) for v in value]))
    return str(NodeSet(str(value)))


def make_environment() -> ImmutableSandboxedEnvironment:
    """The sandboxed Jinja2 environment rules render with (adds a ``nodeset`` filter)."""
    env = ImmutableSandboxedEnvironment(undefined=StrictUndefined, autoescape=False)
    env.filters["nodeset"] = _nodeset
    return env


def _single_expression(text: str) -> str | None:
    match = _SINGLE_EXPR.match(text)
    if match is None:
        return None
    expr = match.group("expr")
    # "{{ a }} and {{ b }}" also matches the pattern; it is not one expression.
    if "{{" in expr or "}}" in expr:
        return None
    return expr.strip()


def compile_templates(value: Any, env: ImmutableSandboxedEnvironment, *, param: str) -> None:
    """Compile every template in ``value`` once, so syntax errors are found at load time.

    Raises :class:`InvalidInput` naming the parameter.
    """
    if isinstance(value, str):
        try:
            expr = _single_expression(value)
            if expr is not None:
                env.compile_expression(expr)
            else:
                env.from_string(value)
        except TemplateError as exc:
            raise InvalidInput(f"template error in {param}: {exc}", param=param) from exc
    elif isinstance(value, Mapping):
        for key, item in value.items():
            compile_templates(item, env, param=f"{param}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            compile_templates(item, env, param=f"{param}[{i}]")


def render_value(value: Any, context: Mapping[str, Any], env: ImmutableSandboxedEnvironment) -> Any:
    """Render every string in ``value`` against ``context``; raises :class:`RenderError`."""
    if isinstance(value, str):
        if "{{" not in value and "{%" not in value:
            return value
        try:
            expr = _single_expression(value)
            if expr is not None:
                fn: Callable[..., Any] = env.compile_expression(expr, undefined_to_none=False)
                result = fn(**context)
                if isinstance(result, Undefined):
                    str(result)  # StrictUndefined raises here
                return result
            return env.from_string(value).render(**context)
        except TemplateError as exc:
            raise RenderError(f"{type(exc).__name__}: {exc}") from exc
        except (TypeError, ValueError, AttributeError, LookupError, InvalidInput) as exc:
            raise RenderError(f"{type(exc).__name__}: {exc}") from exc
    if isinstance(value, Mapping):
        return {str(k): render_value(v, context, env) for k, v in value.items()}
    if isinstance(value, list):
        return [render_value(v, context, env) for v in value]
    return value
