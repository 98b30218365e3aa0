"""The event table: the normalized EventTable (event_table.py) and its columns (columns.py), how rows are made
(rows.py), memory (memory.py), progress (progress.py) and the stacks record's one line (stacks.py).

The bottom layer of data/: it imports nothing of the importers or the store. With load.py, the one door of data/
that commands/ and tui/ may use (pyproject.toml's import contracts): the table's types, constants and column
helpers are what they hold, so they import them from here.
"""

from .event_table import COLLECTIVE_OPS, NONE, OPS, P2P_OPS, EventTable, Group, RankInfo
from .memory import gc_paused, give_back_freed_memory
from .progress import Progress, part_of
from .stacks import stacks_site

__all__ = ["COLLECTIVE_OPS", "NONE", "OPS", "P2P_OPS", "EventTable", "Group", "Progress", "RankInfo", "gc_paused",
           "give_back_freed_memory", "part_of", "stacks_site"]
