"""Mixed precision by hand, as users write it without a framework (2 ranks, gloo): a bf16 model whose LayerNorm is
kept in fp32 (a module's fp32 parameters), fp32 master copies of the bf16 parameters and one Adam over them and the
LayerNorm's parameters; beside the model, a learnable fp32 per-channel output scale (no module's; shaped like the
bf16 output bias) with its own SGD with momentum. Each step: the forward and backward in bf16, the gradients averaged
over the ranks (an all-reduce of each fp32 gradient), the master copies' gradients from the bf16 ones, the steps,
the bf16 weights copied back from the masters.

Memory's ground truth (`disttrace run --memory`): only the master copies are optimizer state (MASTER_VALUES of them,
4 bytes each); the LayerNorm's and the scale's fp32 values are parameters (PARAM_BYTES in all, with the bf16 ones);
Adam holds exp_avg and exp_avg_sq for every value it steps (ADAM_VALUES) and a 4-byte step count per parameter
(ADAM_TENSORS), SGD a momentum buffer for the scale: OPT_BYTES in all."""

WIDTH, HIDDEN, BATCH, STEPS = 256, 512, 32, 6
BF16_VALUES = WIDTH * HIDDEN + HIDDEN + HIDDEN * WIDTH + WIDTH   # the two Linear layers (bf16)
NORM_VALUES = 2 * WIDTH                                            # the LayerNorm kept in fp32
SCALE_VALUES = WIDTH                                               # the free fp32 output scale
MASTER_VALUES = BF16_VALUES
PARAM_BYTES = 2 * BF16_VALUES + 4 * NORM_VALUES + 4 * SCALE_VALUES
ADAM_VALUES, ADAM_TENSORS = MASTER_VALUES + NORM_VALUES, 4 + 2
OPT_BYTES = 4 * MASTER_VALUES + 8 * ADAM_VALUES + 4 * ADAM_TENSORS + 4 * SCALE_VALUES


def main() -> None:
    import torch
    import torch.distributed as dist
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.Linear(WIDTH, HIDDEN)
            self.down = nn.Linear(HIDDEN, WIDTH)
            self.norm = nn.LayerNorm(WIDTH)

        def forward(self, x):
            h = self.down(torch.nn.functional.gelu(self.up(x)))
            return self.norm(h.float())  # the norm in fp32, as mixed-precision recipes keep it

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = Net()
    model.up.to(torch.bfloat16)
    model.down.to(torch.bfloat16)
    half = [p for p in model.parameters() if p.dtype == torch.bfloat16]
    masters = [p.detach().float().clone().requires_grad_() for p in half]
    opt = torch.optim.Adam(masters + list(model.norm.parameters()), lr=1e-3)
    scale = nn.Parameter(torch.ones(WIDTH))
    opt_scale = torch.optim.SGD([scale], lr=1e-2, momentum=0.9)
    g = torch.Generator().manual_seed(rank)
    for step in range(STEPS):
        x = torch.randn(BATCH, WIDTH, generator=g).to(torch.bfloat16)
        loss = (model(x) * scale).square().mean()
        loss.backward()
        for m, p in zip(masters, half):
            m.grad = p.grad.float()
        for p in opt.param_groups[0]["params"] + [scale]:
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        opt_scale.step()
        opt.zero_grad()
        opt_scale.zero_grad()
        model.zero_grad()
        with torch.no_grad():
            for m, p in zip(masters, half):
                p.copy_(m)
        logged = loss.detach().float()
        dist.all_reduce(logged)
        if rank == 0:
            print(f"step {step} loss {logged.item() / world:.6f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
