"""The Python layer of GroupedLinear.forward alone.

`grouped_linear.module._C` is swapped for a stub whose grouped_linear(...)
(and linear(...)) return the input at once, so what is timed is the module's
own per-call Python work (nn.Module.__call__ plus forward's body). DESIGN.md
asks that this does not grow with G: compare the G=8, 32 and 128 rows. A
trivial nn.Module gives the floor that any module call pays.
"""

import statistics
import sys
import time
from typing import Callable, List, Sequence

import torch

import grouped_linear
import grouped_linear.module as gl_module

from .cases import HostCase, uniform_splits


class _NativeStub:
    """Stands in for grouped_linear._C during the measurement."""

    @staticmethod
    def grouped_linear(inp, *args):
        return inp

    @staticmethod
    def linear(inp, *args):
        return inp

    def __getattr__(self, name):
        # Anything else the module might reach is a bug in this measurement.
        raise AttributeError(f"python_layer stub: grouped_linear.module._C.{name} was called")


class _Floor(torch.nn.Module):
    def forward(self, inp, *args):
        return inp


def per_call_us(fn: Callable[[], object], calls: int, batches: int) -> float:
    for _ in range(max(calls // 10, 1)):
        fn()
    batch_times = []
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        batch_times.append((time.perf_counter() - start) / calls)
    return statistics.median(batch_times) * 1e6


def run(cases: Sequence[HostCase], device: torch.device, calls: int, batches: int,
        dtype: torch.dtype = torch.bfloat16) -> List[dict]:
    print("python layer", file=sys.stderr, flush=True)
    records = []
    floor = _Floor()
    x_small = torch.randn(16, 256, dtype=dtype, device=device)
    records.append({"what": "nn.Module call floor (forward returns input)", "G": None,
                    "us_per_call": per_call_us(lambda: floor(x_small, None), calls, batches)})

    modules = []
    for case in cases:
        module = grouped_linear.GroupedLinear(case.G, case.K, case.N, bias=False,
                                              params_dtype=dtype, device=device)
        x = torch.randn(case.T, case.K, dtype=dtype, device=device)
        modules.append((f"GroupedLinear G={case.G}, m_splits list", case.G,
                        module, (x, uniform_splits(case.G, case.T))))
    linear = grouped_linear.Linear(256, 256, bias=False, params_dtype=dtype, device=device)
    modules.append(("Linear", 1, linear, (x_small,)))

    real_native = gl_module._C
    gl_module._C = _NativeStub()
    try:
        for what, groups, module, args in modules:
            us = per_call_us(lambda: module(*args), calls, batches)
            records.append({"what": what, "G": groups, "us_per_call": us})
            print(f"  {what:36s} {us:.2f} us", file=sys.stderr, flush=True)
    finally:
        gl_module._C = real_native
    return records
