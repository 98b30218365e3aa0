"""Training steps marked by the job: steps 0-2 end with disttrace.tracer.mark_step(), steps 3-5 with torch.profiler's
prof.step() (step 4 with both: it must count once), and a barrier after the last marker is step 6.

Ground truth, per rank, in issue order: all_reduce (steps 0-5, one each) then the barrier (step 6). A mark_step()
before the process group exists (tracing has not started) records nothing."""

STEPS_API, STEPS_PROFILER = 3, 3
BOTH_AT = 4  # the step whose end is marked both ways


def main() -> None:
    import torch
    import torch.distributed as dist

    from disttrace.tracer import mark_step

    mark_step()  # not tracing yet: nothing, and no error
    dist.init_process_group("gloo")
    t = torch.ones(4)
    for _ in range(STEPS_API):
        dist.all_reduce(t)
        mark_step()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for step in range(STEPS_API, STEPS_API + STEPS_PROFILER):
            dist.all_reduce(t)
            if step == BOTH_AT:
                mark_step()
            prof.step()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
