// wbaudit._core: the precision layer and the trace format for Python (pybind11). Every function calls the C++
// core (sim/precision, sim/trace); nothing here rounds or classifies on its own. NumPy float32 arrays are used in
// place (no copy) and the GIL is released inside the kernels.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "audit/block_audit.hpp"
#include "sim/optim/torch_adamw.hpp"
#include "sim/precision/audit.hpp"
#include "sim/precision/block_writeback.hpp"
#include "sim/precision/format.hpp"
#include "sim/precision/policy.hpp"
#include "sim/precision/rounding.hpp"
#include "sim/precision/storage_format.hpp"
#include "sim/precision/writeback.hpp"
#include "sim/precision/writeback_stored.hpp"
#include "sim/trace/block_reference.hpp"
#include "sim/trace/block_sample.hpp"
#include "sim/trace/margin_readout.hpp"
#include "sim/trace/ratio_histogram.hpp"
#include "sim/trace/record_schedule.hpp"
#include "sim/trace/reference_histograms.hpp"
#include "sim/trace/trace.hpp"
#include "sim/trace/trace_writer.hpp"

namespace py = pybind11;
using namespace wbaudit::sim;

namespace {

using Space = Kokkos::DefaultHostExecutionSpace;
using FloatArray = py::array;  // checked by float32_data

bool g_finalized = false;  // Kokkos cannot be initialized again after finalize (Kokkos 3.4 has no is_finalized)

void ensure_kokkos() {
  if (g_finalized) {
    throw std::runtime_error("wbaudit: Kokkos was finalized (interpreter shutting down)");
  }
  if (!Kokkos::is_initialized()) {
    // Threads: WBAUDIT_THREADS, else OMP_NUM_THREADS, else every core. Explicit, because an interpreter that has
    // imported torch first may have lowered OpenMP's default to one thread.
    Kokkos::InitArguments args;
    args.disable_warnings = true;
    const char* env = std::getenv("WBAUDIT_THREADS");
    if (!env || !*env) {
      env = std::getenv("OMP_NUM_THREADS");
    }
    const int requested = env && *env ? std::atoi(env) : 0;
    args.num_threads = requested > 0 ? requested : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    Kokkos::initialize(args);
  }
}

std::string dtype_name(const py::array& a) {
  return py::str(a.dtype()).cast<std::string>();
}

// A C-contiguous float32 array's data; anything else is an error naming the argument and the dtype.
template <class T>
T* float32_data(py::array& a, const char* what, const std::string& fmt) {
  if (!py::isinstance<py::array_t<float>>(a) || a.dtype().kind() != 'f' || a.itemsize() != 4) {
    throw py::type_error(std::string(what) + " has dtype " + dtype_name(a) + "; wbaudit needs float32 (values of " +
                         fmt +
                         " are held as float32, proposals are fp32; a float16 array cannot hold bf16, e4m3 or e5m2 "
                         "values exactly and a float64 proposal would round first)");
  }
  if (!(a.flags() & py::array::c_style)) {
    throw py::value_error(std::string(what) + " must be C-contiguous (np.ascontiguousarray)");
  }
  if constexpr (std::is_const_v<T>) {
    return static_cast<T*>(a.data());
  } else {
    if (!a.writeable()) {
      throw py::value_error(std::string(what) + " is read-only");
    }
    return static_cast<T*>(a.mutable_data());
  }
}

void same_shape(const py::array& a, const py::array& b, const char* an, const char* bn) {
  bool same = a.ndim() == b.ndim();
  for (py::ssize_t d = 0; same && d < a.ndim(); ++d) {
    same = a.shape(d) == b.shape(d);
  }
  if (!same) {
    auto shape = [](const py::array& x) {
      std::string s = "(";
      for (py::ssize_t d = 0; d < x.ndim(); ++d) {
        s += std::to_string(x.shape(d)) + (x.ndim() == 1 || d + 1 < x.ndim() ? "," : "");
      }
      return s + ")";
    };
    throw py::value_error(std::string("shape mismatch: ") + an + " has shape " + shape(a) + ", " + bn + " " + shape(b));
  }
}

FormatSpec make_format(const std::string& name, std::optional<double> scale) {
  FormatSpec fmt = format_from_name(name);
  if (fmt.kind == FormatKind::integer) {
    const double s = scale.value_or(1.0);
    if (static_cast<double>(static_cast<float>(s)) != s) {
      throw py::value_error("scale " + std::to_string(s) + " of " + name + " is not an fp32 value");
    }
    fmt = int_format(fmt.bits, static_cast<float>(s));
  } else if (scale) {
    throw py::value_error("scale applies only to integer formats, not " + name);
  }
  return fmt;
}

py::dict counts_dict(const WritebackCounts& c) {
  py::dict d;
  d["nonzero"] = c.nonzero;
  d["erased"] = c.erased;
  d["saturated"] = c.saturated;
  d["applied"] = c.applied;
  d["sr_applied"] = c.sr_applied;
  d["sr_truncated"] = c.sr_truncated;
  return d;
}

std::string where(const std::string& tensor, std::uint64_t step) {
  return tensor.empty() ? "" : "tensor " + tensor + ", step " + std::to_string(step) + ": ";
}

py::dict block_counts_dict(const BlockWritebackCounts& c) {
  py::dict d;
  d["nonzero"] = c.nonzero;
  d["erased"] = c.erased;
  d["erased_grid"] = c.erased_grid;
  d["erased_saturation"] = c.erased_saturation;
  d["erased_scale"] = c.erased_scale;
  d["applied"] = c.applied;
  d["collateral"] = c.collateral;
  d["flushed"] = c.flushed;
  d["saturated"] = c.saturated;
  d["sr_applied"] = c.sr_applied;
  d["sr_truncated"] = c.sr_truncated;
  d["blocks"] = c.blocks;
  d["blocks_skipped"] = c.blocks_skipped;
  d["rescaled_up"] = c.rescaled_up;
  d["rescaled_down"] = c.rescaled_down;
  return d;
}

// The block layout of an array: blocks run along its last dimension (a 1-D array is one row).
RowMajorShape block_shape(const py::array& a) {
  return row_major_shape(std::vector<std::int64_t>(a.shape(), a.shape() + a.ndim()));
}

// w <- q^policy(w + u) blockwise on host arrays (the Kokkos kernels); nothing is written when it throws.
BlockWritebackCounts block_writeback_arrays(const StorageFormat& sf, const WritebackPolicy& policy, const RngKey& key,
                                            const RowMajorShape& shape, float* w, const float* u, std::size_t n,
                                            std::uint64_t first_coordinate, const std::string& tensor) {
  const Kokkos::View<float*, Space::memory_space, Kokkos::MemoryUnmanaged> wv(w, n);
  const Kokkos::View<const float*, Space::memory_space, Kokkos::MemoryUnmanaged> uv(u, n);
  BlockWritebackOptions options = sf.options;
  options.first_coordinate = first_coordinate;
  try {
    return block_writeback(Space(), sf.blocks, policy, key, shape, wv, uv, options);
  } catch (const NonFiniteError& e) {
    py::gil_scoped_acquire acquire;
    throw py::value_error(where(tensor, key.step) + e.what());
  } catch (const BlockScaleError& e) {
    py::gil_scoped_acquire acquire;
    throw py::value_error(where(tensor, key.step) + e.what());
  }
}

// ---- functions --------------------------------------------------------------------------------------------

py::list block_formats() {
  py::list out;
  for (const std::string& name : known_block_format_names()) {
    const BlockFormatSpec f = block_format_from_name(name);
    py::dict d;
    d["name"] = name;
    d["family"] = f.family == BlockFamily::mx ? "mx" : "nvfp4";
    d["element"] = f.element.kind == FormatKind::integer ? std::string("int8") : std::string(f.element.name);
    d["block_size"] = f.block_size;
    d["tiles_2d"] = f.tiles_2d;
    d["scale_rule"] = f.family == BlockFamily::nvfp4 ? "nvfp4" : (f.rule == ScaleRule::floor ? "floor" : "rceil");
    d["emax_elem"] = f.emax_elem;
    d["max_elem"] = f.max_elem;
    out.append(d);
  }
  return out;
}

py::list formats() {
  py::list out;
  for (const std::string& name : known_format_names()) {
    const FormatSpec f = format_from_name(name);
    py::dict d;
    d["name"] = name;
    d["kind"] = f.kind == FormatKind::integer ? "integer" : "floating";
    d["bits"] = f.bits;
    d["exp_bits"] = f.exp_bits;
    d["man_bits"] = f.man_bits;
    d["bias"] = f.bias;
    d["max_finite"] = f.max_finite;
    d["min_normal"] = f.min_normal;
    d["min_subnormal"] = f.min_subnormal;
    d["has_inf"] = f.has_inf;
    d["has_nan"] = f.has_nan;
    d["subnormals"] = f.subnormals;
    d["max_level"] = f.int_max_level;
    out.append(d);
  }
  return out;
}

py::array_t<float> round_values(const py::array& x, const std::string& fmt_name, const std::string& policy_name_,
                                std::uint64_t seed, int sr_bits, std::uint64_t step, std::uint32_t tensor_id,
                                std::optional<double> scale, const std::string& sr_stream) {
  ensure_kokkos();
  const StorageFormat sf = storage_format_from_name(fmt_name);
  const WritebackPolicy policy = make_policy(policy_name_, sr_bits, sr_stream);
  if (policy.policy != Policy::nearest && policy.policy != Policy::stochastic) {
    throw py::value_error("round: policy " + policy_name_ +
                          " has no single-value rounding (use nearest or stochastic)");
  }
  if (x.dtype().kind() != 'f' && x.dtype().kind() != 'i' && x.dtype().kind() != 'u') {
    throw py::type_error("round: x has dtype " + dtype_name(x) + " (expected a real array)");
  }
  if (sf.block) {
    // Blockwise along the last dimension: the scales from x itself, each element rounded at its block's scale (the
    // write-back of x with u = 0). Block formats hold fp32 values: x must be exactly representable in fp32.
    if (scale) {
      throw py::value_error("scale applies only to intK formats; " + sf.name + " computes its scales from x");
    }
    py::array_t<double, py::array::c_style | py::array::forcecast> xd(x);
    py::array_t<float> out(std::vector<py::ssize_t>(x.shape(), x.shape() + x.ndim()));
    float* o = out.mutable_data();
    const auto n = static_cast<std::size_t>(xd.size());
    for (std::size_t i = 0; i < n; ++i) {
      const double v = xd.data()[i];
      o[i] = static_cast<float>(v);
      if (std::isfinite(v) && static_cast<double>(o[i]) != v) {
        throw py::value_error("round: x[" + std::to_string(i) + "] = " + std::to_string(v) + " is not an fp32 value (" +
                              sf.name + " holds fp32 values; cast x to float32 first)");
      }
    }
    const std::vector<float> zeros(n, 0.0f);
    {
      py::gil_scoped_release release;
      BlockWritebackOptions none = sf.options;
      none.skip_unchanged_blocks = false;  // rounding x: every block
      StorageFormat every = sf;
      every.options = none;
      block_writeback_arrays(every, policy, RngKey{seed, step, tensor_id}, block_shape(x), o, zeros.data(), n, 0, "");
    }
    return out;
  }
  const FormatSpec fmt = make_format(fmt_name, scale);
  // Any real dtype is read as double (exact for float16/32/64 and integers up to 2^53).
  py::array_t<double, py::array::c_style | py::array::forcecast> xd(x);
  std::vector<py::ssize_t> shape(x.shape(), x.shape() + x.ndim());
  py::array_t<float> out(shape);
  const double* in = xd.data();
  float* o = out.mutable_data();
  const auto n = static_cast<std::int64_t>(xd.size());
  for (std::int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(in[i])) {
      throw py::value_error("round: non-finite value at index " + std::to_string(i) + " (NaN/inf are not rounded)");
    }
  }
  const FormatParams p = format_params(fmt);
  const RngKey key{seed, step, tensor_id};
  {
    py::gil_scoped_release release;
    Kokkos::parallel_for("wbaudit::python::round::values", Kokkos::RangePolicy<Space>(0, n), [=](const std::int64_t i) {
      const Bracket b = bracket_of(p, ExactSum{in[i], 0.0});
      if (policy.policy == Policy::stochastic && !b.exact) {
        PhiloxStream stream = sr_stream_of(policy, key, static_cast<std::uint64_t>(i));
        o[i] = static_cast<float>(stochastic_of(b, policy.sr_bits, stream).value);
      } else {
        o[i] = static_cast<float>(nearest_of(b));
      }
    });
    Kokkos::fence();
  }
  return out;
}

