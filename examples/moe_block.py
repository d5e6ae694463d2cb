"""A Mixture-of-Experts expert block on grouped_linear, with device-side splits.

    router (linear) -> top-k -> permute tokens by expert -> fc1 (GroupedLinear,
    hidden -> 2*ffn) -> SwiGLU -> fc2 (GroupedLinear, ffn -> hidden) ->
    unpermute (weighted combine by the router's probabilities)

The per-expert token counts (`m_splits`) are computed on the tensor's device
and handed to GroupedLinear as a tensor: the forward never calls `.tolist()`,
`.item()` or `.cpu()`, so on a GPU whose engine reads group sizes on the
device (sm90_grouped) the block runs without a device-to-host sync and a whole
forward+backward can be captured in a CUDA graph.

`PlainMoEBlock` / `reference_forward` are the same block in plain PyTorch (a
per-expert loop of torch.nn.functional.linear over the same parameters), used
by the tests and by the demo for comparison.

Importable (`from moe_block import MoEBlock`) and runnable:

    python examples/moe_block.py [--steps 300] [--log-every 50] [--fp8]

trains the block by regression onto a random teacher block (AdamW), prints the
loss every `--log-every` steps beside the plain PyTorch block trained from the
same initial weights on the same batches, and the mean step time of both.
"""

import argparse
import copy
import time
from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F

import grouped_linear as gl


class Routing(NamedTuple):
    """Where each (token, slot) assignment goes. Assignment a = t * top_k + j
    is token t's j-th expert. All tensors stay on the input's device."""
    probs: torch.Tensor       # [T, k] float32 combine weights (see _renormalise)
    experts: torch.Tensor     # [T, k] int64 expert ids
    order: torch.Tensor       # [T*k] assignments sorted by expert (stable)
    inverse: torch.Tensor     # [T*k] position of assignment a in the sorted order
    tokens: torch.Tensor      # [T*k] token of the i-th sorted assignment (order // k)
    counts: torch.Tensor      # [E] int64 assignments per expert: m_splits


def route(logits: torch.Tensor, top_k: int) -> "Routing":
    """Top-k routing and the permutation that groups assignments by expert.

    Only device ops: softmax, topk, a stable argsort of the expert ids, and
    the counts as a scatter-add of ones. (torch.bincount would read the
    maximum back to size its output: a sync on CUDA.)"""
    num_tokens, num_experts = logits.shape
    probs = torch.softmax(logits.float(), dim=-1)
    top_p, experts = torch.topk(probs, top_k, dim=-1)
    top_p = _renormalise(top_p)
    flat = experts.reshape(-1)
    order = torch.argsort(flat, stable=True)
    positions = torch.arange(flat.numel(), device=flat.device)
    inverse = torch.empty_like(order).scatter_(0, order, positions)
    counts = torch.zeros(num_experts, dtype=torch.int64, device=flat.device)
    counts.scatter_add_(0, flat, torch.ones_like(flat))
    tokens = torch.div(order, top_k, rounding_mode="floor")
    return Routing(top_p, experts, order, inverse, tokens, counts)


def _renormalise(top_p: torch.Tensor) -> torch.Tensor:
    """Top-k > 1: the chosen probabilities rescaled to sum to 1 (Mixtral's
    combine). Top-1 keeps the softmax probability (Switch Transformer's):
    renormalised it would be a constant 1 and the router would get no gradient."""
    return top_p / top_p.sum(dim=-1, keepdim=True) if top_p.shape[-1] > 1 else top_p


def swiglu(h: torch.Tensor) -> torch.Tensor:
    """SwiGLU on [..., 2*ffn]: silu(first half) * second half."""
    gate, up = h.chunk(2, dim=-1)
    return F.silu(gate) * up


