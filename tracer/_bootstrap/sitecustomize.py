"""Loaded by every Python process that `disttrace run` starts (this folder is first on PYTHONPATH).

Inert unless DISTTRACE_OUT is set. It imports nothing heavy: it installs a post-import hook that, once
torch.distributed has been imported by the program, arranges for tracing to start when the process group is
initialized. Then it chain-loads the sitecustomize this one shadows, if any.
"""

import os
import sys


def _disttrace_bootstrap():
    if not os.environ.get("DISTTRACE_OUT"):
        return
    import importlib.abc
    import importlib.util

    def _enable():
        try:
            from disttrace.tracer import blackbox_files
            from disttrace.tracer.record import hooks

            hooks.install(os.environ["DISTTRACE_OUT"], os.environ.get("DISTTRACE_SUMMARIES", "off"),
                          float(os.environ.get("DISTTRACE_HANG_TIMEOUT", "0") or 0),
                          black_box=blackbox_files.Config.from_env(),
                          memory=int(os.environ["DISTTRACE_MEMORY"]) if os.environ.get("DISTTRACE_MEMORY") else None)
        except Exception as e:  # noqa: BLE001 - never break the job
            sys.stderr.write(f"disttrace: tracing disabled: {type(e).__name__}: {e}\n")

    class _DistFinder(importlib.abc.MetaPathFinder):
        """Runs the hook when `torch.distributed` (the package) has finished importing."""

        def find_spec(self, name, path, target_mod=None):
            if name != "torch.distributed":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            if spec is None or spec.loader is None:
                return spec
            exec_module = spec.loader.exec_module

            def exec_and_hook(module):
                exec_module(module)
                _enable()

            spec.loader.exec_module = exec_and_hook
            return spec

    if "torch.distributed" in sys.modules:
        _enable()
    else:
        sys.meta_path.insert(0, _DistFinder())


def _chain_load():
    """Run the sitecustomize that this one shadows (a virtualenv's or the distribution's), if there is one."""
    here = os.path.dirname(os.path.abspath(__file__))
    import importlib.machinery

    path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.origin and os.path.dirname(os.path.abspath(spec.origin)) != here:
        import importlib.util

        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


try:
    _disttrace_bootstrap()
finally:
    _chain_load()
