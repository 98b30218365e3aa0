"""Pipeline parallelism: the stages found from the send/recv chain and each stage's bubble (stages.py), and each
iteration's schedule, micro-batch by micro-batch (schedule.py)."""
