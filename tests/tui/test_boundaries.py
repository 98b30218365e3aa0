"""The viewer never imports torch (its import alone costs about a second at start-up)."""

from __future__ import annotations

import subprocess
import sys

import pytest


def loaded(modules: str, among: tuple[str, ...]) -> list[str]:
    """Which of `among` a fresh interpreter has loaded once it imported `modules`."""
    code = f"import sys; import {modules}; print(' '.join(m for m in {among!r} if m in sys.modules))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()


@pytest.mark.slow  # (a fresh interpreter)
def test_tui_does_not_import_torch():
    assert loaded("disttrace.tui.app, disttrace.tui.cli, disttrace.tui.loading, disttrace.tui.screens.viewer",
                  ("torch",)) == []


@pytest.mark.slow  # (a fresh interpreter)
def test_the_view_command_opens_a_store_before_it_imports_the_viewer():
    # `disttrace view` opens a stored trace's store ahead (loading.StoredAhead) from modules that load none of
    # these, so that the store's open and the viewer's imports go on at once (issue 53)
    assert loaded("disttrace.tracer.cli, disttrace.tui.cli, disttrace.tui.loading",
                  ("numpy", "textual", "pyarrow", "disttrace.tracer.analysis")) == []
