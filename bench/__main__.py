"""python -m bench [--quick] [--cases a,b] [--roles fwd,wgrad] [--out PATH]
                 [--tile-order along_m|along_n|shorter_side] ...

Run from the repository root. On a GPU: throughput of the bench_cases.json
shapes, host overhead of the tiny cases and the Python-layer figure. Without
one: a small CPU version of the same, which says nothing about GPU speed.
The summary tables are printed last on stdout; progress goes to stderr. With
matplotlib installed it also draws RESULT.png beside the JSON (bench/plot.py).
"""

import argparse
import datetime
import sys
import time
from pathlib import Path
from typing import Optional

import torch

from . import fp8_module, fp8_throughput, host_overhead, meta, plot, python_layer, throughput
from .cases import (REPO_ROOT, ROLES, ROUTINGS, TILE_ORDERS, csv_list, load_cases,
                    select_throughput_cases)
from .report import log, print_summary, write_json
from .timing import make_timer

SECTIONS = ("throughput", "fp8", "host", "python")

# (GPU, CPU) defaults. The GPU ones keep the whole run within a few minutes on
# an H200; the CPU ones within a minute on 2 cores (its engine is a plain loop).
DEFAULTS = {
    "warmup":       (5, 1),
    "reps":         (30, 5),
    "host_warmup":  (20, 1),
    "host_calls":   (200, 3),
    "host_batches": (3, 1),
    "py_calls":     (2000, 2000),
    "py_batches":   (5, 5),
}
QUICK = {
    "warmup":       (2, 1),
    "reps":         (10, 3),
    "host_warmup":  (5, 1),
    "host_calls":   (50, 2),
    "host_batches": (1, 1),
    "py_calls":     (500, 500),
    "py_batches":   (3, 3),
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="auto: cuda when available, else cpu")
    p.add_argument("--cases", help="throughput cases by name, comma-separated "
                                   "(JSON cases and the CPU cases cpu_G4, cpu_G16)")
    p.add_argument("--roles", help="comma-separated subset of fwd,dgrad,wgrad")
    p.add_argument("--routings", help="comma-separated subset of uniform,skewed")
    p.add_argument("--sections", help="comma-separated subset of throughput,fp8,host,python "
                                      "(fp8: FP8 GEMMs, on sm_90 only)")
    p.add_argument("--engines", help="grouped_linear engines to measure "
                                     "(default: every engine built for the device, default first)")
    p.add_argument("--quick", action="store_true", help="fewer repetitions (smoke test)")
    p.add_argument("--warmup", type=int, help="throughput warm-up calls per measurement")
    p.add_argument("--reps", type=int, help="throughput timed runs per measurement (median)")
    p.add_argument("--host-calls", type=int, help="calls per host-overhead batch")
    p.add_argument("--cases-file", help="bench_cases.json to use instead of the search")
    p.add_argument("--out", help="result JSON (default bench_results/<device>-<date>.json)")
    p.add_argument("--tile-order", choices=TILE_ORDERS,
                   help="the order in which the sm90_grouped kernels walk each group's tiles "
                        "(ops.set_tile_order; default: the engine's automatic choice), "
                        "recorded in the result's meta")
    return p.parse_args(argv)


def apply_tile_order(order: Optional[str], device: torch.device) -> str:
    """Sets the sm90 engine's tile order for this run; what meta records."""
    if not order:
        return "automatic"
    if device.type != "cuda":
        raise SystemExit("--tile-order: applies to the sm90_grouped engine, which needs a CUDA "
                         "GPU; this run is on the CPU")
    from grouped_linear import ops
    if "sm90_grouped" not in ops.engine_names("cuda"):
        raise SystemExit("--tile-order: this build has no sm90_grouped engine")
    ops.set_tile_order("cuda", "sm90_grouped", order)
    return order


def pick_device(choice: str) -> torch.device:
    if choice == "cuda" or (choice == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise SystemExit("--device cuda: torch.cuda.is_available() is False")
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def main(argv=None) -> int:
    args = parse_args(argv)
    device = pick_device(args.device)
    on_gpu = device.type == "cuda"
    column = 0 if on_gpu else 1
    table = QUICK if args.quick else DEFAULTS
    value = {key: pair[column] for key, pair in table.items()}
    for key in ("warmup", "reps", "host_calls"):
        if getattr(args, key) is not None:
            value[key] = getattr(args, key)

    case_file = load_cases(args.cases_file)
    sections = csv_list(args.sections, SECTIONS, "--sections") or list(SECTIONS)
    roles = csv_list(args.roles, ROLES, "--roles") or list(ROLES)
    routings = csv_list(args.routings, ROUTINGS, "--routings") or list(ROUTINGS)
    engines = csv_list(args.engines) or throughput.default_engines(device)
    cases = select_throughput_cases(case_file, on_gpu, csv_list(args.cases))
    timer = make_timer(device)
    tile_order = apply_tile_order(args.tile_order, device)

    started = datetime.datetime.now()
    out_path = Path(args.out) if args.out else (
        REPO_ROOT / "bench_results" / f"{meta.device_slug(device)}-{started:%Y%m%d-%H%M%S}.json")

    result = {"meta": meta.collect(device, engines, timer.kind)}
    result["meta"].update({"quick": bool(args.quick), "cases_file": str(case_file.path),
                           "routing_rules": case_file.routing_text, "settings": value,
                           "bias": False, "dtype": "bfloat16", "tile_order": tile_order})
    log(f"bench: {result['meta']['device']} engine={result['meta']['engine']} "
        f"engines={engines} cases={[c.name for c in cases]} -> {out_path}")
    if not on_gpu:
        log("bench: no GPU -- small CPU run; its figures say nothing about GPU speed")
    clock = time.perf_counter()

    if "throughput" in sections:
        settings = throughput.Settings(warmup=value["warmup"], reps=value["reps"], roles=roles,
                                       routings=routings, engines=engines)
        result["throughput"] = []
        for case in cases:
            result["throughput"] += throughput.run([case], device, timer, settings)
            write_json(result, out_path)   # partial results survive a later failure
    if "fp8" in sections and on_gpu and torch.cuda.get_device_capability(device) == (9, 0):
        settings = throughput.Settings(warmup=value["warmup"], reps=value["reps"], roles=roles,
                                       routings=routings, engines=engines)
        result["fp8_throughput"] = []
        for case in cases:
            result["fp8_throughput"] += fp8_throughput.run([case], device, timer, settings)
            write_json(result, out_path)
        result["fp8_output_types"] = fp8_throughput.run_output_types(cases, device, timer,
                                                                     settings)
        write_json(result, out_path)
        result["fp8_end_to_end"] = fp8_module.run(cases, device, timer, value["warmup"],
                                                  value["reps"], routings)
        write_json(result, out_path)
    if "host" in sections:
        settings = host_overhead.Settings(warmup=value["host_warmup"], calls=value["host_calls"],
                                          batches=value["host_batches"])
        result["host_overhead"] = host_overhead.run(case_file.host, device, timer, settings)
        write_json(result, out_path)
    if "python" in sections:
        result["python_layer"] = python_layer.run(case_file.host, device, value["py_calls"],
                                                  value["py_batches"])

    result["meta"]["wall_seconds"] = round(time.perf_counter() - clock, 1)
    write_json(result, out_path)
    result["path"] = str(out_path)
    print_summary(result)
    png = plot.draw(result, out_path.with_suffix(".png"))
    if png is not None:
        log(f"bench: plot {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
