// The one error facility of the project. Every failed check throws
// grouped_linear::Error; its kind tells a binding which exception to raise
// (ValueError, TypeError, RuntimeError in Python). Messages say what was
// expected and what came.
#pragma once

#include <cstdio>
#include <iterator>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

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

// Message pieces are formatted without iostreams: a check must never depend
// on the stream and locale machinery of whichever C++ runtime copy a binary
// carries (on one toolchain a statically linked libstdc++ made `stream <<
// 42` segfault inside the extension). Text, numbers, pointers and ranges of
// numbers (shapes) are what messages hold.
template <typename T, typename = void>
struct is_number_range : std::false_type {};
template <typename T>
struct is_number_range<T, std::void_t<decltype(std::begin(std::declval<const T&>())),
                                      decltype(std::end(std::declval<const T&>()))>>
    : std::is_arithmetic<std::decay_t<decltype(*std::begin(std::declval<const T&>()))>> {};

template <typename T>
void append(std::string& out, const T& value) {
  if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    out += std::string_view(value);
  } else if constexpr (std::is_same_v<T, bool>) {
    out += value ? "true" : "false";
  } else if constexpr (std::is_same_v<T, char>) {
    out += value;
  } else if constexpr (std::is_integral_v<T>) {
    out += std::to_string(value);
  } else if constexpr (std::is_floating_point_v<T>) {
    char buffer[32];
    std::snprintf(buffer, sizeof(buffer), "%g", static_cast<double>(value));
    out += buffer;
  } else if constexpr (std::is_pointer_v<T>) {
    char buffer[32];
    std::snprintf(buffer, sizeof(buffer), "%p", static_cast<const void*>(value));
    out += buffer;
  } else if constexpr (std::is_enum_v<T>) {
    out += std::to_string(static_cast<std::underlying_type_t<T>>(value));
  } else {
    static_assert(is_number_range<T>::value, "error messages take text, numbers or shapes");
    out += '[';
    bool first = true;
    for (const auto& item : value) {
      if (!first) out += ", ";
      first = false;
      append(out, item);
    }
    out += ']';
  }
}

template <typename... Args>
std::string concat(const Args&... args) {
  std::string out;
  (append(out, args), ...);
  return out;
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
