"""The implementations grouped_linear is compared with, in the same process.

Raw products (no autograd), for the throughput table:
  grouped_mm  torch.nn.functional.grouped_mm (bf16), one call per role
  loop        a Python loop of per-expert torch.mm, writing into one output
  dense       one torch.matmul of the same total M = T, N, K (cuBLAS on a GPU)

Modules (with autograd), for the host-overhead table:
  LoopExperts        per-expert weights, torch.split + F.linear + torch.cat
  GroupedMMExperts   one [G, N, K] weight, F.grouped_mm

The loops below are deliberately per-expert Python: that cost is what the
peer stands for.
"""

from typing import Callable, List, Sequence

import torch
import torch.nn.functional as F

Role = str
Product = Callable[[], torch.Tensor]


def has_grouped_mm() -> bool:
    return hasattr(F, "grouped_mm")


def group_ends(splits: Sequence[int], device: torch.device) -> torch.Tensor:
    """grouped_mm's `offs`: int32 cumulative ends of the groups, on the device."""
    ends, total = [], 0
    for m in splits:
        total += m
        ends.append(total)
    return torch.tensor(ends, dtype=torch.int32, device=device)


def row_bounds(splits: Sequence[int]) -> List[int]:
    bounds = [0]
    for m in splits:
        bounds.append(bounds[-1] + m)
    return bounds


# -- raw products --------------------------------------------------------------

def grouped_mm_product(role: Role, x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor,
                       offs: torch.Tensor) -> Product:
    if not has_grouped_mm():
        raise RuntimeError(f"torch {torch.__version__} has no torch.nn.functional.grouped_mm")
    if role == "fwd":      # y[T, N]: x[T, K] by w_gᵀ, [G, K, N] (column-major per group)
        return lambda: F.grouped_mm(x, w.transpose(-2, -1), offs=offs)
    if role == "dgrad":    # dx[T, K]: dy[T, N] by w_g [G, N, K]
        return lambda: F.grouped_mm(dy, w, offs=offs)
    if role == "wgrad":    # dw[G, N, K]: dyᵀ[N, T] by x[T, K], groups along T
        return lambda: F.grouped_mm(dy.t(), x, offs=offs)
    raise ValueError(role)


def loop_product(role: Role, x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor,
                 splits: Sequence[int]) -> Product:
    """The best a per-expert loop can do: one output buffer, mm(out=slice),
    no torch.cat. Empty groups still write zeros in wgrad (mm over 0 rows)."""
    bounds = row_bounds(splits)
    groups = range(len(splits))
    T, K = x.shape
    N = w.shape[1]

    def fwd() -> torch.Tensor:
        y = torch.empty(T, N, dtype=x.dtype, device=x.device)
        for g in groups:
            lo, hi = bounds[g], bounds[g + 1]
            torch.mm(x[lo:hi], w[g].t(), out=y[lo:hi])
        return y

    def dgrad() -> torch.Tensor:
        dx = torch.empty(T, K, dtype=x.dtype, device=x.device)
        for g in groups:
            lo, hi = bounds[g], bounds[g + 1]
            torch.mm(dy[lo:hi], w[g], out=dx[lo:hi])
        return dx

    def wgrad() -> torch.Tensor:
        dw = torch.empty_like(w)
        for g in groups:
            lo, hi = bounds[g], bounds[g + 1]
            torch.mm(dy[lo:hi].t(), x[lo:hi], out=dw[g])
        return dw

    return {"fwd": fwd, "dgrad": dgrad, "wgrad": wgrad}[role]


def dense_product(role: Role, x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor) -> Product:
    """One GEMM of the same M = T, N, K: the yardstick every ratio divides by."""
    w0 = w[0]
    if role == "fwd":      # [T, K] x [K, N]
        return lambda: torch.matmul(x, w0.t())
    if role == "dgrad":    # [T, N] x [N, K]
        return lambda: torch.matmul(dy, w0)
    if role == "wgrad":    # [N, T] x [T, K]
        return lambda: torch.matmul(dy.t(), x)
    raise ValueError(role)


# -- modules with autograd -----------------------------------------------------

class LoopExperts(torch.nn.Module):
    """How MoE layers are often written: a weight per expert and a Python loop."""

    def __init__(self, num_experts: int, in_features: int, out_features: int, *,
                 dtype: torch.dtype, device: torch.device):
        super().__init__()
        self.weights = torch.nn.ParameterList(
            torch.nn.Parameter(torch.randn(out_features, in_features, dtype=dtype,
                                           device=device) * 0.02)
            for _ in range(num_experts))
        # A plain tuple, so the figure is the loop's cost, not ParameterList's.
        self._weight_tuple = tuple(self.weights)

    def forward(self, x: torch.Tensor, m_splits: Sequence[int]) -> torch.Tensor:
        pieces = x.split(m_splits)
        return torch.cat([F.linear(piece, weight)
                          for piece, weight in zip(pieces, self._weight_tuple)])


class GroupedMMExperts(torch.nn.Module):
    """One [G, N, K] weight and F.grouped_mm; offs are device group ends."""

    def __init__(self, num_experts: int, in_features: int, out_features: int, *,
                 dtype: torch.dtype, device: torch.device):
        super().__init__()
        self.weight = torch.nn.Parameter(
            torch.randn(num_experts, out_features, in_features, dtype=dtype, device=device) * 0.02)

    def forward(self, x: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        return F.grouped_mm(x, self.weight.transpose(-2, -1), offs=offs)
