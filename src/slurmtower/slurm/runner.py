"""The one place where slurmtower starts a subprocess.

Every Slurm command goes through :class:`CommandRunner`: argv lists only (never a
shell), always a timeout, stderr captured and turned into a typed error that carries
argv, return code and Slurm's own message.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from slurmtower.errors import SlurmError, SlurmRequestError, SlurmTimeout, SlurmUnavailable

__all__ = ["CallObserver", "CommandResult", "CommandRunner", "classify_failure"]

#: Called after every command with (kind, seconds, ok). ``kind`` is the command name plus
#: its first sub-command word (``scontrol show``, ``sinfo``), for metrics on controller load.
CallObserver = Callable[[str, float, bool], None]

# Messages by which Slurm's clients say the controller (or slurmdbd) could not be reached,
# e.g. "slurm_load_node error: Unable to contact slurm controller (connect failure)".
_UNAVAILABLE_MARKERS = (
    "unable to contact",
    "connection refused",
    "socket timed out",
    "zero bytes were transmitted",
    "unable to establish a connection",
    "communication connection failure",
)


@dataclass(frozen=True)
class CommandResult:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float


def classify_failure(argv: Sequence[str], returncode: int, stderr: str) -> SlurmError:
    """Turn a failed command into the right :class:`SlurmError` subclass."""
    message = " ".join(line.strip() for line in stderr.strip().splitlines() if line.strip())
    if not message:
        message = f"{argv[0]} exited with status {returncode}"
    low = message.lower()
    unavailable = any(m in low for m in _UNAVAILABLE_MARKERS)
    cls: type[SlurmError] = SlurmUnavailable if unavailable else SlurmRequestError
    return cls(message, argv=list(argv), returncode=returncode, stderr=stderr)


def _kind(argv: Sequence[str]) -> str:
    name = os.path.basename(argv[0])
    if name == "runuser" and "--" in argv:
        return _kind(argv[list(argv).index("--") + 1 :])
    if name in {"scontrol", "sacctmgr"}:
        words = [a for a in argv[1:] if not a.startswith("-")]
        return f"{name} {words[0]}" if words else name
    return name


@dataclass
class CommandRunner:
    """Runs commands with a timeout and turns failures into typed errors.

    ``env`` is added to the current environment (e.g. ``SLURM_CONF``).
    """

    timeout: float = 30.0
    env: Mapping[str, str] = field(default_factory=dict)
    observers: list[CallObserver] = field(default_factory=list)

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        as_user: str | None = None,
        input: str | None = None,
        check: bool = True,
    ) -> CommandResult:
        """Run ``argv``; raise :class:`SlurmError` subclasses on failure when ``check``.

        ``as_user`` runs the command as that user (``runuser``; requires root unless we
        already are that user), e.g. ``strigger --set`` which only SlurmUser may call.
        """
        if isinstance(argv, str):  # pragma: no cover - programming error
            raise TypeError("argv must be a list, never a shell string")
        full = [str(a) for a in argv]
        if as_user is not None and pwd.getpwuid(os.geteuid()).pw_name != as_user:
            if os.geteuid() != 0:
                raise SlurmRequestError(
                    f"running {full[0]} as {as_user} needs root", argv=full, returncode=None
                )
            full = ["runuser", "-u", as_user, "--", *full]
        # SLURM_BITSTR_LEN=0: squeue and scontrol print an array's task list whole (past 64
        # characters they cut it with "...", and the jobs a record stands for cannot be counted).
        env = {**os.environ, "SLURM_BITSTR_LEN": "0", **self.env}
        limit = self.timeout if timeout is None else timeout
        started = time.monotonic()
        ok = False
        try:
            proc = subprocess.run(  # noqa: S603 - argv list, no shell
                full,
                input=input,
                capture_output=True,
                text=True,
                timeout=limit,
                env=env,
                check=False,
                cwd="/",
            )
            ok = proc.returncode == 0
        except subprocess.TimeoutExpired as exc:
            raise SlurmTimeout(
                f"{full[0]} did not finish within {limit:g} s", argv=full, returncode=None
            ) from exc
        except FileNotFoundError as exc:
            raise SlurmUnavailable(
                f"{full[0]} is not installed or not on PATH", argv=full, returncode=None
            ) from exc
        finally:
            seconds = time.monotonic() - started
            kind = _kind(full)
            for observer in self.observers:
                observer(kind, seconds, ok)
        result = CommandResult(full, proc.returncode, proc.stdout, proc.stderr, seconds)
        if check and not ok:
            raise classify_failure(full, proc.returncode, proc.stderr or proc.stdout)
        return result
