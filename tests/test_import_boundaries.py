"""Import rules that keep the layers apart (checked in fresh interpreters, by what lands in sys.modules).

Readers and the analysis never import torch or textual; the viewer never imports torch nor the in-rank hooks
(torch alone costs about a second at start-up); recording never imports the viewer."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEADLESS = ["disttrace.tracer.events", "disttrace.tracer.reader", "disttrace.tracer.analysis",
            "disttrace.tracer.report", "disttrace.tracer.export", "disttrace.tracer.flightrec",
            "disttrace.tracer.hangwatch", "disttrace.tracer.launch", "disttrace.tracer.cli"]


def loaded_after_import(module: str) -> set[str]:
    code = f"import sys, {module}; print('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


@pytest.mark.parametrize("module", HEADLESS)
def test_readers_and_analysis_import_neither_torch_nor_textual(module):
    mods = loaded_after_import(module)
    assert "torch" not in mods and "textual" not in mods, module


@pytest.mark.parametrize("module", ["disttrace.tui.app", "disttrace.tui.cli"])
def test_viewer_never_imports_torch_nor_the_hooks(module):
    mods = loaded_after_import(module)
    assert "torch" not in mods
    assert not {"disttrace.tracer.hooks", "disttrace.tracer.fastpath", "disttrace.tracer.capture",
                "disttrace.tracer.summaries"} & mods


def test_recording_never_imports_the_viewer():
    mods = loaded_after_import("disttrace.tracer.hooks")
    assert not any(m.startswith(("disttrace.tui", "textual", "disttrace.tracer.analysis")) for m in mods)


def test_the_bootstrap_is_inert_without_the_environment():
    from disttrace.tracer.launch import BOOTSTRAP_DIR

    code = ("import os, sys; os.environ.pop('DISTTRACE_OUT', None); "
            f"sys.path.insert(0, {BOOTSTRAP_DIR!r}); import sitecustomize; import torch.distributed; "
            "print('disttrace.tracer.hooks' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
