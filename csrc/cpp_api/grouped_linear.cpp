#include "grouped_linear/grouped_linear.h"

#include <torch/cuda.h>
#include <torch/nn/init.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <exception>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/fp8/autocast_state.h"
#include "torch_binding/autograd_function.h"
#include "torch_binding/engines.h"
#include "torch_binding/fp8_autocast.h"
#include "torch_binding/fp8_autograd.h"
#include "torch_binding/fp8_state.h"
#include "torch_binding/group_splits.h"

namespace grouped_linear {
namespace {

namespace tb = torch_binding;

// Transformer Engine's default weight init, as python/grouped_linear/module.py.
constexpr double kDefaultInitStd = 0.023;

// Core errors become libtorch's exception types, so callers catch what
// libtorch's own checks throw (c10::Error and its Value/Type kinds).
template <typename Fn>
auto translate_errors(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const Error& e) {
    const c10::SourceLocation where{__func__, __FILE__, __LINE__};
    if (e.kind() == ErrorKind::kValue) throw c10::ValueError(where, e.what());
    if (e.kind() == ErrorKind::kType) throw c10::TypeError(where, e.what());
    throw c10::Error(where, e.what());
  }
}

void check_positive(const char* name, int64_t value) {
  GL_CHECK_VALUE(value >= 1, name, ": is ", value, "; expected an int >= 1");
}

torch::Dtype resolve_dtype(const std::optional<torch::Dtype>& requested) {
  const torch::Dtype dtype =
      requested.has_value() ? *requested : c10::typeMetaToScalarType(torch::get_default_dtype());
  GL_CHECK_TYPE(dtype == torch::kFloat || dtype == torch::kHalf || dtype == torch::kBFloat16,
                "params_dtype: ", c10::toString(dtype),
                " is not supported; expected Float, Half or BFloat16");
  return dtype;
}

torch::Device resolve_device(const std::optional<torch::Device>& requested) {
  if (requested.has_value()) return *requested;
  return torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
}

void init_parameters(const torch::Tensor& weight, const torch::Tensor& bias,
                     const InitMethod& init_method) {
  torch::NoGradGuard no_grad;
  if (bias.defined()) bias.zero_();
  if (!init_method) {
    torch::nn::init::normal_(weight, 0.0, kDefaultInitStd);
    return;
  }
  // One call per expert, as the Python module does.
  if (weight.dim() == 3) {
    for (const torch::Tensor& expert : weight.unbind(0)) init_method(expert);
  } else {
    init_method(weight);
  }
}

// Both modules: (re)registers `weight` and `bias` with the options' dtype and
// device, initialized unless on the meta device (as in Python).
template <typename Options>
void create_parameters(torch::nn::Module& module, const Options& options,
                       std::vector<int64_t> weight_shape, std::vector<int64_t> bias_shape,
                       torch::Tensor& weight, torch::Tensor& bias) {
  const torch::Device device = resolve_device(options.device());
  const auto tensor_options =
      torch::TensorOptions().dtype(resolve_dtype(options.params_dtype())).device(device);
  tb::register_builtin_engines();
  weight = module.register_parameter("weight", torch::empty(weight_shape, tensor_options));
  bias = options.bias()
             ? module.register_parameter("bias", torch::empty(bias_shape, tensor_options))
             : module.register_parameter("bias", torch::Tensor(), /*requires_grad=*/false);
  if (!device.is_meta()) init_parameters(weight, bias, options.init_method());
}

// The module's call options; delay_wgrad_compute's queue lives as long as
// the module (and the autograd nodes that stash into it).
template <typename Options>
std::shared_ptr<tb::LinearConfig> config_for(const Options& options) {
  auto config = std::make_shared<tb::LinearConfig>();
  config->fuse_wgrad_accumulation = options.fuse_wgrad_accumulation();
  config->save_original_input = options.save_original_input();
  if (options.delay_wgrad_compute()) config->wgrad_store = c10::make_intrusive<tb::WgradStore>();
  return config;
}

bool backward_dw_of(const tb::LinearConfig& config, const torch::Tensor& weight,
                    const torch::Tensor& bias) {
  if (!config.wgrad_store) return false;  // delay_wgrad_compute off: nothing is ever stashed
  return translate_errors([&] { return tb::run_backward_dw(*config.wgrad_store, weight, bias); });
}

void check_input(const torch::Tensor& inp) {
  GL_CHECK_VALUE(inp.defined(), "inp: expected a defined tensor");
  GL_CHECK_VALUE(inp.dim() >= 1, "inp: expected at least 1 dimension, got a 0-D tensor");
}

std::string expert_key(const char* name, int64_t index) { return name + std::to_string(index); }

// ---- FP8 ----

const char* format_name(Fp8Format format) {
  switch (format) {
    case Fp8Format::kE4M3: return "E4M3";
    case Fp8Format::kE5M2: return "E5M2";
    case Fp8Format::kHybrid: return "HYBRID";
  }
  GL_CHECK_VALUE(false, "fp8_format: got the value ", static_cast<int>(format),
                 ", expected Fp8Format::kE4M3, kE5M2 or kHybrid");
  return "";
}

// The recipe as the core's value, through the one checked constructor the
// Python recipes use too.
fp8::Recipe to_core_recipe(const Fp8Recipe& recipe) {
  return std::visit(
      [](const auto& r) {
        using R = std::decay_t<decltype(r)>;
        const bool fprop = r.fp8_gemm_fprop.use_split_accumulator;
        const bool dgrad = r.fp8_gemm_dgrad.use_split_accumulator;
        const bool wgrad = r.fp8_gemm_wgrad.use_split_accumulator;
        if constexpr (std::is_same_v<R, DelayedScaling>) {
          return tb::make_recipe("delayed", format_name(r.fp8_format), r.margin, r.amax_history_len,
                                 r.amax_compute_algo, false, fprop, dgrad, wgrad);
        } else if constexpr (std::is_same_v<R, Float8CurrentScaling>) {
          return tb::make_recipe("current", format_name(r.fp8_format), 0, 1024, "max", false, fprop,
                                 dgrad, wgrad);
        } else {
          return tb::make_recipe("block", format_name(r.fp8_format), 0, 1024, "max",
                                 /*power_2_scales=*/true, fprop, dgrad, wgrad);
        }
      },
      recipe);
}

constexpr const char* kFp8StateKey = "_extra_state";  // the Python modules' key

// The archive's FP8 state (undefined when it has none), checked by loading
// it into a scratch state first, so that a bad one is refused before any
// parameter changes.
torch::Tensor read_fp8_state(torch::serialize::InputArchive& archive,
                             const tb::Fp8ModuleState& state) {
  torch::Tensor saved;
  if (!archive.try_read(kFp8StateKey, saved)) return saved;
  tb::Fp8ModuleState scratch(state.num_groups(), state.name());
  scratch.load_state_dict(saved);
  return saved;
}

}  // namespace

