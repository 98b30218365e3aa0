"""The analysis run: run.py (analyze: its stages in order, data flowing one way) and child_process.py (the first
analysis of a large stored trace, run in a child process)."""
