"""slurmtower.rules: StackStorm-shaped rules (trigger, criteria, templated action) and their engine."""

from __future__ import annotations

from slurmtower.rules.builtin import WebhookOptions, run_command, run_webhook, webhook_signature
from slurmtower.rules.criteria import OPERATORS
from slurmtower.rules.engine import BUILTIN_ACTIONS, Dispatcher, RuleEngine
from slurmtower.rules.model import (
    ActionSpec,
    Criterion,
    RateLimit,
    Rule,
    RuleLoadError,
    TriggerSpec,
    load_rule_file,
    load_rules,
    parse_rule,
)

__all__ = [
    "BUILTIN_ACTIONS",
    "OPERATORS",
    "ActionSpec",
    "Criterion",
    "Dispatcher",
    "RateLimit",
    "Rule",
    "RuleEngine",
    "RuleLoadError",
    "TriggerSpec",
    "WebhookOptions",
    "load_rule_file",
    "load_rules",
    "parse_rule",
    "run_command",
    "run_webhook",
    "webhook_signature",
]
