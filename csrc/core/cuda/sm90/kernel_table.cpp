#include <atomic>
#include <cstring>
#include <mutex>
#include <string>

#include "core/cuda/sm90/grouped_gemm_sm90.h"
#include "core/cuda/sm90/kernel_entries.h"
#include "core/cuda/sm90/split_reduction.h"
#include "core/error.h"

namespace grouped_linear::cuda::sm90 {
namespace {

struct Table {
  std::vector<KernelEntry> kernels;
  size_t short_groups = 0;  // kernels[0, short_groups): only where groups are short
  size_t automatic = 0;     // kernels[0, automatic) may be chosen automatically
};

const Table& table() {
  static const Table t = [] {
    Table built;
#define GL_SM90_ADD(fn) built.kernels.push_back(fn());
    GL_SM90_SHORT_GROUP_KERNELS(GL_SM90_ADD)
    built.short_groups = built.kernels.size();
    GL_SM90_KERNELS(GL_SM90_ADD)
    built.automatic = built.kernels.size();
#ifdef GL_SM90_TUNING
    GL_SM90_TUNING_KERNELS(GL_SM90_ADD)
#endif
#undef GL_SM90_ADD
    return built;
  }();
  return t;
}

std::atomic<bool> g_has_override{false};
std::mutex g_override_mutex;
std::string g_override;

bool matches(const KernelEntry& e, Role role, DType input_a, DType input_b, DType output,
             bool block_scaled) {
  return e.role == role && e.input == input_a && e.input_b == input_b && e.output == output &&
         e.block_scaled == block_scaled;
}

// Rows the tiles of height `tile` cover: every group rounds up to whole tiles.
int64_t padded_rows(const GroupShape& shape, int tile) {
  int64_t rows = 0;
  for (int g = 0; g < shape.num_groups; ++g) rows += (shape.host_sizes[g] + tile - 1) / tile * tile;
  return rows;
}

// The automatic choice, from the H200 measurements of `python -m
// bench.tune_sm90` (BENCHMARKS.md):
//  - fwd/dgrad: 128x256 cooperative tiles are the fastest on full tiles; the
//    64x256 pingpong kernel is about 0.92 of that per tile but pads each
//    group to 64 rows instead of 128. Take it when the padding it saves is
//    worth more: with host sizes, when the 128-row padding exceeds the
//    64-row one by 9%; with device sizes (unknown per group), when groups
//    average under 384 rows, where routed (skewed) groups lose most.
//  - wgrad: each group's reduction is its own rows; with few of them (under
//    1024 on average) 256x128 tiles beat 128x256 (up to 0.70 against 0.53
//    of dense), with long reductions 128x256 wins.
//  - Kernels listed first win among equal tiles: the FP8 wide-store wgrads,
//    where the output is not accumulated into, which they cannot do. The
//    fast one (0.30-0.54 of dense against 0.28-0.43 at 32-128 experts) only
//    where the output store dominates, groups averaging under 1024 rows: at
//    8 experts (2048 rows a group) it was within run-to-run noise of the
//    regular store (-0.07 to +0.08 over four runs), which longer reductions
//    keep. The promoting one beat its regular store in every tuning case
//    (+0.01 to +0.10 of dense, 8 experts included); the blockwise-scaled
//    ones gained up to 0.06 of dense where groups are short and were
//    within 4% elsewhere.
//  - Before them, and only where groups average under 1024 rows, their
//    copies whose group switches do not wait for the stores in flight, and
//    the blockwise forward and E4M3 dgrad on 128x256 taking turns at the
//    tensor cores (GL_SM90_SHORT_GROUP_KERNELS in kernel_entries.h).
//  - The promoting FP8 forward and E5M2 dgrad have one tile, 128x256 (it
//    beat 64x128 pingpong in every tuning case), which the search below
//    falls back to where 64-row tiles are preferred.
constexpr int64_t kShortGroupRows = 1024;  // average rows per group

int64_t average_rows(const GroupShape& shape) {
  return shape.num_groups > 0 ? shape.total_rows / shape.num_groups : 0;
}

int preferred_tile_m(Role role, const GroupShape& shape) {
  if (shape.num_groups <= 0 || shape.total_rows <= 0) return 128;
  const int64_t average = average_rows(shape);
  if (role == Role::kWgrad) return average < kShortGroupRows ? 256 : 128;
  if (shape.host_sizes == nullptr) return average < 384 ? 64 : 128;
  return padded_rows(shape, 128) * 100 > padded_rows(shape, 64) * 109 ? 64 : 128;
}

// Kernels that read no C operand (the forward's, the "_widestore" wgrads):
// never to accumulate; the fast wide-store wgrad only where its store pays.
bool source_rule_allows(const KernelEntry& e, const GroupShape& shape) {
  if (e.reads_source) return true;
  if (shape.accumulate) return false;
  return e.role != Role::kWgrad || !e.fast_accumulation || average_rows(shape) < kShortGroupRows;
}

}  // namespace

const char* role_name(Role role) {
  switch (role) {
    case Role::kForward: return "forward";
    case Role::kDgrad: return "dgrad";
    case Role::kWgrad: return "wgrad";
  }
  return "?";
}

const std::vector<KernelEntry>& all_kernels() { return table().kernels; }

const KernelEntry* select_kernel(Role role, DType input, DType output, const GroupShape& shape) {
  return select_kernel(role, input, input, output, shape);
}

const KernelEntry* select_kernel(Role role, DType input_a, DType input_b, DType output,
                                 const GroupShape& shape) {
  return select_kernel(role, input_a, input_b, output, /*block_scaled=*/false, shape);
}

// Block-scaled FP8 kernels: 128x128 cooperative tiles, and 128x256 ones
// listed first, which the search below takes whatever the preferred
// height: for the E4M3 wgrad that writes (does not accumulate), and where
// groups are short, for the bf16 forward and E4M3 dgrad (kernel_entries.h).
const KernelEntry* select_kernel(Role role, DType input_a, DType input_b, DType output,
                                 bool block_scaled, const GroupShape& shape,
                                 bool fast_accumulation) {
  const Table& t = table();
  if (g_has_override.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(g_override_mutex);
    for (const KernelEntry& e : t.kernels)
      if (matches(e, role, input_a, input_b, output, block_scaled) && g_override == e.name)
        return &e;
  }
  const int tile_m = preferred_tile_m(role, shape);
  // Fast-accumulation kernels when allowed and built, else promoting ones.
  for (const bool fast : {fast_accumulation, false}) {
    const KernelEntry* any = nullptr;
    for (size_t i = 0; i < t.automatic; ++i) {
      const KernelEntry& e = t.kernels[i];
      if (!matches(e, role, input_a, input_b, output, block_scaled) ||
          e.fast_accumulation != fast || !source_rule_allows(e, shape) ||
          (i < t.short_groups && average_rows(shape) >= kShortGroupRows))
        continue;
      if (e.tile_m == tile_m) return &e;
      if (any == nullptr) any = &e;
    }
    if (any != nullptr || !fast) return any;
  }
  return nullptr;
}

bool kernel_forced() { return g_has_override.load(std::memory_order_acquire); }

void set_kernel_override(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_override_mutex);
  if (!name.empty()) {
    bool known = false;
    std::string names;
    for (const KernelEntry& e : table().kernels) {
      known = known || name == e.name;
      names += names.empty() ? "" : ", ";
      names += e.name;
    }
    GL_CHECK_VALUE(known, "kernel: got '", name,
                   "', expected one of the built sm90 kernels: ", names);
  }
  g_override = name;
  g_has_override.store(!name.empty(), std::memory_order_release);
}

}  // namespace grouped_linear::cuda::sm90
