"""Write the NCCL/RCCL fixtures of tests/data/test_kineto.py from real host-side traces.

The host side is real: host/torch{2.4,2.13}-gloo-r{0,1}.json.gz, written by host/profile_gloo.py (2 gloo ranks,
torch.profiler with CPU activities and shapes around all_reduce, all_gather_into_tensor, all_to_all_single,
batch_isend_irecv, a _coalescing_manager block of two all_reduces, barrier and broadcast) under torch 2.4.1 and
2.13.0. No GPU here: the device side is written as ProcessGroupNCCL and Kineto write it, from their published
schema (record_param_comms' args, nccl:* annotations, cudaLaunchKernel with its correlation, the kernel on its
stream with "External id" and "correlation", ac2g flows, nccl:coalesced at a coalesced block's end, cudaGraphLaunch
for a graph's replay), one vintage per directory:

- nccl-newer/ (torch 2.13's host): times after baseTimeNanoseconds; record_param_comms with the collective's
  metadata and Seq, copied onto the kernel; `ncclDevKernel_*` names; distributedInfo with pg_config; a copy kernel
  beside the all_gather's NCCL kernel (not communication);
- nccl-older/ (torch 2.4's host, laid out as PyTorch 2.0-era Kineto): Unix-epoch µs and no baseTimeNanoseconds;
  record_param_comms without args (and one alone after each op: Work.wait's); the tensors on the nccl:*
  annotation's "Input Dims"; `ncclKernel_*(ncclWorkElem)` names, the kernel's External id its correlation;
  distributedInfo without pg_config;
- nccl-noshapes/ (torch 2.4's host): nccl-older/ as recorded without shapes (record_shapes=False): no "Input Dims",
  "Input type", "Input Strides" nor "Concrete Inputs" on any event (no size anywhere: a send's peer only in its
  nccl:send annotation's name), no record_shapes at the top;
- rccl/ (torch 2.13's host on ROCm): `ncclDevKernel_Generic(...)` for every op, launched by hipExtModuleLaunchKernel;
- nccl-graph/ (torch 2.13's host): the all_reduce runs a custom kernel (no NCCL kernel: an inference stack's
  all-reduce), then GRAPH_REPLAYS replays of a CUDA graph holding an all_reduce and an all_gather kernel beside a
  gemm, each launched by cudaGraphLaunch.

Each collective's kernels start together on both ranks (after the later issue), and run DEVICE_US[op] µs; a P2P
block's kernel runs P2P_US. Deterministic: `python make_device.py` rewrites the same bytes."""

import gzip
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
DEVICE_US = {"all_reduce": 120.0, "all_gather": 80.0, "all_to_all": 150.0, "barrier": 10.0, "broadcast": 40.0}
COALESCED_US = 90.0      # the _coalescing_manager block's one all_reduce_coalesced kernel
P2P_US = 60.0            # batch_isend_irecv's one SendRecv kernel
CUSTOM_US = 33.0         # nccl-graph/'s custom all-reduce kernel
GRAPH_REPLAYS = 3
GRAPH_US = {"all_reduce": 25.0, "all_gather": 15.0}
GEMM_US = 7.0
NEWER = {"ar": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
         "ag": "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
         "sr": "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
         "bc": "ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)"}
OLDER = {"ar": "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
         "ag": "ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)",
         "sr": "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)",
         "bc": "ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclWorkElem)"}
GENERIC = "ncclDevKernel_Generic(ncclDevComm*, channelMasks, ncclWork*)"
CUSTOM = ("void vllm::cross_device_reduce_1stage<float, 2>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, float*, "
          "int, int)")
