"""Write the single-vintage NCCL fixtures of tests/data/test_kineto.py, every event from Kineto's published schema.

No GPU here and no trace of anyone else's: each file is one rank's torch.profiler trace (CPU and CUDA activities)
laid out as its vintage wrote it, with the markers docs/FORMAT.md's table of vintages lists; the ops, their sizes
and their device times are the tables below, which is what tests/data/test_kineto.py asserts.

- pt2.0-torchrec-8ranks-r3.json.gz: rank 3 of an 8-rank TorchRec-like job, PyTorch 2.0-era Kineto: Unix-epoch µs
  (ints), no baseTimeNanoseconds; distributedInfo with rank and world_size, no pg_config; record_param_comms without
  args, and one alone after each all_to_all (Work.wait's); TorchRec's all_to_all as record_param_comms +
  nccl:all_to_all (its tensor in the annotation's "Input Dims") with no c10d op; c10d::alltoall_base_ (input second)
  and c10d::allreduce_ (a TensorList, whose "Input Dims" say no size: the annotation's do); ops on two threads (the
  pipeline's all_reduces issued while the main thread's all_to_all runs); one all_to_all run as two SendRecv
  kernels; `ncclKernel_*(ncclWorkElem)` names, the kernel's "External id" its own correlation; kernels of ATen's
  between the ops;
- pt2.0-sendrecv-128ranks-r0.json.gz: rank 0 of 128, NCCL 2.12-era: every NCCL kernel `ncclKernel_SendRecv_*`
  whatever the op (all_to_all, all_reduce, all_gather, reduce_scatter); Unix-epoch µs as floats to the quarter µs;
  record_shapes: the c10d ops', record_param_comms' and nccl:*'s "Input Dims"; no collective metadata;
- nccl2.17/rank{0,1}.pt.trace.json.gz: both ranks of 2, NCCL 2.17-era Kineto: times µs after
  baseTimeNanoseconds (rank 1's clock 2.5 ms ahead); record_param_comms with the collective's metadata (no "Seq"),
  copied onto the kernel, whose "External id" is record_param_comms'; cudaLaunchKernelExC; `ncclKernel_*(ncclDevComm*,
  unsigned long, ncclWork*)` names; distributedInfo with pg_config and nccl_version; the nccl:* annotations again on
  the device (gpu_user_annotation); Work.wait's record_param_comms ("Collective name": "wait") after each broadcast;
  broadcasts on the main thread, all_reduces on the autograd thread; no shapes.

(The fourth old vintage, a trace recorded without shapes, is make_device.py's nccl-noshapes/, on our real host
traces.) Deterministic: `python make_vintages.py` rewrites the same bytes."""

import gzip
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
OLD_AR = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"
OLD_SR = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)"
SR_2_12 = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"
AR_2_17 = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
BC_2_17 = "ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"
ELEMENTWISE = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
               "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)")
REDUCE = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float> > >"
SCAN = "void cub::DeviceScanKernel<cub::DeviceScanPolicy<long>::Policy600, long*, long*, cub::Sum, long>"
CONV = "sm80_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x16_stage4_warpsize2x2x1"
COPY = "void at::native::elementwise_kernel<128, 2, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)>(int)"

# rank 3 of 8, PyTorch 2.0 era. Per op: (thread, c10d op or None (TorchRec's), annotation, its Input Dims, its
# Input type, the c10d op's Input Dims and Input type, issue µs, host µs, [(kernel start µs, µs)], Work.wait after)
TORCHREC_T0 = 1_680_000_000_000_000          # Unix-epoch µs (2023-03-28)
MAIN, PIPE = 52103, 52240
TENSORLIST = ([[], [], [], []], ["TensorList", "", "Scalar", "Scalar"])
TORCHREC = [
    (MAIN, None, "nccl:all_to_all", [[8, 512, 64]], ["float"], None, 100, 140, [(180, 1250)], True),
    (MAIN, None, "nccl:all_to_all", [[4096]], ["int"], None, 2000, 90, [(2060, 40)], True),
    (MAIN, "c10d::alltoall_base_", "nccl:all_to_all", [[32768, 16]], ["float"],
     ([[30000, 16], [32768, 16], [], [], [], []], ["float", "float", "", "ScalarList", "ScalarList", "Scalar"]),
     4000, 200, [(4150, 300), (4455, 200)], True),
    (PIPE, "c10d::allreduce_", "nccl:all_reduce", [[2_000_000]], ["float"], TENSORLIST, 5000, 90, [(5400, 900)], False),
    (PIPE, "c10d::allreduce_", "nccl:all_reduce", [[262_144]], ["float"], TENSORLIST, 5200, 80, [(6301, 150)], False),
    (MAIN, None, "nccl:all_to_all", [[8, 512, 64]], ["float"], None, 5300, 120, [(6460, 1100)], True),
]
TORCHREC_OTHER = [(MAIN, 3000, ELEMENTWISE, 3010, 3), (MAIN, 3050, REDUCE, 3060, 5)]  # (tid, launch, kernel, at, µs)