py::tuple writeback_py(py::array w, py::array u, const std::string& fmt_name, const std::string& policy_name_,
                       std::uint64_t seed, std::uint64_t step, std::uint32_t tensor_id, int sr_bits,
                       std::optional<double> scale, std::optional<py::array> out, std::uint64_t first_coordinate,
                       const std::string& tensor, const std::string& sr_stream) {
  ensure_kokkos();
  const StorageFormat sf = storage_format_from_name(fmt_name);
  if (sf.block) {
    const WritebackPolicy policy = make_policy(policy_name_, sr_bits, sr_stream);
    if (policy.policy == Policy::master) {
      throw py::value_error("writeback: policy master keeps an fp32 master copy; write back with nearest instead");
    }
    if (scale) {
      throw py::value_error("scale applies only to intK formats; " + sf.name + " computes its scales from w + u");
    }
    same_shape(w, u, "w", "u");
    const float* wd = float32_data<const float>(w, "w", fmt_name);
    const float* ud = float32_data<const float>(u, "u", fmt_name);
    py::array target;
    if (out) {
      target = *out;
      same_shape(w, target, "w", "out");
    } else {
      target = py::array_t<float>(std::vector<py::ssize_t>(w.shape(), w.shape() + w.ndim()));
    }
    float* od = float32_data<float>(target, "out", fmt_name);
    const auto n = static_cast<std::size_t>(w.size());
    const RowMajorShape shape = block_shape(w);
    BlockWritebackCounts counts;
    {
      py::gil_scoped_release release;
      // The write-back refuses NaN/inf and out-of-range blocks before writing, so out is never half written; it
      // works on a copy unless out is w itself.
      std::vector<float> scratch(wd, wd + n);
      counts = block_writeback_arrays(sf, policy, RngKey{seed, step, tensor_id}, shape, scratch.data(), ud, n,
                                      first_coordinate, tensor);
      std::memcpy(od, scratch.data(), n * sizeof(float));
    }
    return py::make_tuple(target, block_counts_dict(counts));
  }
  const FormatSpec fmt = make_format(fmt_name, scale);
  const WritebackPolicy policy = make_policy(policy_name_, sr_bits, sr_stream);
  if (policy.policy == Policy::master) {
    throw py::value_error("writeback: policy master keeps an fp32 master copy; write back with nearest instead");
  }
  same_shape(w, u, "w", "u");
  const float* wd = float32_data<const float>(w, "w", fmt_name);
  const float* ud = float32_data<const float>(u, "u", fmt_name);
  py::array target;
  if (out) {
    target = *out;
    same_shape(w, target, "w", "out");
  } else {
    target = py::array_t<float>(std::vector<py::ssize_t>(w.shape(), w.shape() + w.ndim()));
  }
  float* od = float32_data<float>(target, "out", fmt_name);
  const auto n = static_cast<std::size_t>(w.size());
  WritebackCounts counts;
  std::vector<float> scratch;
  {
    py::gil_scoped_release release;
    if (out) {
      // Nothing partially written: the kernel writes every finite coordinate before it reports a non-finite one, so
      // with NaN/inf in w or u it runs on a scratch copy (and throws naming the first) and `out` is left untouched.
      std::int64_t bad = 0;
      Kokkos::parallel_reduce(
          "wbaudit::python::writeback::finite", Kokkos::RangePolicy<Space>(0, static_cast<std::int64_t>(n)),
          [=](const std::int64_t i, std::int64_t& c) { c += std::isfinite(wd[i]) && std::isfinite(ud[i]) ? 0 : 1; },
          bad);
      if (bad > 0) {
        scratch.resize(n);
        od = scratch.data();
      }
    }
    if (od != wd) {
      std::memcpy(od, wd, n * sizeof(float));
    }
    const Kokkos::View<float*, Space::memory_space, Kokkos::MemoryUnmanaged> wv(od, n);
    const Kokkos::View<const float*, Space::memory_space, Kokkos::MemoryUnmanaged> uv(ud, n);
    WritebackOptions options;
    options.first_coordinate = first_coordinate;
    try {
      counts = writeback(Space(), fmt, policy, RngKey{seed, step, tensor_id}, wv, uv, options);
    } catch (const NonFiniteError& e) {
      py::gil_scoped_acquire acquire;
      throw py::value_error(where(tensor, step) + e.what());
    }
  }
  return py::make_tuple(target, counts_dict(counts));
}

// The write-back of a parameter stored in bf16 / fp16 (sim/precision/writeback_stored.hpp), fused: storage holds
// the parameter's raw 16 bits (int16 / uint16, written in place), stepped the fp32 value its optimizer stepped it to.
py::dict writeback_stored_py(py::array storage, py::array stepped, const std::string& storage_dtype,
                             const std::string& fmt_name, const std::string& policy_name_, std::uint64_t seed,
                             std::uint64_t step, std::uint32_t tensor_id, int sr_bits, std::optional<double> scale,
                             std::uint64_t first_coordinate, const std::string& tensor, const std::string& sr_stream) {
  ensure_kokkos();
  if (storage_dtype != "bf16" && storage_dtype != "fp16") {
    throw py::value_error("writeback_stored: storage_dtype " + storage_dtype + " is not bf16 or fp16");
  }
  const Storage16 type = storage_dtype == "bf16" ? Storage16::bf16 : Storage16::fp16;
  if (storage.dtype().kind() != 'i' && storage.dtype().kind() != 'u') {
    throw py::type_error("writeback_stored: storage has dtype " + dtype_name(storage) +
                         "; it takes the parameter's 16 raw bits (tensor.view(torch.int16).numpy())");
  }
  if (storage.itemsize() != 2) {
    throw py::type_error("writeback_stored: storage has dtype " + dtype_name(storage) + ", not 16 bits");
  }
  if (!(storage.flags() & py::array::c_style) || !storage.writeable()) {
    throw py::value_error("writeback_stored: storage must be C-contiguous and writable");
  }
  const FormatSpec fmt = make_format(fmt_name, scale);
  const WritebackPolicy policy = make_policy(policy_name_, sr_bits, sr_stream);
  if (policy.policy == Policy::master) {
    throw py::value_error("writeback: policy master keeps an fp32 master copy; write back with nearest instead");
  }
  if (storage.size() != stepped.size()) {
    throw py::value_error("writeback_stored: storage holds " + std::to_string(storage.size()) + " values, stepped " +
                          std::to_string(stepped.size()));
  }
  const float* pd = float32_data<const float>(stepped, "stepped", fmt_name);
  const auto n = static_cast<std::size_t>(storage.size());
  const Kokkos::View<std::uint16_t*, Space::memory_space, Kokkos::MemoryUnmanaged> sv(
      static_cast<std::uint16_t*>(storage.mutable_data()), n);
  const Kokkos::View<const float*, Space::memory_space, Kokkos::MemoryUnmanaged> pv(pd, n);
  WritebackOptions options;
  options.first_coordinate = first_coordinate;
  WritebackCounts counts;
  {
    py::gil_scoped_release release;
    try {
      counts = writeback_stored(Space(), fmt, policy, RngKey{seed, step, tensor_id}, type, sv, pv, options);
    } catch (const NonFiniteError& e) {
      py::gil_scoped_acquire acquire;
      throw py::value_error(where(tensor, step) + e.what());
    } catch (const std::invalid_argument& e) {
      py::gil_scoped_acquire acquire;
      throw py::value_error(where(tensor, step) + e.what());
    }
  }
  return counts_dict(counts);
}

