"""The lecture's helpers (docs/TEACHING.md#the-lecture), shared by data_parallel.py, tensor_parallel.py and
pipeline_parallel.py."""

import math

import torch
import torch.nn as nn


def int_divide(a: int, b: int) -> int:
    """a / b, which must be exact: a batch or a dimension that does not split evenly is a mistake."""
    if a % b:
        raise SystemExit(f"{a} is not divisible by {b}")
    return a // b


def get_init_params(num_inputs: int, num_outputs: int, device) -> nn.Parameter:
    """A weight matrix, the same on every rank and in every run (seeded), scaled like a usual init."""
    torch.random.manual_seed(0)
    return nn.Parameter(torch.randn(num_inputs, num_outputs, device=device) / math.sqrt(num_outputs))


def generate_sample_data(batch_size: int, num_dim: int, device) -> torch.Tensor:
    """The same data on every rank (seeded); in a real job each rank would load only what it needs."""
    generator = torch.Generator().manual_seed(42)
    return torch.randn(batch_size, num_dim, generator=generator).to(device)


def summarize_tensor(t: torch.Tensor) -> str:
    return f"shape={list(t.shape)} norm={t.detach().norm().item():.4f}"
