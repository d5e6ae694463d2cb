// The CPU implementation of quantize_ops.h and delayed_scaling_ops.h, built on
// the reference in quantize.h: inputs are widened to float exactly, quantized
// with quantize / quantize_blockwise, then laid out as fp8_tensor.h says. The
// CUDA kernels are tested against this bit for bit.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/cpu/float_convert.h"
#include "core/error.h"
#include "core/fp8/quantize.h"
#include "core/fp8/quantize_ops_backend.h"
#include "core/fp8/scaling_rules.h"

namespace grouped_linear::fp8 {
namespace {

constexpr int64_t kBlock = 128;

int64_t blocks(int64_t n) { return (n + kBlock - 1) / kBlock; }

float load(const void* base, DType dtype, int64_t index) {
  switch (dtype) {
    case DType::kFloat32: return static_cast<const float*>(base)[index];
    case DType::kFloat16: return cpu::fp16_to_float(static_cast<const uint16_t*>(base)[index]);
    case DType::kBFloat16: return cpu::bf16_to_float(static_cast<const uint16_t*>(base)[index]);
    default: GL_CHECK(false, "fp8 cpu: cannot read dtype ", dtype_name(dtype));
  }
}

void store(void* base, DType dtype, int64_t index, float value) {
  switch (dtype) {
    case DType::kFloat32: static_cast<float*>(base)[index] = value; return;
    case DType::kFloat16: static_cast<uint16_t*>(base)[index] = cpu::float_to_fp16(value); return;
    case DType::kBFloat16: static_cast<uint16_t*>(base)[index] = cpu::float_to_bf16(value); return;
    default: GL_CHECK(false, "fp8 cpu: cannot write dtype ", dtype_name(dtype));
  }
}

// The matrix widened to float and packed [rows, cols].
std::vector<float> load_matrix(const MatrixView& m) {
  std::vector<float> out(static_cast<size_t>(m.rows * m.cols));
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t c = 0; c < m.cols; ++c)
      out[r * m.cols + c] = load(m.data, m.dtype, r * m.row_stride + c);
  return out;
}

std::vector<float> load_group(const GroupedMatrixView& m, int64_t g) {
  std::vector<float> out(static_cast<size_t>(m.rows * m.cols));
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t c = 0; c < m.cols; ++c)
      out[r * m.cols + c] = load(m.data, m.dtype, g * m.group_stride + r * m.row_stride + c);
  return out;
}

uint8_t* codes(const MatrixView& m) { return static_cast<uint8_t*>(m.data); }
const uint8_t* codes(const void* data) { return static_cast<const uint8_t*>(data); }

// Where each group's rows go: prefix sums over the group sizes. Host sizes
// were validated; "device" sizes (on the CPU, host memory in a device
// dtype) are clamped as the CUDA kernels clamp them, so both agree on any
// input.
struct GroupLayout {
  std::vector<int64_t> row;     // G + 1: first row of each group in [T, C]
  std::vector<int64_t> column;  // G + 1: first column in the column-wise copy
  std::vector<int64_t> block;   // G + 1: first column-wise scale block
  int64_t rows(int64_t g) const { return row[g + 1] - row[g]; }
};

GroupLayout group_layout(const GroupSizes& s, int64_t total_rows) {
  const size_t n = static_cast<size_t>(s.num_groups) + 1;
  GroupLayout l{std::vector<int64_t>(n, 0), std::vector<int64_t>(n, 0), std::vector<int64_t>(n, 0)};
  for (int64_t g = 0; g < s.num_groups; ++g) {
    int64_t size;
    if (s.host != nullptr)
      size = s.host[g];
    else if (s.device_dtype == DType::kInt32)
      size = static_cast<const int32_t*>(s.device)[g];
    else
      size = static_cast<const int64_t*>(s.device)[g];
    const int64_t m = clamped_group_rows(size, l.row[g], total_rows);
    l.row[g + 1] = l.row[g] + m;
    l.column[g + 1] = l.column[g] + round_up(m, kGroupAlign);
    l.block[g + 1] = l.block[g] + blocks(m);
  }
  return l;
}

// Packed codes [rows, cols] into a strided code matrix.
void store_codes(const std::vector<uint8_t>& q, const MatrixView& out) {
  if (out.cols == 0) return;
  for (int64_t r = 0; r < out.rows; ++r)
    std::memcpy(codes(out) + r * out.row_stride, q.data() + r * out.cols,
                static_cast<size_t>(out.cols));
}

