"""A toy training run in FP8 follows the float32 run.

Task: regression onto a random Mixture-of-Experts teacher (two GroupedLinear
layers with a GELU between, tokens routed to experts by a fixed random
router and sorted by expert). The student has the same shape, starts from
its own random weights, and trains with Adam on the MSE for 200 steps, once
in float32 and once per FP8 recipe, from the same initial weights on the same
batches.

Margins, in units of the initial loss L0 (measured on the CPU: at most 0.005
for three recipes, 0.05 for delayed scaling with E4M3 gradients, whose first
backward casts the tiny MSE gradients with the initial scale 1 and flushes
them to zero; the scales learn from that step's amax):
* every step: |L_fp8(t) - L_fp32(t)| <= 0.1 L0. FP8 perturbs each product by
  a few percent (2^-4 to 2^-3 per operand, see fp8_testutil); as gradient
  noise that moves an Adam trajectory little, and the output error it adds
  to the loss, of order (0.04)^2 of the target's scale, is far below 0.1 L0;
* the end: the mean loss of the last 20 steps within 5% of float32's (measured
  <= 1.3%), and below 15% of L0, so the run did learn.
"""

import functools

import pytest
import torch

import grouped_linear
from grouped_linear import fp8

G, K, H, N, T, STEPS = 4, 32, 64, 32, 128, 200

RECIPES = {
    "delayed-hybrid": lambda: fp8.DelayedScaling(),
    "delayed-e4m3-most_recent": lambda: fp8.DelayedScaling(
        fp8_format=fp8.Format.E4M3, amax_history_len=16, amax_compute_algo="most_recent"),
    "current-hybrid": lambda: fp8.Float8CurrentScaling(),
    "block": lambda: fp8.Float8BlockScaling(),
}


class ToyMoE(torch.nn.Module):
    def __init__(self, seed: int, device):
        super().__init__()
        g = torch.Generator()
        g.manual_seed(seed)
        self.fc1 = grouped_linear.GroupedLinear(G, K, H, device=device)
        self.fc2 = grouped_linear.GroupedLinear(G, H, N, device=device)
        with torch.no_grad():
            self.fc1.weight.copy_(torch.randn(G, H, K, generator=g) / K ** 0.5)
            self.fc2.weight.copy_(torch.randn(G, N, H, generator=g) / H ** 0.5)
            self.fc1.bias.copy_(torch.randn(G, H, generator=g) * 0.1)
            self.fc2.bias.zero_()

    def forward(self, x, m_splits):
        return self.fc2(torch.nn.functional.gelu(self.fc1(x, m_splits)), m_splits)


@functools.lru_cache(maxsize=None)
def _batches(device: str):
    g = torch.Generator()
    g.manual_seed(123)
    router = torch.randn(K, G, generator=g)
    teacher = ToyMoE(7, device)
    batches = []
    for _ in range(STEPS):
        x = torch.randn(T, K, generator=g)
        expert = (x @ router).argmax(1)
        x = x[torch.argsort(expert, stable=True)].to(device)
        m_splits = torch.bincount(expert, minlength=G).tolist()
        with torch.no_grad():
            y = teacher(x, m_splits)
        batches.append((x, m_splits, y))
    return batches


def _train(device: str, recipe_id):
    model = ToyMoE(1, device)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    recipe = RECIPES[recipe_id]() if recipe_id is not None else None
    losses = []
    for x, m_splits, y in _batches(device):
        with grouped_linear.autocast(enabled=recipe is not None, recipe=recipe):
            prediction = model(x, m_splits)
        loss = torch.nn.functional.mse_loss(prediction, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return torch.tensor(losses, dtype=torch.float64), model


@functools.lru_cache(maxsize=None)
def _baseline(device: str):
    return _train(device, None)[0]


@pytest.mark.parametrize("recipe_id", list(RECIPES))
def test_fp8_training_follows_float32(device, recipe_id):
    base = _baseline(device)
    losses, model = _train(device, recipe_id)
    l0 = float(base[0])
    assert torch.isfinite(losses).all()
    gap = (losses - base).abs() / l0
    worst = int(gap.argmax())
    assert float(gap.max()) <= 0.1, (
        f"step {worst}: FP8 loss {float(losses[worst]):.4f} vs float32 {float(base[worst]):.4f} "
        f"(initial {l0:.4f})")
    end, end_base = float(losses[-20:].mean()), float(base[-20:].mean())
    assert end <= 1.05 * end_base, f"final loss {end:.4f} vs float32 {end_base:.4f}"
    assert end <= 0.15 * l0, f"the FP8 run did not learn: {end:.4f} from {l0:.4f}"
    if recipe_id.startswith("delayed"):
        # The run went through the step boundary every step: the scales moved.
        for layer in (model.fc1, model.fc2):
            assert torch.all(layer._fp8_state.scale_fwd != 1)
            assert float(layer._fp8_state.scale_bwd[0]) != 1.0