Fp8Autocast::Fp8Autocast(const Fp8Recipe& recipe, bool enabled)
    : uncaught_exceptions_(std::uncaught_exceptions()) {
  translate_errors([&] { tb::autocast_push(enabled, to_core_recipe(recipe)); });
}

Fp8Autocast::~Fp8Autocast() noexcept(false) {
  if (std::uncaught_exceptions() > uncaught_exceptions_) {
    // Unwinding: a second exception would terminate the program.
    try {
      tb::autocast_pop();
    } catch (...) {
    }
    return;
  }
  translate_errors([] { tb::autocast_pop(); });
}

bool fp8_autocast_enabled() { return fp8::current().enabled; }

void set_fp8_amax_check(bool enabled) { tb::set_amax_check(enabled); }

// ---- GroupedLinear --------------------------------------------------------------

GroupedLinearImpl::GroupedLinearImpl(GroupedLinearOptions options_) : options(std::move(options_)) {
  reset();
}

void GroupedLinearImpl::reset() {
  translate_errors([&] {
    check_positive("num_gemms", options.num_gemms());
    check_positive("in_features", options.in_features());
    check_positive("out_features", options.out_features());
    create_parameters(*this, options,
                      {options.num_gemms(), options.out_features(), options.in_features()},
                      {options.num_gemms(), options.out_features()}, weight, bias);
    main_grad = torch::Tensor();
    fp8_state_ = std::make_shared<tb::Fp8ModuleState>(options.num_gemms(), "GroupedLinear");
    config_ = config_for(options);
  });
}

