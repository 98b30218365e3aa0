"""A hand-written 2-stage GPipe training loop, as a user writes one: each iteration runs 4 micro-batches' forwards
through both stages, then their backwards, with blocking send/recv, then an optimizer step; 3 iterations.

The first iteration holds the start-up: gloo's first exchanges and a stage still starting while the other waits in
its first send (270-360 ms on 2 busy cores, 630 ms where the issue was filed, but only 44 ms against 34-38 ms on CI's
machine), and stage 1's first forward's one-off cost (a compile, a lazy module's set-up: here a sleep of
`--first-forward-ms`, 1000 by default, so that the warm-up does not hang on the machine's pace: it outweighs the
start-up's spread from one run to the next; 0 is the run without it). The pipeline's schedule marks it warm-up and
keeps it out of the mean bubble, and the viewer's Pipeline tab
opens on the first steady iteration (tests/analysis/pipeline/test_schedule_real.py). The stored trace
tests/tui/data/gpipe_warmup.jsonl (tests/tui/test_schedule_view.py, the goldens) was recorded before the sleep was
added, from the start-up alone; its call sites are this file's lines then."""

import argparse
import time

import torch
import torch.distributed as dist

MICRO_BATCHES, ITERATIONS = 4, 3
BATCH, WIDTH = 32, 256


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--first-forward-ms", type=float, default=1000.0)
    first_forward_s = parser.parse_args().first_forward_ms / 1000
    dist.init_process_group("gloo")
    stage = dist.get_rank()
    torch.manual_seed(stage)
    layers = torch.nn.Sequential(*[m for _ in range(4) for m in (torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU())])
    opt = torch.optim.SGD(layers.parameters(), lr=0.01)
    data = torch.Generator().manual_seed(0)
    for iteration in range(ITERATIONS):
        opt.zero_grad()
        inputs, outputs = [], []
        for _ in range(MICRO_BATCHES):  # forwards
            if stage == 0:
                x = torch.randn(BATCH, WIDTH, generator=data)
            else:
                x = torch.empty(BATCH, WIDTH)
                dist.recv(x, 0)
                x.requires_grad_()
            y = layers(x)
            if stage == 1 and iteration == 0 and not outputs:
                time.sleep(first_forward_s)
            if stage == 0:
                dist.send(y.detach(), 1)
            inputs.append(x)
            outputs.append(y)
        for x, y in zip(inputs, outputs):  # backwards
            if stage == 1:
                y.square().mean().backward()
                dist.send(x.grad, 0)
            else:
                grad = torch.empty(BATCH, WIDTH)
                dist.recv(grad, 1)
                y.backward(grad)
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
