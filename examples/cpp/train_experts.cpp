// Trains a small GroupedLinear by regression onto a random teacher (one
// linear map per expert) with the C++ API, and prints the loss:
//
//   train_experts [--steps N] [--log-every N] [--device cpu|cuda] [--fp8]
//
// --fp8 runs each forward inside grouped_linear::Fp8Autocast with
// DelayedScaling (forward, dgrad and wgrad in FP8; emulated on the CPU).
// Each step routes a batch of random rows to the experts with random group
// sizes (some experts get no rows), as an MoE router would. Exits with 1 if
// the loss did not fall, so CTest can run it as a smoke test.
#include <grouped_linear/grouped_linear.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Args {
  int steps = 200;
  int log_every = 25;
  std::string device;
  bool fp8 = false;
};

Args parse(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (std::strcmp(argv[i], "--steps") == 0 && has_value) {
      args.steps = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--log-every") == 0 && has_value) {
      args.log_every = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--device") == 0 && has_value) {
      args.device = argv[++i];
    } else if (std::strcmp(argv[i], "--fp8") == 0) {
      args.fp8 = true;
    } else {
      std::fprintf(stderr, "usage: %s [--steps N] [--log-every N] [--device cpu|cuda] [--fp8]\n",
                   argv[0]);
      std::exit(2);
    }
  }
  if (args.steps < 1 || args.log_every < 1) {
    std::fprintf(stderr, "--steps and --log-every: expected positive integers\n");
    std::exit(2);
  }
  return args;
}

// Group sizes summing to `rows`: a random share per expert, one expert left
// empty at random (routers do that).
std::vector<int64_t> random_splits(int64_t groups, int64_t rows) {
  torch::Tensor share = torch::rand({groups});
  share[torch::randint(groups, {1}).item<int64_t>()] = 0;
  share = share / share.sum();
  std::vector<int64_t> splits(groups);
  int64_t used = 0;
  for (int64_t g = 0; g + 1 < groups; ++g) {
    splits[g] = static_cast<int64_t>(share[g].item<double>() * static_cast<double>(rows));
    used += splits[g];
  }
  splits[groups - 1] = rows - used;
  return splits;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  torch::manual_seed(0);
  const torch::Device device(args.device.empty() ? (torch::cuda::is_available() ? "cuda" : "cpu")
                                                 : args.device);
  const int64_t experts = 4, in_features = 32, out_features = 16, rows = 256;

  grouped_linear::GroupedLinear model(
      grouped_linear::GroupedLinearOptions(experts, in_features, out_features).device(device));
  // The teacher: what each expert should learn.
  const torch::Tensor teacher_w = torch::randn({experts, out_features, in_features}, device) * 0.2;
  const torch::Tensor teacher_b = torch::randn({experts, out_features}, device) * 0.1;

  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-2));
  std::ostringstream description;
  model->pretty_print(description);
  std::printf("%s on %s, %d steps%s\n", description.str().c_str(), device.str().c_str(), args.steps,
              args.fp8 ? ", FP8 (DelayedScaling)" : "");
  double first_loss = 0, last_loss = 0;
  for (int step = 1; step <= args.steps; ++step) {
    const std::vector<int64_t> splits = random_splits(experts, rows);
    const torch::Tensor x = torch::randn({rows, in_features}, device);
    std::vector<torch::Tensor> targets;
    int64_t start = 0;
    for (int64_t g = 0; g < experts; ++g) {
      const torch::Tensor rows_g = x.narrow(0, start, splits[g]);
      targets.push_back(torch::addmm(teacher_b[g], rows_g, teacher_w[g].t()));
      start += splits[g];
    }
    const torch::Tensor target = torch::cat(targets);

    optimizer.zero_grad();
    torch::Tensor prediction;
    {
      // The region ends before backward, as in Python: its exit updates the
      // delayed-scaling scales, and backward runs with the recipe it saved.
      grouped_linear::Fp8Autocast fp8(grouped_linear::DelayedScaling{}, args.fp8);
      prediction = model(x, splits);
    }
    const torch::Tensor loss = torch::mse_loss(prediction, target);
    loss.backward();
    optimizer.step();

    last_loss = loss.item<double>();
    if (step == 1) first_loss = last_loss;
    if (step == 1 || step % args.log_every == 0 || step == args.steps)
      std::printf("step %4d  loss %.6f\n", step, last_loss);
  }
  const bool learned = last_loss < first_loss;
  std::printf("%s: loss %.6f -> %.6f\n", learned ? "ok" : "FAILED", first_loss, last_loss);
  return learned ? 0 : 1;
}
