"""The three products of a grouped linear layer, without autograd.

For tests, benchmarks and callers that manage their own backward. Each takes
`m_splits` as a list/tuple of ints or a 1-D integer tensor, and an optional
`out` buffer (written, never read) so callers can reuse memory.
"""

from typing import Optional, Sequence, Tuple, Union

import torch

from . import _C

Splits = Union[Sequence[int], torch.Tensor]


def forward(inp: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
            m_splits: Splits, *, out: Optional[torch.Tensor] = None,
            engine: str = "") -> torch.Tensor:
    """y[T, N] = per group x_g[m_g, K] @ weight[g].T (+ bias[g])."""
    return _C.ops.forward(inp, weight, bias, m_splits, out=out, engine=engine)


def dgrad(grad_output: torch.Tensor, weight: torch.Tensor, m_splits: Splits, *,
          out: Optional[torch.Tensor] = None, engine: str = "") -> torch.Tensor:
    """dx[T, K] = per group dy_g[m_g, N] @ weight[g]."""
    return _C.ops.dgrad(grad_output, weight, m_splits, out=out, engine=engine)


def wgrad(grad_output: torch.Tensor, inp: torch.Tensor, m_splits: Splits, *,
          grad_weight: Optional[torch.Tensor] = None, accumulate: bool = False,
          weight_grad: bool = True, bias_grad: bool = False,
          grad_bias: Optional[torch.Tensor] = None,
          engine: str = "") -> Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
    """(dw[G, N, K], db[G, N]): dw[g] = dy_g.T @ x_g (added to grad_weight when
    accumulate), db[g] = dy_g.sum(0). Either is None when not asked for."""
    return _C.ops.wgrad(grad_output, inp, m_splits, grad_weight=grad_weight,
                        accumulate=accumulate, weight_grad=weight_grad, bias_grad=bias_grad,
                        grad_bias=grad_bias, engine=engine)


def set_engine_override(device_type: str, name: str) -> None:
    """Pin the engine for 'cpu' or 'cuda' by name ('' restores automatic choice)."""
    _C.set_engine_override(device_type, name)


def engine_names(device_type: str):
    """Engines built for 'cpu' or 'cuda', the default first."""
    return list(_C.engine_names(device_type))


def kernel_names(device_type: str, engine: str):
    """Kernels (tile configurations) that `engine` chooses among; empty for
    engines with a single kernel."""
    return list(_C.kernel_names(device_type, engine))


def set_kernel_override(device_type: str, engine: str, kernel: str) -> None:
    """Force one kernel of `engine` by name, for tests and tuning ('' restores
    the automatic choice). An unknown name raises ValueError. The override
    applies only to calls the kernel serves (its role, dtypes and scaling);
    every other call keeps the automatic choice, so one override can be set
    while a whole forward and backward runs."""
    _C.set_kernel_override(device_type, engine, kernel)


def set_tile_order(device_type: str, engine: str, order: str) -> None:
    """For tuning: the order in which `engine`'s CTAs walk each group's output
    tiles, "along_m", "along_n" or "shorter_side" (CUTLASS's rule for single
    GEMMs); '' restores the automatic one (wgrad along the shorter side, the
    forward and dgrad along M unless each group's rows are at least twice the
    output's columns). Engines without a tile scheduler accept only ''."""
    _C.set_tile_order(device_type, engine, order)


def set_l2_promotion(device_type: str, engine: str, promotion: str) -> None:
    """For tuning: how much L2 fetches from memory for each miss of `engine`'s
    operand loads, "128B" or "256B" (the L2 promotion of the sm90 kernels'
    tensor maps); '' restores the default, "128B" (CUTLASS's). Results are
    the same bits either way; only the memory traffic's shape changes.
    Engines that load no operands through tensor maps accept only ''."""
    _C.set_l2_promotion(device_type, engine, promotion)


def set_dependent_launch(enabled: bool) -> None:
    """Whether the FP8 casts and the sm90 grouped GEMMs launch as programmatic
    dependents on sm_90+ GPUs (on by default; GROUPED_LINEAR_DEPENDENT_LAUNCH=0
    turns it off at start). A dependent kernel's CTAs take SMs as the kernel
    ahead of it drains, then wait for it to finish before touching memory, so
    results are the same bits either way; only the device's idle time between
    kernels changes. Process-wide; for A/B timing and tests."""
    _C.set_dependent_launch(_bool(enabled, "enabled"))


