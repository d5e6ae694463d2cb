#include "core/engine_registry.h"

#include <atomic>
#include <mutex>

#include "core/error.h"

namespace grouped_linear {
namespace {

struct Registry {
  std::mutex mutex;
  std::vector<GroupedGemmEngine*> engines[2];  // indexed by DeviceType
  // Read on every call, written by tests and tuning from any thread: an
  // atomic pointer, so a forward never takes the lock nor reads a string
  // that another thread is assigning.
  std::atomic<GroupedGemmEngine*> override_engine[2] = {nullptr, nullptr};
};

Registry& registry() {
  static Registry instance;
  return instance;
}

int slot(DeviceType type) { return static_cast<int>(type); }

GroupedGemmEngine* find(const std::vector<GroupedGemmEngine*>& engines, const std::string& name) {
  for (GroupedGemmEngine* engine : engines)
    if (name == engine->name()) return engine;
  return nullptr;
}

std::string join_names(const std::vector<GroupedGemmEngine*>& engines) {
  std::string names;
  for (GroupedGemmEngine* engine : engines)
    names += (names.empty() ? "" : ", ") + std::string(engine->name());
  return names.empty() ? "none" : names;
}

}  // namespace

void GroupedGemmEngine::set_kernel_override(const std::string& name) {
  GL_CHECK_VALUE(name.empty(), "kernel: got '", name, "', but engine '", this->name(),
                 "' has no named kernels; expected ''");
}

void GroupedGemmEngine::set_tile_order(const std::string& order) {
  GL_CHECK_VALUE(order.empty(), "tile order: got '", order, "', but engine '", this->name(),
                 "' has no tile scheduler; expected ''");
}

void GroupedGemmEngine::set_l2_promotion(const std::string& promotion) {
  GL_CHECK_VALUE(promotion.empty(), "L2 promotion: got '", promotion, "', but engine '",
                 this->name(), "' loads no operands through tensor maps; expected ''");
}

void register_engine(DeviceType device_type, GroupedGemmEngine* engine) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto& engines = r.engines[slot(device_type)];
  if (find(engines, engine->name()) == nullptr) engines.push_back(engine);
}

GroupedGemmEngine& engine_for(const Device& device, const std::string& requested) {
  Registry& r = registry();
  // The engine list is filled once at start-up; reading it needs no lock,
  // and a forward must not take one.
  const auto& engines = r.engines[slot(device.type)];
  GroupedGemmEngine* chosen = nullptr;
  if (!requested.empty()) {
    chosen = find(engines, requested);
    GL_CHECK_VALUE(chosen != nullptr, "engine: '", requested, "' is not available for ",
                   device_type_name(device.type), "; expected one of: ", join_names(engines));
  } else {
    chosen = r.override_engine[slot(device.type)].load(std::memory_order_acquire);
  }
  if (chosen != nullptr) {
    GL_CHECK_VALUE(chosen->available(device), "engine: '", chosen->name(), "' does not run on ",
                   device_type_name(device.type), ":", device.index);
    return *chosen;
  }
  for (GroupedGemmEngine* engine : engines)
    if (engine->available(device)) return *engine;
  GL_CHECK_VALUE(false, "no grouped GEMM engine is built for ", device_type_name(device.type),
                 " tensors; rebuild grouped_linear with CUDA to use CUDA tensors");
}

void set_engine_override(DeviceType device_type, const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  GroupedGemmEngine* engine = nullptr;
  if (!name.empty()) {
    engine = find(r.engines[slot(device_type)], name);
    GL_CHECK_VALUE(engine != nullptr, "engine: '", name, "' is not available for ",
                   device_type_name(device_type),
                   "; expected one of: ", join_names(r.engines[slot(device_type)]));
  }
  r.override_engine[slot(device_type)].store(engine, std::memory_order_release);
}

std::vector<std::string> engine_names(DeviceType device_type) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (GroupedGemmEngine* engine : r.engines[slot(device_type)]) names.push_back(engine->name());
  return names;
}

GroupedGemmEngine& engine_by_name(DeviceType device_type, const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  GroupedGemmEngine* engine = find(r.engines[slot(device_type)], name);
  GL_CHECK_VALUE(engine != nullptr, "engine: '", name, "' is not available for ",
                 device_type_name(device_type),
                 "; expected one of: ", join_names(r.engines[slot(device_type)]));
  return *engine;
}

}  // namespace grouped_linear
