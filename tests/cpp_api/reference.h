// The float64 reference of the C++ API tests: each group's products, one
// group at a time.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace grouped_linear::test {

struct Reference {
  torch::Tensor y, dx, dw, db;  // float64
};

// y_g = x_g · w_gᵀ + b_g and the gradients of sum(y * dy), group by group in float64.
inline Reference reference(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                           const std::vector<int64_t>& splits, const torch::Tensor& dy) {
  const auto opts = torch::TensorOptions().dtype(torch::kDouble);
  const torch::Tensor xd = x.to(torch::kDouble), wd = w.to(torch::kDouble);
  const torch::Tensor dyd = dy.to(torch::kDouble);
  Reference r{torch::zeros({x.size(0), w.size(1)}, opts), torch::zeros_like(xd),
              torch::zeros_like(wd), torch::zeros({w.size(0), w.size(1)}, opts)};
  int64_t start = 0;
  for (size_t g = 0; g < splits.size(); ++g) {
    const int64_t m = splits[g];
    const torch::Tensor xg = xd.narrow(0, start, m), dyg = dyd.narrow(0, start, m);
    torch::Tensor yg = xg.matmul(wd[g].t());
    if (b.defined()) yg = yg + b[g].to(torch::kDouble);
    r.y.narrow(0, start, m).copy_(yg);
    r.dx.narrow(0, start, m).copy_(dyg.matmul(wd[g]));
    r.dw[g].copy_(dyg.t().matmul(xg));
    r.db[g].copy_(dyg.sum(0));
    start += m;
  }
  return r;
}

}  // namespace grouped_linear::test
