"""Import rules that keep the layers apart (checked in fresh interpreters, by what lands in sys.modules).

Readers and the analysis never import torch or textual; the viewer never imports torch nor the in-rank hooks
(torch alone costs about a second at start-up); recording never imports the viewer."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import pytest

from harness import REPO

def modules_under(*packages: str) -> list[str]:
    """Every module of these packages, found by walking them: a new module is covered without a list to edit."""
    out = []
    for name in packages:
        pkg = importlib.import_module(name)
        out += [name] + [m.name for m in pkgutil.walk_packages(pkg.__path__, name + ".")]
    return out


# Readers, analysis and commands: everything of disttrace.tracer but the recorder (record/, inside ranks)
HEADLESS = modules_under("disttrace.tracer.data", "disttrace.tracer.analysis", "disttrace.tracer.commands") + [
    "disttrace.tracer.format", "disttrace.tracer.errors", "disttrace.tracer.cli"]


@pytest.mark.slow  # (fresh interpreters)
def test_the_import_contracts_hold():
    """pyproject.toml's [tool.importlinter] contracts, checked statically on every module (import-linter)."""
    proc = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command; "
                           "lint_imports_command()"], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


def loaded_after_import(module: str) -> set[str]:
    code = f"import sys, {module}; print('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


# A fresh interpreter imports the headless modules in turn and stops at the first after which torch or textual is
# loaded: that one brought it in (each before it was clean). The rest go to the next fresh interpreter. A few
# interpreters for the hundred modules, not one a module: each costs Python's and numpy's start.
_IMPORT_UNTIL_ONE_LOADS = """import importlib, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
    loaded = [m for m in ("torch", "textual") if m in sys.modules]
    print(name, *loaded)
    if loaded:
        break
"""


@pytest.fixture(scope="module")
def headless_loads() -> dict[str, set[str]]:
    loads, left = {}, list(HEADLESS)
    while left:
        proc = subprocess.run([sys.executable, "-c", _IMPORT_UNTIL_ONE_LOADS, *left], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-3000:]
        for line in proc.stdout.splitlines():
            loads[line.split()[0]] = set(line.split()[1:])
        left = [m for m in left if m not in loads]
    return loads


@pytest.mark.slow  # (fresh interpreters)
@pytest.mark.parametrize("module", HEADLESS)
def test_readers_and_analysis_import_neither_torch_nor_textual(module, headless_loads):
    assert headless_loads[module] == set(), (module, headless_loads[module])


@pytest.mark.slow  # (fresh interpreters)
@pytest.mark.parametrize("module", ["disttrace.tui.app", "disttrace.tui.cli"])
def test_viewer_never_imports_torch_nor_the_hooks(module):
    mods = loaded_after_import(module)
    assert "torch" not in mods
    assert not any(m.startswith("disttrace.tracer.record") for m in mods)


@pytest.mark.slow  # (fresh interpreters)
def test_recording_never_imports_the_viewer():
    mods = loaded_after_import("disttrace.tracer.record.hooks")
    assert not any(m.startswith(("disttrace.tui", "textual", "disttrace.tracer.analysis")) for m in mods)


@pytest.mark.slow  # (fresh interpreters)
def test_the_bootstrap_is_inert_without_the_environment():
    from disttrace.tracer.commands.run import BOOTSTRAP_DIR

    code = ("import os, sys; os.environ.pop('DISTTRACE_OUT', None); "
            f"sys.path.insert(0, {BOOTSTRAP_DIR!r}); import sitecustomize; import torch.distributed; "
            "print('disttrace.tracer.record.hooks' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