// PyTorch's AdamW step on a bf16 / fp16 parameter (sim/optim/torch_adamw.hpp): storage and grad16 its raw 16-bit
// values and gradient (or grad a float32 array), exp_avg / exp_avg_sq its float32 moments (updated in place), stepped
// receives the float32 values torch.optim.AdamW would step the parameter's fp32 copy to.
void adamw_step_stored_py(const py::array& storage, py::array grad, py::array exp_avg, py::array exp_avg_sq,
                          py::array stepped, const std::string& storage_dtype, double lr, double beta1, double beta2,
                          double eps, double weight_decay, double step) {
  ensure_kokkos();
  if (storage_dtype != "bf16" && storage_dtype != "fp16") {
    throw py::value_error("adamw_step_stored: storage_dtype " + storage_dtype + " is not bf16 or fp16");
  }
  const auto raw16 = [](const py::array& a, const char* what) {
    if ((a.dtype().kind() != 'i' && a.dtype().kind() != 'u') || a.itemsize() != 2) {
      throw py::type_error(std::string("adamw_step_stored: ") + what + " has dtype " + dtype_name(a) +
                           "; it takes 16 raw bits (tensor.view(torch.int16).numpy())");
    }
    if (!(a.flags() & py::array::c_style)) {
      throw py::value_error(std::string("adamw_step_stored: ") + what + " must be C-contiguous");
    }
  };
  raw16(storage, "storage");
  const auto n = static_cast<std::size_t>(storage.size());
  for (const auto& [a, what] : {std::pair<const py::array*, const char*>{&grad, "grad"},
                                {&exp_avg, "exp_avg"},
                                {&exp_avg_sq, "exp_avg_sq"},
                                {&stepped, "stepped"}}) {
    if (static_cast<std::size_t>(a->size()) != n) {
      throw py::value_error(std::string("adamw_step_stored: storage holds ") + std::to_string(n) + " values, " + what +
                            " " + std::to_string(a->size()));
    }
  }
  const std::uint16_t* grad16 = nullptr;
  const float* grad32 = nullptr;
  if (grad.itemsize() == 2) {
    raw16(grad, "grad");
    grad16 = static_cast<const std::uint16_t*>(grad.data());
  } else {
    grad32 = float32_data<const float>(grad, "grad", storage_dtype);
  }
  float* m = float32_data<float>(exp_avg, "exp_avg", storage_dtype);
  float* v = float32_data<float>(exp_avg_sq, "exp_avg_sq", storage_dtype);
  float* out = float32_data<float>(stepped, "stepped", storage_dtype);
  const TorchAdamWStep s{lr, beta1, beta2, eps, weight_decay, step};
  const Storage16 type = storage_dtype == "bf16" ? Storage16::bf16 : Storage16::fp16;
  const auto* sp = static_cast<const std::uint16_t*>(storage.data());
  py::gil_scoped_release release;
  torch_adamw_step_stored(s, type, sp, grad16, grad32, m, v, out, n);
}

template <class T, class Allocator>
py::array_t<T> array_of(const std::vector<T, Allocator>& v) {
  return py::array_t<T>(static_cast<py::ssize_t>(v.size()), v.data());
}

// The margin layout of `formats` (margin_layout_for), or the default one (None).
MarginLayout margin_layout_or_default(const std::optional<std::vector<std::string>>& formats) {
  return formats ? margin_layout_for(*formats) : default_margin_layout();
}

py::dict project_py(py::array w, py::array u, const std::vector<py::object>& formats_list, bool histogram, double d_min,
                    double bin_width, int bins, const std::string& tensor, std::uint64_t step, bool joint,
                    double init_absmax, const std::optional<std::vector<std::string>>& margin_formats_list) {
  ensure_kokkos();
  same_shape(w, u, "w", "u");
  const float* wd = float32_data<const float>(w, "w", "fp32");
  const float* ud = float32_data<const float>(u, "u", "fp32");
  const auto n = static_cast<std::int64_t>(w.size());
  std::vector<FormatSpec> fmts;
  std::vector<std::string> names;
  for (const py::object& f : formats_list) {
    if (py::isinstance<py::str>(f)) {
      names.push_back(f.cast<std::string>());
      fmts.push_back(make_format(names.back(), std::nullopt));
    } else {
      const auto pair = f.cast<std::pair<std::string, double>>();
      names.push_back(pair.first);
      fmts.push_back(make_format(pair.first, pair.second));
    }
  }
  // The simulator's recording (sim/trace/reference_histograms.hpp): the d histogram and, with joint, the margin
  // histogram (of every format, or of margin_formats), in one pass; integer counts, independent of the thread count.
  const MarginLayout layout = joint ? margin_layout_or_default(margin_formats_list) : MarginLayout{};
  const std::vector<MarginFormat> margin_fmts = margin_formats(layout, init_absmax);
  std::vector<std::int64_t> erased(fmts.size());
  ReferenceHistograms h;
  std::int64_t first_bad = -1;
  {
    py::gil_scoped_release release;
    const Kokkos::View<const float*, Space::memory_space, Kokkos::MemoryUnmanaged> wv(wd, n), uv(ud, n);
    h = reference_histograms(Space(), RatioHistogramLayout{d_min, bin_width, bins}, layout, margin_fmts, wd, ud,
                             static_cast<std::size_t>(n));
    for (std::int64_t i = 0; h.non_finite > 0 && first_bad < 0 && i < n; ++i) {
      if (!std::isfinite(wd[i]) || !std::isfinite(ud[i])) {
        first_bad = i;
      }
    }
    if (h.non_finite == 0) {
      for (std::size_t f = 0; f < fmts.size(); ++f) {
        // A format the margin histogram recorded with the same rounding: whole counters of it (margin_readout.hpp).
        const int block = joint ? margin_block_of(layout, margin_fmts, fmts[f]) : -1;
        erased[f] = block >= 0 ? margin_erased_at_unit_scale(layout, h.margin, static_cast<std::size_t>(block))
                               : project_erasure(Space(), fmts[f], wv, uv).erased;
      }
    }
  }
  if (h.non_finite > 0) {
    throw py::value_error(where(tensor, step) + "project: " + std::to_string(h.non_finite) +
                          " non-finite coordinates (first at index " + std::to_string(first_bad) +
                          ": w = " + std::to_string(wd[first_bad]) + ", u = " + std::to_string(ud[first_bad]) + ")");
  }
  py::dict out;
  out["nonzero"] = h.nonzero;
  out["zero_weight"] = h.zero_weight;
  py::dict e;
  for (std::size_t f = 0; f < fmts.size(); ++f) {
    e[py::str(names[f])] = erased[f];
  }
  out["erased"] = e;
  if (histogram) {
    out["ratio_histogram"] = py::array_t<std::int64_t>(static_cast<py::ssize_t>(bins), h.ratio.data());
  }
  if (joint) {
    out["margin"] = py::array_t<std::int64_t>(static_cast<py::ssize_t>(h.margin.size()), h.margin.data());
  }
  return out;
}

// audit() of a write-back in a block format (audit/block_audit.hpp): w_next against the block write-back of (w, u)
// with the arrays' shape (blocks along the last dimension); SR is replayed from the seed, which it needs.
py::dict audit_block_py(py::array w, py::array u, py::array w_next, const StorageFormat& sf,
                        const WritebackPolicy& policy, std::optional<std::uint64_t> seed, std::uint64_t step,
                        std::uint32_t tensor_id, const std::string& tensor) {
  if (policy.policy == Policy::master) {
    throw py::value_error("audit: policy master cannot be audited from w and u alone (the fp32 master copy)");
  }
  if (policy.policy != Policy::nearest && !seed) {
    throw py::value_error(where(tensor, step) + "audit: policy " + policy_name(policy.policy) + " in block format " +
                          sf.name + " is audited by replaying the run's draws: give seed=");
  }
  same_shape(w, u, "w", "u");
  same_shape(w, w_next, "w", "w_next");
  const auto n = static_cast<std::size_t>(w.size());
  const std::span<const float> ws(float32_data<const float>(w, "w", sf.name), n),
      us(float32_data<const float>(u, "u", sf.name), n), ns(float32_data<const float>(w_next, "w_next", sf.name), n);
  const RowMajorShape shape = block_shape(w);
  wbaudit::audit::BlockStepAudit r;
  {
    py::gil_scoped_release release;
    try {
      r = wbaudit::audit::audit_block_step(sf, policy, RngKey{seed.value_or(0), step, tensor_id}, shape, ws, us, ns);
    } catch (const std::exception& e) {
      py::gil_scoped_acquire acquire;
      throw py::value_error(where(tensor, step) + e.what());
    }
  }
  py::dict out = block_counts_dict(r.counts.block);  // the causes of the recomputed write-back
  out["nonzero"] = r.counts.nonzero;                 // the arrays' own events
  out["erased"] = r.counts.erased;
  out["applied"] = r.counts.applied;
  out["nearest_erased"] = r.counts.nearest_erased;
  out["consistent"] = r.differing.empty();
  py::list bad;
  for (const std::int64_t i : r.differing) {
    const auto j = static_cast<std::size_t>(i);
    py::dict d;
    d["index"] = i;
    d["w"] = ws[j];
    d["u"] = us[j];
    d["w_next"] = ns[j];
    d["expected_low"] = r.expected[j];
    d["expected_high"] = r.expected[j];
    d["reason"] = std::string("the ") + policy_name(policy.policy) + " block write-back gives another value";
    bad.append(d);
  }
  out["inconsistent"] = bad;
  return out;
}

