from __future__ import annotations

import pytest

from slurmtower.errors import SlurmRequestError, SlurmTimeout, SlurmUnavailable
from slurmtower.slurm.runner import CommandRunner, classify_failure


def test_timeout_is_a_typed_error_carrying_argv() -> None:
    calls: list[tuple[str, bool]] = []
    runner = CommandRunner(timeout=0.3, observers=[lambda kind, _s, ok: calls.append((kind, ok))])
    with pytest.raises(SlurmTimeout) as exc:
        runner.run(["sleep", "5"])
    assert exc.value.argv == ["sleep", "5"]
    assert calls == [("sleep", False)]


def test_failure_carries_return_code_and_stderr() -> None:
    with pytest.raises(SlurmRequestError) as exc:
        CommandRunner().run(["sh", "-c", "echo 'Invalid node name specified' >&2; exit 1"])
    assert exc.value.returncode == 1
    assert "Invalid node name specified" in exc.value.message


def test_missing_binary_is_unavailable() -> None:
    with pytest.raises(SlurmUnavailable, match="not installed"):
        CommandRunner().run(["no-such-slurm-command"])


def test_a_shell_string_is_refused() -> None:
    with pytest.raises(TypeError):
        CommandRunner().run("sinfo -N")  # type: ignore[arg-type]


def test_controller_unreachable_is_classified() -> None:
    err = classify_failure(["sinfo"], 1, "slurm_load_partitions: Unable to contact slurm controller (connect failure)")
    assert isinstance(err, SlurmUnavailable)
    assert isinstance(classify_failure(["scontrol"], 1, "Invalid node state specified"), SlurmRequestError)