// Column-wise copy: group g's rows become columns [column_g, column_g + m_g)
// of every row, followed by zero padding up to column_{g+1}. Columns past the
// last group's padding (and scale slots past its blocks) are not written:
// nothing reads them, and with many groups they are a large share of the
// buffer.
void zero_padding(const MatrixView& out, const GroupLayout& layout) {
  for (size_t g = 0; g + 1 < layout.row.size(); ++g) {
    const int64_t m = layout.row[g + 1] - layout.row[g];
    const int64_t pad = layout.column[g + 1] - layout.column[g] - m;
    if (pad == 0) continue;
    for (int64_t ch = 0; ch < out.rows; ++ch)
      std::memset(codes(out) + ch * out.row_stride + layout.column[g] + m, 0,
                  static_cast<size_t>(pad));
  }
}

void quantize_activation_cpu(const ActivationQuantize& r, const ExecContext&) {
  const int64_t t = r.input.rows, c = r.input.cols;
  const std::vector<float> x = load_matrix(r.input);
  const bool rowwise = r.out.rowwise.data != nullptr || r.out.rowwise_scale.scale_inv != nullptr;
  const bool columnwise =
      r.out.columnwise.data != nullptr || r.out.columnwise_scale.scale_inv != nullptr;
  GroupLayout layout;
  if (columnwise || r.dbias.present) layout = group_layout(r.splits, t);
  const int64_t groups = r.splits.num_groups;

  if (r.kind == RecipeKind::kBlock) {
    if (rowwise) {
      std::vector<uint8_t> q(x.size());
      std::vector<float> s(static_cast<size_t>(t * blocks(c)));  // [T, blocks]
      const BlockLayout l{t, c, 1, static_cast<int>(kBlock)};
      quantize_blockwise(x.data(), l, r.format, r.power_2_scales, q.data(), s.data());
      store_codes(q, r.out.rowwise);
      // Block-major: [blocks, T] (fp8_tensor.h).
      float* scale_inv = r.out.rowwise_scale.scale_inv;
      for (int64_t row = 0; row < t; ++row)
        for (int64_t b = 0; b < blocks(c); ++b) scale_inv[b * t + row] = s[row * blocks(c) + b];
    }
    if (columnwise) {
      const MatrixView& out = r.out.columnwise;
      zero_padding(out, layout);
      float* scale_inv = r.out.columnwise_scale.scale_inv;  // [capacity, C]
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t m = layout.rows(g);
        if (m == 0) continue;
        // Group g transposed, [C, m]: its 1 x 128 blocks run along the rows of g.
        std::vector<float> xt(static_cast<size_t>(c * m));
        for (int64_t i = 0; i < m; ++i)
          for (int64_t ch = 0; ch < c; ++ch) xt[ch * m + i] = x[(layout.row[g] + i) * c + ch];
        std::vector<uint8_t> q(xt.size());
        std::vector<float> s(static_cast<size_t>(c * blocks(m)));
        const BlockLayout l{c, m, 1, static_cast<int>(kBlock)};
        quantize_blockwise(xt.data(), l, r.format, r.power_2_scales, q.data(), s.data());
        for (int64_t ch = 0; ch < c; ++ch) {
          std::memcpy(codes(out) + ch * out.row_stride + layout.column[g], &q[ch * m],
                      static_cast<size_t>(m));
          for (int64_t b = 0; b < blocks(m); ++b)
            scale_inv[(layout.block[g] + b) * c + ch] = s[ch * blocks(m) + b];
        }
      }
    }
  } else {
    const bool need_amax = r.kind == RecipeKind::kCurrent || r.state.amax != nullptr;
    const float a = need_amax ? amax(x.data(), t * c) : 0.f;
    const float scale =
        r.kind == RecipeKind::kDelayed
            ? r.state.scale[0]
            : scale_from_amax(a, format_info(r.format).max, r.margin, 1.f, r.power_2_scales);
    if (r.kind == RecipeKind::kCurrent && r.state.scale != nullptr) r.state.scale[0] = scale;
    if (r.state.amax != nullptr) r.state.amax[0] = merge_amax(r.state.amax[0], a);
    const float scale_inv = 1.f / scale;
    std::vector<uint8_t> q(x.size());
    quantize(x.data(), t * c, scale, r.format, q.data());
    if (rowwise) {
      store_codes(q, r.out.rowwise);
      r.out.rowwise_scale.scale_inv[0] = scale_inv;
    }
    if (columnwise) {
      const MatrixView& out = r.out.columnwise;
      zero_padding(out, layout);
      for (int64_t g = 0; g < groups; ++g)
        for (int64_t i = 0; i < layout.rows(g); ++i)
          for (int64_t ch = 0; ch < c; ++ch)
            codes(out)[ch * out.row_stride + layout.column[g] + i] =
                q[(layout.row[g] + i) * c + ch];
      r.out.columnwise_scale.scale_inv[0] = scale_inv;
    }
  }

  if (r.dbias.present) {
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t ch = 0; ch < c; ++ch) {
        float sum = 0.f;  // fp32 accumulation, row order
        for (int64_t row = layout.row[g]; row < layout.row[g + 1]; ++row) sum += x[row * c + ch];
        store(r.dbias.data, r.dbias.dtype, g * r.dbias.group_stride + ch, sum);
      }
  }
}

