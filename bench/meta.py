"""What a result was measured on: date, commit, versions, device, engine."""

import datetime
import os
import platform
import re
import subprocess
import sys
from typing import Dict

import torch

import grouped_linear

from .cases import REPO_ROOT


def tree_commit() -> str:
    """The checkout's commit (git), or "unknown"."""
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    commit = done.stdout.strip()
    if done.returncode == 0 and commit:
        return commit
    return "unknown"


def measured_commit() -> str:
    """The commit a result belongs to: GL_COMMIT if set (by whoever copied the
    code to the machine that measures), else the one the installed package
    was built from, which is what ran even where the checkout beside it is
    another commit or has no .git; the checkout's only for a package that
    does not say."""
    if os.environ.get("GL_COMMIT"):
        return os.environ["GL_COMMIT"]
    built = grouped_linear.build_info.get("commit", "unknown")
    return built if built != "unknown" else tree_commit()


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine() or "cpu"


def device_slug(device: torch.device) -> str:
    """For file names: 'nvidia-h200', or 'cpu'."""
    if device.type != "cuda":
        return "cpu"
    return re.sub(r"[^a-z0-9]+", "-", device_name(device).lower()).strip("-") or "cuda"


def collect(device: torch.device, engines, timer_kind: str) -> Dict[str, object]:
    now = datetime.datetime.now(datetime.timezone.utc)
    meta: Dict[str, object] = {
        "date": now.strftime("%Y-%m-%d %H:%M:%S UTC"),
        "commit": measured_commit(),
        "package_build_commit": grouped_linear.build_info.get("commit", "unknown"),
        "package_sm90_tuning": grouped_linear.build_info.get("sm90_tuning", False),
        "tree_commit": tree_commit(),
        "device_type": device.type,
        "device": device_name(device),
        "engine": grouped_linear.engine_for(device),
        "engines_measured": list(engines),
        "grouped_linear_version": getattr(grouped_linear, "__version__", "unknown"),
        "grouped_linear_with_cuda": bool(getattr(grouped_linear, "with_cuda", False)),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "argv": sys.argv[1:],
        "timer": timer_kind,
        "has_grouped_mm": hasattr(torch.nn.functional, "grouped_mm"),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        meta["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
        meta["gpu_sm_count"] = props.multi_processor_count
        meta["gpu_capability"] = f"{props.major}.{props.minor}"
    else:
        meta["torch_threads"] = torch.get_num_threads()
        meta["note"] = ("CPU run: the grouped_linear engine is the CPU reference (a plain loop); "
                        "these figures say nothing about GPU speed.")
    return meta
