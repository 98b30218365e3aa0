"""Why a step is as long as it is: its critical path (critical_path.py, walked by backward_walk.py), the overlap
of communication and compute (overlap.py), the attribution of the slowdown (attribution.py) and what a change
would save (what_if.py, replayed by what_if_loop.py)."""
