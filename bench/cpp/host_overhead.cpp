// Host cost per call of the C++ API, with no Python anywhere: the same tiny
// problems and modes as `python -m bench --sections host`
// (bench/host_overhead.py), so that the two tables side by side show what
// the Python layer and its calls into autograd add.
//
//   host_overhead [--device cpu|cuda] [--calls N] [--batches B] [--groups 8,32,128]
//
// Cases: G = 8, 32, 128 experts (--groups), 16 rows each, K = N = 256, bf16. Modes:
// fwd_no_grad, fwd_grad (the weights need grad, so the node is built) and
// fwd_bwd (backward from a prepared gradient, the gradients reset to
// undefined after each step, as zero_grad(set_to_none) does). Candidates:
//   grouped_linear                    the bf16 GroupedLinear
//   grouped_linear_fp8_delayed        inside one Fp8Autocast(DelayedScaling)
//                                     region, weights quantized in each call
//   grouped_linear_fp8_delayed_cached the same with is_first_microbatch =
//                                     false (weights quantized once)
//   autograd_floor                    a view of the input: libtorch's own
//                                     cost of one forward (+ backward)
// host µs = wall time to issue `calls` calls without synchronizing / calls
// (median over batches); wall µs adds the wait for the device at the end of
// each batch: wall ≈ host means the device waited for the host. On the CPU
// the engine computes inside the call, so there the figures measure that
// too, not the host path alone.
#include <grouped_linear/grouped_linear.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace gl = grouped_linear;

namespace {

struct Args {
  std::string device;
  int calls = 200;
  int batches = 5;
  std::vector<int64_t> groups{8, 32, 128};
};

// "8,32,128" -> {8, 32, 128}; empty on anything else.
std::vector<int64_t> parse_groups(const char* text) {
  std::vector<int64_t> groups;
  const char* p = text;
  while (*p != '\0') {
    char* end = nullptr;
    const long long value = std::strtoll(p, &end, 10);
    if (end == p || value < 1 || (*end != ',' && *end != '\0')) return {};
    groups.push_back(value);
    p = *end == ',' ? end + 1 : end;
  }
  return groups;
}

Args parse(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (std::strcmp(argv[i], "--device") == 0 && has_value) {
      args.device = argv[++i];
    } else if (std::strcmp(argv[i], "--calls") == 0 && has_value) {
      args.calls = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--batches") == 0 && has_value) {
      args.batches = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--groups") == 0 && has_value) {
      args.groups = parse_groups(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--device cpu|cuda] [--calls N] [--batches B] [--groups 8,32,128]\n",
                   argv[0]);
      std::exit(2);
    }
  }
  if (args.calls < 1 || args.batches < 1 || args.groups.empty()) {
    std::fprintf(stderr,
                 "--calls and --batches: expected positive integers; --groups: expected "
                 "comma-separated positive integers\n");
    std::exit(2);
  }
  return args;
}

using Clock = std::chrono::steady_clock;

double micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

void wait_for(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

struct Timing {
  double host_us, wall_us;
};

// `step` repeated `calls` times per batch after a warm-up batch; medians.
Timing measure(const std::function<void()>& step, const torch::Device& device, const Args& args) {
  for (int i = 0; i < std::max(1, args.calls / 10); ++i) step();
  wait_for(device);
  std::vector<double> host, wall;
  for (int b = 0; b < args.batches; ++b) {
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < args.calls; ++i) step();
    const Clock::time_point issued = Clock::now();
    wait_for(device);
    const Clock::time_point done = Clock::now();
    host.push_back(micros(issued - start) / args.calls);
    wall.push_back(micros(done - start) / args.calls);
  }
  std::sort(host.begin(), host.end());
  std::sort(wall.begin(), wall.end());
  return {host[host.size() / 2], wall[wall.size() / 2]};
}

struct Candidate {
  std::string name;
  // x -> out; called inside `region` (an Fp8Autocast for the FP8 ones)
  std::function<torch::Tensor(const torch::Tensor&)> forward;
  std::vector<torch::Tensor> params;
  std::optional<gl::Fp8Recipe> recipe;
};

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  torch::manual_seed(0);
  const torch::Device device(args.device.empty() ? (torch::cuda::is_available() ? "cuda" : "cpu")
                                                 : args.device);
  const int64_t k = 256, n = 256, rows_per_group = 16;
  std::printf("# grouped_linear C++ API host overhead on %s: %d calls x %d batches, medians\n",
              device.str().c_str(), args.calls, args.batches);
  std::printf("%-10s %4s %-12s %-34s %10s %10s\n", "case", "G", "mode", "implementation", "host_us",
              "wall_us");
  for (const int64_t groups : args.groups) {
    const int64_t rows = groups * rows_per_group;
    const std::vector<int64_t> splits(groups, rows_per_group);
    gl::GroupedLinear experts(gl::GroupedLinearOptions(groups, k, n)
                                  .bias(false)
                                  .params_dtype(torch::kBFloat16)
                                  .device(device));
    const auto opts = torch::TensorOptions().dtype(torch::kBFloat16).device(device);
    const torch::Tensor x = torch::randn({rows, k}, opts);
    const torch::Tensor x_leaf = x.clone().requires_grad_();
    const torch::Tensor dy = torch::randn({rows, n}, opts);

    std::vector<Candidate> candidates;
    candidates.push_back({"grouped_linear",
                          [&](const torch::Tensor& in) { return experts->forward(in, splits); },
                          {experts->weight},
                          std::nullopt});
    candidates.push_back({"grouped_linear_fp8_delayed",
                          [&](const torch::Tensor& in) { return experts->forward(in, splits); },
                          {experts->weight},
                          gl::DelayedScaling{}});
    candidates.push_back(
        {"grouped_linear_fp8_delayed_cached",
         [&](const torch::Tensor& in) { return experts->forward(in, splits, false); },
         {experts->weight},
         gl::DelayedScaling{}});
    candidates.push_back(
        {"autograd_floor", [](const torch::Tensor& in) { return in.view_as(in); }, {}, {}});

    for (const Candidate& c : candidates) {
      // One region around the loop, as a model's layers share a step's; the
      // cached candidate quantizes its weights once first.
      std::optional<gl::Fp8Autocast> region;
      if (c.recipe.has_value()) region.emplace(*c.recipe);
      if (c.name == "grouped_linear_fp8_delayed_cached") {
        torch::NoGradGuard no_grad;
        experts->forward(x, splits, true);
      }
      const std::vector<std::pair<const char*, std::function<void()>>> modes{
          {"fwd_no_grad",
           [&] {
             torch::NoGradGuard no_grad;
             c.forward(x);
           }},
          {"fwd_grad", [&] { c.forward(x); }},
          {"fwd_bwd", [&] {
             c.forward(x_leaf).backward(dy);
             x_leaf.mutable_grad() = torch::Tensor();
             for (const torch::Tensor& p : c.params) p.mutable_grad() = torch::Tensor();
           }}};
      for (const auto& [mode, step] : modes) {
        const Timing t = measure(step, device, args);
        std::printf("%-10s %4lld %-12s %-34s %10.2f %10.2f\n",
                    ("tiny_G" + std::to_string(groups)).c_str(), static_cast<long long>(groups),
                    mode, c.name.c_str(), t.host_us, t.wall_us);
      }
    }
  }
  return 0;
}
