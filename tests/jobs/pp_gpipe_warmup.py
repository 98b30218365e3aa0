"""A hand-written 2-stage GPipe training loop, as a user writes one: each iteration runs 4 micro-batches' forwards
through both stages, then their backwards, with blocking send/recv, then an optimizer step; 3 iterations.

The first iteration holds the start-up (a stage still starting while the other waits in its first send, gloo's
first exchanges: 270-360 ms on 2 busy cores, 630 ms where the issue was filed, against 50-90 ms for a steady one):
the pipeline's schedule marks it warm-up and keeps it out of the mean bubble, and the viewer's Pipeline tab opens on
the first steady iteration (tests/analysis/pipeline/test_schedule_real.py; its trace is tests/tui/data/gpipe_warmup.jsonl,
for tests/tui/test_schedule_view.py)."""

import torch
import torch.distributed as dist

MICRO_BATCHES, ITERATIONS = 4, 3
BATCH, WIDTH = 32, 256


def main() -> None:
    dist.init_process_group("gloo")
    stage = dist.get_rank()
    torch.manual_seed(stage)
    layers = torch.nn.Sequential(*[m for _ in range(4) for m in (torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU())])
    opt = torch.optim.SGD(layers.parameters(), lr=0.01)
    data = torch.Generator().manual_seed(0)
    for _ in range(ITERATIONS):
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