# rank 0 of 128, NCCL 2.12 era: (c10d op, annotation, the c10d op's Input Dims, Input type, the annotation's Input
# Dims, Input type, issue µs, [(kernel start µs, µs)], stream); every kernel SR_2_12
SENDRECV_T0 = 1_682_000_000_000_000.0       # Unix-epoch µs (2023-04-20), floats: to the quarter µs there
A2A_TYPES = ["", "", "", "ScalarList", "ScalarList", "Scalar"]
SENDRECV = [
    ("c10d::alltoall_base_", "nccl:all_to_all", [[512], [512], [], [], [], []], ["long", "long"] + A2A_TYPES[2:],
     [[512]], ["long"], 100.0, [(150.25, 2000.5)], 52),
    ("c10d::allreduce_", "nccl:all_reduce", *TENSORLIST, [[5_000_000]], ["float"], 3000.0, [(3040.75, 3500.25)], 52),
    ("c10d::_allgather_base_", "nccl:_all_gather_base", [[8_388_608], [65_536], []], ["signed char"] * 2 + [""],
     [[65_536]], ["signed char"], 7000.0, [(7050.5, 900.75)], 60),
    ("c10d::_reduce_scatter_base_", "nccl:_reduce_scatter_base", [[65_536], [8_388_608], [], [], []],
     ["float", "float", "", "", "Scalar"], [[8_388_608]], ["float"], 9000.0, [(9100.0, 4200.0)], 60),
    ("c10d::alltoall_base_", "nccl:all_to_all", [[1_000_000], [1_048_576], [], [], [], []],
     ["unsigned char"] * 2 + A2A_TYPES[2:], [[1_048_576]], ["unsigned char"], 14000.0, [(14060.25, 7000.75)], 52),
    ("c10d::allreduce_", "nccl:all_reduce", *TENSORLIST, [[1_234_567]], ["float"], 22000.0, [(22040.5, 1100.5)], 52),
]
SENDRECV_OTHER = [(2000.0, SCAN, 2010.25, 64.5), (13000.0, ELEMENTWISE, 13009.0, 27.0)]

# both ranks of 2, NCCL 2.17: (thread, c10d op, Collective name, dtype, nelems, issue ns per rank, transfer ns,
# kernel); times true ns after BASE_NS; each rank's kernel starts LAUNCH_NS after its issue, both end together
BASE_NS = 1_712_000_000_000_000_000
CLOCK_AHEAD_NS = (0, 2_500_000)              # each rank's clock ahead of the true time
LAUNCH_NS = 150_000
MAIN17, BWD17 = 0, 100                       # + 60000 + rank: the main thread, the autograd thread
NCCL217 = [
    (MAIN17, "c10d::broadcast_", "broadcast", "Float", 40_000, (1_000_000, 1_050_000), 31_500, BC_2_17),
    (MAIN17, "c10d::broadcast_", "broadcast", "Long", 64, (3_000_000, 3_000_000), 8_250, BC_2_17),
    (BWD17, "c10d::allreduce_", "allreduce", "Float", 1_000_000, (20_000_000, 20_400_000), 2_750_500, AR_2_17),
    (BWD17, "c10d::allreduce_", "allreduce", "Float", 4_000_000, (30_000_000, 30_000_000), 9_100_125, AR_2_17),
]
# (ATen op, launch ns, kernel, its start after the launch, ns)
NCCL217_OTHER = [("aten::copy_", 2_000_000, COPY, 17_000, 3_552),
                 ("aten::cudnn_convolution", 10_000_000, CONV, 40_000, 461_914)]


