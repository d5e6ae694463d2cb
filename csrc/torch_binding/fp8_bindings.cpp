#include "torch_binding/fp8_bindings.h"

#include <string>
#include <tuple>

#include "core/error.h"
#include "core/fp8/autocast_state.h"
#include "core/fp8/delayed_scaling.h"
#include "core/fp8/fp8_tensor.h"
#include "core/fp8/quantize.h"
#include "core/fp8/recipe.h"
#include "torch_binding/fp8_autocast.h"
#include "torch_binding/fp8_state.h"
#include "torch_binding/python_errors.h"

namespace py = pybind11;

namespace grouped_linear::torch_binding {
namespace {

using fp8::Format;

Format parse_format(const std::string& name) {
  if (name == "E4M3") return Format::kE4M3;
  GL_CHECK_VALUE(name == "E5M2", "format: got '", name, "', expected 'E4M3' or 'E5M2'");
  return Format::kE5M2;
}

const char* kind_name(fp8::RecipeKind k) {
  return k == fp8::RecipeKind::kDelayed   ? "delayed"
         : k == fp8::RecipeKind::kCurrent ? "current"
                                          : "block";
}
const char* format_choice_name(fp8::FormatChoice f) {
  return f == fp8::FormatChoice::kE4M3 ? "E4M3" : f == fp8::FormatChoice::kE5M2 ? "E5M2" : "HYBRID";
}

// The CPU reference takes contiguous float32 CPU tensors; GPU kernels come
// with the FP8 engine.
at::Tensor cpu_float(const at::Tensor& x, const char* name) {
  GL_CHECK_VALUE(
      x.device().is_cpu(), name, ": got a tensor on ", x.device().str(),
      ", expected a CPU tensor (FP8 quantization runs on the CPU reference only so far)");
  GL_CHECK_TYPE(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16 ||
                    x.scalar_type() == at::kHalf,
                name, ": got dtype ", c10::toString(x.scalar_type()),
                ", expected float32, bfloat16 or float16");
  return x.to(at::kFloat).contiguous();
}

at::Tensor cpu_bytes(const at::Tensor& q, const char* name) {
  GL_CHECK_VALUE(q.device().is_cpu(), name, ": got a tensor on ", q.device().str(),
                 ", expected a CPU tensor");
  GL_CHECK_TYPE(q.scalar_type() == at::kByte, name, ": got dtype ", c10::toString(q.scalar_type()),
                ", expected uint8 (FP8 codes)");
  return q.contiguous();
}

at::Tensor quantize(const at::Tensor& x, const std::string& format, double scale) {
  const at::Tensor xf = cpu_float(x, "x");
  at::Tensor q = at::empty(xf.sizes(), xf.options().dtype(at::kByte));
  fp8::quantize(xf.data_ptr<float>(), xf.numel(), static_cast<float>(scale), parse_format(format),
                q.data_ptr<uint8_t>());
  return q;
}

at::Tensor dequantize(const at::Tensor& q, const std::string& format, double scale_inv) {
  const at::Tensor qb = cpu_bytes(q, "q");
  at::Tensor out = at::empty(qb.sizes(), qb.options().dtype(at::kFloat));
  fp8::dequantize(qb.data_ptr<uint8_t>(), qb.numel(), static_cast<float>(scale_inv),
                  parse_format(format), out.data_ptr<float>());
  return out;
}

fp8::BlockLayout layout_of(const at::Tensor& t, int64_t block_rows, int64_t block_cols) {
  GL_CHECK_VALUE(t.dim() == 2, "x: got shape ", t.sizes(), ", expected a 2-D tensor");
  GL_CHECK_VALUE(block_rows >= 1 && block_cols >= 1, "block shape: got ", block_rows, "x",
                 block_cols, ", expected positive sizes");
  fp8::BlockLayout l;
  l.rows = t.size(0);
  l.cols = t.size(1);
  l.block_rows = static_cast<int>(block_rows);
  l.block_cols = static_cast<int>(block_cols);
  return l;
}

std::tuple<at::Tensor, at::Tensor> quantize_blockwise(const at::Tensor& x,
                                                      const std::string& format, int64_t block_rows,
                                                      int64_t block_cols, bool power_2_scales) {
  const at::Tensor xf = cpu_float(x, "x");
  const fp8::BlockLayout l = layout_of(xf, block_rows, block_cols);
  at::Tensor q = at::empty(xf.sizes(), xf.options().dtype(at::kByte));
  at::Tensor scale_inv = at::empty({l.row_blocks(), l.col_blocks()}, xf.options());
  fp8::quantize_blockwise(xf.data_ptr<float>(), l, parse_format(format), power_2_scales,
                          q.data_ptr<uint8_t>(), scale_inv.data_ptr<float>());
  return {q, scale_inv};
}

at::Tensor dequantize_blockwise(const at::Tensor& q, const at::Tensor& scale_inv,
                                const std::string& format, int64_t block_rows, int64_t block_cols) {
  const at::Tensor qb = cpu_bytes(q, "q");
  const fp8::BlockLayout l = layout_of(qb, block_rows, block_cols);
  const at::Tensor s = cpu_float(scale_inv, "scale_inv");
  GL_CHECK_VALUE(s.dim() == 2 && s.size(0) == l.row_blocks() && s.size(1) == l.col_blocks(),
                 "scale_inv: got shape ", s.sizes(), ", expected [", l.row_blocks(), ", ",
                 l.col_blocks(), "]");
  at::Tensor out = at::empty(qb.sizes(), qb.options().dtype(at::kFloat));
  fp8::dequantize_blockwise(qb.data_ptr<uint8_t>(), s.data_ptr<float>(), l, parse_format(format),
                            out.data_ptr<float>());
  return out;
}

double scale_from_amax(double amax, const std::string& format, int margin, double previous_scale,
                       bool power_2) {
  return fp8::scale_from_amax(static_cast<float>(amax), fp8::format_info(parse_format(format)).max,
                              margin, static_cast<float>(previous_scale), power_2);
}

double format_max(const std::string& format) { return fp8::format_info(parse_format(format)).max; }

// In place on CPU float32 tensors: history [H, n], scale [n], scale_inv [n].
void update_delayed_scaling(at::Tensor& history, at::Tensor& scale, at::Tensor& scale_inv,
                            const std::string& format, int margin,
                            const std::string& amax_compute_algo, bool check_finite) {
  for (const auto& [t, name] : {std::pair<const at::Tensor*, const char*>{&history, "amax_history"},
                                {&scale, "scale"},
                                {&scale_inv, "scale_inv"}}) {
    GL_CHECK_VALUE(t->device().is_cpu() && t->scalar_type() == at::kFloat && t->is_contiguous(),
                   name, ": expected a contiguous float32 CPU tensor (in place), got ",
                   c10::toString(t->scalar_type()), " on ", t->device().str());
  }
  GL_CHECK_VALUE(history.dim() == 2, "amax_history: got shape ", history.sizes(),
                 ", expected [history_len, num_tensors]");
  const int64_t n = history.size(1);
  GL_CHECK_VALUE(
      scale.dim() == 1 && scale.size(0) == n && scale_inv.dim() == 1 && scale_inv.size(0) == n,
      "scale / scale_inv: got shapes ", scale.sizes(), " and ", scale_inv.sizes(), ", expected [",
      n, "] (one per history column)");
  GL_CHECK_VALUE(amax_compute_algo == "max" || amax_compute_algo == "most_recent",
                 "amax_compute_algo: got '", amax_compute_algo,
                 "', expected 'max' or 'most_recent'");
  fp8::DelayedScalingGroup g;
  g.history = history.data_ptr<float>();
  g.scale = scale.data_ptr<float>();
  g.scale_inv = scale_inv.data_ptr<float>();
  g.history_len = history.size(0);
  g.num_tensors = n;
  fp8::update_delayed_scaling(
      g, fp8::format_info(parse_format(format)).max, margin,
      amax_compute_algo == "max" ? fp8::AmaxAlgo::kMax : fp8::AmaxAlgo::kMostRecent, check_finite);
}

bool autocast_enabled() { return fp8::current().enabled; }
fp8::Recipe autocast_recipe() { return fp8::current().recipe; }
int64_t autocast_depth() { return static_cast<int64_t>(fp8::depth()); }

}  // namespace

void register_fp8(py::module_& m) {
  py::module_ f = m.def_submodule("fp8", "FP8 recipes, autocast state and CPU quantization.");
  // Column-wise copies start each group at a multiple of this many columns.
  f.attr("GROUP_ALIGN") = fp8::kGroupAlign;
  py::class_<fp8::Recipe>(f, "Recipe")
      .def(py::init(guarded(&make_recipe)), py::arg("kind"), py::arg("fp8_format"),
           py::arg("margin") = 0, py::arg("amax_history_len") = 1024,
           py::arg("amax_compute_algo") = "max", py::arg("power_2_scales") = false,
           py::arg("fprop_split_accumulator") = false, py::arg("dgrad_split_accumulator") = true,
           py::arg("wgrad_split_accumulator") = true)
      .def_property_readonly("kind", [](const fp8::Recipe& r) { return kind_name(r.kind); })
      .def_property_readonly("fp8_format",
                             [](const fp8::Recipe& r) { return format_choice_name(r.format); })
      .def_readonly("margin", &fp8::Recipe::margin)
      .def_readonly("amax_history_len", &fp8::Recipe::amax_history_len)
      .def_property_readonly("amax_compute_algo",
                             [](const fp8::Recipe& r) {
                               return r.amax_compute_algo == fp8::AmaxAlgo::kMax ? "max"
                                                                                 : "most_recent";
                             })
      .def_readonly("power_2_scales", &fp8::Recipe::power_2_scales)
      .def_readonly("fprop_split_accumulator", &fp8::Recipe::fprop_split_accumulator)
      .def_readonly("dgrad_split_accumulator", &fp8::Recipe::dgrad_split_accumulator)
      .def_readonly("wgrad_split_accumulator", &fp8::Recipe::wgrad_split_accumulator)
      .def_property_readonly("forward_format",
                             [](const fp8::Recipe& r) {
                               return fp8::forward_format(r) == Format::kE4M3 ? "E4M3" : "E5M2";
                             })
      .def_property_readonly("backward_format", [](const fp8::Recipe& r) {
        return fp8::backward_format(r) == Format::kE4M3 ? "E4M3" : "E5M2";
      });

  register_fp8_state(f);

  f.def("autocast_push", guarded(&autocast_push), py::arg("enabled"), py::arg("recipe"));
  f.def("autocast_pop", guarded(&autocast_pop));
  f.def("autocast_enabled", guarded(&autocast_enabled));
  f.def("autocast_recipe", guarded(&autocast_recipe));
  f.def("autocast_depth", guarded(&autocast_depth));

  f.def("quantize", guarded(&quantize), py::arg("x"), py::arg("format"), py::arg("scale"),
        "FP8 codes (uint8) of x * scale, rounded to nearest even and saturated.");
  f.def("dequantize", guarded(&dequantize), py::arg("q"), py::arg("format"), py::arg("scale_inv"));
  f.def("quantize_blockwise", guarded(&quantize_blockwise), py::arg("x"), py::arg("format"),
        py::arg("block_rows"), py::arg("block_cols") = 128, py::arg("power_2_scales") = true,
        "(codes, scale_inv[row_blocks, col_blocks]) with one scale per block.");
  f.def("dequantize_blockwise", guarded(&dequantize_blockwise), py::arg("q"), py::arg("scale_inv"),
        py::arg("format"), py::arg("block_rows"), py::arg("block_cols") = 128);
  f.def("scale_from_amax", guarded(&scale_from_amax), py::arg("amax"), py::arg("format"),
        py::arg("margin") = 0, py::arg("previous_scale") = 1.0, py::arg("power_2_scales") = false);
  f.def("format_max", guarded(&format_max), py::arg("format"));
  f.def("update_delayed_scaling", guarded(&update_delayed_scaling), py::arg("amax_history"),
        py::arg("scale"), py::arg("scale_inv"), py::arg("format"), py::arg("margin") = 0,
        py::arg("amax_compute_algo") = "max", py::arg("check_finite") = false,
        "Delayed scaling's step boundary, in place: next scales from the amax history, then "
        "the history rolled (row 0 zeroed for the next step).");
}

}  // namespace grouped_linear::torch_binding
