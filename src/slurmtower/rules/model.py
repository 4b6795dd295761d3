"""Rules as data: StackStorm-shaped YAML files, one rule per file, loaded and validated.

::

    name: drain_down_nodes
    description: Keep a node that went down out of scheduling until an admin looks.
    enabled: true
    trigger:
      type: slurm.node.state
    criteria:
      trigger.state: {type: equals, pattern: DOWN}
      trigger.node: {type: regex, pattern: '^n[0-9]+$'}
    action:
      ref: slurm.node.drain
      parameters:
        nodes: "{{ trigger.node }}"
        reason: "slurmtower: went down ({{ trigger.reason | default('no reason') }})"
    rate_limit: {max_runs: 3, per_seconds: 3600}
    cooldown_seconds: 600
    cooldown_per_node: true

A criteria key may also hold a *list* of criteria, all of which must hold. See
``docs/rules.md`` for the whole format.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from slurmtower.errors import ConfigError, InvalidInput
from slurmtower.rules.criteria import check_pattern, evaluate, lookup
from slurmtower.rules.render import compile_templates, make_environment

__all__ = [
    "ActionSpec",
    "Criterion",
    "RateLimit",
    "Rule",
    "RuleLoadError",
    "TriggerSpec",
    "load_rule_file",
    "load_rules",
    "parse_rule",
]

_NAME = re.compile(r"^[A-Za-z0-9_.:\-]{1,200}$")
_RULE_SUFFIXES = (".yaml", ".yml")
MAX_RULE_FILE_BYTES = 1024 * 1024


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TriggerSpec(_Strict):
    """Which events a rule looks at: an exact event type (``slurm.node.state``)."""

    type: str = Field(min_length=1)
    parameters: dict[str, Any] = Field(default_factory=dict)
    """Accepted for StackStorm compatibility; unused."""


class Criterion(_Strict):
    """One test: ``type`` is the operator, ``pattern`` its argument."""

    type: str
    pattern: Any = None
    _prepared: Any = PrivateAttr(default=None)
    _op: str = PrivateAttr(default="")

    def prepare(self, param: str) -> None:
        self._op, self._prepared = check_pattern(self.type, self.pattern, param=param)

    def holds(self, value: Any) -> bool:
        return evaluate(self._op, value, self._prepared)


class ActionSpec(_Strict):
    """What a matching rule does: an action reference and its templated parameters.

    ``webhook`` and ``command`` are built into the engine; anything else goes to the
    action catalogue (``slurm.node.drain``, ``slurm.trigger.set`` ...).
    """

    ref: str = Field(min_length=1)
    parameters: dict[str, Any] = Field(default_factory=dict)


class RateLimit(_Strict):
    """At most ``max_runs`` action runs in any ``per_seconds`` window.

    Global to the rule by default (what stops a flapping rack from draining half the
    cluster); ``per_node: true`` counts each node separately.
    """

    max_runs: int = Field(ge=1)
    per_seconds: float = Field(gt=0)
    per_node: bool = False


class Rule(_Strict):
    """A validated rule. Build with :func:`parse_rule` / :func:`load_rules`."""

    name: str
    description: str = ""
    enabled: bool = True
    pack: str | None = None
    """Accepted for StackStorm compatibility; unused."""
    tags: list[Any] = Field(default_factory=list)
    trigger: TriggerSpec
    criteria: dict[str, Criterion | list[Criterion]] = Field(default_factory=dict)
    action: ActionSpec
    rate_limit: RateLimit | None = None
    cooldown_seconds: float | None = Field(default=None, gt=0)
    cooldown_per_node: bool = False
    """Cooldown per node (``event.node``) instead of for the whole rule."""
    source_file: str | None = Field(default=None, exclude=True)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError("rule name must be 1-200 of [A-Za-z0-9_.:-]")
        return value

    def _prepare(self) -> None:
        for key, spec in self.criteria.items():
            if not key.startswith(("trigger.", "event.")):
                raise InvalidInput(
                    f"criteria key {key!r} must start with 'trigger.' or 'event.'", param=f"criteria.{key}"
                )
            for i, criterion in enumerate(spec if isinstance(spec, list) else [spec]):
                criterion.prepare(f"criteria.{key}" + (f"[{i}]" if isinstance(spec, list) else ""))
        compile_templates(self.action.parameters, make_environment(), param="action.parameters")

    def matches(self, event_type: str, context: Mapping[str, Any]) -> bool:
        """True if the rule is enabled, its trigger type is ``event_type`` and every
        criterion holds in ``context`` (``{"trigger": payload, "event": metadata}``)."""
        if not self.enabled or self.trigger.type != event_type:
            return False
        for key, spec in self.criteria.items():
            value = lookup(context, key)
            for criterion in spec if isinstance(spec, list) else [spec]:
                if not criterion.holds(value):
                    return False
        return True


@dataclass(frozen=True)
class RuleLoadError:
    """A rule file that did not load: which file, which rule (if its name was readable), why."""

    file: Path
    rule: str | None
    message: str

    def __str__(self) -> str:
        who = f" (rule {self.rule})" if self.rule else ""
        return f"{self.file}{who}: {self.message}"


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "rule"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


def parse_rule(data: Any, *, source: str | None = None) -> Rule:
    """Validate one rule document (criteria operators, regexes, templates included).

    Raises :class:`InvalidInput` with a message naming the bad key.
    """
    if not isinstance(data, Mapping):
        raise InvalidInput("a rule file must hold a mapping", param="rule")
    try:
        rule = Rule.model_validate({**data, "source_file": source})
    except ValidationError as exc:
        raise InvalidInput(_validation_message(exc), param="rule") from exc
    rule._prepare()
    return rule


def load_rule_file(path: str | os.PathLike[str]) -> Rule:
    """Load and validate one YAML rule file; raises :class:`InvalidInput` or :class:`ConfigError`."""
    p = Path(path)
    try:
        if p.stat().st_size > MAX_RULE_FILE_BYTES:
            raise InvalidInput(f"rule file larger than {MAX_RULE_FILE_BYTES} bytes", param="rule")
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read rule file {p}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise InvalidInput("rule file is not UTF-8", param="rule") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidInput(f"YAML does not parse: {exc}", param="rule") from exc
    return parse_rule(data, source=str(p))


def _name_of(path: Path) -> str | None:
    """The rule's name if the file is readable enough to tell, for error reports."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    if isinstance(data, Mapping) and isinstance(data.get("name"), str):
        return str(data["name"])
    return None


