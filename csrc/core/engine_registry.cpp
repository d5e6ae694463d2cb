#include "core/engine_registry.h"

#include <mutex>

#include "core/error.h"

namespace grouped_linear {
namespace {

struct Registry {
  std::mutex mutex;
  std::vector<GroupedGemmEngine*> engines[2];  // indexed by DeviceType
  std::string override_name[2];
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

void register_engine(DeviceType device_type, GroupedGemmEngine* engine) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto& engines = r.engines[slot(device_type)];
  if (find(engines, engine->name()) == nullptr) engines.push_back(engine);
}

GroupedGemmEngine& engine_for(const Device& device, const std::string& requested) {
  Registry& r = registry();
  // The registry is filled once at start-up; reading it needs no lock, and a
  // forward must not take one.
  const auto& engines = r.engines[slot(device.type)];
  const std::string& name = requested.empty() ? r.override_name[slot(device.type)] : requested;
  if (!name.empty()) {
    GroupedGemmEngine* engine = find(engines, name);
    GL_CHECK_VALUE(engine != nullptr, "engine: '", name, "' is not available for ",
                   device_type_name(device.type), "; expected one of: ", join_names(engines));
    GL_CHECK_VALUE(engine->available(device), "engine: '", name, "' does not run on ",
                   device_type_name(device.type), ":", device.index);
    return *engine;
  }
  for (GroupedGemmEngine* engine : engines)
    if (engine->available(device)) return *engine;
  GL_CHECK_VALUE(false, "no grouped GEMM engine is built for ", device_type_name(device.type),
                 " tensors; rebuild grouped_linear with CUDA to use CUDA tensors");
}

void set_engine_override(DeviceType device_type, const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!name.empty()) {
    GL_CHECK_VALUE(find(r.engines[slot(device_type)], name) != nullptr, "engine: '", name,
                   "' is not available for ", device_type_name(device_type),
                   "; expected one of: ", join_names(r.engines[slot(device_type)]));
  }
  r.override_name[slot(device_type)] = name;
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
                 device_type_name(device_type), "; expected one of: ",
                 join_names(r.engines[slot(device_type)]));
  return *engine;
}

}  // namespace grouped_linear