COPY = "void at::native::elementwise_kernel<128, 2, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)>(int)"
GEMM = "sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel"
# c10d op -> (collective name, nccl annotation, kernel key, op)
C10D = {"c10d::allreduce_": ("allreduce", "nccl:all_reduce", "ar", "all_reduce"),
        "c10d::_allgather_base_": ("_allgather_base", "nccl:_all_gather_base", "ag", "all_gather"),
        "c10d::alltoall_base_": ("all_to_allv", "nccl:all_to_all", "sr", "all_to_all"),
        "c10d::allreduce_coalesced_": ("allreduce_coalesced", "nccl:allreduce_coalesced", "ar", "coalesced"),
        "c10d::barrier": ("allreduce", "nccl:all_reduce", "ar", "barrier"),
        "c10d::broadcast_": ("broadcast", "nccl:broadcast", "bc", "broadcast"),
        "c10d::send": ("send", "nccl:send 0->1", None, "p2p"),
        "c10d::recv_": ("recv", "nccl:recv 0<-1", None, "p2p")}
DTYPE = {"float": "Float", "c10::BFloat16": "BFloat16", "long int": "Long", "unsigned char": "Byte"}


def read(path):
    with gzip.open(path, "rt") as f:
        return json.load(f)


def write(doc, path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with gzip.GzipFile(path, "wb", mtime=0) as f:
        f.write(json.dumps(doc).encode())


def tensors(ev, which=0):
    """(dims, c++ type, nelems) of a c10d op's input (a TensorList's first entry)."""
    dims, types = ev["args"]["Input Dims"], ev["args"]["Input type"]
    d, t = dims[which], types[which]
    if t == "TensorList":
        shapes = d
        t = {"c10d::send": "float", "c10d::recv_": "float"}.get(ev["name"], "float")
    else:
        shapes = [d]
    n = sum(_prod(s) for s in shapes)
    return shapes, t, n


def _prod(s):
    n = 1
    for x in s:
        n *= x
    return n


def host_ops(doc):
    """The top-level c10d ops of the main thread, in issue order."""
    ops = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e["name"] in C10D]
    return sorted(ops, key=lambda e: e["ts"])


def plan(docs):
    """Per op index: the kernels' common start and duration (µs, each rank's own time base), and the blocks."""
    per = [host_ops(d) for d in docs]
    assert len({len(p) for p in per}) == 1 and all(len({p[k]["name"] for p in per}) == 1
                                                   for k in range(len(per[0])))
    out, free = [], 0.0
    for k in range(len(per[0])):
        name = per[0][k]["name"]
        what = C10D[name][3]
        if what == "p2p":
            if name == "c10d::recv_":  # the block's end: the coalesced kernel after the last op of the block
                end = max(p[k]["ts"] + p[k]["dur"] for p in per) + 5.0
                start = max(end + 20.0, free)
                out.append((start, P2P_US))
                free = start + P2P_US + 1.0
            else:
                out.append(None)
            continue
        start = max(max(p[k]["ts"] for p in per) + 30.0, free)
        dur = COALESCED_US if what == "coalesced" else DEVICE_US[what]
        out.append((start, dur))
        free = start + dur + 1.0
    return per, out


