// The engine registry: choice by name, override, and an override changed by
// one thread while others look engines up (the lookup takes no lock).
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "core/builtin_engines.h"
#include "core/engine_registry.h"
#include "core/error.h"

namespace grouped_linear {
namespace {

const Device kCpu{DeviceType::kCPU, -1};

TEST(EngineRegistry, DefaultRequestedAndOverride) {
  register_cpu_engines();
  EXPECT_STREQ(engine_for(kCpu).name(), "cpu_reference");
  EXPECT_STREQ(engine_for(kCpu, "cpu_reference").name(), "cpu_reference");
  set_engine_override(DeviceType::kCPU, "cpu_reference");
  EXPECT_STREQ(engine_for(kCpu).name(), "cpu_reference");
  set_engine_override(DeviceType::kCPU, "");
  EXPECT_THROW(engine_for(kCpu, "no_such_engine"), Error);
  EXPECT_THROW(set_engine_override(DeviceType::kCPU, "no_such_engine"), Error);
  EXPECT_STREQ(engine_for(kCpu).name(), "cpu_reference");  // a rejected override changes nothing
}

TEST(EngineRegistry, OverrideChangesWhileOtherThreadsLookUp) {
  register_cpu_engines();
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t)
    readers.emplace_back([&] {
      while (!stop.load()) {
        if (std::string(engine_for(kCpu).name()) != "cpu_reference") wrong.fetch_add(1);
      }
    });
  for (int i = 0; i < 20000; ++i)
    set_engine_override(DeviceType::kCPU, i % 2 ? "cpu_reference" : "");
  stop.store(true);
  for (auto& t : readers) t.join();
  set_engine_override(DeviceType::kCPU, "");
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace grouped_linear
