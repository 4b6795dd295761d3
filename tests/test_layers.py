"""The house's rules, checked: the import layers (import-linter's contracts in pyproject.toml),
no module reaching into another package's private names, imports inside functions only where
deferred on purpose (and saying why), and every package declaring what it exports."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "slurmtower"
ROOT = SRC.parents[1]


def _modules() -> list[tuple[Path, ast.Module, list[str]]]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        text = path.read_text()
        out.append((path, ast.parse(text), text.splitlines()))
    return out


def _package(path: Path) -> str:
    rel = path.relative_to(SRC).parts
    return rel[0].removesuffix(".py") if rel else ""


def test_the_import_contracts_hold() -> None:
    linter = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(linter), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_no_package_imports_another_packages_private_names() -> None:
    found = []
    for path, tree, _lines in _modules():
        mine = _package(path)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("slurmtower."):
                theirs = node.module.split(".")[1]
                private = [a.name for a in node.names if a.name.startswith("_") and a.name != "__version__"]
                if theirs != mine and private:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.module} {private}")
    assert found == []


def test_imports_inside_functions_say_why_they_are_deferred() -> None:
    found = []
    for path, tree, lines in _modules():
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(func):
                if isinstance(node, ast.Import | ast.ImportFrom) and "# deferred:" not in lines[node.lineno - 1]:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert sorted(set(found)) == []


def test_every_package_declares_its_exports() -> None:
    missing = [str(init.relative_to(ROOT)) for init in sorted(SRC.rglob("__init__.py"))
               if "migrations" not in init.parts and init.read_text().strip()
               and "__all__" not in init.read_text()]
    assert missing == []


def test_the_public_surface_loads_each_name_it_declares() -> None:
    import slurmtower

    missing = [name for name in slurmtower.__all__ if getattr(slurmtower, name, None) is None]
    assert missing == []


def test_the_action_index_names_each_action_where_its_module_registers_it() -> None:
    """``slurmtower run`` imports the one module of the action it runs (registry.ACTION_MODULES):
    the index must name every registered action, at the module that registers it."""
    import importlib

    from slurmtower.actions.registry import ACTION_MODULES, REGISTRY

    for module in sorted(set(ACTION_MODULES.values())):
        importlib.import_module(module)
    registered = REGISTRY.registered()
    assert sorted(registered) == sorted(ACTION_MODULES)
    assert {name: spec.run.__module__ for name, spec in registered.items()} == ACTION_MODULES
    # and a one-off run of one read action loads its module alone, not the others
    probe = subprocess.run([sys.executable, "-c", "import sys\n"
                            "from slurmtower.actions import REGISTRY\n"
                            "REGISTRY['slurm.node.get']\n"
                            "print(sorted(m for m in sys.modules if m.startswith('slurmtower.actions.') and "
                            "m.rsplit('.', 1)[1] in ('jobs', 'why', 'maintain')))"],
                           capture_output=True, text=True, check=True, timeout=60)
    assert probe.stdout.strip() == "[]", probe.stdout
