#include "core/error.h"

namespace grouped_linear::detail {

void fail(ErrorKind kind, const std::string& message) {
  throw Error(kind, "grouped_linear: " + message);
}

void fail_at(ErrorKind kind, const char* file, int line, const std::string& message) {
  throw Error(kind, concat("grouped_linear: ", message, " (", file, ":", line, ")"));
}

}  // namespace grouped_linear::detail
