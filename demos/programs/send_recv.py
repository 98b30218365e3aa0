"""send / recv: point-to-point messages between two ranks, the building block of pipelines and rings.

    rank 0 sends [1, 2, 3] to rank 1;
    rank 1 receives it, adds 10 and sends [11, 12, 13] back;
    rank 0 receives [11, 12, 13].

`send` returns once the message is on its way (or, for large messages, once the receiver took it);
`recv` blocks until a message arrives. A recv that is posted early waits for its sender (a "late sender").
With more than 2 ranks the message goes around the ring 0 -> 1 -> ... -> N-1 -> 0 instead.
"""

import torch
import torch.distributed as dist

from disttrace.demos._world import cleanup, setup, show


def main():
    world = setup()
    r, n = world.rank, world.world_size
    nxt, prev = (r + 1) % n, (r - 1) % n
    if r == 0:
        message = torch.tensor([1.0, 2.0, 3.0], device=world.device)
        dist.send(message, dst=nxt)
        print(f"rank 0 sent {show(message)} to rank {nxt}", flush=True)
        reply = torch.zeros(3, device=world.device)
        dist.recv(reply, src=prev)
        print(f"rank 0 received {show(reply)} from rank {prev}", flush=True)
    else:
        message = torch.zeros(3, device=world.device)
        dist.recv(message, src=prev)
        message += 10 if nxt == 0 else 0   # the last rank of the ring adds 10 before it answers
        dist.send(message, dst=nxt)
        print(f"rank {r} received from rank {prev} and sent {show(message)} to rank {nxt}", flush=True)
    cleanup(world)


if __name__ == "__main__":
    main()
