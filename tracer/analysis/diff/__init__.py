"""Two runs side by side: compare.py (the diff and its verdict), sides.py (one run analysed for it), align.py
(which op of B is which op of A), timing.py (each difference against its noise), explain.py (why B's step moved)."""