void GroupedLinearImpl::reset_parameters() { init_parameters(weight, bias, options.init_method()); }

torch::Tensor GroupedLinearImpl::forward(const torch::Tensor& inp, const MSplits& m_splits,
                                         std::optional<bool> is_first_microbatch) {
  return translate_errors([&] {
    check_input(inp);
    tb::GroupSplits splits;
    if (m_splits.is_tensor()) {
      GL_CHECK_VALUE(m_splits.tensor().defined(), "m_splits: expected a defined tensor");
      splits = tb::splits_from_tensor(m_splits.tensor(), inp.device());
    } else {
      splits = tb::splits_from_host(m_splits.counts());
    }
    tb::check_split_count(splits, weight.size(0));
    return tb::grouped_linear(inp, weight, bias, std::move(splits),
                              options.fuse_wgrad_accumulation() ? main_grad : torch::Tensor(),
                              *config_, tb::Fp8Call{fp8_state_, is_first_microbatch});
  });
}

bool GroupedLinearImpl::backward_dw() { return backward_dw_of(*config_, weight, bias); }

torch::OrderedDict<std::string, torch::Tensor> GroupedLinearImpl::expert_state_dict() const {
  torch::OrderedDict<std::string, torch::Tensor> state;
  const int64_t groups = weight.size(0);
  for (int64_t i = 0; i < groups; ++i) state.insert(expert_key("weight", i), weight.detach()[i]);
  if (bias.defined())
    for (int64_t i = 0; i < groups; ++i) state.insert(expert_key("bias", i), bias.detach()[i]);
  return state;
}

void GroupedLinearImpl::load_expert_state_dict(
    const torch::OrderedDict<std::string, torch::Tensor>& state) {
  translate_errors([&] {
    const int64_t groups = weight.size(0);
    // Checked completely first, copied after: a rejected state changes nothing.
    std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;  // (destination, source)
    std::unordered_set<std::string> consumed;
    for (const auto& [name, param] : {std::pair<std::string, torch::Tensor>{"weight", weight},
                                      std::pair<std::string, torch::Tensor>{"bias", bias}}) {
      if (!param.defined()) continue;
      const torch::Tensor destination = param.detach();
      const torch::Tensor* fused = state.find(name);
      if (fused != nullptr) {
        for (int64_t i = 0; i < groups; ++i)
          GL_CHECK_VALUE(!state.contains(expert_key(name.c_str(), i)), "state: both '", name,
                         "' and '", expert_key(name.c_str(), i), "' are present; expected the ",
                         "fused or the per-expert naming");
        GL_CHECK_VALUE(fused->sizes() == param.sizes(), "state: '", name, "' has shape ",
                       fused->sizes(), "; expected ", param.sizes());
        copies.emplace_back(destination, *fused);
        consumed.insert(name);
        continue;
      }
      for (int64_t i = 0; i < groups; ++i) {
        const std::string key = expert_key(name.c_str(), i);
        const torch::Tensor* expert = state.find(key);
        GL_CHECK_VALUE(expert != nullptr, "state: missing key '", key, "' (num_gemms = ", groups,
                       ")");
        GL_CHECK_VALUE(expert->sizes() == destination[i].sizes(), "state: '", key, "' has shape ",
                       expert->sizes(), "; expected ", destination[i].sizes());
        copies.emplace_back(destination[i], *expert);
        consumed.insert(key);
      }
    }
    for (const auto& item : state.items())
      GL_CHECK_VALUE(consumed.count(item.key()) != 0, "state: unexpected key '", item.key(),
                     "' (num_gemms = ", groups, ", bias = ", bias.defined(), ")");
    torch::NoGradGuard no_grad;
    for (auto& [destination, source] : copies) destination.copy_(source);
  });
}