py::dict audit_py(py::array w, py::array u, py::array w_next, const std::string& fmt_name,
                  const std::string& policy_name_, int sr_bits, std::optional<std::uint64_t> seed, std::uint64_t step,
                  std::uint32_t tensor_id, std::optional<double> scale, const std::string& tensor,
                  const std::string& sr_stream) {
  ensure_kokkos();
  if (is_block_storage_name(fmt_name)) {
    if (scale) {
      throw py::value_error("scale applies only to intK formats; " + fmt_name + " computes its scales from w + u");
    }
    return audit_block_py(w, u, w_next, storage_format_from_name(fmt_name),
                          make_policy(policy_name_, sr_bits, sr_stream), seed, step, tensor_id, tensor);
  }
  const FormatSpec fmt = make_format(fmt_name, scale);
  const WritebackPolicy policy = make_policy(policy_name_, sr_bits, sr_stream);
  same_shape(w, u, "w", "u");
  same_shape(w, w_next, "w", "w_next");
  const auto n = static_cast<std::size_t>(w.size());
  const std::span<const float> ws(float32_data<const float>(w, "w", fmt_name), n),
      us(float32_data<const float>(u, "u", fmt_name), n), ns(float32_data<const float>(w_next, "w_next", fmt_name), n);
  AuditReport report;
  {
    py::gil_scoped_release release;
    std::optional<RngKey> replay;
    if (seed) {
      replay = RngKey{*seed, step, tensor_id};
    }
    try {
      report = audit_writeback(fmt, policy, ws, us, ns, tensor_id, step, replay);
    } catch (const std::exception& e) {
      py::gil_scoped_acquire acquire;
      throw py::value_error(where(tensor, step) + e.what());
    }
  }
  py::dict out = counts_dict(report.counts);
  out["nearest_erased"] = report.nearest_erased;
  out["consistent"] = report.consistent();
  py::list bad;
  for (const AuditInconsistency& c : report.inconsistencies) {
    py::dict d;
    d["index"] = c.coordinate;
    d["w"] = c.w;
    d["u"] = c.u;
    d["w_next"] = c.w_next;
    d["expected_low"] = c.allowed_low;
    d["expected_high"] = c.allowed_high;
    d["reason"] = c.reason;
    bad.append(d);
  }
  out["inconsistent"] = bad;
  return out;
}

// ---- traces -----------------------------------------------------------------------------------------------

py::dict margin_layout_dict(const MarginLayout& m) {
  return py::dict(py::arg("formats") = m.formats, py::arg("coarse_lo") = m.rows.coarse_lo,
                  py::arg("fine_lo") = m.rows.fine_lo, py::arg("fine_hi") = m.rows.fine_hi,
                  py::arg("coarse_hi") = m.rows.coarse_hi, py::arg("sub_bins") = kMarginSubBins,
                  py::arg("moment_bits") = m.moments ? kMarginMomentBits : 0, py::arg("bins") = m.bins());
}

MarginLayout margin_layout_of(const py::dict& d) {
  MarginLayout m;
  m.formats = d["formats"].cast<std::vector<std::string>>();
  m.rows.coarse_lo = d["coarse_lo"].cast<int>();
  m.rows.fine_lo = d["fine_lo"].cast<int>();
  m.rows.fine_hi = d["fine_hi"].cast<int>();
  m.rows.coarse_hi = d["coarse_hi"].cast<int>();
  if (d.contains("sub_bins") && d["sub_bins"].cast<int>() != kMarginSubBins) {
    throw py::value_error("margin layout: sub_bins must be " + std::to_string(kMarginSubBins));
  }
  // schema 4's moments (absent: a schema-3 layout; header_from_dict checks it against the schema)
  m.moments = d.contains("moment_bits") && d["moment_bits"].cast<int>() != 0;
  if (m.moments && d["moment_bits"].cast<int>() != kMarginMomentBits) {
    throw py::value_error("margin layout: moment_bits must be " + std::to_string(kMarginMomentBits) + " or 0");
  }
  if (!m.rows.valid()) {
    throw py::value_error("margin layout: invalid rows");
  }
  return m;
}

// A block format's events by cause ({"blocks": n, "erased_grid": [T], ...}; docs/trace-format.md).
py::dict block_events_dict(const BlockEventSeries& b) {
  py::dict d;
  d["blocks"] = b.blocks;
  for (const BlockEventField& f : kBlockEventFields) {
    d[f.name] = array_of(b.*f.series);
  }
  return d;
}

// A block format's sample ({"rows", "cols", "elements", "blocks", a sampled tensor's "anchor_scales", and with T rows
// "w", "u": [T, elements] float32, NVFP4 "tensor": [T, kBlockSampleTensorWidth], a sampled tensor's "anchors": [T,
// anchors, kBlockAnchorCounts] int64; docs/trace-format.md, "Block samples").
py::dict block_sample_dict(const BlockSample& b, bool rows) {
  py::dict d;
  d["rows"] = b.rows;
  d["cols"] = b.cols;
  d["elements"] = b.elements;
  d["blocks"] = array_of(b.blocks);
  if (!b.anchor_scales.empty()) {
    d["anchor_scales"] = array_of(b.anchor_scales);
  }
  if (rows) {
    const auto e = static_cast<py::ssize_t>(b.elements);
    const auto T = static_cast<py::ssize_t>(e == 0 ? 0 : b.w.size() / b.elements);
    d["w"] = array_of(b.w).reshape({T, e});
    d["u"] = array_of(b.u).reshape({T, e});
    if (!b.tensor.empty()) {
      d["tensor"] = array_of(b.tensor).reshape({T, static_cast<py::ssize_t>(kBlockSampleTensorWidth)});
    }
    if (!b.anchor_scales.empty()) {
      d["anchors"] = array_of(b.anchors).reshape(
          {T, static_cast<py::ssize_t>(b.anchor_scales.size()), static_cast<py::ssize_t>(kBlockAnchorCounts)});
    }
  }
  return d;
}

// The header of a block format's projection for a tensor of this shape (ReferenceRecorder's trace header):
// {"block_events": {"blocks": n}, "block_sample": {rows, cols, elements, blocks}}, as the engine declares it.
py::dict block_projection_header_py(const std::string& fmt_name, const std::vector<std::int64_t>& shape) {
  const StorageFormat sf = storage_format_from_name(fmt_name);
  if (!sf.block) {
    throw py::value_error("block_projection_header: " + fmt_name + " is not a block format");
  }
  const ProjectedSeries series = block_projection_header(sf.blocks, row_major_shape(shape));
  py::dict d;
  d["block_events"] = py::dict(py::arg("blocks") = series.block_events.blocks);
  d["block_sample"] = block_sample_dict(series.block_sample, false);
  return d;
}

// One recorded step of a block format's projection (sim/trace/block_reference.hpp, the engine's recording): w, u
// with the tensor's shape (blocks along the last dimension). Returns the step's rows of projected[fmt]: erased,
// fraction, block_events, block_sample (w, u and NVFP4's tensor row).
py::dict block_projection_step_py(py::array w, py::array u, const std::string& fmt_name, std::uint64_t seed,
                                  std::uint64_t step, std::uint32_t tensor_id, const std::string& tensor) {
  ensure_kokkos();
  same_shape(w, u, "w", "u");
  const float* wd = float32_data<const float>(w, "w", "fp32");
  const float* ud = float32_data<const float>(u, "u", "fp32");
  const StorageFormat sf = storage_format_from_name(fmt_name);
  if (!sf.block) {
    throw py::value_error("block_projection_step: " + fmt_name + " is not a block format");
  }
  const RowMajorShape shape = block_shape(w);
  ProjectedSeries series = block_projection_header(sf.blocks, shape);
  {
    py::gil_scoped_release release;
    const auto n = static_cast<std::size_t>(w.size());
    const Kokkos::View<const float*, Space::memory_space, Kokkos::MemoryUnmanaged> wv(wd, n), uv(ud, n);
    try {
      record_block_projection(Space(), sf.blocks, RngKey{seed, step, tensor_id}, shape,
                              Kokkos::View<const float*, Space::memory_space>(wv),
                              Kokkos::View<const float*, Space::memory_space>(uv), series);
    } catch (const std::exception& e) {
      py::gil_scoped_acquire acquire;
      throw py::value_error(where(tensor, step) + fmt_name + ": " + e.what());
    }
  }
  py::dict d;
  d["erased"] = array_of(series.erased);
  d["fraction"] = array_of(series.fraction);
  py::dict events = block_events_dict(series.block_events);
  events.attr("pop")("blocks");
  d["block_events"] = events;
  py::dict sample;
  sample["w"] = array_of(series.block_sample.w);
  sample["u"] = array_of(series.block_sample.u);
  if (!series.block_sample.tensor.empty()) {
    sample["tensor"] = array_of(series.block_sample.tensor);
  }
  if (!series.block_sample.anchor_scales.empty()) {
    sample["anchors"] = array_of(series.block_sample.anchors);
  }
  d["block_sample"] = sample;
  return d;
}