class Writer:
    def __init__(self, doc, rank, vintage):
        self.doc, self.rank, self.vintage = doc, rank, vintage
        self.ext = 100000
        self.corr = 5000
        self.events = [e for e in doc["traceEvents"] if not e.get("name", "").startswith("gloo:")]
        self.pid = next(e["pid"] for e in host_ops(doc))
        self.tid = next(e["tid"] for e in host_ops(doc))
        self.seq = 0

    def next_ext(self):
        self.ext += 1
        return self.ext

    def x(self, cat, name, ts, dur, args, pid=None, tid=None):
        ev = {"ph": "X", "cat": cat, "name": name, "pid": self.pid if pid is None else pid,
              "tid": self.tid if tid is None else tid, "ts": round(ts, 3), "dur": round(dur, 3), "args": args}
        self.events.append(ev)
        return ev

    def meta(self, coll, dtype, n_in, n_out, seq):
        m = {"Collective name": coll, "dtype": DTYPE.get(dtype, "Float"), "In msg nelems": n_in,
             "Out msg nelems": n_out, "Group size": 2, "In split size": "[]", "Out split size": "[]",
             "Global rank start": 0, "Global rank stride": 1, "Process Group Name": "0",
             "Process Group Description": "default_pg", "Process Group Ranks": "[0, 1]", "Rank": self.rank}
        if seq is not None:
            m["Seq"] = seq
        return m

    def launch(self, ts, ext, kernel, kstart, kdur, kargs=None, runtime="cudaLaunchKernel"):
        self.corr += 1
        c = self.corr
        kext = c if self.vintage == "older" else ext
        self.x("cuda_runtime", runtime, ts, 4.0, {"External id": kext, "cbid": 211, "correlation": c})
        args = {"External id": kext, "queued": 0, "device": self.rank, "context": 1, "stream": 7, "correlation": c,
                "registers per thread": 96, "shared memory": 0, "grid": [2, 1, 1], "block": [640, 1, 1]}
        args.update(kargs or {})
        self.x("kernel", kernel, kstart, kdur, args, pid=self.rank, tid=7)
        self.events.append({"ph": "s", "id": c, "pid": self.pid, "tid": self.tid, "ts": round(ts, 3),
                            "cat": "ac2g", "name": "ac2g"})
        self.events.append({"ph": "f", "id": c, "pid": self.rank, "tid": 7, "ts": round(kstart, 3),
                            "cat": "ac2g", "name": "ac2g", "bp": "e"})

    def op(self, ev, slot, names):
        """The NCCL parts inside one c10d op: record_param_comms, nccl:*, the launch and the kernel."""
        name = ev["name"]
        coll, ann, key, what = C10D[name]
        peer = 1 - self.rank
        idx = 1 if name in ("c10d::_allgather_base_", "c10d::alltoall_base_") else 0
        shapes, ctype, n = tensors(ev, idx)
        if what == "barrier":
            shapes, ctype, n = [[1]], "unsigned char", 1
        n_out = n * 2 if what == "all_gather" else n
        seq = None
        if what != "p2p":
            self.seq += 1
            seq = self.seq
        meta = self.meta(coll, ctype, n, n_out, seq if self.vintage != "older" else None)
        t0, d0 = ev["ts"], ev["dur"]
        rpc_args = {"External id": self.next_ext()}
        if self.vintage != "older":
            rpc_args.update(meta)
        self.x("cpu_op", "record_param_comms", t0 + d0 * 0.1, d0 * 0.8, rpc_args)
        ann_name = ann.replace("0->1", f"{self.rank}->{peer}").replace("0<-1", f"{self.rank}<-{peer}")
        ann_ext = self.next_ext()
        ann_args = {"External id": ann_ext}
        if self.vintage == "older":
            ann_args.update({"Input Dims": shapes, "Input type": [ctype] * len(shapes)})
        self.x("user_annotation", ann_name, t0 + d0 * 0.2, d0 * 0.5, ann_args)
        if self.vintage == "older":  # Work.wait's record_param_comms, alone, after the op
            self.x("cpu_op", "record_param_comms", t0 + d0 + 1.0, 2.0, {"External id": self.next_ext()})
        if slot is None or what == "p2p":
            return
        kstart, kdur = slot
        kernel = names(key, what)
        kargs = meta if self.vintage == "newer" else {}
        if kernel == CUSTOM:
            kdur = CUSTOM_US
        runtime = "hipExtModuleLaunchKernel" if self.vintage == "rccl" else "cudaLaunchKernel"
        self.launch(t0 + d0 * 0.4, ann_ext, kernel, kstart, kdur, kargs, runtime)
        if what == "all_gather" and self.vintage == "newer":  # a copy beside it: no communication
            self.launch(t0 + d0 * 0.7, ann_ext, COPY, kstart + kdur + 1.0, 3.0)

    def coalesced(self, after, slot, names):
        """batch_isend_irecv's block end: nccl:coalesced, whose launch runs the block's one SendRecv kernel."""
        kstart, kdur = slot
        ts = after["ts"] + after["dur"] + 5.0
        ext = self.next_ext()
        self.x("user_annotation", "nccl:coalesced", ts, 12.0, {"External id": ext})
        self.launch(ts + 3.0, ext, names("sr", "p2p"), kstart, kdur,
                    runtime="hipExtModuleLaunchKernel" if self.vintage == "rccl" else "cudaLaunchKernel")

    def graph(self, t0):
        """GRAPH_REPLAYS replays of a captured graph: an all_reduce, a gemm and an all_gather kernel each."""
        t = t0
        for k in range(GRAPH_REPLAYS):
            ext = self.next_ext()
            self.x("user_annotation", "decode_step", t, 20.0, {"External id": ext})
            self.corr += 1
            c = self.corr
            self.x("cuda_runtime", "cudaGraphLaunch", t + 5.0, 9.0, {"External id": ext, "cbid": 311, "correlation": c})
            kt = t + 40.0
            for kname, dur in ((NEWER["ar"], GRAPH_US["all_reduce"]), (GEMM, GEMM_US),
                               (NEWER["ag"], GRAPH_US["all_gather"])):
                self.x("kernel", kname, kt, dur, {"External id": ext, "device": self.rank, "stream": 9,
                                                   "correlation": c, "graph id": 1, "graph node id": 10 + k},
                       pid=self.rank, tid=9)
                kt += dur + 2.0
            t += 500.0


