// The one error facility of the project. Every failed check throws
// grouped_linear::Error; its kind tells a binding which exception to raise
// (ValueError, TypeError, RuntimeError in Python). Messages say what was
// expected and what came.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace grouped_linear {

enum class ErrorKind { kValue, kType, kRuntime };

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

namespace detail {

template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream stream;
  (stream << ... << args);
  return stream.str();
}

[[noreturn]] void fail(ErrorKind kind, const std::string& message);
[[noreturn]] void fail_at(ErrorKind kind, const char* file, int line, const std::string& message);

}  // namespace detail
}  // namespace grouped_linear

// User-facing argument checks: the message alone is the report.
#define GL_CHECK_VALUE(cond, ...)                                                    \
  do {                                                                               \
    if (!(cond))                                                                     \
      ::grouped_linear::detail::fail(::grouped_linear::ErrorKind::kValue,            \
                                     ::grouped_linear::detail::concat(__VA_ARGS__)); \
  } while (0)

#define GL_CHECK_TYPE(cond, ...)                                                     \
  do {                                                                               \
    if (!(cond))                                                                     \
      ::grouped_linear::detail::fail(::grouped_linear::ErrorKind::kType,             \
                                     ::grouped_linear::detail::concat(__VA_ARGS__)); \
  } while (0)

// Internal invariants and library failures: the location helps whoever debugs.
#define GL_CHECK(cond, ...)                                                                        \
  do {                                                                                             \
    if (!(cond))                                                                                   \
      ::grouped_linear::detail::fail_at(::grouped_linear::ErrorKind::kRuntime, __FILE__, __LINE__, \
                                        ::grouped_linear::detail::concat(__VA_ARGS__));            \
  } while (0)
