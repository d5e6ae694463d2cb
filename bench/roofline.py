"""The memory floor of each FP8 grouped GEMM, beside the dense GEMM it is
compared with: how close to dense a grouped kernel can come at all.

    python -m bench.roofline FP8_RESULT.json STORE_PROBE.json [--out FILE]

A grouped GEMM does the flops of one dense GEMM of the same M, N, K but moves
more bytes: the forward and dgrad read G weight matrices, and wgrad writes G
weight gradients. Per record of the FP8 throughput section (per-tensor
scaling: FP8 operands, bf16 output), the fewest bytes any kernel moves
(every operand read once, the output written once) over the GPU's copy
bandwidth (read + write, the best of `python -m bench.store_probe`'s copy_
figures on the same GPU) is the memory floor; and wgrad's output alone over
the write bandwidth (the same probe's fill_) is its store floor. No kernel
passes dense / floor, and a kernel that overlaps its loads and stores with
its math perfectly reaches min(1, dense / floor); where the floor comes near
dense's time (mem/dense close to 1), that overlap has to be near perfect.

The second table bounds the end-to-end speedup (the `fp8_end_to_end`
section: one GroupedLinear's forward+backward, quantization included, over
our bf16 step). No FP8 step is faster than its casts at copy bandwidth plus
its three GEMMs each at max(dense FP8 time, memory or store floor); the
bound is the measured bf16 step over that sum. A cast reads the 16-bit
operand and writes a row-wise and a column-wise FP8 copy (4 bytes an
element); current scaling first reads it once more for its amax. The
weights are cast in every step except in the cached-weights micro-batch.
Left out, so the bound stays a bound: scale bookkeeping, block scales'
bytes, the delayed-scaling update at the step boundary. For the blockwise
step a second figure ("block peer") takes each GEMM at max(cuBLAS's blockwise
GEMM time, its floor) instead: what GEMMs as fast as the blockwise peer of
the same record (`dense_fp8_block`) would allow, not a bound on the hardware.
Reads only committed JSON: runs anywhere.
"""

import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List

OURS = "grouped_linear:fp8"
DENSE = "dense_fp8"
DENSE_BLOCK = "dense_fp8_block"


def traffic_bytes(role: str, G: int, K: int, N: int, T: int) -> Dict[str, int]:
    """Bytes read and written at least once: E4M3/E5M2 operands (1 byte),
    bf16 output (2 bytes)."""
    if role == "fwd":  # X [T, K], W [G, N, K] -> Y [T, N]
        return {"read": T * K + G * N * K, "write": 2 * T * N}
    if role == "dgrad":  # dY [T, N], W [G, N, K] -> dX [T, K]
        return {"read": T * N + G * N * K, "write": 2 * T * K}
    if role == "wgrad":  # dY [T, N], X [T, K] -> dW [G, N, K]
        return {"read": T * N + T * K, "write": 2 * G * N * K}
    raise ValueError(f"role {role!r}: expected fwd, dgrad or wgrad")


def bandwidths(probe: dict) -> Dict[str, float]:
    """The best copy (read + write) and fill (write) bandwidth of a store
    probe, in bytes per second."""
    records = probe.get("records", [])
    if not records:
        raise ValueError("the store probe holds no records")
    return {"copy": max(r["copy_tb_per_s"] for r in records) * 1e12,
            "fill": max(r["fill_tb_per_s"] for r in records) * 1e12}


def gemm_floors_ms(role: str, G: int, K: int, N: int, T: int,
                   bw: Dict[str, float]) -> Dict[str, float]:
    """A GEMM's memory floor (its bytes at the copy bandwidth) and, for
    wgrad, its store floor (its output at the write bandwidth), in ms."""
    t = traffic_bytes(role, G, K, N, T)
    out = {"memory": (t["read"] + t["write"]) / bw["copy"] * 1e3}
    if role == "wgrad":
        out["store"] = t["write"] / bw["fill"] * 1e3
    return out


def floors(result: dict, bw: Dict[str, float]) -> List[dict]:
    rows = []
    for r in result.get("fp8_throughput", []):
        impls = r.get("impls", {})
        dense = impls.get(DENSE, {}).get("median_ms")
        if dense is None:
            continue
        f = gemm_floors_ms(r["role"], r["G"], r["K"], r["N"], r["T"], bw)
        row = {"case": r["case"], "routing": r["routing"], "role": r["role"],
               "dense_ms": dense, "memory_floor_ms": f["memory"],
               "dense_block_ms": impls.get(DENSE_BLOCK, {}).get("median_ms"),
               "attainable": min(1.0, dense / max(f.values())),
               "ours": impls.get(OURS, {}).get("ratio_to_dense")}
        if "store" in f:
            row["store_floor_ms"] = f["store"]
        rows.append(row)
    return rows


def cast_bytes(elements: int, recipe: str) -> int:
    """Bytes one cast of a 16-bit operand moves at least: read it, write
    row-wise and column-wise FP8 codes; current scaling's amax reads it
    once more."""
    return elements * (2 + 1 + 1) + (2 * elements if recipe == "fp8_current" else 0)


def gemm_floor_ms(row: dict, math: str = "dense_ms"):
    """A GEMM's least time: its math at the speed of the peer `math` names
    (dense FP8 by default, "dense_block_ms" for cuBLAS's blockwise GEMM) or
    its memory (and, for wgrad, store) floor, whichever is longer; None
    without that peer."""
    if row.get(math) is None:
        return None
    return max(row[math], row["memory_floor_ms"], row.get("store_floor_ms", 0.0))


