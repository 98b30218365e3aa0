"""A slow all_reduce group in a 2x2 mesh (rank = 2 * row + column): groups from dist.new_group, rows {0,1}, {2,3}
and columns {0,2}, {1,3}. Every step each rank computes 20 ms, all_reduces in its row group, computes 10 ms, and
all_reduces in its column group. The fault: rank 1 computes 80 ms more before its row all_reduce in every 4th
step from step 3 (6 of 24), so rank 0 waits for it in row {0,1}; then rank 3 waits for rank 1 in column {1,3}, and rank 2 for
rank 0 in column {0,2} (a chain: rank 0 was late because it waited for rank 1). With --no-fault it runs on time:
"rank 1 on time" on the faulty run must predict the on-time run's step time (tests/analysis/causal/test_critical_path.py)."""

import sys
import time

from tagged import line

STEPS = 24
# 80 ms late: a rank that waits for it waits 80 ms less its own lateness, which on a loaded 2-core machine (4
# ranks) reached 7 ms at 40 ms late
LATE_RANK, LATE_STEPS, LATE_S = 1, (3, 7, 11, 15, 19, 23), 0.080
COMPUTE_S, BETWEEN_S = 0.020, 0.010
NO_FAULT = "--no-fault" in sys.argv
ROWS, COLUMNS = ([0, 1], [2, 3]), ([0, 2], [1, 3])


ROW_LINE, COLUMN_LINE = line(__file__, "row"), line(__file__, "column")


def main() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    assert dist.get_world_size() == 4
    rows = [dist.new_group(r) for r in ROWS]  # every rank makes every group, in the same order
    columns = [dist.new_group(c) for c in COLUMNS]
    row, column = rows[rank // 2], columns[rank % 2]
    x = torch.ones(256)
    for step in range(STEPS):
        time.sleep(COMPUTE_S)
        if rank == LATE_RANK and step in LATE_STEPS and not NO_FAULT:
            time.sleep(LATE_S)
        dist.all_reduce(x, group=row)  # <row>
        time.sleep(BETWEEN_S)
        dist.all_reduce(x, group=column)  # <column>
        x.fill_(1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
