// GROUPED_LINEAR_* switches: every spelling of on and off, unset, and a value
// that is neither (which keeps the fallback).
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/env_switch.h"

namespace gl_test {
namespace {

constexpr const char* kName = "GROUPED_LINEAR_TEST_SWITCH";

bool read_with(const char* value, bool fallback) {
  if (value == nullptr)
    unsetenv(kName);
  else
    setenv(kName, value, 1);
  const bool on = grouped_linear::env_switch(kName, fallback);
  unsetenv(kName);
  return on;
}

TEST(EnvSwitch, OnAndOffSpellings) {
  for (const char* on : {"1", "on", "ON", "true", "True", "yes", ""}) {
    EXPECT_TRUE(read_with(on, false)) << "'" << on << "'";
  }
  for (const char* off : {"0", "off", "OFF", "false", "False", "no"}) {
    EXPECT_FALSE(read_with(off, true)) << "'" << off << "'";
  }
}

TEST(EnvSwitch, UnsetAndUnknownValuesKeepTheFallback) {
  EXPECT_TRUE(read_with(nullptr, true));
  EXPECT_FALSE(read_with(nullptr, false));
  EXPECT_TRUE(read_with("maybe", true));
  EXPECT_FALSE(read_with("2", false));
}

}  // namespace
}  // namespace gl_test