def write(doc, path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with gzip.GzipFile(path, "wb", mtime=0) as f:
        f.write(json.dumps(doc).encode())


class Rank:
    """One rank's events; `ext` and `corr` count as the profiler does (External id per host op, correlation per
    launch)."""

    def __init__(self, pid, device, threads):
        self.pid, self.device = pid, device
        self.ext, self.corr = 700, 90000
        self.events = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python"}},
                       {"ph": "M", "name": "process_name", "pid": device, "tid": 0, "args": {"name": "python"}},
                       {"ph": "M", "name": "process_labels", "pid": device, "tid": 0,
                        "args": {"labels": f"GPU {device}"}}]
        for tid in threads:
            self.events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                                "args": {"name": f"thread {tid} (python)"}})

    def host(self, cat, name, tid, ts, dur, args=None):
        self.ext += 1
        ev = {"ph": "X", "cat": cat, "name": name, "pid": self.pid, "tid": tid, "ts": ts, "dur": dur,
              "args": {"External id": self.ext, **(args or {})}}
        self.events.append(ev)
        return self.ext

    def launch(self, tid, ts, dur, kernel, kts, kdur, stream, ext=None, runtime="cudaLaunchKernel", cbid=211,
               kargs=None):
        """A launch and its kernel; ext None: older Kineto's (the kernel's External id is its correlation)."""
        self.corr += 1
        c = self.corr
        x = c if ext is None else ext
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": runtime, "pid": self.pid, "tid": tid,
                            "ts": ts, "dur": dur, "args": {"External id": x, "cbid": cbid, "correlation": c}})
        args = {"External id": x, "queued": 0, "device": self.device, "context": 1, "stream": stream,
                "correlation": c, "registers per thread": 96 if kernel.startswith("nccl") else 32,
                "shared memory": 0, "grid": [8, 1, 1], "block": [512, 1, 1], **(kargs or {})}
        self.events.append({"ph": "X", "cat": "kernel", "name": kernel, "pid": self.device, "tid": stream,
                            "ts": kts, "dur": kdur, "args": args})
        self.events.append({"ph": "s", "id": c, "pid": self.pid, "tid": tid, "ts": ts, "cat": "ac2g",
                            "name": "ac2g"})
        self.events.append({"ph": "f", "id": c, "pid": self.device, "tid": stream, "ts": kts, "cat": "ac2g",
                            "name": "ac2g", "bp": "e"})


def torchrec():
    w = Rank(MAIN, 3, (MAIN, PIPE))
    t0 = TORCHREC_T0
    for tid, c10d, ann, dims, types, c10d_shapes, at, host_us, kernels, wait in TORCHREC:
        outer = at
        if c10d:
            w.host("cpu_op", c10d, tid, t0 + at, host_us, {"Input Dims": c10d_shapes[0],
                                                            "Input type": c10d_shapes[1]})
            at += 4
        w.host("cpu_op", "record_param_comms", tid, t0 + at, host_us - (at - outer) - 2)
        w.host("user_annotation", ann, tid, t0 + at + 10, host_us - (at - outer) - 20,
               {"Input Dims": dims, "Input type": types})
        for k, (kts, kdur) in enumerate(kernels):
            kernel = OLD_AR if ann == "nccl:all_reduce" else OLD_SR
            w.launch(tid, t0 + at + 40 + 30 * k, 12, kernel, t0 + kts, kdur, 21)
        if wait:  # Work.wait's, alone, once the op is issued
            w.host("cpu_op", "record_param_comms", tid, t0 + outer + host_us + 30, 6)
    for tid, at, kernel, kts, kdur in TORCHREC_OTHER:
        w.launch(tid, t0 + at, 8, kernel, t0 + kts, kdur, 20)
    return {"schemaVersion": 1, "deviceProperties": [{"id": 3, "name": "Tesla V100-SXM2-32GB"}],
            "distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 8}, "traceEvents": w.events}


def sendrecv():
    pid = 7710
    w = Rank(pid, 0, (pid,))
    t0 = SENDRECV_T0
    for c10d, ann, dims, types, adims, atypes, at, kernels, stream in SENDRECV:
        w.host("cpu_op", c10d, pid, t0 + at, 240.0, {"Input Dims": dims, "Input type": types})
        w.host("cpu_op", "record_param_comms", pid, t0 + at + 7.0, 230.0,
               {"Input Dims": [adims[0], [], [], []], "Input type": [atypes[0], "Scalar", "Scalar", "Scalar"]})
        w.host("user_annotation", ann, pid, t0 + at + 20.0, 200.0, {"Input Dims": adims, "Input type": atypes})
        for kts, kdur in kernels:
            w.launch(pid, t0 + at + 25.0, 13.0, SR_2_12, t0 + kts, kdur, stream)
    for at, kernel, kts, kdur in SENDRECV_OTHER:
        w.launch(pid, t0 + at, 9.0, kernel, t0 + kts, kdur, 7)
    return {"schemaVersion": 1, "record_shapes": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}],
            "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 128}, "traceEvents": w.events}


