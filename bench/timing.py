"""Timers behind one interface, so every measurement runs unchanged on a GPU
(CUDA events) and on the CPU (time.perf_counter), and the GPU code path can
be dry-run on a machine without one.

Both timers offer:
  per_run_seconds(fn, warmup, reps) -> list of seconds, one per call of fn
  issue_loop(fn, calls) -> (host seconds per call, device seconds per call or None)
"""

import statistics
import time
from typing import Callable, List, Optional, Tuple

import torch


class HostTimer:
    """perf_counter around each call. Right for CPU work, which is synchronous."""

    kind = "perf_counter"
    measures_device = False

    def synchronize(self) -> None:
        pass

    def per_run_seconds(self, fn: Callable[[], object], warmup: int, reps: int) -> List[float]:
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return times

    def issue_loop(self, fn: Callable[[], object], calls: int) -> Tuple[float, Optional[float]]:
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - start) / calls, None


class CudaEventTimer:
    """CUDA events on the current stream.

    per_run_seconds records an event pair around every call without
    synchronising in between, so the GPU sees the calls back to back (as in
    training); a host-bound implementation shows its launch gaps in the
    figure, which is what it costs.
    """

    kind = "cuda_event"
    measures_device = True

    def __init__(self, device: torch.device):
        self.device = device

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def per_run_seconds(self, fn: Callable[[], object], warmup: int, reps: int) -> List[float]:
        for _ in range(warmup):
            fn()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        self.synchronize()
        for start, end in zip(starts, ends):
            start.record()
            fn()
            end.record()
        self.synchronize()
        return [start.elapsed_time(end) * 1e-3 for start, end in zip(starts, ends)]

    def issue_loop(self, fn: Callable[[], object], calls: int) -> Tuple[float, Optional[float]]:
        """Host time to issue `calls` calls without synchronising, and the GPU
        time from the first to the last of them (events around the same loop).
        GPU time close to host time means the GPU waited for the host."""
        start_event = torch.cuda.Event(enable_timing=True)
        end_event = torch.cuda.Event(enable_timing=True)
        self.synchronize()
        start_event.record()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        host = time.perf_counter() - start
        end_event.record()
        self.synchronize()
        return host / calls, start_event.elapsed_time(end_event) * 1e-3 / calls


def median_ms(timer, fn: Callable[[], object], warmup: int, reps: int) -> float:
    """The median of `reps` timed calls of fn (after `warmup`), in milliseconds."""
    return statistics.median(timer.per_run_seconds(fn, warmup, reps)) * 1e3


def make_timer(device: torch.device):
    return CudaEventTimer(device) if device.type == "cuda" else HostTimer()
