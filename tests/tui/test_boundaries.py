"""The viewer never imports torch (its import alone costs about a second at start-up)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.slow  # (a fresh interpreter)
def test_tui_does_not_import_torch():
    code = ("import sys; import disttrace.tui.app, disttrace.tui.cli, disttrace.tui.loading; "
            "import disttrace.tui.widgets.views; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