py::dict trace_to_dict(const Trace& t) {
  py::dict d;
  d["schema"] = t.schema;
  d["complete"] = t.complete;
  d["mode"] = t.mode;
  d["format"] = t.format;
  d["policy"] = t.policy;
  d["seed"] = t.seed;
  d["steps"] = t.steps;
  d["config_json"] = t.config_json;
  d["numeric_contract"] = t.numeric_contract;  // "" when not recorded (traces of the Python module, older traces)
  d["recorded_steps"] = array_of(t.recorded_steps);
  d["loss"] = array_of(t.loss);
  d["learning_rate"] = array_of(t.learning_rate);
  d["histogram"] = py::dict(py::arg("d_min") = t.histogram.d_min, py::arg("bin_width") = t.histogram.bin_width,
                            py::arg("bins") = t.histogram.bins);
  py::dict groups;
  for (const GroupTrace& g : t.groups) {
    py::dict gd;
    gd["tensor_id"] = g.tensor_id;
    gd["size"] = g.size;
    gd["nonzero"] = array_of(g.nonzero);
    if (t.mode == "target") {
      gd["erased"] = array_of(g.erased);
      gd["saturated"] = array_of(g.saturated);
      gd["applied"] = array_of(g.applied);
      gd["erased_fraction"] = array_of(g.erased_fraction);
      if (!g.block_format.empty()) {
        gd["block_format"] = g.block_format;
      }
      if (!g.block_events.empty()) {
        gd["block_events"] = block_events_dict(g.block_events);
      }
    } else {
      gd["zero_weight"] = array_of(g.zero_weight);
      py::array_t<std::int64_t> h(static_cast<py::ssize_t>(g.ratio_histogram.size()), g.ratio_histogram.data());
      const auto T = static_cast<py::ssize_t>(t.recorded_steps.size());
      gd["ratio_histogram"] = h.reshape({T, static_cast<py::ssize_t>(t.histogram.bins)});
      py::dict projected;
      for (const auto& [name, s] : g.projected) {
        py::dict pd(py::arg("erased") = array_of(s.erased), py::arg("fraction") = array_of(s.fraction));
        if (!s.block_events.empty()) {
          pd["block_events"] = block_events_dict(s.block_events);
        }
        if (!s.block_sample.empty()) {
          pd["block_sample"] = block_sample_dict(s.block_sample, true);
        }
        projected[py::str(name)] = pd;
      }
      gd["projected"] = projected;
      if (g.has_margin()) {
        gd["joint"] =
            py::dict(py::arg("margin") = array_of(g.margin).reshape({T, static_cast<py::ssize_t>(t.margin.bins())}),
                     py::arg("init_absmax") = g.init_absmax);
      } else if (g.has_pairs()) {
        gd["joint"] = py::dict(py::arg("offsets") = array_of(g.joint_offsets), py::arg("keys") = array_of(g.joint_keys),
                               py::arg("counts") = array_of(g.joint_counts), py::arg("init_absmax") = g.init_absmax);
      } else if (std::isfinite(g.init_absmax)) {
        gd["joint"] = py::dict(py::arg("init_absmax") = g.init_absmax);
      }
      if (g.has_joint()) {
        if (g.has_exact()) {  // a small group's kept w and u, [T, size] (docs/trace-format.md)
          const auto shape = std::vector<py::ssize_t>{T, static_cast<py::ssize_t>(g.size)};
          gd["joint"]["w"] = array_of(g.exact_w).reshape(shape);
          gd["joint"]["u"] = array_of(g.exact_u).reshape(shape);
        }
      }
    }
    groups[py::str(g.name)] = gd;
  }
  d["groups"] = groups;
  if (std::any_of(t.groups.begin(), t.groups.end(), [](const GroupTrace& g) { return g.has_pairs(); })) {
    d["joint"] = py::dict(py::arg("w_bits") = t.joint.w_bits, py::arg("u_bits") = t.joint.u_bits);
  }
  if (!t.margin.formats.empty()) {
    d["margin"] = margin_layout_dict(t.margin);
  }
  if (!t.validation_steps.empty()) {
    d["validation_steps"] = array_of(t.validation_steps);
    d["validation_loss"] = array_of(t.validation_loss);
  }
  return d;
}

template <class T>
std::vector<T> vector_of(const py::handle& obj, const std::string& what, std::size_t expected) {
  const auto a = py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(obj);
  if (!a) {
    throw py::value_error("write_trace: " + what + " is not a numeric array");
  }
  std::vector<T> v(a.data(), a.data() + a.size());
  if (expected != static_cast<std::size_t>(-1) && v.size() != expected) {
    throw py::value_error("write_trace: " + what + " has " + std::to_string(v.size()) + " values, expected " +
                          std::to_string(expected));
  }
  return v;
}

// A reference's projected block format in a header dict: "block_events" {"blocks"} and "block_sample" {"rows",
// "cols", "blocks"[, "elements"]} (what read_trace gives and block_projection_header makes); absent: none.
void block_projection_header_of(const py::dict& pd, const std::string& mode, const GroupTrace& g,
                                const std::string& format, ProjectedSeries& series, const char* who) {
  if (!pd.contains("block_events") && !pd.contains("block_sample")) {
    return;
  }
  const std::string w = std::string(who) + ": group " + g.name + ": projected " + format + ": ";
  const StorageFormat sf = storage_format_from_name(format);  // throws naming the known formats
  if (!sf.block || mode != "reference") {
    throw py::value_error(w + "block_events and block_sample are for block formats of reference traces");
  }
  if (pd.contains("block_events")) {
    const py::dict bd = pd["block_events"];
    series.block_events.blocks = bd["blocks"].cast<std::int64_t>();
    if (series.block_events.blocks <= 0) {
      throw py::value_error(w + "block_events needs \"blocks\" > 0");
    }
  }
  if (pd.contains("block_sample")) {
    const py::dict sd = pd["block_sample"];
    BlockSample& b = series.block_sample;
    b.rows = sd["rows"].cast<std::int64_t>();
    b.cols = sd["cols"].cast<std::int64_t>();
    b.blocks = vector_of<std::int64_t>(sd["blocks"], w + "block_sample.blocks", static_cast<std::size_t>(-1));
    const RowMajorShape shape{b.rows, b.cols};
    if (b.rows <= 0 || b.cols <= 0 || shape.size() != g.size) {
      throw py::value_error(w + "block_sample shape " + std::to_string(b.rows) + " x " + std::to_string(b.cols) +
                            " does not hold the group's " + std::to_string(g.size) + " coordinates");
    }
    const std::int64_t n = block_count(sf.blocks, shape);
    b.elements = 0;
    for (std::size_t k = 0; k < b.blocks.size(); ++k) {
      if (b.blocks[k] < 0 || b.blocks[k] >= n || (k > 0 && b.blocks[k] <= b.blocks[k - 1])) {
        throw py::value_error(w + "block_sample.blocks must rise within [0, " + std::to_string(n) + ")");
      }
      const BlockLocation at = block_at(sf.blocks, shape, b.blocks[k]);
      b.elements += (at.row_end - at.row_begin) * (at.col_end - at.col_begin);
    }
    if (sd.contains("elements") && sd["elements"].cast<std::int64_t>() != b.elements) {
      throw py::value_error(w + "block_sample.elements " + std::to_string(sd["elements"].cast<std::int64_t>()) +
                            " is not the sampled blocks' " + std::to_string(b.elements));
    }
    b.anchor_scales.clear();
    if (sd.contains("anchor_scales")) {  // a sampled tensor's exact anchors (absent: none, as before them)
      b.anchor_scales =
          vector_of<double>(sd["anchor_scales"], w + "block_sample.anchor_scales", static_cast<std::size_t>(-1));
      for (const double s : b.anchor_scales) {
        if (!(s > 0) || !std::isfinite(s)) {
          throw py::value_error(w + "block_sample.anchor_scales must be positive and finite");
        }
      }
    }
  }
}