def nccl217(rank):
    pid = 60000 + rank
    w = Rank(pid, rank, (pid, pid + BWD17))

    def us(t_ns):  # this rank's clock, µs after baseTimeNanoseconds, to the ns
        return round((t_ns + CLOCK_AHEAD_NS[rank]) / 1000, 3)

    for thread, c10d, coll, dtype, nelems, issue, transfer, kernel in NCCL217:
        tid = pid + thread
        t = issue[rank]
        start = t + LAUNCH_NS
        end = max(issue) + LAUNCH_NS + transfer
        meta = {"Collective name": coll, "dtype": dtype, "In msg nelems": nelems, "Out msg nelems": nelems,
                "Group size": 2, "In split size": "[]", "Out split size": "[]", "Process Group Name": "0",
                "Process Group Description": "default_pg", "Process Group Ranks": "[0, 1]"}
        w.host("cpu_op", c10d, tid, us(t), 290.0)
        rpc = w.host("cpu_op", "record_param_comms", tid, us(t + 50_000), 190.0,
                     {**meta, "Global rank start": 0, "Global rank stride": 1})
        name = "nccl:" + {"allreduce": "all_reduce"}.get(coll, coll)
        ann = w.host("user_annotation", name, tid, us(t + 70_000), 90.0)
        w.launch(tid, us(t + 100_000), 12.0, kernel, us(start), (end - start) / 1000, 40, ext=rpc,
                 runtime="cudaLaunchKernelExC", cbid=430, kargs=meta)
        w.events.append({"ph": "X", "cat": "gpu_user_annotation", "name": name, "pid": rank, "tid": 40,
                         "ts": us(start - 1000), "dur": (end - start + 1500) / 1000, "args": {"External id": ann}})
        if coll == "broadcast":  # Work.wait's: with its own metadata, "wait"
            w.host("cpu_op", "record_param_comms", tid, us(t + 500_000), 36.5,
                   {"Collective name": "wait", "dtype": "Byte", "In msg nelems": 0, "Out msg nelems": 0,
                    "Group size": 1, "In split size": "[]", "Out split size": "[]", "Process Group Ranks": "[]"})
    for op, at, kernel, after, dur in NCCL217_OTHER:  # launched inside their ATen op, whose External id they carry
        ext = w.host("cpu_op", op, pid, us(at - 5_000), 40.0)
        w.launch(pid, us(at), 15.0, kernel, us(at + after), dur / 1000, 7, ext=ext)
    return {"schemaVersion": 1, "deviceProperties": [{"id": rank, "name": "NVIDIA A100-SXM4-40GB"}],
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2, "pg_count": 1,
                                "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
                                               "pg_size": 2, "ranks": [0, 1]}], "nccl_version": "2.17.1"},
            "displayTimeUnit": "ms", "baseTimeNanoseconds": BASE_NS, "traceEvents": w.events}


# A sampled 128-rank pipeline job of the PyTorch 2.0 era (issue 53): 8 stages x 16 replicas, stage = rank % 8, one
# node (one clock) per 8 ranks; the profiler's files of some ranks only. Per step, each micro-batch's activations go
# forward and its gradients back as Megatron sends them: batch_isend_irecv([send to the next stage, recv from the
# previous]) where a stage has both, a plain isend or irecv at the pipeline's ends; then the step's all_reduce.
# PyTorch 2.0's batch_isend_irecv is `_coalescing_manager`: each c10d::send / c10d::recv_ (with record_param_comms
# and its nccl:send 0->1 / nccl:recv 1<-0) launches nothing, and _end_coalescing's ncclGroupEnd launches the one
# SendRecv kernel that runs both, outside every communication host op (no nccl:coalesced before 2.1). A plain
# isend/irecv launches its own kernel inside its host ops. All in true µs on rank 0's node clock, as floats.
PIPE_STAGES, PIPE_MICRO = 8, 4
PIPE_NODE_AHEAD_US = 1375.25                 # each node's clock ahead of the one before it
PIPE_STREAM, PIPE_AR_STREAM = 60, 52