def load_rules(directory: str | os.PathLike[str]) -> tuple[list[Rule], list[RuleLoadError]]:
    """Load every ``*.yaml``/``*.yml`` file in ``directory`` (not recursive), by file name.

    A file that fails (bad YAML, unknown key, bad operator, regex or template, duplicate
    name) is reported as a :class:`RuleLoadError` with its file and rule name and does not
    stop the others. Disabled rules are loaded (and returned) but never match.

    Raises :class:`ConfigError` if ``directory`` is not a readable directory.
    """
    d = Path(directory)
    if not d.is_dir():
        raise ConfigError(f"rules directory {d} does not exist or is not a directory", key="events.rules_dir")
    try:
        files = sorted(p for p in d.iterdir() if p.suffix in _RULE_SUFFIXES and not p.name.startswith("."))
    except OSError as exc:
        raise ConfigError(f"cannot list rules directory {d}: {exc.strerror}", key="events.rules_dir") from exc
    rules: list[Rule] = []
    errors: list[RuleLoadError] = []
    seen: dict[str, Path] = {}
    for path in files:
        try:
            rule = load_rule_file(path)
        except (InvalidInput, ConfigError) as exc:
            errors.append(RuleLoadError(path, _name_of(path), exc.message))
            continue
        if rule.name in seen:
            message = f"duplicate rule name, already defined in {seen[rule.name]}"
            errors.append(RuleLoadError(path, rule.name, message))
            continue
        seen[rule.name] = path
        rules.append(rule)
    return rules, errors