def dependent_launch() -> bool:
    """The switch set_dependent_launch sets (False in a build without CUDA)."""
    return bool(_C.dependent_launch())


def _bool(value, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"grouped_linear: {name}: got {value!r}, expected a bool")
    return value


def _splits_tensor(m_splits: Splits) -> torch.Tensor:
    return m_splits if isinstance(m_splits, torch.Tensor) else torch.tensor(list(m_splits),
                                                                              dtype=torch.int64)


def fp8_forward(inp: torch.Tensor, inp_scale_inv: torch.Tensor, weight: torch.Tensor,
                weight_scale_inv: torch.Tensor, bias: Optional[torch.Tensor], m_splits: Splits, *,
                out: Optional[torch.Tensor] = None, out_dtype: torch.dtype = torch.bfloat16,
                engine: str = "", split_accumulator: bool = True) -> torch.Tensor:
    """FP8 forward on quantized operands: inp [T, K] and weight [G, N, K] in
    torch.float8_e4m3fn/e5m2 with float32 scale_inv, per-tensor (inp_scale_inv
    [1], weight_scale_inv [G]) or blockwise (Float8BlockScaling: inp_scale_inv
    [ceil(K/128), T] for 1x128 blocks, block-major: block b of row r at [b, r];
    weight_scale_inv [G, ceil(N/128), ceil(K/128)] for 128x128 blocks). y_g = dequant(x_g) @ dequant(w_g).T
    (+ bias[g]). engine="emulate" forces the dequantize-then-float32 emulation.
    split_accumulator=False allows a fast-accumulation kernel (a recipe's
    use_split_accumulator; the emulation sums in float32 either way); the
    same argument in fp8_dgrad and fp8_wgrad."""
    return _C.ops.fp8_forward(inp, inp_scale_inv, weight, weight_scale_inv, bias,
                              _splits_tensor(m_splits), out, out_dtype, engine,
                              _bool(split_accumulator, "split_accumulator"))


def fp8_dgrad(grad_output: torch.Tensor, grad_output_scale_inv: torch.Tensor,
              weight_t: torch.Tensor, weight_scale_inv: torch.Tensor, m_splits: Splits, *,
              out: Optional[torch.Tensor] = None, out_dtype: torch.dtype = torch.bfloat16,
              engine: str = "", split_accumulator: bool = True) -> torch.Tensor:
    """FP8 dgrad: grad_output [T, N], weight_t [G, K, N] (each expert's weight
    transposed, the column-wise copy). dx_g = dy_g @ w_g. Scales per-tensor
    ([1], [G]) or blockwise ([ceil(N/128), T], [G, ceil(K/128), ceil(N/128)])."""
    return _C.ops.fp8_dgrad(grad_output, grad_output_scale_inv, weight_t, weight_scale_inv,
                            _splits_tensor(m_splits), out, out_dtype, engine,
                            _bool(split_accumulator, "split_accumulator"))


def fp8_wgrad(grad_output_t: torch.Tensor, grad_output_scale_inv: torch.Tensor,
              inp_t: torch.Tensor, inp_scale_inv: torch.Tensor, m_splits: Splits,
              total_rows: int, *, out: Optional[torch.Tensor] = None, accumulate: bool = False,
              out_dtype: torch.dtype = torch.bfloat16, engine: str = "",
              split_accumulator: bool = True) -> torch.Tensor:
    """FP8 wgrad on the column-wise copies grad_output_t [N, P] and inp_t [K, P]
    (group g's rows in columns starting at sum_{j<g} roundup(m_j, GROUP_ALIGN),
    _C.fp8.GROUP_ALIGN = 32, with zeros in the columns between, as the
    quantizers write them: the sm90 kernels read them as part of the group).
    dw_g = dy_g.T @ x_g, added to `out` when accumulate. Scales per-tensor ([1]
    each) or blockwise, block-major: [B, N] and [B, K] with B = ceil(T/128) + G,
    group g's 1x128 blocks (restarting at its first row) from block
    sum_{j<g} ceil(m_j/128)."""
    return _C.ops.fp8_wgrad(grad_output_t, grad_output_scale_inv, inp_t, inp_scale_inv,
                            _splits_tensor(m_splits), total_rows, out, accumulate, out_dtype,
                            engine, _bool(split_accumulator, "split_accumulator"))