uint8_t* group_codes(const GroupedMatrixView& m, int64_t g) {
  return static_cast<uint8_t*>(m.data) + g * m.group_stride;
}

void quantize_weight_cpu(const WeightQuantize& r, const ExecContext&) {
  const GroupedMatrixView& in = r.input;
  const int64_t n = in.rows, k = in.cols;
  const bool rowwise = r.out.rowwise.data != nullptr || r.out.rowwise_scale.scale_inv != nullptr;
  const bool columnwise =
      r.out.columnwise.data != nullptr || r.out.columnwise_scale.scale_inv != nullptr;
  const GroupedMatrixView& row_out = r.out.rowwise;
  const GroupedMatrixView& col_out = r.out.columnwise;
  for (int64_t g = 0; g < in.groups; ++g) {
    const std::vector<float> x = load_group(in, g);
    std::vector<uint8_t> q(x.size());
    if (r.kind == RecipeKind::kBlock) {
      const BlockLayout l{n, k, static_cast<int>(kBlock), static_cast<int>(kBlock)};
      const int64_t nb = blocks(n), kb = blocks(k);
      std::vector<float> s(static_cast<size_t>(nb * kb));
      quantize_blockwise(x.data(), l, r.format, r.power_2_scales, q.data(), s.data());
      if (rowwise) std::copy(s.begin(), s.end(), r.out.rowwise_scale.scale_inv + g * nb * kb);
      // A 128 x 128 block has one scale either way: the column-wise scales
      // are the row-wise ones transposed.
      if (columnwise)
        for (int64_t i = 0; i < nb; ++i)
          for (int64_t j = 0; j < kb; ++j)
            r.out.columnwise_scale.scale_inv[g * nb * kb + j * nb + i] = s[i * kb + j];
    } else {
      const bool need_amax = r.kind == RecipeKind::kCurrent || r.state.amax != nullptr;
      const float a = need_amax ? amax(x.data(), n * k) : 0.f;
      const float scale =
          r.kind == RecipeKind::kDelayed
              ? r.state.scale[g]
              : scale_from_amax(a, format_info(r.format).max, r.margin, 1.f, r.power_2_scales);
      if (r.kind == RecipeKind::kCurrent && r.state.scale != nullptr) r.state.scale[g] = scale;
      if (r.state.amax != nullptr) r.state.amax[g] = merge_amax(r.state.amax[g], a);
      quantize(x.data(), n * k, scale, r.format, q.data());
      if (rowwise) r.out.rowwise_scale.scale_inv[g] = 1.f / scale;
      if (columnwise) r.out.columnwise_scale.scale_inv[g] = 1.f / scale;
    }
    if (rowwise && k > 0)
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(group_codes(row_out, g) + i * row_out.row_stride, &q[i * k],
                    static_cast<size_t>(k));
    if (columnwise)
      for (int64_t j = 0; j < k; ++j)
        for (int64_t i = 0; i < n; ++i)
          group_codes(col_out, g)[j * col_out.row_stride + i] = q[i * k + j];
  }
}

