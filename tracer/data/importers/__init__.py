"""The importers: each trace format into the event table (the layer between the store and the table).

rank_files.py (a trace dir's rank files, the careful reader) with rank_batches.py (the fast one) and runs.py (the
runs a trace dir holds, and the one default-run rule, `pick`); events_files.py (the JSON Lines of `disttrace
events`) with event_batches.py (the fast decoder); kineto.py (PyTorch profiler traces) with kineto_device.py and
clockfit.py; flightrec.py (Flight Recorder dumps). The importers are independent of each other (pyproject.toml's
import contracts); they share runs.py and the table. load.py registers them.
"""