def _pipe_kernel_us(stage: int, k: int, step: int) -> float:
    """A transfer's device time: 0.8-2.2 ms, deterministic."""
    return 800.0 + ((stage * 37 + k * 11 + step * 5) % 8) * 200.25


def pipeline_2_0(rank: int, world: int = 128, steps: int = 6) -> tuple[dict, list]:
    """Rank `rank`'s trace of the sampled pipeline job, and [(kernel start µs, µs)] of its communication kernels."""
    stage = rank % PIPE_STAGES
    pid = 9100 + rank
    w = Rank(pid, rank % 8, (pid,))
    t0 = SENDRECV_T0 + (rank // 8) * PIPE_NODE_AHEAD_US
    nxt, prv = rank + 1, rank - 1
    kernels = []
    at = 1000.0
    for step in range(steps):
        for k, forward in enumerate([True] * PIPE_MICRO + [False] * PIPE_MICRO):
            to, frm = (nxt, prv) if forward else (prv, nxt)
            ops = []
            if (stage < PIPE_STAGES - 1) if forward else stage > 0:
                ops.append(("c10d::send", "nccl:send", f"{rank}->{to}", to))
            if stage > 0 if forward else stage < PIPE_STAGES - 1:
                ops.append(("c10d::recv_", "nccl:recv", f"{rank}<-{frm}", frm))
            dur = _pipe_kernel_us(stage, k, step)
            issue = at + 300.0 * stage + 40.0 * (k % 3)   # stages issue in turn, a little jitter
            coalesced = len(ops) > 1
            t = issue
            for c10d, ann, pair, peer in ops:
                dims = [[[4096, 1024]], [], []]
                w.host("cpu_op", c10d, pid, t0 + t, 30.0, {"Input Dims": dims, "Input type": ["TensorList", "", ""],
                                                           "Concrete Inputs": ["", "", str(peer), "0"]})
                w.host("cpu_op", "record_param_comms", pid, t0 + t + 3.0, 24.0,
                       {"Input Dims": [[4096, 1024], [], [], []], "Input type": ["float", "Scalar", "Scalar", ""]})
                w.host("user_annotation", f"{ann} {pair}", pid, t0 + t + 6.0, 18.0,
                       {"Input Dims": [[4096, 1024]], "Input type": ["float"]})
                if not coalesced:
                    w.launch(pid, t0 + t + 10.0, 6.0, SR_2_12, t0 + t + 25.0, dur, PIPE_STREAM)
                    kernels.append((t0 + t + 25.0, dur))
                t += 35.0
            if coalesced:  # _end_coalescing: ncclGroupEnd's launch, after the block's ops
                w.launch(pid, t0 + t + 4.0, 6.0, SR_2_12, t0 + t + 20.0, dur, PIPE_STREAM)
                kernels.append((t0 + t + 20.0, dur))
            at += 3000.0
        issue = at + 100.0 * stage
        w.host("cpu_op", "c10d::allreduce_", pid, t0 + issue, 40.0, {"Input Dims": TENSORLIST[0],
                                                                       "Input type": TENSORLIST[1]})
        w.host("cpu_op", "record_param_comms", pid, t0 + issue + 4.0, 32.0)
        w.host("user_annotation", "nccl:all_reduce", pid, t0 + issue + 8.0, 24.0,
               {"Input Dims": [[2_000_000]], "Input type": ["float"]})
        end = at + 100.0 * PIPE_STAGES + 2500.5
        w.launch(pid, t0 + issue + 12.0, 6.0, SR_2_12, t0 + issue + 30.0, end - issue - 30.0, PIPE_AR_STREAM)
        kernels.append((t0 + issue + 30.0, end - issue - 30.0))
        at = end + 20_000.0  # the next step's compute
    doc = {"schemaVersion": 1, "record_shapes": 1, "deviceProperties": [{"id": rank % 8, "name": "NVIDIA A100-SXM4-80GB"}],
           "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world}, "traceEvents": w.events}
    return doc, kernels


if __name__ == "__main__":
    write(torchrec(), os.path.join(HERE, "pt2.0-torchrec-8ranks-r3.json.gz"))
    write(sendrecv(), os.path.join(HERE, "pt2.0-sendrecv-128ranks-r0.json.gz"))
    for r in (0, 1):
        write(nccl217(r), os.path.join(HERE, "nccl2.17", f"rank{r}.pt.trace.json.gz"))