SHAPES = ("Input Dims", "Input type", "Input Strides", "Concrete Inputs")  # what record_shapes=True adds


def build(vintage, host, out):
    layout = "older" if vintage == "noshapes" else vintage
    docs = [read(os.path.join(HERE, "host", f"torch{host}-gloo-r{r}.json.gz")) for r in (0, 1)]
    per, slots = plan(docs)
    for r, doc in enumerate(docs):
        w = Writer(doc, r, layout)

        def names(key, what, vintage=layout):
            if vintage == "rccl":
                return GENERIC
            if vintage == "graph" and what == "all_reduce":
                return CUSTOM
            return (OLDER if vintage == "older" else NEWER)[key]

        ops = per[r]
        for k, ev in enumerate(ops):
            w.op(ev, slots[k], names)
            if ev["name"] == "c10d::recv_":
                w.coalesced(ev, slots[k], names)
        if vintage == "graph":  # (one instant for both ranks: their clocks are one)
            w.graph(max(p[-1]["ts"] + p[-1]["dur"] for p in per) + 1000.0)
        top = {k: v for k, v in doc.items() if k != "traceEvents"}
        top["distributedInfo"] = dict(top["distributedInfo"], backend="nccl", nccl_version="2.21.5")
        for c in top["distributedInfo"].get("pg_config", []):
            c["backend_config"] = "cuda:nccl"
        top["deviceProperties"] = [{"id": r, "name": "AMD Instinct MI300X" if vintage == "rccl" else
                                    "NVIDIA H100 80GB HBM3"}]
        events = w.events
        if layout == "older":
            base = top.pop("baseTimeNanoseconds")
            top["distributedInfo"] = {"backend": "nccl", "rank": r, "world_size": 2}
            for e in events:
                if "ts" in e:  # Unix-epoch µs, as Kineto wrote them before baseTimeNanoseconds (whole µs)
                    e["ts"] = base // 1000 + round(e["ts"])
                if "dur" in e:
                    e["dur"] = round(e["dur"])
        if vintage == "noshapes":
            top.pop("record_shapes", None)
            for e in events:
                for k in SHAPES:
                    e.get("args", {}).pop(k, None)
        top["traceEvents"] = events
        write(top, os.path.join(out, f"rank{r}.pt.trace.json.gz"))


if __name__ == "__main__":
    for vintage, host in (("newer", "2.13"), ("older", "2.4"), ("rccl", "2.13"), ("graph", "2.13"),
                          ("noshapes", "2.4")):
        build(vintage, host, os.path.join(HERE, "nccl-" + vintage if vintage != "rccl" else "rccl"))