def combine(y_assign: torch.Tensor, probs: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """[T*k, H] expert outputs in assignment order -> [T, H], weighted by probs."""
    num_tokens, top_k = probs.shape
    y = y_assign.view(num_tokens, top_k, -1).float()
    return (y * probs.unsqueeze(-1)).sum(dim=1).to(out_dtype)


class MoEBlock(torch.nn.Module):
    """The expert block on two GroupedLinear layers.

    forward(x [..., hidden]) -> [..., hidden]. Parameters: `router.weight`
    [E, hidden], `fc1.weight` [E, 2*ffn, hidden], `fc1.bias` [E, 2*ffn],
    `fc2.weight` [E, hidden, ffn], `fc2.bias` [E, hidden]."""

    def __init__(self, hidden: int, ffn: int, num_experts: int, top_k: int = 2, *,
                 bias: bool = True, dtype: torch.dtype = torch.bfloat16, device=None):
        super().__init__()
        if not 1 <= top_k <= num_experts:
            raise ValueError(f"top_k: is {top_k}; expected 1 <= top_k <= num_experts = "
                             f"{num_experts}")
        self.hidden, self.ffn, self.num_experts, self.top_k = hidden, ffn, num_experts, top_k
        self.router = torch.nn.Linear(hidden, num_experts, bias=False, dtype=dtype, device=device)
        self.fc1 = gl.GroupedLinear(num_experts, hidden, 2 * ffn, bias=bias, params_dtype=dtype,
                                    device=device)
        self.fc2 = gl.GroupedLinear(num_experts, ffn, hidden, bias=bias, params_dtype=dtype,
                                    device=device)
        self.reset_parameters()

    def reset_parameters(self, generator: Optional[torch.Generator] = None) -> None:
        """Weights ~ N(0, 1/fan_in) (unit-scale activations), biases small."""
        with torch.no_grad():
            for w in (self.router.weight, self.fc1.weight, self.fc2.weight):
                _normal_(w, w.shape[-1] ** -0.5, generator)
            for b in (self.fc1.bias, self.fc2.bias):
                if b is not None:
                    _normal_(b, 0.02, generator)

    def route(self, x2d: torch.Tensor) -> Routing:
        return route(self.router(x2d), self.top_k)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2d = x.reshape(-1, self.hidden)
        r = self.route(x2d)
        xp = x2d.index_select(0, r.tokens)              # permuted: rows grouped by expert
        h = self.fc1(xp, r.counts)                      # m_splits: a device tensor
        yp = self.fc2(swiglu(h), r.counts)
        y = yp.index_select(0, r.inverse)               # back to assignment order
        return combine(y, r.probs, x.dtype).view(shape)


def _normal_(t: torch.Tensor, std: float, generator: Optional[torch.Generator]) -> None:
    # Drawn in float32 on the CPU so that a seed gives the same weights everywhere.
    t.copy_(torch.randn(t.shape, generator=generator) * std)


def _loop_forward(x, router_weight, w1, b1, w2, b2, top_k):
    """The plain PyTorch block: per-expert loop of F.linear (boolean masks,
    host-side counts: the way such blocks are usually written)."""
    shape = x.shape
    x2d = x.reshape(-1, shape[-1])
    probs = torch.softmax(F.linear(x2d, router_weight).float(), dim=-1)
    top_p, experts = torch.topk(probs, top_k, dim=-1)
    top_p = _renormalise(top_p)
    out = torch.zeros(x2d.shape[0], w2.shape[1], dtype=torch.float32, device=x.device)
    for e in range(w1.shape[0]):
        token, slot = torch.nonzero(experts == e, as_tuple=True)
        if token.numel() == 0:
            continue
        h = F.linear(x2d[token], w1[e], None if b1 is None else b1[e])
        y = F.linear(swiglu(h), w2[e], None if b2 is None else b2[e])
        out = out.index_add(0, token, y.float() * top_p[token, slot].unsqueeze(-1))
    return out.to(x.dtype).view(shape)


def reference_forward(block: MoEBlock, x: torch.Tensor) -> torch.Tensor:
    """`block`'s function computed by the plain per-expert loop on the block's
    own parameters (gradients flow into them)."""
    return _loop_forward(x, block.router.weight, block.fc1.weight, block.fc1.bias,
                         block.fc2.weight, block.fc2.bias, block.top_k)


class PlainMoEBlock(torch.nn.Module):
    """The same block in plain PyTorch, with its own parameters (same shapes
    and names as MoEBlock's: `fc1.weight` here is `fc1_weight`)."""

    def __init__(self, block: MoEBlock):
        super().__init__()
        self.top_k = block.top_k
        self.router = copy.deepcopy(block.router)
        self.fc1_weight = torch.nn.Parameter(block.fc1.weight.detach().clone())
        self.fc2_weight = torch.nn.Parameter(block.fc2.weight.detach().clone())
        self.fc1_bias = (None if block.fc1.bias is None
                         else torch.nn.Parameter(block.fc1.bias.detach().clone()))
        self.fc2_bias = (None if block.fc2.bias is None
                         else torch.nn.Parameter(block.fc2.bias.detach().clone()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _loop_forward(x, self.router.weight, self.fc1_weight, self.fc1_bias,
                             self.fc2_weight, self.fc2_bias, self.top_k)


# ----------------------------------------------------------------------------
# The demo: regression onto a random teacher block.

def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _batch(step: int, tokens: int, hidden: int, dtype, device) -> torch.Tensor:
    # Same batches for both blocks, drawn on the device: a host-side randn of
    # 4096 x 1024 took longer than the block's step and dominated the timing.
    gen = torch.Generator(device=device).manual_seed(1000 + step)
    return torch.randn(tokens, hidden, generator=gen, device=device).to(dtype)


def train(model, teacher, args, device, dtype, fp8: bool, label: str):
    """Trains `model`; returns (losses by step, mean seconds per step after warm-up)."""
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    recipe = gl.fp8.DelayedScaling() if fp8 else None
    warmup = min(5, max(args.steps - 1, 0))
    losses = {}
    start = None
    for step in range(args.steps):
        if step == warmup:
            _sync(device)
            start = time.perf_counter()
        x = _batch(step, args.tokens, args.hidden, dtype, device)
        with torch.no_grad():
            target = teacher(x)
        if fp8:
            with gl.autocast(enabled=True, recipe=recipe):
                out = model(x)
        else:
            out = model(x)
        loss = F.mse_loss(out.float(), target.float())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if (step + 1) % args.log_every == 0 or step == 0 or step + 1 == args.steps:
            losses[step + 1] = loss.detach()
    _sync(device)
    timed = args.steps - warmup
    per_step = (time.perf_counter() - start) / timed if timed > 0 else float("nan")
    return {s: float(v) for s, v in losses.items()}, per_step


def _defaults(device: torch.device):
    if device.type == "cuda":
        return dict(tokens=4096, hidden=1024, ffn=2048, experts=8, dtype="bf16")
    return dict(tokens=128, hidden=64, ffn=64, experts=8, dtype="fp32")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    parser.add_argument("--log-every", type=int, default=50, help="print the loss every N steps")
    parser.add_argument("--fp8", action="store_true",
                        help="run the grouped block inside grouped_linear.autocast("
                             "recipe=DelayedScaling()) (CPU: emulated)")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda if present)")
    parser.add_argument("--tokens", type=int, default=None)
    parser.add_argument("--hidden", type=int, default=None)
    parser.add_argument("--ffn", type=int, default=None)
    parser.add_argument("--experts", type=int, default=None)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--dtype", choices=["bf16", "fp32"], default=None,
                        help="default: bf16 on CUDA, fp32 on the CPU")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--no-plain", action="store_true",
                        help="skip the plain PyTorch block (loss and time comparison)")
    args = parser.parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    for name, value in _defaults(device).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    args.log_every = max(1, args.log_every)

    gen = torch.Generator().manual_seed(0)
    teacher = MoEBlock(args.hidden, args.ffn, args.experts, args.top_k, dtype=dtype, device=device)
    teacher.reset_parameters(gen)
    teacher.requires_grad_(False)
    block = MoEBlock(args.hidden, args.ffn, args.experts, args.top_k, dtype=dtype, device=device)
    block.reset_parameters(gen)
    plain = PlainMoEBlock(block)        # same initial weights

    print(f"MoE block: {args.tokens} tokens, hidden {args.hidden}, ffn {args.ffn}, "
          f"{args.experts} experts, top-{args.top_k}, {args.dtype} on {device} "
          f"(engine {gl.engine_for(device)}){', FP8 DelayedScaling' if args.fp8 else ''}; "
          f"{args.steps} steps of AdamW (lr {args.lr})")
    losses, t_block = train(block, teacher, args, device, dtype, args.fp8, "grouped_linear")
    plain_losses, t_plain = ({}, float("nan"))
    if not args.no_plain:
        plain_losses, t_plain = train(plain, teacher, args, device, dtype, False, "plain")
    name = "grouped_linear" + (" (FP8)" if args.fp8 else "")
    print(f"{'step':>6}  {name + ' loss':>22}  {'plain PyTorch loss':>18}")
    for step, value in losses.items():
        other = plain_losses.get(step)
        print(f"{step:>6}  {value:>22.5f}  {'' if other is None else f'{other:.5f}':>18}")
    print(f"mean step time: {name} {t_block * 1e3:.2f} ms", end="")
    if not args.no_plain:
        print(f", plain PyTorch (per-expert loop) {t_plain * 1e3:.2f} ms "
              f"({t_plain / t_block:.2f}x)")
    else:
        print()
    return losses, plain_losses


if __name__ == "__main__":
    main()
