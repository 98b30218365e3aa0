"""Data x pipeline parallel written by hand, Megatron's way: 4 ranks (ranks 0, 1 one replica's stages 0, 1; ranks 2,
3 the other's), a 1F1B schedule over 4 micro-batches an iteration whose steady phase sends the activation and
receives the gradient in one `batch_isend_irecv`, then the gradients flattened and all-reduced over the stage's
data-parallel group. 20 iterations; the faults are wi_pp_common.py's."""

from wi_pp_common import BATCH, DIM, ITERATIONS, MICRO_BATCHES, STAGES, before_step, layers


def main() -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    replica, stage = divmod(rank, STAGES)
    pp = [dist.new_group([r * STAGES + s for s in range(STAGES)]) for r in range(2)][replica]
    dp = [dist.new_group([r * STAGES + s for r in range(2)]) for s in range(STAGES)][stage]
    prev, nxt = rank - 1, rank + 1
    first, last = stage == 0, stage == STAGES - 1
    model = layers(stage, rank)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(replica)
    mb = BATCH // MICRO_BATCHES

    def recv(src):
        t = torch.empty(mb, DIM)
        dist.recv(t, src, group=pp)
        return t

    for step in range(ITERATIONS):
        before_step(step, rank)
        x, y = torch.randn(BATCH, DIM, generator=g), torch.randn(BATCH, DIM, generator=g)
        opt.zero_grad()
        inputs, outputs = [], []
        warmup = min(STAGES - stage - 1, MICRO_BATCHES)

        def forward(m):
            inp = x[m * mb:(m + 1) * mb] if first else recv(prev).requires_grad_()
            out = model(inp)
            inputs.append(inp)
            outputs.append(out)
            return out

        def backward(grad):
            inp, out = inputs.pop(0), outputs.pop(0)
            if last:
                ((out - y[:mb]) ** 2).mean().backward()
            else:
                out.backward(grad)
            if not first:
                dist.send(inp.grad, prev, group=pp)

        for m in range(warmup):
            out = forward(m)
            dist.send(out.detach(), nxt, group=pp)
        for m in range(warmup, MICRO_BATCHES):
            out = forward(m)
            grad = None
            if not last:
                grad = torch.empty(mb, DIM)
                ops = [dist.P2POp(dist.isend, out.detach(), nxt, pp), dist.P2POp(dist.irecv, grad, nxt, pp)]
                for w in dist.batch_isend_irecv(ops):
                    w.wait()
            backward(grad)
        for _ in range(warmup):
            backward(recv(nxt))
        flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        dist.all_reduce(flat, group=dp)
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
