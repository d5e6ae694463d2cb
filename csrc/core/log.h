// The library's diagnostic log: which engine (and sm90 kernel) ran for each
// role and why. The level comes from GROUPED_LINEAR_LOG_LEVEL (off, error,
// warn, info, debug; default warn), read once on first use. With the level
// below a message's, a log statement is one predictable branch and its
// arguments are not evaluated.
//
// At info a message is printed the first time it is seen (a training loop
// repeats the same decisions every step); at debug every message is printed.
// Lines go to stderr with one fprintf each, prefixed "[grouped_linear LEVEL] ".
// Messages are built like error messages (detail::concat): no iostreams.
#pragma once

#include <string>

#include "core/error.h"

namespace grouped_linear::log {

enum class Level : int { kOff = 0, kError = 1, kWarn = 2, kInfo = 3, kDebug = 4 };

// "off", "error", "warn"/"warning", "info", "debug" (any case) or 0..4.
// Returns false (and leaves *out alone) for anything else.
bool parse_level(const char* text, Level* out);
const char* level_name(Level level);

// The level of GROUPED_LINEAR_LOG_LEVEL; an unknown value gives warn and one
// warning naming the value.
Level level_from_env();

inline Level level() {
  static const Level value = level_from_env();
  return value;
}

inline bool enabled(Level at) { return static_cast<int>(level()) >= static_cast<int>(at); }

// Writes one line (info: only the first time this exact text is written).
void write(Level at, const std::string& message);

}  // namespace grouped_linear::log

#define GL_LOG_AT(at, ...)                                                             \
  do {                                                                                 \
    if (::grouped_linear::log::enabled(at))                                            \
      ::grouped_linear::log::write(at, ::grouped_linear::detail::concat(__VA_ARGS__)); \
  } while (0)

#define GL_LOG_WARN(...) GL_LOG_AT(::grouped_linear::log::Level::kWarn, __VA_ARGS__)
#define GL_LOG_INFO(...) GL_LOG_AT(::grouped_linear::log::Level::kInfo, __VA_ARGS__)
#define GL_LOG_DEBUG(...) GL_LOG_AT(::grouped_linear::log::Level::kDebug, __VA_ARGS__)
