"""The analysis' core: its results' types (results.py), the collectives and messages as columns (tables.py), the
matching of ops across ranks (matching.py), the compiled loops' home (jit.py) and the analysis kept beside a
trace (saved_analysis.py). Every other group builds on it; it imports none of them."""
