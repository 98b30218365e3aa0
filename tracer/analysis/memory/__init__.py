"""Memory (`disttrace run --memory`; docs/ANALYSIS.md "Memory"): each rank's samples cut into the steps (steps.py),
the chosen step's breakdown by kind and the imbalance across ranks (breakdown.py), the formula that predicts the
parameters', gradients' and optimizer state's bytes (formula.py), the leak rule (leaks.py); analyse.py puts them
together into a MemoryReport (results.py), which the report, its JSON and the viewer read as it is."""
