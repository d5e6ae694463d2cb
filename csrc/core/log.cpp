#include "core/log.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <unordered_set>

namespace grouped_linear::log {
namespace {

bool equals_lower(const char* text, const char* lower) {
  for (; *text != '\0' && *lower != '\0'; ++text, ++lower) {
    if (std::tolower(static_cast<unsigned char>(*text)) != *lower) return false;
  }
  return *text == '\0' && *lower == '\0';
}

// Messages already printed at info. Bounded: past the cap, messages are
// printed every time rather than remembered (a log, not a memory leak).
constexpr size_t kMaxRemembered = 4096;
std::mutex g_mutex;
std::unordered_set<std::string>& seen() {
  static auto* set = new std::unordered_set<std::string>();  // never destroyed: safe at exit
  return *set;
}

void print(Level at, const std::string& message) {
  std::fprintf(stderr, "[grouped_linear %s] %s\n", level_name(at), message.c_str());
}

}  // namespace

bool parse_level(const char* text, Level* out) {
  if (text == nullptr) return false;
  static const struct {
    const char* name;
    Level level;
  } kNames[] = {{"off", Level::kOff},      {"none", Level::kOff},    {"0", Level::kOff},
                {"error", Level::kError},  {"1", Level::kError},     {"warn", Level::kWarn},
                {"warning", Level::kWarn}, {"2", Level::kWarn},      {"info", Level::kInfo},
                {"3", Level::kInfo},       {"debug", Level::kDebug}, {"4", Level::kDebug}};
  for (const auto& entry : kNames) {
    if (equals_lower(text, entry.name)) {
      *out = entry.level;
      return true;
    }
  }
  return false;
}

const char* level_name(Level level) {
  switch (level) {
    case Level::kOff: return "off";
    case Level::kError: return "error";
    case Level::kWarn: return "warn";
    case Level::kInfo: return "info";
    case Level::kDebug: return "debug";
  }
  return "?";
}

Level level_from_env() {
  const char* text = std::getenv("GROUPED_LINEAR_LOG_LEVEL");
  if (text == nullptr || *text == '\0') return Level::kWarn;
  Level parsed = Level::kWarn;
  if (!parse_level(text, &parsed)) {
    print(Level::kWarn, detail::concat("GROUPED_LINEAR_LOG_LEVEL='", text,
                                       "' is not a level; expected off, error, warn, info or "
                                       "debug; using warn"));
  }
  return parsed;
}

void write(Level at, const std::string& message) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (at == Level::kInfo && level() < Level::kDebug) {
    auto& remembered = seen();
    if (remembered.count(message) != 0) return;
    if (remembered.size() < kMaxRemembered) remembered.insert(message);
  }
  print(at, message);
}

}  // namespace grouped_linear::log