void GroupedLinearImpl::save(torch::serialize::OutputArchive& archive) const {
  for (const auto& item : expert_state_dict()) archive.write(item.key(), item.value());
  archive.write(kFp8StateKey, fp8_state_->state_dict());
}

void GroupedLinearImpl::load(torch::serialize::InputArchive& archive) {
  // Per-expert keys, or the fused ones of an archive written by
  // torch::nn::Module::save; whichever the archive holds.
  torch::OrderedDict<std::string, torch::Tensor> state;
  const int64_t groups = weight.size(0);
  for (const char* name : {"weight", "bias"}) {
    torch::Tensor fused;
    if (archive.try_read(name, fused)) state.insert(name, fused);
    for (int64_t i = 0; i < groups; ++i) {
      torch::Tensor expert;
      if (archive.try_read(expert_key(name, i), expert)) state.insert(expert_key(name, i), expert);
    }
  }
  const torch::Tensor fp8_saved = translate_errors([&] {
    fp8_state_->check_not_held_elsewhere("load");
    return read_fp8_state(archive, *fp8_state_);
  });
  load_expert_state_dict(state);
  translate_errors([&] { fp8_state_->load_state_dict(fp8_saved); });
}

void GroupedLinearImpl::pretty_print(std::ostream& stream) const {
  // Numbers through std::to_string, as everywhere in this project (core/error.h).
  stream << "grouped_linear::GroupedLinear(num_gemms=" + std::to_string(options.num_gemms()) +
                ", in_features=" + std::to_string(options.in_features()) +
                ", out_features=" + std::to_string(options.out_features()) +
                ", bias=" + (options.bias() ? "true" : "false") + ")";
}

// ---- Linear ---------------------------------------------------------------------

LinearImpl::LinearImpl(LinearOptions options_) : options(std::move(options_)) { reset(); }

void LinearImpl::reset() {
  translate_errors([&] {
    check_positive("in_features", options.in_features());
    check_positive("out_features", options.out_features());
    create_parameters(*this, options, {options.out_features(), options.in_features()},
                      {options.out_features()}, weight, bias);
    main_grad = torch::Tensor();
    fp8_state_ = std::make_shared<tb::Fp8ModuleState>(1, "Linear");
    config_ = config_for(options);
  });
}

void LinearImpl::reset_parameters() { init_parameters(weight, bias, options.init_method()); }

torch::Tensor LinearImpl::forward(const torch::Tensor& inp,
                                  std::optional<bool> is_first_microbatch) {
  return translate_errors([&] {
    check_input(inp);
    // Every row is in the one group.
    int64_t rows = 1;
    for (int64_t d = 0; d + 1 < inp.dim(); ++d) rows *= inp.size(d);
    return tb::grouped_linear(inp, weight, bias, tb::splits_from_host({rows}),
                              options.fuse_wgrad_accumulation() ? main_grad : torch::Tensor(),
                              *config_, tb::Fp8Call{fp8_state_, is_first_microbatch});
  });
}

bool LinearImpl::backward_dw() { return backward_dw_of(*config_, weight, bias); }

void LinearImpl::save(torch::serialize::OutputArchive& archive) const {
  torch::nn::Module::save(archive);
  archive.write(kFp8StateKey, fp8_state_->state_dict());
}

void LinearImpl::load(torch::serialize::InputArchive& archive) {
  const torch::Tensor fp8_saved = translate_errors([&] {
    fp8_state_->check_not_held_elsewhere("load");
    return read_fp8_state(archive, *fp8_state_);
  });
  torch::nn::Module::load(archive);
  translate_errors([&] { fp8_state_->load_state_dict(fp8_saved); });
}

void LinearImpl::pretty_print(std::ostream& stream) const {
  stream << "grouped_linear::Linear(in_features=" + std::to_string(options.in_features()) +
                ", out_features=" + std::to_string(options.out_features()) +
                ", bias=" + (options.bias() ? "true" : "false") + ")";
}

}  // namespace grouped_linear