void dequantize_activation_cpu(const QuantizedActivation& q, bool columnwise,
                               const GroupSizes& splits, const MatrixView& out,
                               const ExecContext&) {
  const int64_t t = out.rows, c = out.cols;
  float* y = static_cast<float*>(out.data);
  const ScaleView& s = columnwise ? q.columnwise_scale : q.rowwise_scale;
  const bool block = s.layout == ScaleLayout::kBlock;
  if (!columnwise) {
    for (int64_t row = 0; row < t; ++row)
      for (int64_t ch = 0; ch < c; ++ch) {
        const float scale_inv = block ? s.scale_inv[ch / kBlock * t + row] : s.scale_inv[0];
        y[row * out.row_stride + ch] =
            from_fp8(codes(q.rowwise.data)[row * q.rowwise.row_stride + ch], q.format) * scale_inv;
      }
    return;
  }
  const GroupLayout layout = group_layout(splits, t);
  const int64_t groups = splits.num_groups;
  for (int64_t row = layout.row[groups]; row < t; ++row)  // rows no (clamped) group holds
    std::fill(y + row * out.row_stride, y + row * out.row_stride + c, 0.f);
  const uint8_t* qc = codes(q.columnwise.data);
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t i = 0; i < layout.rows(g); ++i)
      for (int64_t ch = 0; ch < c; ++ch) {
        const float scale_inv =
            block ? s.scale_inv[(layout.block[g] + i / kBlock) * c + ch] : s.scale_inv[0];
        y[(layout.row[g] + i) * out.row_stride + ch] =
            from_fp8(qc[ch * q.columnwise.row_stride + layout.column[g] + i], q.format) * scale_inv;
      }
}

void dequantize_weight_cpu(const QuantizedWeight& q, bool columnwise, const GroupedMatrixView& out,
                           const ExecContext&) {
  const int64_t n = out.rows, k = out.cols, nb = blocks(n), kb = blocks(k);
  const ScaleView& s = columnwise ? q.columnwise_scale : q.rowwise_scale;
  const bool block = s.layout == ScaleLayout::kBlock;
  const GroupedMatrixView& src = columnwise ? q.columnwise : q.rowwise;
  float* y = static_cast<float*>(out.data);
  for (int64_t g = 0; g < out.groups; ++g)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < k; ++j) {
        const uint8_t code = columnwise ? group_codes(src, g)[j * src.row_stride + i]
                                        : group_codes(src, g)[i * src.row_stride + j];
        float scale_inv = s.scale_inv[g];
        if (block)
          scale_inv = columnwise ? s.scale_inv[g * nb * kb + (j / kBlock) * nb + i / kBlock]
                                 : s.scale_inv[g * nb * kb + (i / kBlock) * kb + j / kBlock];
        y[g * out.group_stride + i * out.row_stride + j] = from_fp8(code, q.format) * scale_inv;
      }
}

// The amax update_delayed_scaling takes for tensor t (see delayed_scaling.cpp).
float history_amax(const DelayedScalingGroup& g, int64_t t, AmaxAlgo algo) {
  float a = g.history[t];
  if (algo == AmaxAlgo::kMax)
    for (int64_t h = 1; h < g.history_len; ++h) a = merge_amax(a, g.history[h * g.num_tensors + t]);
  return a;
}

void update_delayed_scaling_cpu(const DelayedScalingUpdate* sets, int count, int margin,
                                AmaxAlgo algo, bool check_finite, const ExecContext&) {
  // Every set is checked before any is updated.
  if (check_finite)
    for (int i = 0; i < count; ++i)
      for (int64_t t = 0; t < sets[i].group.num_tensors; ++t) {
        const float a = history_amax(sets[i].group, t, algo);
        GL_CHECK_VALUE(std::isfinite(a), "amax of tensor ", t, " of set ", i, " is ", a,
                       ", expected a finite value (an overflow or NaN upstream; scales unchanged)");
      }
  for (int i = 0; i < count; ++i)
    update_delayed_scaling(sets[i].group, sets[i].fp8_max, margin, algo, false);
}

// On the CPU the two casts simply run in turn.
void quantize_forward_operands_cpu(const ActivationQuantize& x, const WeightQuantize& w,
                                   const ExecContext& ctx) {
  quantize_activation_cpu(x, ctx);
  quantize_weight_cpu(w, ctx);
}

const QuantizeOpsBackend kCpuOps = {&quantize_activation_cpu,       &quantize_weight_cpu,
                                    &quantize_forward_operands_cpu, &dequantize_activation_cpu,
                                    &dequantize_weight_cpu,         &update_delayed_scaling_cpu};

}  // namespace

const QuantizeOpsBackend& cpu_quantize_ops() { return kCpuOps; }

}  // namespace grouped_linear::fp8
