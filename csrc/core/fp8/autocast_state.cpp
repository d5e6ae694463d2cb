#include "core/fp8/autocast_state.h"

#include <vector>

#include "core/error.h"

namespace grouped_linear::fp8 {
namespace {

// Thread-local: autocast regions belong to the thread that opened them (as
// torch.autocast's do); autograd's backward threads see the default.
thread_local std::vector<AutocastState> t_stack;
const AutocastState kOutside{};

}  // namespace

const AutocastState& current() { return t_stack.empty() ? kOutside : t_stack.back(); }

void push(const AutocastState& state) { t_stack.push_back(state); }

void pop() {
  GL_CHECK(!t_stack.empty(), "fp8 autocast: exit without a matching entry on this thread");
  t_stack.pop_back();
}

size_t depth() { return t_stack.size(); }

}  // namespace grouped_linear::fp8