// The header of a trace dict (every field but the rows): what a TraceWriter is created from, and the first half of
// trace_from_dict. Groups: tensor_id, size, projected format names, joint.init_absmax.
Trace header_from_dict(const py::dict& d, const char* who) {
  Trace t;
  auto need = [&](const char* key) -> py::handle {
    if (!d.contains(key)) {
      throw py::value_error(std::string(who) + ": missing key \"" + key + "\"");
    }
    return d[key];
  };
  t.mode = need("mode").cast<std::string>();
  if (t.mode != "reference" && t.mode != "target") {
    throw py::value_error(std::string(who) + ": mode must be reference or target, got " + t.mode);
  }
  t.schema = d.contains("schema") ? d["schema"].cast<std::string>() : trace_schema_for_mode(t.mode);
  if (t.schema != kTraceSchema && t.schema != kTraceSchemaV3 && t.schema != kTraceSchemaV2 &&
      t.schema != kTraceSchemaV1) {
    throw py::value_error(std::string(who) + ": schema " + t.schema + " is not " + kTraceSchema + ", " +
                          kTraceSchemaV3 + ", " + kTraceSchemaV2 + " or " + kTraceSchemaV1);
  }
  t.format = need("format").cast<std::string>();
  t.policy = need("policy").cast<std::string>();
  t.seed = d.contains("seed") ? d["seed"].cast<std::uint64_t>() : 0;
  t.steps = need("steps").cast<std::int64_t>();
  t.config_json = d.contains("config_json") ? d["config_json"].cast<std::string>() : "{}";
  if (d.contains("histogram")) {
    const py::dict h = d["histogram"];
    t.histogram.d_min = h["d_min"].cast<double>();
    t.histogram.bin_width = h["bin_width"].cast<double>();
    t.histogram.bins = h["bins"].cast<int>();
  }
  if (d.contains("joint")) {
    const py::dict j = d["joint"];
    t.joint.w_bits = j["w_bits"].cast<int>();
    t.joint.u_bits = j["u_bits"].cast<int>();
  }
  if (d.contains("margin")) {
    t.margin = margin_layout_of(d["margin"]);
    if (t.margin.moments != (t.schema == kTraceSchema)) {
      throw py::value_error(std::string(who) + ": a margin layout " + (t.margin.moments ? "with" : "without") +
                            " moment_bits in a trace of schema " + t.schema + " (moments: schema " + kTraceSchema +
                            " only)");
    }
  }
  const auto groups = py::reinterpret_borrow<py::dict>(need("groups"));
  for (const auto& [key, value] : groups) {
    const py::dict gd = py::reinterpret_borrow<py::dict>(value);
    GroupTrace g;
    g.name = key.cast<std::string>();
    g.tensor_id = gd["tensor_id"].cast<std::uint32_t>();
    g.size = gd["size"].cast<std::int64_t>();
    if (gd.contains("projected")) {
      for (const auto& [pname, pvalue] : py::reinterpret_borrow<py::dict>(gd["projected"])) {
        ProjectedSeries& series = g.projected[pname.cast<std::string>()];
        if (py::isinstance<py::dict>(pvalue)) {
          block_projection_header_of(py::reinterpret_borrow<py::dict>(pvalue), t.mode, g, pname.cast<std::string>(),
                                     series, who);
        }
      }
    }
    if (gd.contains("joint")) {
      const py::dict jd = gd["joint"];
      g.init_absmax =
          jd.contains("init_absmax") ? jd["init_absmax"].cast<double>() : std::numeric_limits<double>::quiet_NaN();
    }
    if (gd.contains("block_format")) {  // target mode: a group held in a block format, with its block count
      if (t.mode != "target") {
        throw py::value_error(std::string(who) + ": group " + g.name + ": block_format is for target traces");
      }
      g.block_format = gd["block_format"].cast<std::string>();
      if (!storage_format_from_name(g.block_format).block) {  // throws naming the known formats
        throw py::value_error(std::string(who) + ": group " + g.name + ": " + g.block_format +
                              " is not a block format");
      }
      if (!gd.contains("blocks") || gd["blocks"].cast<std::int64_t>() <= 0) {
        throw py::value_error(std::string(who) + ": group " + g.name + ": block_format needs \"blocks\" > 0");
      }
      g.block_events.blocks = gd["blocks"].cast<std::int64_t>();
    }
    t.groups.push_back(std::move(g));
  }
  return t;
}

// The rows of a trace dict (recorded_steps, loss, learning_rate, per group its series, d histogram and joint
// record, optional validation) into t, whose header (group order, mode, layouts) they must match.
void rows_from_dict(Trace& t, const py::dict& d, const char* who) {
  auto need = [&](const py::dict& from, const char* key, const std::string& w) -> py::handle {
    if (!from.contains(key)) {
      throw py::value_error(std::string(who) + ": missing key \"" + w + key + "\"");
    }
    return from[key];
  };
  t.recorded_steps =
      vector_of<std::int64_t>(need(d, "recorded_steps", ""), "recorded_steps", static_cast<std::size_t>(-1));
  const std::size_t T = t.recorded_steps.size();
  t.loss = vector_of<double>(need(d, "loss", ""), "loss", T);
  t.learning_rate = vector_of<double>(need(d, "learning_rate", ""), "learning_rate", T);
  if (d.contains("validation_steps")) {
    t.validation_steps =
        vector_of<std::int64_t>(d["validation_steps"], "validation_steps", static_cast<std::size_t>(-1));
    t.validation_loss = vector_of<double>(need(d, "validation_loss", ""), "validation_loss", t.validation_steps.size());
  }
  const auto groups = py::reinterpret_borrow<py::dict>(need(d, "groups", ""));
  for (GroupTrace& g : t.groups) {
    if (!groups.contains(py::str(g.name))) {
      throw py::value_error(std::string(who) + ": groups has no entry for " + g.name);
    }
    const py::dict gd = groups[py::str(g.name)];
    const std::string w = "groups[" + g.name + "].";
    g.nonzero = vector_of<std::int64_t>(need(gd, "nonzero", w), w + "nonzero", T);
    if (t.mode == "target") {
      g.erased = vector_of<std::int64_t>(need(gd, "erased", w), w + "erased", T);
      g.saturated = vector_of<std::int64_t>(need(gd, "saturated", w), w + "saturated", T);
      g.applied = vector_of<std::int64_t>(need(gd, "applied", w), w + "applied", T);
      g.erased_fraction = vector_of<double>(need(gd, "erased_fraction", w), w + "erased_fraction", T);
      if (!g.block_events.empty()) {  // a block format's events by cause, one entry per recorded step
        const py::dict bd = py::reinterpret_borrow<py::dict>(need(gd, "block_events", w));
        for (const BlockEventField& f : kBlockEventFields) {
          g.block_events.*f.series =
              vector_of<std::int64_t>(need(bd, f.name, w + "block_events."), w + "block_events." + f.name, T);
        }
      }
      continue;
    }
    g.zero_weight = vector_of<std::int64_t>(need(gd, "zero_weight", w), w + "zero_weight", T);
    g.ratio_histogram = vector_of<std::int64_t>(need(gd, "ratio_histogram", w), w + "ratio_histogram",
                                                T * static_cast<std::size_t>(t.histogram.bins));
    const auto projected = py::reinterpret_borrow<py::dict>(need(gd, "projected", w));
    for (auto& [pname, series] : g.projected) {
      if (!projected.contains(py::str(pname))) {
        throw py::value_error(std::string(who) + ": " + w + "projected." + pname + " missing");
      }
      const py::dict pd = projected[py::str(pname)];
      series.erased = vector_of<std::int64_t>(need(pd, "erased", w + "projected."), w + "projected.erased", T);
      series.fraction = vector_of<double>(need(pd, "fraction", w + "projected."), w + "projected.fraction", T);
      const std::string pw = w + "projected." + pname + ".";
      if (!series.block_events.empty()) {  // a block format's events by cause, one entry per recorded step
        const py::dict bd = py::reinterpret_borrow<py::dict>(need(pd, "block_events", pw));
        for (const BlockEventField& f : kBlockEventFields) {
          series.block_events.*f.series =
              vector_of<std::int64_t>(need(bd, f.name, pw + "block_events."), pw + "block_events." + f.name, T);
        }
      }
      if (!series.block_sample.empty()) {  // its sample: T rows of w and u (NVFP4: and of the tensor row)
        const py::dict sd = py::reinterpret_borrow<py::dict>(need(pd, "block_sample", pw));
        BlockSample& b = series.block_sample;
        const std::size_t n = T * static_cast<std::size_t>(b.elements);
        b.w = vector_of<float>(need(sd, "w", pw + "block_sample."), pw + "block_sample.w", n);
        b.u = vector_of<float>(need(sd, "u", pw + "block_sample."), pw + "block_sample.u", n);
        b.tensor.clear();
        if (block_sample_has_tensor_rows(pname)) {
          b.tensor = vector_of<float>(need(sd, "tensor", pw + "block_sample."), pw + "block_sample.tensor",
                                      T * kBlockSampleTensorWidth);
        }
        b.anchors.clear();
        if (!b.anchor_scales.empty()) {
          b.anchors = vector_of<std::int64_t>(need(sd, "anchors", pw + "block_sample."), pw + "block_sample.anchors",
                                              T * b.anchor_scales.size() * kBlockAnchorCounts);
        }
      }
    }
    if (!gd.contains("joint")) {
      continue;
    }
    const py::dict jd = gd["joint"];
    if (jd.contains("margin")) {
      if (t.margin.formats.empty()) {
        throw py::value_error(std::string(who) + ": " + w + "joint.margin given without the trace's \"margin\" layout");
      }
      g.margin = vector_of<std::int64_t>(jd["margin"], w + "joint.margin", T * t.margin.bins());
    } else if (jd.contains("offsets") || jd.contains("keys")) {
      if (!d.contains("joint") && t.joint.w_bits == JointHistogramLayout{}.w_bits && t.schema != kTraceSchemaV2) {
        throw py::value_error(std::string(who) + ": " + w + "joint pairs given without the trace's \"joint\" layout");
      }
      g.joint_offsets = vector_of<std::int64_t>(need(jd, "offsets", w + "joint."), w + "joint.offsets", T + 1);
      const std::vector<std::uint64_t> keys =
          vector_of<std::uint64_t>(need(jd, "keys", w + "joint."), w + "joint.keys", static_cast<std::size_t>(-1));
      const std::vector<std::int64_t> counts =
          vector_of<std::int64_t>(need(jd, "counts", w + "joint."), w + "joint.counts", keys.size());
      g.joint_keys.assign(keys.begin(), keys.end());
      g.joint_counts.assign(counts.begin(), counts.end());
      if (g.joint_offsets.front() != 0 || static_cast<std::size_t>(g.joint_offsets.back()) != g.joint_keys.size() ||
          !std::is_sorted(g.joint_offsets.begin(), g.joint_offsets.end())) {
        throw py::value_error(std::string(who) + ": " + w + "joint.offsets must rise from 0 to the number of keys (" +
                              std::to_string(g.joint_keys.size()) + ")");
      }
    }
    if (jd.contains("w") || jd.contains("u")) {
      if (!jd.contains("w") || !jd.contains("u")) {
        throw py::value_error(std::string(who) + ": " + w + "joint needs both w and u");
      }
      const std::size_t n = T * static_cast<std::size_t>(g.size);
      g.exact_w = vector_of<float>(jd["w"], w + "joint.w", n);  // [T, size] or flat, C order
      g.exact_u = vector_of<float>(jd["u"], w + "joint.u", n);
    }
  }
}

