"""Empty-group wgrad probe: GroupedLinear steps in a loop, the weight
gradient of every empty group checked to be exactly zero.

Before each step freed CUDA memory is filled with one recognisable byte
(0x41, 0xFF, 0x7F, 0x00), so that a bad element that still carries the
fill's bits (an unwritten output) can be told from a computed one. Per
configuration and fill it prints the failing steps and, for the first
three, the groups, rows and columns of the bad elements.

    python scripts/empty_group_probe.py          (STEPS=500 by default)
    ONLY=block STEPS=400 python scripts/empty_group_probe.py
                                                 (configurations whose name contains ONLY)

The "backward only" configurations run the forward once and repeat the
backward (retain_graph): the forward's quantized copies are then fixed, so
a failure there lies in the backward's quantization or GEMMs.

Written to chase fuzz case 51 of the random-poison pass at seed 4321
(G=101, T=0, K=144, N=512, fp32, blockwise scaling) and case 425 (G=209,
mostly empty groups, current scaling); RELIABILITY.md reads its results.
Non-empty groups are checked too: each step's must equal the first's bit
for bit (the open blockwise case, mostly empty groups, may fail either way).
"""
import os, sys, time
import torch
import grouped_linear

DEV = os.environ.get("DEV", "cuda")
STEPS = int(os.environ.get("STEPS", "500"))
ONLY = os.environ.get("ONLY", "")


def fill_pools(byte):
    if DEV != "cuda":
        return
    junk = [torch.full((32768 * 4,), byte, dtype=torch.uint8, device=DEV) for _ in range(8)]
    junk.append(torch.full((64 << 20,), byte, dtype=torch.uint8, device=DEV))
    del junk


def describe_bad(bad, g_count):
    idx = bad.nonzero()
    groups = sorted(set(idx[:, 0].tolist()))
    out = []
    for g in groups[:4]:
        sel = idx[idx[:, 0] == g]
        out.append(f"g{g}: {sel.shape[0]} el rows {int(sel[:,1].min())}-{int(sel[:,1].max())} "
                   f"cols {int(sel[:,2].min())}-{int(sel[:,2].max())}")
    return f"{len(groups)} groups: " + "; ".join(out)


def run(name, G, K, N, dtype, recipe, rows_splits, backward_only=False):
    if ONLY not in name:
        return
    torch.manual_seed(0)
    module = grouped_linear.GroupedLinear(G, K, N, bias=False, params_dtype=dtype, device=DEV)
    T = sum(rows_splits)
    x = torch.randn(T, K, device=DEV, dtype=dtype)
    dy = torch.randn(T, N, device=DEV, dtype=dtype)
    arg = torch.tensor(rows_splits)
    empty = torch.tensor([s == 0 for s in rows_splits], device=DEV)
    for byte in (0x41, 0xFF, 0x7F, 0x00):
        pattern = torch.full((4,), byte, dtype=torch.uint8).view(dtype if dtype != torch.bfloat16 else torch.int16)
        fails, shown, changed = 0, 0, 0
        first = None
        t0 = time.time()
        y = None
        for i in range(STEPS):
            module.zero_grad(set_to_none=True)
            fill_pools(byte)
            if y is None or not backward_only:
                leaf = x.clone().requires_grad_(True)
                with grouped_linear.autocast(enabled=recipe is not None, recipe=recipe):
                    y = module(leaf, arg)
            y.backward(dy, retain_graph=backward_only)
            g = module.weight.grad
            # Empty groups must be exactly zero (T=0 makes them all); the
            # others must repeat the first step's bits (no split reductions).
            bad = (g != 0) & empty.view(G, 1, 1)
            if first is None:
                first = g.clone()
            elif not torch.equal(g[~empty], first[~empty]):
                changed += 1
                if changed <= 3:
                    diff = (g != first) & ~empty.view(G, 1, 1)
                    print(f"  {name} fill 0x{byte:02X} step {i}: non-empty groups changed, "
                          f"{describe_bad(diff, G)}; values (got, first) "
                          f"{list(zip(g[diff][:4].tolist(), first[diff][:4].tolist()))}", flush=True)
            if bool(bad.any()):
                fails += 1
                if shown < 3:
                    shown += 1
                    raw = g.view(torch.int32 if g.element_size() == 4 else torch.int16)
                    fill_bits = torch.full_like(raw, int.from_bytes(bytes([byte] * g.element_size()), "little", signed=True))
                    unwritten = int(((raw == fill_bits) & bad).sum())
                    nonfinite = int((~torch.isfinite(g) & bad).sum())
                    print(f"  {name} fill 0x{byte:02X} step {i}: {int(bad.sum())} bad, "
                          f"{unwritten} with the fill's bits, {nonfinite} non-finite; "
                          f"{describe_bad(bad, G)}; values {g[bad][:4].tolist()}", flush=True)
        torch.cuda.synchronize() if DEV == "cuda" else None
        print(f"{name:34s} fill 0x{byte:02X}: {fails}/{STEPS} steps bad, {changed} with "
              f"non-empty groups changed ({time.time()-t0:.1f} s)", flush=True)


fp8 = grouped_linear.fp8
import random
rng = random.Random(425)
mostly_empty = [0] * 209
for i in rng.sample(range(209), 6):
    mostly_empty[i] = rng.randint(1, 40)
run("block fp32 G101 T0 K144 N512", 101, 144, 512, torch.float32, fp8.Float8BlockScaling(), [0] * 101)
run("block bf16 G101 T0 K144 N512", 101, 144, 512, torch.bfloat16, fp8.Float8BlockScaling(), [0] * 101)
run("current bf16 G209 T0 K176 N624", 209, 176, 624, torch.bfloat16, fp8.Float8CurrentScaling(), [0] * 209)
run("current bf16 G209 mostly-empty", 209, 176, 624, torch.bfloat16, fp8.Float8CurrentScaling(), mostly_empty)
run("block bf16 G209 mostly-empty", 209, 176, 624, torch.bfloat16, fp8.Float8BlockScaling(), mostly_empty)
run("block bf16 G209 backward-only mostly-empty", 209, 176, 624, torch.bfloat16,
    fp8.Float8BlockScaling(), mostly_empty, backward_only=True)
run("bf16 (no fp8) G101 T0 K144 N512", 101, 144, 512, torch.bfloat16, None, [0] * 101)