def end_to_end_bounds(result: dict, bw: Dict[str, float]) -> List[dict]:
    """Per end-to-end record and FP8 step: the least step time and the
    speedup over the measured bf16 step it allows."""
    gemms = {(r["case"], r["routing"], r["role"]): r for r in floors(result, bw)}
    rows = []
    for r in result.get("fp8_end_to_end", []):
        impls = r.get("impls", {})
        bf16 = impls.get("bf16", {}).get("median_ms")
        roles = [gemms.get((r["case"], r["routing"], role)) for role in ("fwd", "dgrad", "wgrad")]
        if bf16 is None or None in roles:
            continue
        G, K, N, T = r["G"], r["K"], r["N"], r["T"]
        gemm_ms = sum(gemm_floor_ms(g) for g in roles)
        for name, step in impls.items():
            if name == "bf16" or "median_ms" not in step:
                continue
            recipe = name.replace("_cached_weights", "")
            casts = cast_bytes(T * K, recipe) + cast_bytes(T * N, recipe)
            if not name.endswith("_cached_weights"):
                casts += cast_bytes(G * N * K, recipe)
            cast_ms = casts / bw["copy"] * 1e3
            floor_ms = cast_ms + gemm_ms
            row = {"case": r["case"], "routing": r["routing"], "step": name,
                   "bf16_ms": bf16, "cast_floor_ms": cast_ms, "gemm_floor_ms": gemm_ms,
                   "step_floor_ms": floor_ms, "bound": bf16 / floor_ms,
                   "ours": step.get("speedup_over_bf16")}
            peer = [gemm_floor_ms(g, "dense_block_ms") for g in roles]
            if recipe == "fp8_block" and None not in peer:
                row["block_peer_bound"] = bf16 / (cast_ms + sum(peer))
            rows.append(row)
    return rows


def render_end_to_end(rows: List[dict]) -> str:
    lines = ["# end to end: bound = bf16 step / (casts at copy bandwidth + each GEMM at "
             "max(dense, floor)); block peer: the same with cuBLAS's blockwise GEMM as "
             "dense (fp8_block only); ours = measured speedup over bf16",
             f"{'case':15s} {'routing':8s} {'step':27s} {'bf16':>7s} {'casts':>7s} "
             f"{'gemms':>7s} {'floor':>7s} {'bound':>6s} {'block peer':>10s} {'ours':>5s}"]
    for r in rows:
        ours = f"{r['ours']:5.2f}" if r["ours"] is not None else f"{'-':>5s}"
        peer = f"{r['block_peer_bound']:10.2f}" if "block_peer_bound" in r else f"{'-':>10s}"
        lines.append(f"{r['case']:15s} {r['routing']:8s} {r['step']:27s} {r['bf16_ms']:7.3f} "
                     f"{r['cast_floor_ms']:7.3f} {r['gemm_floor_ms']:7.3f} "
                     f"{r['step_floor_ms']:7.3f} {r['bound']:6.2f} {peer} {ours}")
    return "\n".join(lines) + "\n"


def render(rows: List[dict], bw: Dict[str, float]) -> str:
    lines = [f"# copy {bw['copy'] / 1e12:.2f} TB/s, fill {bw['fill'] / 1e12:.2f} TB/s; ms; "
             "attainable = min(1, dense / floor); ours = grouped_linear:fp8 / dense_fp8",
             f"{'case':15s} {'routing':8s} {'role':6s} {'dense':>7s} {'memory':>7s} "
             f"{'mem/dense':>9s} {'store':>7s} {'attainable':>10s} {'ours':>5s} {'ours/att.':>9s}"]
    for r in rows:
        store = f"{r['store_floor_ms']:.3f}" if "store_floor_ms" in r else "-"
        ours = r["ours"]
        lines.append(
            f"{r['case']:15s} {r['routing']:8s} {r['role']:6s} {r['dense_ms']:7.3f} "
            f"{r['memory_floor_ms']:7.3f} {r['memory_floor_ms'] / r['dense_ms']:9.2f} "
            f"{store:>7s} {r['attainable']:10.2f} "
            + (f"{ours:5.2f} {ours / r['attainable']:9.2f}" if ours is not None else
               f"{'-':>5s} {'-':>9s}"))
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("result", help="a `python -m bench` JSON with the fp8 sections")
    parser.add_argument("store_probe", help="a `python -m bench.store_probe` JSON")
    parser.add_argument("--out", help="also write the table here")
    args = parser.parse_args(argv)
    try:
        result = json.loads(Path(args.result).read_text())
        bw = bandwidths(json.loads(Path(args.store_probe).read_text()))
    except (OSError, ValueError, KeyError) as exc:
        print(f"roofline: {exc}", file=sys.stderr)
        return 2
    rows = floors(result, bw)
    if not rows:
        print(f"roofline: {args.result} holds no FP8 throughput records with a dense_fp8 peer",
              file=sys.stderr)
        return 2
    text = (f"# python -m bench.roofline {Path(args.result).name} "
            f"{Path(args.store_probe).name}\n" + render(rows, bw))
    e2e = end_to_end_bounds(result, bw)
    if e2e:
        text += "\n" + render_end_to_end(e2e)
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