Trace trace_from_dict(const py::dict& d) {
  Trace t = header_from_dict(d, "write_trace");
  rows_from_dict(t, d, "write_trace");
  if (t.schema == kTraceSchema &&
      std::any_of(t.groups.begin(), t.groups.end(), [](const GroupTrace& g) { return g.has_pairs(); })) {
    t.schema = kTraceSchemaV2;  // a dict read from a schema-2 trace written back as it was
  }
  return t;
}

// wbaudit._core.TraceWriter: sim::TraceWriter for the Python recorders.
class PyTraceWriter {
 public:
  PyTraceWriter(const std::string& path, const py::dict& header) : m_header(header_from_dict(header, "TraceWriter")) {
    Trace prototype = m_header;
    m_writer.emplace(path, prototype);
  }
  void append(const py::dict& rows) {
    if (!m_writer) {
      throw py::value_error("TraceWriter: closed");
    }
    Trace t = m_header;
    rows_from_dict(t, rows, "TraceWriter.append");
    py::gil_scoped_release release;
    m_writer->append(t);
  }
  void finish(std::optional<std::int64_t> steps) {
    if (!m_writer) {
      throw py::value_error("TraceWriter: closed");
    }
    {
      py::gil_scoped_release release;
      m_writer->finish(steps);
    }
    m_writer.reset();
  }
  void close() { m_writer.reset(); }
  py::dict rows() const {
    const TraceRows r = m_writer ? m_writer->rows() : TraceRows{};
    return py::dict(py::arg("steps") = r.steps, py::arg("validations") = r.validations, py::arg("replays") = r.replays);
  }
  std::string partial() const { return m_writer ? m_writer->partial().string() : std::string(); }

 private:
  Trace m_header;
  std::optional<TraceWriter> m_writer;
};

// Kokkos start and stop, and the thresholds Python reads.
void def_runtime(py::module_& m) {
  m.def("_ensure_kokkos", &ensure_kokkos);
  m.attr("JOINT_EXACT_MAX") = kJointExactMaxCoordinates;  // groups this small keep their w and u in a reference
  m.def("_finalize", [] {
    if (Kokkos::is_initialized()) {
      Kokkos::finalize();
    }
    g_finalized = true;
  });
  m.def("_concurrency", [] {
    ensure_kokkos();
    return Space().concurrency();
  });
}

// The formats, rounding into them, and intK scales.
void def_formats(py::module_& m) {
  m.def("formats", &formats,
        "formats() -> list of dict\n\nThe built-in number formats and their parameters (name, kind, bits, exp_bits, "
        "man_bits, bias, max_finite, min_normal, min_subnormal, has_inf, has_nan, subnormals, max_level).");
  m.def("block_formats", &block_formats,
        "block_formats() -> list of dict\n\nThe block-scaled formats (name, family, element, block_size, tiles_2d, "
        "scale_rule, emax_elem, max_elem). Any of them may take the option ':skip_unchanged_blocks'.");
  m.def("round", &round_values, py::arg("x"), py::arg("fmt"), py::arg("policy") = "nearest", py::arg("seed") = 0,
        py::arg("sr_bits") = 0, py::arg("step") = 0, py::arg("tensor_id") = 0, py::arg("scale") = py::none(),
        py::arg("sr_stream") = "philox",
        "round(x, fmt, policy='nearest', seed=0, sr_bits=0, step=0, tensor_id=0, scale=None, sr_stream='philox')\n"
        "      -> float32 array\n\n"
        "Rounds every value of x (any real dtype, read exactly as float64) into format fmt: 'nearest' (ties to even, "
        "beyond the largest finite value: saturated) or 'stochastic' (exact probabilities, or sr_bits = r random "
        "bits). SR draws are keyed by (seed, step, tensor_id, flat index), as in the simulator. scale: the "
        "per-tensor scale of an intK format. sr_stream: where SR's random bits come from: 'philox' (the default, one "
        "32-bit word per coordinate) or 'philox-packed' (sr_bits 1..16: one word feeds floor(32 / r) neighbouring "
        "coordinates; sr_bits 0: two coordinates, 16 bits each, further bits from each coordinate's own words; "
        "different draws). Block formats (block_formats()) round blockwise along the last dimension of x, with "
        "the scales x implies; x must hold fp32 values. Raises ValueError for NaN/inf, an unknown "
        "format/policy/sr_stream or an sr_stream the policy and sr_bits do not allow.");
  m.def("int_scale_for_absmax", &int_scale_for_absmax, py::arg("k"), py::arg("absmax"),
        "int_scale_for_absmax(k, absmax) -> float\n\nThe per-tensor scale of intK for an initialization absmax.");
}

