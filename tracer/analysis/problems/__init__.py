"""Problems a person must act on (checks.py: mismatches, deaths, hangs, raised ops, non-finite values, clock
violations), with the scan of tensor summaries for NaN/Inf (nonfinite_scan.py)."""
