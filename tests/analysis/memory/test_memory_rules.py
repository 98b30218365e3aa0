"""The memory analysis' arithmetic on synthetic inputs: the formula per scheme (formula.py) and the leak rule
(leaks.py), each on a series made by hand."""

from types import SimpleNamespace

from disttrace.tracer.analysis.memory.formula import formula
from disttrace.tracer.analysis.memory.leaks import LEAK_STEPS, leaks
from disttrace.tracer.analysis.memory.results import StepMemory

MB = 1 << 20


def _rank(wraps=(), opts=()):
    return SimpleNamespace(wraps=list(wraps), optimizers=list(opts))


def _adam(n, dtype="float32", oid=1, **extra):
    return {"id": oid, "cls": "Adam", "params": {dtype: n}, "state": {"exp_avg": 4, "exp_avg_sq": 4},
            "scalar_bytes": 8, **extra}


def test_ddp_fp32_adam_is_4_4_8():
    f = formula(SimpleNamespace(ranks={0: _rank([{"scheme": "ddp", "params": {"float32": 1000}, "buffers": {},
                                                 "group_size": 4}], [_adam(1000)])}))
    assert (f.scheme, f.psi, f.k, f.n) == ("ddp", 1000, 8, 4)
    assert f.predicted[0] == {"params": 4000, "grads": 4000, "optimizer": 8000}
    assert f.expression == "(4 + 4 + 8)Ψ"


def test_zero1_predicts_its_own_partition_and_says_k_psi_over_n():
    zero = {"id": 2, "cls": "ZeroRedundancyOptimizer", "inner": 1, "group_size": 4, "params": {"float32": 1000}}
    ranks = {0: _rank([], [_adam(300), {**zero, "local": {"float32": 300}}]),
             1: _rank([], [_adam(200), {**zero, "local": {"float32": 200}}])}
    f = formula(SimpleNamespace(ranks=ranks))
    assert f.scheme == "zero1" and f.n == 4
    assert f.predicted[0]["optimizer"] == 2400 and f.predicted[1]["optimizer"] == 1600
    assert f.predicted[0]["params"] == 4000 and f.even_optimizer_bytes == 2000


def test_fsdp2_bf16_shards_everything():
    wraps = [{"scheme": "fsdp2", "params": {"bfloat16": 600}, "group_size": 2},
             {"scheme": "fsdp2", "params": {"bfloat16": 400}, "group_size": 2}]
    opt = {"id": 1, "cls": "Adam", "params": {"bfloat16": 500}, "state": {"m": 4, "v": 4, "master": 4},
           "scalar_bytes": 0}
    f = formula(SimpleNamespace(ranks={0: _rank(wraps, [opt])}))
    assert (f.scheme, f.psi, f.k) == ("fsdp2", 1000, 12)
    assert f.predicted[0] == {"params": 1000, "grads": 1000, "optimizer": 6000}  # (2 + 2 + 12)Ψ/N
    assert f.expression == "(2 + 2 + 12)Ψ/N"


def test_hand_written_zero1_master_copies_are_optimizer_state():
    """The zero1 demo's shape: bf16 modules, each rank's Adam over fp32 master copies of 1/N of them (K = 4 + 4 + 4)."""
    def rank(mine):
        opt = {**_adam(mine), "master": {"float32": mine}, "model": {"bfloat16": 1000}}
        return SimpleNamespace(wraps=[], optimizers=[opt], meta={"world_size": 2})
    f = formula(SimpleNamespace(ranks={0: rank(500), 1: rank(500)}))
    assert (f.scheme, f.psi, f.k, f.n) == ("zero1", 1000, 12, 2)
    assert f.predicted[1] == {"params": 2000, "grads": 2000, "optimizer": 6000}  # (2 + 2)Ψ + KΨ/N
    assert f.expression == "(2 + 2)Ψ + 12Ψ/N" and f.even_optimizer_bytes == 6000 and not f.unrecognized
    replicated = formula(SimpleNamespace(ranks={0: rank(1000)}))
    assert (replicated.scheme, replicated.psi, replicated.k) == ("replicated", 1000, 12)


def test_unrecognized_is_said():
    f = formula(SimpleNamespace(ranks={0: _rank([], [_adam(10)])}))
    assert f.scheme == "replicated" and f.unrecognized
    assert formula(SimpleNamespace(ranks={0: _rank()})).scheme == "unknown"


def _series(ends, warmup=1):
    return [StepMemory(i, i * 10, i * 10 + 10, e, e, e, i * 10, {"activations": e}, i < warmup)
            for i, e in enumerate(ends)]


def test_leak_from_the_step_it_began():
    ends = [50 * MB] * 10 + [50 * MB + k * 2 * MB for k in range(1, 8)]
    [p] = leaks({3: _series(ends)})
    assert p.kind == "leak" and p.ranks == [3] and p.step == 10


def test_no_leak_from_warmup_growth_or_too_few_or_too_small_steps():
    assert not leaks({0: _series([10 * MB, 20 * MB, 30 * MB] + [30 * MB] * 10, warmup=3)})  # set-up's growth
    few = [50 * MB] * 5 + [50 * MB + k * 2 * MB for k in range(1, LEAK_STEPS)] + [58 * MB] * 3
    assert not leaks({0: _series(few)})  # 4 growing steps, not 5
    small = [50 * MB + k * (MB // 2) for k in range(12)]  # under 1 MB a step
    assert not leaks({0: _series(small)})
    big = [500 * MB + k * 2 * MB for k in range(12)]  # 2 MB is under 1% of 500 MB
    assert not leaks({0: _series(big)})