// The write-back, the projections a reference records, and the audit of one step.
void def_writeback(py::module_& m) {
  m.def("writeback", &writeback_py, py::arg("w"), py::arg("u"), py::arg("fmt"), py::arg("policy") = "nearest",
        py::arg("seed") = 0, py::arg("step") = 0, py::arg("tensor_id") = 0, py::arg("sr_bits") = 0,
        py::arg("scale") = py::none(), py::arg("out") = py::none(), py::arg("first_coordinate") = 0,
        py::arg("tensor") = "", py::arg("sr_stream") = "philox",
        "writeback(w, u, fmt, policy='nearest', seed=0, step=0, tensor_id=0, sr_bits=0, scale=None, out=None,\n"
        "          first_coordinate=0, tensor='', sr_stream='philox') -> (w_next, counts)\n\n"
        "The persistent-native write-back w_next = q_fmt^policy(w + u), formed exactly, with the exact events.\n"
        "w: float32 array of values of fmt; u: float32 proposals of the same shape. policy: nearest, stochastic,\n"
        "deadzone-sr. SR draws are keyed by (seed, step, tensor_id, first_coordinate + flat index), exactly as in\n"
        "the simulator, so both agree bitwise. out: a float32 array to write into (out=w: in place, no copy).\n"
        "counts: dict nonzero, erased, saturated, applied, sr_applied, sr_truncated. tensor: a name for messages.\n"
        "sr_stream: the SR stream, 'philox' (default: one 32-bit word per coordinate, the stream of every trace so\n"
        "far) or 'philox-packed' (stochastic or deadzone-sr with sr_bits 1..16: one word feeds floor(32 / r)\n"
        "neighbouring coordinates, r bits each; sr_bits 0: two coordinates, 16 bits each, further bits from each\n"
        "coordinate's own words; different draws, so a run records which stream it used).\n"
        "Block formats (block_formats()): blocks run along the last dimension of w (a 1-D w is one row); each\n"
        "block's scale is recomputed from w + u and every element re-quantized; counts add erased_grid,\n"
        "erased_saturation, erased_scale, collateral, flushed, blocks, blocks_skipped, rescaled_up, rescaled_down;\n"
        "NaN/inf or a block out of range raise ValueError naming tensor, step and block, and nothing is written.\n"
        "Raises ValueError naming tensor and step for NaN/inf (the finite coordinates are still written back),\n"
        "TypeError for a dtype other than float32, ValueError for a shape mismatch, an unknown sr_stream or one\n"
        "the policy and sr_bits do not allow.");
  m.def("adamw_step_stored", &adamw_step_stored_py, py::arg("storage"), py::arg("grad"), py::arg("exp_avg"),
        py::arg("exp_avg_sq"), py::arg("stepped"), py::arg("storage_dtype"), py::arg("lr"), py::arg("beta1"),
        py::arg("beta2"), py::arg("eps"), py::arg("weight_decay"), py::arg("step"),
        "adamw_step_stored(storage, grad, exp_avg, exp_avg_sq, stepped, storage_dtype, lr, beta1, beta2, eps,\n"
        "                  weight_decay, step) -> None\n\n"
        "torch.optim.AdamW's step (its single-tensor CPU path) for a parameter stored in bf16 or fp16\n"
        "(storage_dtype), in one pass: storage holds its raw 16 bits (read only), grad its gradient (16 raw bits\n"
        "of the same type, or float32), exp_avg and exp_avg_sq its float32 moments (updated in place); stepped\n"
        "(float32) receives what AdamW steps the parameter's fp32 copy to. step is state['step'] after this\n"
        "step's increment. ATen's float32 operations in its order (sim/optim/torch_adamw.hpp); wbaudit.torch\n"
        "checks it against torch.optim.AdamW before using it.");
  m.def("writeback_stored", &writeback_stored_py, py::arg("storage"), py::arg("stepped"), py::arg("storage_dtype"),
        py::arg("fmt"), py::arg("policy") = "nearest", py::arg("seed") = 0, py::arg("step") = 0,
        py::arg("tensor_id") = 0, py::arg("sr_bits") = 0, py::arg("scale") = py::none(),
        py::arg("first_coordinate") = 0, py::arg("tensor") = "", py::arg("sr_stream") = "philox",
        "writeback_stored(storage, stepped, storage_dtype, fmt, policy='nearest', seed=0, step=0, tensor_id=0,\n"
        "                 sr_bits=0, scale=None, first_coordinate=0, tensor='', sr_stream='philox') -> counts\n\n"
        "The write-back of a parameter stored in bf16 or fp16 (storage_dtype), in one pass: storage holds its raw\n"
        "16 bits (an int16 / uint16 array, e.g. p.data.view(torch.int16).numpy(), written in place), stepped the\n"
        "float32 values its optimizer stepped it to. Per coordinate w = the stored value, u = fl32(stepped - w),\n"
        "and q_fmt^policy(w + u) is stored back: the values, counts and SR draws of writeback(w, u, ...) on those\n"
        "arrays, without fp32 copies of w, u or the result. fmt's values must fit the storage (ValueError before\n"
        "anything is written). NaN/inf in w or u: those coordinates keep their value, the others are written back,\n"
        "then ValueError naming tensor, step, the count and the first coordinate.");
  m.def("project", &project_py, py::arg("w"), py::arg("u"), py::arg("formats"), py::arg("histogram") = true,
        py::arg("d_min") = -16.0, py::arg("bin_width") = 0.125, py::arg("bins") = 512, py::arg("tensor") = "",
        py::arg("step") = 0, py::arg("joint") = false,
        py::arg("init_absmax") = std::numeric_limits<double>::quiet_NaN(), py::arg("margin_formats") = py::none(),
        "project(w, u, formats, histogram=True, d_min=-16, bin_width=0.125, bins=512, tensor='', step=0,\n"
        "        joint=False, init_absmax=nan, margin_formats=None) -> dict\n\n"
        "Projected events on an fp32 reference state (nothing is modified): for each format F of `formats` (names, "
        "or (name, scale) pairs for intK), erased[F] = #{u != 0 and q_F(q_F(w) + u) == q_F(w)} under nearest; "
        "nonzero = #{u != 0}; zero_weight = #{u != 0, w == 0}; ratio_histogram: int64 counts of d = "
        "floor(log2|w|) - log2|u| over u != 0, w != 0 in the trace's bins (docs/trace-format.md); with joint, "
        "margin (int64, margin_layout()['bins'] entries: every format's counters, then every format's moments): the "
        "margin histogram of the analytic grid over u != 0, as "
        "the simulator records it (docs/trace-format.md), its intK formats scaled from init_absmax (the tensor's max "
        "|w| at initialization; NaN: not recorded); margin_formats: the layout margin_layout(margin_formats) records "
        "(None: every format).");
  m.def(
      "block_projection_header", &block_projection_header_py, py::arg("fmt"), py::arg("shape"),
      "block_projection_header(fmt, shape) -> dict\n\nThe trace header of a reference's projection of block format "
      "fmt for a tensor of this shape (blocks along its last dimension): {'block_events': {'blocks': n}, "
      "'block_sample': {'rows', 'cols', 'elements', 'blocks'[, 'anchor_scales']}}, the sampled block indices as "
      "the engine takes them and, for a sampled tensor, the scales of its exact anchors (sim/trace/block_sample.hpp).");
  m.def("block_projection_step", &block_projection_step_py, py::arg("w"), py::arg("u"), py::arg("fmt"),
        py::arg("seed") = 0, py::arg("step") = 0, py::arg("tensor_id") = 0, py::arg("tensor") = "",
        "block_projection_step(w, u, fmt, seed=0, step=0, tensor_id=0, tensor='') -> dict\n\n"
        "One recorded step of a reference's projection of block format fmt, recorded by the engine's function "
        "(sim/trace/block_reference.hpp): w, u float32 with the tensor's shape (blocks along the last dimension). "
        "Returns the step's rows of projected[fmt]: erased, fraction ([1]), block_events (each cause, [1]) and "
        "block_sample (w, u: the sampled blocks' values; NVFP4 also tensor: max |w|, max |q(w)| and the (q(w), u) "
        "lines; a sampled tensor also anchors: the exact projection's nonzero, erased and causes at each of the "
        "header's anchor_scales). Raises ValueError naming tensor and step for NaN/inf or a block out of range.");
  m.def("audit", &audit_py, py::arg("w"), py::arg("u"), py::arg("w_next"), py::arg("fmt"),
        py::arg("policy") = "nearest", py::arg("sr_bits") = 0, py::arg("seed") = py::none(), py::arg("step") = 0,
        py::arg("tensor_id") = 0, py::arg("scale") = py::none(), py::arg("tensor") = "",
        py::arg("sr_stream") = "philox",
        "audit(w, u, w_next, fmt, policy='nearest', sr_bits=0, seed=None, step=0, tensor_id=0, scale=None,\n"
        "      tensor='', sr_stream='philox') -> dict\n\n"
        "The exact audit of one write-back w -> w_next with proposals u under the claimed policy: realized counts "
        "(nonzero, erased, saturated, applied, sr_applied, sr_truncated, nearest_erased), consistent (bool) and "
        "inconsistent: a list of dicts (index, w, u, w_next, expected_low, expected_high, reason). With seed, SR "
        "outcomes must equal the replayed draws of (seed, step, tensor_id) from the SR stream sr_stream ('philox', the "
        "default, or 'philox-packed': sr_bits 0 or 1..16; the stream the run wrote with). Raises "
        "ValueError for an unknown sr_stream or one the policy and sr_bits do not allow. Block formats (MX, NVFP4): "
        "w_next is compared with the block write-back of (w, u) with the arrays' shape (blocks along the last "
        "dimension), the counts add the causes (erased_grid, erased_saturation, erased_scale, collateral, flushed, "
        "rescaled_up, rescaled_down, blocks); SR needs seed (its draws are replayed).");
}

// Reading, writing and streaming traces, and the recording schedule.
void def_traces(py::module_& m) {
  m.def(
      "read_trace",
      [](const std::string& path, bool allow_incomplete) {
        return trace_to_dict(read_trace(path, TraceReadOptions{allow_incomplete}));
      },
      py::arg("path"), py::arg("allow_incomplete") = false,
      "read_trace(path, allow_incomplete=False) -> dict\n\nReads a trace.h5 (schema wbaudit.trace/3, /2 or /1) into a "
      "dict of the fields of docs/trace-format.md; groups[name] holds the per-group arrays. The partial trace of an "
      "unfinished run (trace.h5.partial, root attribute complete = 0) is refused unless allow_incomplete, and then "
      "read with complete = False and the steps recorded so far. Raises RuntimeError naming the file and the missing "
      "dataset for anything else.");
  m.def(
      "write_trace", [](const std::string& path, const py::dict& trace) { write_trace(path, trace_from_dict(trace)); },
      py::arg("path"), py::arg("trace"),
      "write_trace(path, trace) -> None\n\nWrites a dict shaped like read_trace's result as a trace.h5, atomically "
      "(temporary name, then rename).");
  py::class_<PyTraceWriter>(m, "TraceWriter",
                            "TraceWriter(path, header)\n\nStreams a trace to path + '.partial' as it is recorded "
                            "(docs/trace-format.md, 'Streaming'): header is a dict shaped like read_trace's without "
                            "rows (mode, format, policy, steps, config_json, histogram, margin, groups with tensor_id, "
                            "size, projected formats, joint.init_absmax); append(rows) appends a dict of rows "
                            "(recorded_steps, loss, learning_rate, groups[name] series) and flushes; finish() writes "
                            "path (atomically) and removes the partial file; close() leaves the partial file.")
      .def(py::init<const std::string&, const py::dict&>(), py::arg("path"), py::arg("header"))
      .def("append", &PyTraceWriter::append, py::arg("rows"))
      .def("finish", &PyTraceWriter::finish, py::arg("steps") = py::none())
      .def("close", &PyTraceWriter::close)
      .def_property_readonly("rows", &PyTraceWriter::rows)
      .def_property_readonly("partial", &PyTraceWriter::partial);
  m.def(
      "margin_layout",
      [](const std::optional<std::vector<std::string>>& formats) {
        return margin_layout_dict(margin_layout_or_default(formats));
      },
      py::arg("formats") = py::none(),
      "margin_layout(formats=None) -> dict\n\nThe margin histogram's layout the simulator records (formats, rows, "
      "bins): every format it can record, or only `formats` (in the default's order; ValueError for a name it does "
      "not record or a repeat).");
  m.attr("TRACE_SCHEMA") = kTraceSchema;
  m.attr("TRACE_SCHEMA_TARGET") = kTraceSchemaV2;
  m.def(
      "recorded_steps",
      [](const std::string& kind, std::int64_t steps, std::int64_t k, std::int64_t points) {
        RecordConfig c;
        c.kind = record_kind_from_name(kind);
        c.k = k;
        c.points = points;
        return wbaudit::sim::recorded_steps(c, steps);
      },
      py::arg("kind"), py::arg("steps"), py::arg("k") = 10, py::arg("points") = 100,
      "recorded_steps(kind, steps, k=10, points=100) -> list of int\n\nThe simulator's recording schedule: kind "
      "'every', 'every_k' (0, k, 2k, ..., last) or 'log' (points log-spaced steps).");
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "wbaudit's C++ core: formats, exact rounding and write-back, projected events, audit, traces";
  py::register_exception<NonFiniteError>(m, "NonFiniteError", PyExc_ValueError);
  def_runtime(m);
  def_formats(m);
  def_writeback(m);
  def_traces(m);
}
