#include "sim/model/decoder.hpp"

#include <cmath>
#include <stdexcept>

#include "sim/data/gaussian_stream.hpp"
#include "sim/model/detail/exp.hpp"
#include "sim/model/detail/gemm.hpp"
#include "sim/model/detail/gemm_parallel.hpp"
#include "sim/model/detail/lane_sum.hpp"
#include "sim/model/detail/rope.hpp"

namespace wbaudit::sim {

namespace {

std::string describe(const char* key, double value) {
  std::string s = std::to_string(value);
  return std::string(key) + " = " + s;
}

}  // namespace

void validate(const DecoderShape& s) {
  const auto positive = [](const char* key, int value) {
    if (value <= 0) {
      throw std::invalid_argument("decoder shape: " + std::string(key) + " = " + std::to_string(value) +
                                  " must be positive");
    }
  };
  positive("vocab", s.vocab);
  positive("width", s.width);
  positive("heads", s.heads);
  positive("layers", s.layers);
  positive("mlp_hidden", s.mlp_hidden);
  positive("seq_len", s.seq_len);
  if (s.width % s.heads != 0) {
    throw std::invalid_argument("decoder shape: heads = " + std::to_string(s.heads) +
                                " does not divide width = " + std::to_string(s.width));
  }
  if (!(s.rotary_fraction >= 0.0 && s.rotary_fraction <= 1.0)) {
    throw std::invalid_argument("decoder shape: " + describe("rotary_fraction", s.rotary_fraction) +
                                " is outside [0, 1]");
  }
  if (!(s.rotary_base > 0.0) || !std::isfinite(s.rotary_base)) {
    throw std::invalid_argument("decoder shape: " + describe("rotary_base", s.rotary_base) +
                                " must be positive and finite");
  }
  if (!(s.norm_eps >= 0.0) || !std::isfinite(s.norm_eps)) {
    throw std::invalid_argument("decoder shape: " + describe("norm_eps", s.norm_eps) +
                                " must be non-negative and finite");
  }
}

int rotary_dim(const DecoderShape& shape) {
  const int head_dim = shape.width / shape.heads;
  return 2 * static_cast<int>(std::floor(head_dim * shape.rotary_fraction / 2.0));
}

std::vector<std::pair<std::string, std::vector<std::int64_t>>> decoder_tensors(const DecoderShape& shape) {
  const std::int64_t V = shape.vocab, D = shape.width, F = shape.mlp_hidden;
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> t;
  t.push_back({"embed.weight", {V, D}});
  for (int i = 0; i < shape.layers; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    t.push_back({b + "attn_norm.weight", {D}});
    t.push_back({b + "attn.qkv.weight", {3 * D, D}});
    t.push_back({b + "attn.out.weight", {D, D}});
    t.push_back({b + "mlp_norm.weight", {D}});
    t.push_back({b + "mlp.gate.weight", {F, D}});
    t.push_back({b + "mlp.up.weight", {F, D}});
    t.push_back({b + "mlp.down.weight", {D, F}});
  }
  t.push_back({"final_norm.weight", {D}});
  t.push_back({"lm_head.weight", {V, D}});
  return t;
}

template <class ExecSpace, class Scalar>
DecoderModel<ExecSpace, Scalar>::DecoderModel(const DecoderShape& shape, int batch) : m_shape(shape), m_batch(batch) {
  validate(shape);
  if (batch <= 0) {
    throw std::invalid_argument("DecoderModel: batch = " + std::to_string(batch) + " must be positive");
  }
  detail::default_gemm_isa();  // a bad WBAUDIT_GEMM_ISA throws here, not inside a product's parallel region
  const std::int64_t V = shape.vocab, D = shape.width, F = shape.mlp_hidden, L = shape.layers, S = shape.seq_len;
  m_rows = batch * shape.seq_len;
  m_rotary_dim = rotary_dim(shape);
  for (auto& [name, dims] : decoder_tensors(shape)) {
    m_names.push_back(std::move(name));
    m_shapes.push_back(std::move(dims));
  }
  for (int t = 0; t < tensor_count(); ++t) {
    m_params.push_back(Vector("wbaudit::sim::DecoderModel::" + m_names[t], tensor_size(t)));
    m_grads.push_back(Vector("wbaudit::sim::DecoderModel::grad::" + m_names[t], tensor_size(t)));
  }
  const std::int64_t T = m_rows, B = batch, H = shape.heads;
  const auto buffer = [](const char* what, std::int64_t n) {
    return Buffer(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("wbaudit::sim::DecoderModel::") + what),
                  static_cast<std::size_t>(n));
  };
  m_x = buffer("x", (L + 1) * T * D);
  m_xmid = buffer("xmid", shape.parallel_residual ? 0 : L * T * D);
  m_n1 = buffer("n1", L * T * D);
  m_n2 = buffer("n2", L * T * D);
  m_rstd1 = buffer("rstd1", L * T);
  m_rstd2 = buffer("rstd2", L * T);
  m_qkv = buffer("qkv", L * T * 3 * D);
  m_probs = buffer("probs", L * B * H * S * S);
  m_attn = buffer("attn", L * T * D);
  m_gate = buffer("gate", L * T * F);
  m_up = buffer("up", L * T * F);
  m_hidden = buffer("hidden", L * T * F);
  m_nf = buffer("nf", T * D);
  m_rstdf = buffer("rstdf", T);
  m_logits = buffer("logits", T * V);
  m_row_loss = Kokkos::View<double*, memory_space>(
      Kokkos::view_alloc(Kokkos::WithoutInitializing, "wbaudit::sim::DecoderModel::row_loss"), T);
  m_dx = buffer("dx", T * D);
  m_dx_other = buffer("dx_other", T * D);
  m_dn = buffer("dn", T * D);
  m_dqkv = buffer("dqkv", T * 3 * D);
  m_dattn = buffer("dattn", T * D);
  m_dhidden = buffer("dhidden", T * F);
  m_dgate = buffer("dgate", T * F);
  m_dup = buffer("dup", T * F);
  m_dscores = buffer("dscores", B * H * S * S);
  const int half = m_rotary_dim / 2;
  m_rope_cos = buffer("rope_cos", S * half);
  m_rope_sin = buffer("rope_sin", S * half);
  detail::fill_rope_tables(m_rope_cos, m_rope_sin, shape.seq_len, m_rotary_dim, shape.rotary_base);
  m_token_offsets.assign(static_cast<std::size_t>(V + 1), 0);
  m_token_positions.assign(static_cast<std::size_t>(T), 0);
}

template <class ExecSpace, class Scalar>
const std::string& DecoderModel<ExecSpace, Scalar>::tensor_name(int tensor) const {
  if (tensor < 0 || tensor >= tensor_count()) {
    throw std::out_of_range("DecoderModel: no tensor id " + std::to_string(tensor));
  }
  return m_names[tensor];
}

template <class ExecSpace, class Scalar>
std::vector<std::int64_t> DecoderModel<ExecSpace, Scalar>::tensor_shape(int tensor) const {
  tensor_name(tensor);  // range check
  return m_shapes[tensor];
}

template <class ExecSpace, class Scalar>
std::int64_t DecoderModel<ExecSpace, Scalar>::tensor_size(int tensor) const {
  std::int64_t n = 1;
  for (const std::int64_t d : tensor_shape(tensor)) {
    n *= d;
  }
  return n;
}

template <class ExecSpace, class Scalar>
std::int64_t DecoderModel<ExecSpace, Scalar>::parameter_count() const {
  std::int64_t n = 0;
  for (int t = 0; t < tensor_count(); ++t) {
    n += tensor_size(t);
  }
  return n;
}

template <class ExecSpace, class Scalar>
typename DecoderModel<ExecSpace, Scalar>::Vector DecoderModel<ExecSpace, Scalar>::parameter(int tensor) const {
  tensor_name(tensor);
  return m_params[tensor];
}

template <class ExecSpace, class Scalar>
typename DecoderModel<ExecSpace, Scalar>::Vector DecoderModel<ExecSpace, Scalar>::gradient(int tensor) const {
  tensor_name(tensor);
  return m_grads[tensor];
}

template <class ExecSpace, class Scalar>
void DecoderModel<ExecSpace, Scalar>::initialize(const ExecSpace& space, std::uint64_t seed, double init_std) {
  if (!(init_std >= 0.0) || !std::isfinite(init_std)) {
    throw std::invalid_argument("DecoderModel::initialize: init_std = " + std::to_string(init_std) +
                                " must be non-negative and finite");
  }
  const GaussianStream stream{seed, StreamDomain::decoder_init};
  const double out_scale = 1.0 / std::sqrt(2.0 * m_shape.layers);
  for (int t = 0; t < tensor_count(); ++t) {
    Vector p = m_params[t];
    if (m_shapes[t].size() == 1) {  // norm gains
      Kokkos::deep_copy(space, p, Scalar(1));
      continue;
    }
    const int which = (t - 1) % kDecoderBlockTensors;
    const bool output_projection = t > 0 && t < 1 + kDecoderBlockTensors * m_shape.layers &&
                                   (which == decoder_block::attn_out || which == decoder_block::mlp_down);
    const double std_dev = output_projection ? init_std * out_scale : init_std;
    const std::uint64_t id = static_cast<std::uint64_t>(t);
    Kokkos::parallel_for(
        "wbaudit::sim::DecoderModel::initialize", Kokkos::RangePolicy<ExecSpace>(space, 0, p.extent(0)),
        KOKKOS_LAMBDA(const std::size_t i) {
          p(i) = static_cast<Scalar>(std_dev * static_cast<double>(stream(id, 0, i)));
        });
  }
  space.fence();
}

template <class ExecSpace, class Scalar>
void DecoderModel<ExecSpace, Scalar>::check_tokens(Tokens tokens) const {
  const std::int64_t cols = m_shape.seq_len + 1;
  if (static_cast<std::int64_t>(tokens.extent(0)) != m_batch * cols) {
    throw std::invalid_argument("DecoderModel: token batch has " + std::to_string(tokens.extent(0)) +
                                " entries, expected batch x (seq_len + 1) = " + std::to_string(m_batch) + " x " +
                                std::to_string(cols));
  }
  for (std::int64_t i = 0; i < m_batch * cols; ++i) {
    const std::int32_t tok = tokens(i);
    if (tok < 0 || tok >= m_shape.vocab) {
      throw std::invalid_argument("DecoderModel: token " + std::to_string(tok) + " at row " + std::to_string(i / cols) +
                                  ", column " + std::to_string(i % cols) +
                                  " is outside [0, vocab = " + std::to_string(m_shape.vocab) + ")");
    }
  }
}

namespace {

using detail::gemm_blocked;
using detail::gemm_parallel;
using detail::Op;

// y = x / sqrt(mean(x^2) + eps) * g per row; mean accumulated in double, the reciprocal root rounded once.
template <class ExecSpace, class Scalar>
void rmsnorm_forward(const ExecSpace& space, int rows, int width, double eps, const Scalar* x, const Scalar* g,
                     Scalar* y, Scalar* rstd) {
  Kokkos::parallel_for(
      "wbaudit::sim::DecoderModel::rmsnorm_forward", Kokkos::RangePolicy<ExecSpace>(space, 0, rows), [=](const int r) {
        const Scalar* xr = x + static_cast<std::ptrdiff_t>(r) * width;
        Scalar* yr = y + static_cast<std::ptrdiff_t>(r) * width;
        const double ss = detail::lane_sum<double>(width, [=](int j) { return static_cast<double>(xr[j]) * xr[j]; });
        const Scalar inv = static_cast<Scalar>(1.0 / std::sqrt(ss / width + eps));
        rstd[r] = inv;
        for (int j = 0; j < width; ++j) {
          yr[j] = xr[j] * inv * g[j];
        }
      });
}

// With a = g * dy: dx = rstd * a - x * rstd^3 * mean(a * x), written as out = residual + dx (residual may be null or
// alias out).
template <class ExecSpace, class Scalar>
void rmsnorm_backward(const ExecSpace& space, int rows, int width, const Scalar* dy, const Scalar* x,
                      const Scalar* rstd, const Scalar* g, const Scalar* residual, Scalar* out) {
  Kokkos::parallel_for(
      "wbaudit::sim::DecoderModel::rmsnorm_backward", Kokkos::RangePolicy<ExecSpace>(space, 0, rows), [=](const int r) {
        const std::ptrdiff_t o = static_cast<std::ptrdiff_t>(r) * width;
        const double dot =
            detail::lane_sum<double>(width, [=](int j) { return static_cast<double>(g[j] * dy[o + j]) * x[o + j]; });
        const double inv = rstd[r];
        const Scalar coef = static_cast<Scalar>(inv * inv * inv * dot / width);
        const Scalar s = rstd[r];
        for (int j = 0; j < width; ++j) {
          const Scalar dx = s * (g[j] * dy[o + j]) - x[o + j] * coef;
          out[o + j] = residual ? residual[o + j] + dx : dx;
        }
      });
}

// dg_j = sum_r dy[r, j] * x[r, j] * rstd[r], rows summed in order in double; one work item per block of 16 columns.
template <class ExecSpace, class Scalar>
void rmsnorm_gain_gradient(const ExecSpace& space, int rows, int width, const Scalar* dy, const Scalar* x,
                           const Scalar* rstd, Scalar* dg) {
  constexpr int kCols = 16;
  const int blocks = (width + kCols - 1) / kCols;
  Kokkos::parallel_for("wbaudit::sim::DecoderModel::rmsnorm_gain_gradient",
                       Kokkos::RangePolicy<ExecSpace>(space, 0, blocks), [=](const int blk) {
                         const int j0 = blk * kCols;
                         const int n = width - j0 < kCols ? width - j0 : kCols;
                         double acc[kCols] = {};
                         for (int r = 0; r < rows; ++r) {
                           const std::ptrdiff_t o = static_cast<std::ptrdiff_t>(r) * width + j0;
                           const Scalar s = rstd[r];
                           for (int j = 0; j < n; ++j) {
                             acc[j] += static_cast<double>(dy[o + j] * (x[o + j] * s));
                           }
                         }
                         for (int j = 0; j < n; ++j) {
                           dg[j0 + j] = static_cast<Scalar>(acc[j]);
                         }
                       });
}

// SiLU kernels work on chunks of a row: sigmoid of the chunk into a local array first, then the products. GCC
// vectorizes both loops; fused into one loop (exp, then g * s * u) it vectorizes too but runs 2.3x slower per element
// (measured: 3.7 ns vs 1.6 ns per element, exp_poly with SSE2).
constexpr int kSiluChunk = 64;

template <class Scalar>
KOKKOS_INLINE_FUNCTION void sigmoid_chunk(const Scalar* z, Scalar* s, int n) {
  for (int j = 0; j < n; ++j) {
    s[j] = Scalar(1) / (Scalar(1) + detail::kernel_exp(-z[j]));
  }
}

}  // namespace

template <class ExecSpace, class Scalar>
double DecoderModel<ExecSpace, Scalar>::forward(const ExecSpace& space, Tokens tokens, bool with_gradient) {
  check_tokens(tokens);
  const int T = m_rows, D = m_shape.width, H = m_shape.heads, hd = D / H, F = m_shape.mlp_hidden, V = m_shape.vocab,
            S = m_shape.seq_len, B = m_batch, L = m_shape.layers, half = m_rotary_dim / 2;
  const double eps = m_shape.norm_eps;
  const std::ptrdiff_t TD = std::ptrdiff_t(T) * D, TF = std::ptrdiff_t(T) * F, SS = std::ptrdiff_t(S) * S;
  const std::int32_t* tok = tokens.data();

  {
    const Scalar* embed = m_params[0].data();
    Scalar* x0 = m_x.data();
    Kokkos::parallel_for("wbaudit::sim::DecoderModel::forward::embed", Kokkos::RangePolicy<ExecSpace>(space, 0, T),
                         [=](const int r) {
                           const std::int32_t t = tok[(r / S) * (S + 1) + r % S];
                           for (int j = 0; j < D; ++j) {
                             x0[std::ptrdiff_t(r) * D + j] = embed[std::ptrdiff_t(t) * D + j];
                           }
                         });
  }

  for (int l = 0; l < L; ++l) {
    const Scalar* x = m_x.data() + l * TD;
    Scalar* x_next = m_x.data() + (l + 1) * TD;
    Scalar* n1 = m_n1.data() + l * TD;
    Scalar* n2 = m_n2.data() + l * TD;
    Scalar* rstd1 = m_rstd1.data() + std::ptrdiff_t(l) * T;
    Scalar* rstd2 = m_rstd2.data() + std::ptrdiff_t(l) * T;
    Scalar* qkv = m_qkv.data() + std::ptrdiff_t(3) * l * TD;
    Scalar* probs = m_probs.data() + std::ptrdiff_t(l) * B * H * SS;
    Scalar* attn = m_attn.data() + l * TD;
    Scalar* gate = m_gate.data() + l * TF;
    Scalar* up = m_up.data() + l * TF;
    Scalar* hidden = m_hidden.data() + l * TF;
    const Scalar* w_g1 = m_params[block_tensor(l, decoder_block::attn_norm)].data();
    const Scalar* w_qkv = m_params[block_tensor(l, decoder_block::attn_qkv)].data();
    const Scalar* w_out = m_params[block_tensor(l, decoder_block::attn_out)].data();
    const Scalar* w_g2 = m_params[block_tensor(l, decoder_block::mlp_norm)].data();
    const Scalar* w_gate = m_params[block_tensor(l, decoder_block::mlp_gate)].data();
    const Scalar* w_up = m_params[block_tensor(l, decoder_block::mlp_up)].data();
    const Scalar* w_down = m_params[block_tensor(l, decoder_block::mlp_down)].data();

    rmsnorm_forward(space, T, D, eps, x, w_g1, n1, rstd1);
    gemm_blocked(space, "wbaudit::sim::DecoderModel::forward::qkv", Op::none, Op::transpose, T, 3 * D, D, Scalar(1), n1,
                 D, w_qkv, D, Scalar(0), qkv, 3 * D);
    if (half > 0) {
      const Scalar* cs = m_rope_cos.data();
      const Scalar* sn = m_rope_sin.data();
      Kokkos::parallel_for("wbaudit::sim::DecoderModel::forward::rope", Kokkos::RangePolicy<ExecSpace>(space, 0, T),
                           [=](const int r) {
                             const int pos = r % S;
                             Scalar* row = qkv + std::ptrdiff_t(r) * 3 * D;
                             for (int h = 0; h < 2 * H; ++h) {  // q heads then k heads
                               detail::rope_rotate(row + h * hd, cs + pos * half, sn + pos * half, half);
                             }
                           });
    }
    const Scalar scale = static_cast<Scalar>(1.0 / std::sqrt(static_cast<double>(hd)));
    Kokkos::parallel_for("wbaudit::sim::DecoderModel::forward::attention",
                         Kokkos::RangePolicy<ExecSpace, Kokkos::Schedule<Kokkos::Dynamic>>(space, 0, B * H),
                         [=](const int bh) {
                           const int b = bh / H, h = bh % H;
                           const Scalar* q = qkv + std::ptrdiff_t(b) * S * 3 * D + h * hd;
                           const Scalar* k = q + D;
                           const Scalar* v = q + 2 * D;
                           Scalar* p = probs + bh * SS;
                           detail::gemm(Op::none, Op::transpose, S, S, hd, scale, q, 3 * D, k, 3 * D, Scalar(0), p, S);
                           for (int i = 0; i < S; ++i) {  // causal softmax of row i over keys 0..i, max subtracted
                             Scalar* pr = p + std::ptrdiff_t(i) * S;
                             const Scalar mx = detail::lane_max(pr, i + 1);
                             for (int j = 0; j <= i; ++j) {
                               pr[j] = detail::kernel_exp(pr[j] - mx);
                             }
                             const Scalar sum = detail::lane_sum<Scalar>(i + 1, [=](int j) { return pr[j]; });
                             const Scalar inv = Scalar(1) / sum;
                             for (int j = 0; j <= i; ++j) {
                               pr[j] *= inv;
                             }
                             for (int j = i + 1; j < S; ++j) {
                               pr[j] = 0;
                             }
                           }
                           detail::gemm(Op::none, Op::none, S, hd, S, Scalar(1), p, S, v, 3 * D, Scalar(0),
                                        attn + std::ptrdiff_t(b) * S * D + h * hd, D);
                         });
    // Residual stream: parallel x + attn(n1(x)) + mlp(n2(x)); sequential y = x + attn(n1(x)), y + mlp(n2(y)).
    Scalar* after_attn = m_shape.parallel_residual ? x_next : m_xmid.data() + l * TD;
    Kokkos::parallel_for("wbaudit::sim::DecoderModel::forward::residual", Kokkos::RangePolicy<ExecSpace>(space, 0, TD),
                         [=](const std::ptrdiff_t i) { after_attn[i] = x[i]; });
    gemm_blocked(space, "wbaudit::sim::DecoderModel::forward::attn_out", Op::none, Op::transpose, T, D, D, Scalar(1),
                 attn, D, w_out, D, Scalar(1), after_attn, D);
    const Scalar* mlp_in = m_shape.parallel_residual ? x : after_attn;
    rmsnorm_forward(space, T, D, eps, mlp_in, w_g2, n2, rstd2);
    gemm_parallel<ExecSpace, Scalar>(
        space, "wbaudit::sim::DecoderModel::forward::gate_up",
        {{Op::none, Op::transpose, T, F, D, Scalar(1), n2, D, w_gate, D, Scalar(0), gate, F},
         {Op::none, Op::transpose, T, F, D, Scalar(1), n2, D, w_up, D, Scalar(0), up, F}});
    Kokkos::parallel_for("wbaudit::sim::DecoderModel::forward::swiglu", Kokkos::RangePolicy<ExecSpace>(space, 0, T),
                         [=](const int r) {
                           Scalar s[kSiluChunk];
                           for (int j0 = 0; j0 < F; j0 += kSiluChunk) {
                             const int n = F - j0 < kSiluChunk ? F - j0 : kSiluChunk;
                             const std::ptrdiff_t o = std::ptrdiff_t(r) * F + j0;
                             const Scalar* g = gate + o;
                             const Scalar* u = up + o;
                             Scalar* h = hidden + o;
                             sigmoid_chunk(g, s, n);
                             for (int j = 0; j < n; ++j) {
                               h[j] = g[j] * s[j] * u[j];
                             }
                           }
                         });
    if (!m_shape.parallel_residual) {
      Kokkos::parallel_for("wbaudit::sim::DecoderModel::forward::residual",
                           Kokkos::RangePolicy<ExecSpace>(space, 0, TD),
                           [=](const std::ptrdiff_t i) { x_next[i] = after_attn[i]; });
    }
    gemm_blocked(space, "wbaudit::sim::DecoderModel::forward::mlp_down", Op::none, Op::transpose, T, D, F, Scalar(1),
                 hidden, F, w_down, F, Scalar(1), x_next, D);
  }

  const Scalar* w_gf = m_params[tensor_count() - 2].data();
  const Scalar* w_lm = m_params[tensor_count() - 1].data();
  rmsnorm_forward(space, T, D, eps, m_x.data() + L * TD, w_gf, m_nf.data(), m_rstdf.data());
  Scalar* logits = m_logits.data();
  gemm_blocked(space, "wbaudit::sim::DecoderModel::forward::lm_head", Op::none, Op::transpose, T, V, D, Scalar(1),
               m_nf.data(), D, w_lm, D, Scalar(0), logits, V);
  // Cross-entropy per position: lse in double over exp(l - max); with the gradient, logits become
  // dL/dlogits = (softmax - onehot) / T.
  double* row_loss = m_row_loss.data();
  const Scalar inv_rows = static_cast<Scalar>(1.0 / T);
  Kokkos::parallel_for("wbaudit::sim::DecoderModel::forward::cross_entropy",
                       Kokkos::RangePolicy<ExecSpace>(space, 0, T), [=](const int r) {
                         Scalar* lr = logits + std::ptrdiff_t(r) * V;
                         const std::int32_t target = tok[(r / S) * (S + 1) + r % S + 1];
                         const Scalar mx = detail::lane_max(lr, V);
                         const double target_logit = lr[target];
                         // exp(l - max) in chunks (a vectorized loop), summed in column order in double.
                         constexpr int kChunk = 64;
                         Scalar e[kChunk];
                         double sum = 0.0;
                         for (int j0 = 0; j0 < V; j0 += kChunk) {
                           const int n = V - j0 < kChunk ? V - j0 : kChunk;
                           for (int j = 0; j < n; ++j) {
                             e[j] = detail::kernel_exp(lr[j0 + j] - mx);
                           }
                           for (int j = 0; j < n; ++j) {
                             sum += e[j];
                           }
                           if (with_gradient) {
                             for (int j = 0; j < n; ++j) {
                               lr[j0 + j] = e[j];
                             }
                           }
                         }
                         row_loss[r] = static_cast<double>(mx) + std::log(sum) - target_logit;
                         if (with_gradient) {
                           const Scalar inv = static_cast<Scalar>(1.0 / (sum * T));
                           for (int j = 0; j < V; ++j) {
                             lr[j] *= inv;
                           }
                           lr[target] -= inv_rows;
                         }
                       });
  space.fence();
  double total = 0.0;
  for (int r = 0; r < T; ++r) {
    total += row_loss[r];
  }
  return total / T;
}

template <class ExecSpace, class Scalar>
void DecoderModel<ExecSpace, Scalar>::backward(const ExecSpace& space, Tokens tokens) {
  const int T = m_rows, D = m_shape.width, H = m_shape.heads, hd = D / H, F = m_shape.mlp_hidden, V = m_shape.vocab,
            S = m_shape.seq_len, B = m_batch, L = m_shape.layers, half = m_rotary_dim / 2;
  const std::ptrdiff_t TD = std::ptrdiff_t(T) * D, TF = std::ptrdiff_t(T) * F, SS = std::ptrdiff_t(S) * S;
  const int nt = tensor_count();
  const Scalar* dlogits = m_logits.data();
  Scalar* dx = m_dx.data();
  Scalar* dx_other = m_dx_other.data();
  Scalar* dn = m_dn.data();

  // Each layer's weight and input gradients are independent products: one launch each (detail::gemm_parallel).
  gemm_parallel<ExecSpace, Scalar>(
      space, "wbaudit::sim::DecoderModel::backward::lm_head",
      {{Op::transpose, Op::none, V, D, T, Scalar(1), dlogits, V, m_nf.data(), D, Scalar(0), m_grads[nt - 1].data(), D},
       {Op::none, Op::none, T, D, V, Scalar(1), dlogits, V, m_params[nt - 1].data(), D, Scalar(0), dn, D}});
  const Scalar* x_final = m_x.data() + L * TD;
  rmsnorm_gain_gradient(space, T, D, dn, x_final, m_rstdf.data(), m_grads[nt - 2].data());
  rmsnorm_backward(space, T, D, dn, x_final, m_rstdf.data(), m_params[nt - 2].data(),
                   static_cast<const Scalar*>(nullptr), dx);

  for (int l = L - 1; l >= 0; --l) {
    const Scalar* x = m_x.data() + l * TD;
    const Scalar* n1 = m_n1.data() + l * TD;
    const Scalar* n2 = m_n2.data() + l * TD;
    const Scalar* rstd1 = m_rstd1.data() + std::ptrdiff_t(l) * T;
    const Scalar* rstd2 = m_rstd2.data() + std::ptrdiff_t(l) * T;
    const Scalar* qkv = m_qkv.data() + std::ptrdiff_t(3) * l * TD;
    const Scalar* probs = m_probs.data() + std::ptrdiff_t(l) * B * H * SS;
    const Scalar* attn = m_attn.data() + l * TD;
    const Scalar* gate = m_gate.data() + l * TF;
    const Scalar* up = m_up.data() + l * TF;
    const Scalar* hidden = m_hidden.data() + l * TF;
    const Scalar* mlp_in = m_shape.parallel_residual ? x : m_xmid.data() + l * TD;
    const auto param = [&](int which) { return m_params[block_tensor(l, which)].data(); };
    const auto grad = [&](int which) { return m_grads[block_tensor(l, which)].data(); };

    // MLP: dx is dL/d(block output).
    Scalar* dhidden = m_dhidden.data();
    Scalar* dgate = m_dgate.data();
    Scalar* dup = m_dup.data();
    gemm_parallel<ExecSpace, Scalar>(
        space, "wbaudit::sim::DecoderModel::backward::mlp_down",
        {{Op::transpose, Op::none, D, F, T, Scalar(1), dx, D, hidden, F, Scalar(0), grad(decoder_block::mlp_down), F},
         {Op::none, Op::none, T, F, D, Scalar(1), dx, D, param(decoder_block::mlp_down), F, Scalar(0), dhidden, F}});
    Kokkos::parallel_for("wbaudit::sim::DecoderModel::backward::swiglu", Kokkos::RangePolicy<ExecSpace>(space, 0, T),
                         [=](const int r) {
                           Scalar sg[kSiluChunk];
                           for (int j0 = 0; j0 < F; j0 += kSiluChunk) {
                             const int n = F - j0 < kSiluChunk ? F - j0 : kSiluChunk;
                             const std::ptrdiff_t o = std::ptrdiff_t(r) * F + j0;
                             sigmoid_chunk(gate + o, sg, n);
                             for (int j = 0; j < n; ++j) {
                               const std::ptrdiff_t i = o + j;
                               const Scalar g = gate[i], s = sg[j];
                               const Scalar silu = g * s;
                               dup[i] = dhidden[i] * silu;
                               dgate[i] = dhidden[i] * up[i] * (s + silu * (Scalar(1) - s));
                             }
                           }
                         });
    // dn = dgate Wgate + dup Wup: the second product adds into the same rows after the first (then_add).
    gemm_parallel<ExecSpace, Scalar>(
        space, "wbaudit::sim::DecoderModel::backward::mlp_gate_up",
        {{Op::transpose, Op::none, F, D, T, Scalar(1), dgate, F, n2, D, Scalar(0), grad(decoder_block::mlp_gate), D},
         {Op::transpose, Op::none, F, D, T, Scalar(1), dup, F, n2, D, Scalar(0), grad(decoder_block::mlp_up), D},
         {Op::none, Op::none, T, D, F, Scalar(1), dgate, F, param(decoder_block::mlp_gate), D, Scalar(0), dn, D},
         {Op::none, Op::none, T, D, F, Scalar(1), dup, F, param(decoder_block::mlp_up), D, Scalar(1), dn, D, true}});
    rmsnorm_gain_gradient(space, T, D, dn, mlp_in, rstd2, grad(decoder_block::mlp_norm));
    // dx_other = dx + (mlp_norm backward): dL/d(after attention) when sequential, a partial sum when parallel.
    rmsnorm_backward(space, T, D, dn, mlp_in, rstd2, param(decoder_block::mlp_norm), static_cast<const Scalar*>(dx),
                     dx_other);

    // Attention: its output feeds the residual sum that dx (parallel) or dx_other (sequential) differentiates.
    const Scalar* dattn_out = m_shape.parallel_residual ? dx : dx_other;
    Scalar* dattn = m_dattn.data();
    gemm_parallel<ExecSpace, Scalar>(space, "wbaudit::sim::DecoderModel::backward::attn_out",
                                     {{Op::transpose, Op::none, D, D, T, Scalar(1), dattn_out, D, attn, D, Scalar(0),
                                       grad(decoder_block::attn_out), D},
                                      {Op::none, Op::none, T, D, D, Scalar(1), dattn_out, D,
                                       param(decoder_block::attn_out), D, Scalar(0), dattn, D}});
    Scalar* dqkv = m_dqkv.data();
    Scalar* dscores = m_dscores.data();
    const Scalar scale = static_cast<Scalar>(1.0 / std::sqrt(static_cast<double>(hd)));
    Kokkos::parallel_for(
        "wbaudit::sim::DecoderModel::backward::attention",
        Kokkos::RangePolicy<ExecSpace, Kokkos::Schedule<Kokkos::Dynamic>>(space, 0, B * H), [=](const int bh) {
          const int b = bh / H, h = bh % H;
          const std::ptrdiff_t base = std::ptrdiff_t(b) * S * 3 * D + std::ptrdiff_t(h) * hd;
          const Scalar* q = qkv + base;
          const Scalar* k = q + D;
          const Scalar* v = q + 2 * D;
          Scalar* dq = dqkv + base;
          Scalar* dk = dq + D;
          Scalar* dv = dq + 2 * D;
          const Scalar* p = probs + bh * SS;
          const Scalar* dout = dattn + std::ptrdiff_t(b) * S * D + h * hd;
          Scalar* ds = dscores + bh * SS;
          detail::gemm(Op::none, Op::transpose, S, S, hd, Scalar(1), dout, D, v, 3 * D, Scalar(0), ds, S);  // dP
          detail::gemm(Op::transpose, Op::none, S, hd, S, Scalar(1), p, S, dout, D, Scalar(0), dv, 3 * D);
          for (int i = 0; i < S; ++i) {  // softmax backward: dS = P * (dP - sum_j P dP)
            const Scalar* pr = p + std::ptrdiff_t(i) * S;
            Scalar* dr = ds + std::ptrdiff_t(i) * S;
            const Scalar dot = detail::lane_sum<Scalar>(i + 1, [=](int j) { return pr[j] * dr[j]; });
            for (int j = 0; j <= i; ++j) {
              dr[j] = pr[j] * (dr[j] - dot);
            }
            for (int j = i + 1; j < S; ++j) {
              dr[j] = 0;
            }
          }
          detail::gemm(Op::none, Op::none, S, hd, S, scale, ds, S, k, 3 * D, Scalar(0), dq, 3 * D);
          detail::gemm(Op::transpose, Op::none, S, hd, S, scale, ds, S, q, 3 * D, Scalar(0), dk, 3 * D);
        });
    if (half > 0) {
      const Scalar* cs = m_rope_cos.data();
      const Scalar* sn = m_rope_sin.data();
      Kokkos::parallel_for("wbaudit::sim::DecoderModel::backward::rope", Kokkos::RangePolicy<ExecSpace>(space, 0, T),
                           [=](const int r) {
                             const int pos = r % S;
                             Scalar* row = dqkv + std::ptrdiff_t(r) * 3 * D;
                             for (int h = 0; h < 2 * H; ++h) {
                               detail::rope_rotate_transpose(row + h * hd, cs + pos * half, sn + pos * half, half);
                             }
                           });
    }
    gemm_parallel<ExecSpace, Scalar>(space, "wbaudit::sim::DecoderModel::backward::qkv",
                                     {{Op::transpose, Op::none, 3 * D, D, T, Scalar(1), dqkv, 3 * D, n1, D, Scalar(0),
                                       grad(decoder_block::attn_qkv), D},
                                      {Op::none, Op::none, T, D, 3 * D, Scalar(1), dqkv, 3 * D,
                                       param(decoder_block::attn_qkv), D, Scalar(0), dn, D}});
    rmsnorm_gain_gradient(space, T, D, dn, x, rstd1, grad(decoder_block::attn_norm));
    rmsnorm_backward(space, T, D, dn, x, rstd1, param(decoder_block::attn_norm), static_cast<const Scalar*>(dx_other),
                     dx);
  }

  // Embedding: positions grouped by token (stable counting sort on the host), each vocabulary row summing its
  // positions in increasing order.
  const std::int32_t* tok = tokens.data();
  std::fill(m_token_offsets.begin(), m_token_offsets.end(), 0);
  for (int r = 0; r < T; ++r) {
    ++m_token_offsets[tok[(r / S) * (S + 1) + r % S] + 1];
  }
  for (int v = 0; v < V; ++v) {
    m_token_offsets[v + 1] += m_token_offsets[v];
  }
  {
    std::vector<std::int32_t> next(m_token_offsets.begin(), m_token_offsets.end() - 1);
    for (int r = 0; r < T; ++r) {
      m_token_positions[next[tok[(r / S) * (S + 1) + r % S]]++] = r;
    }
  }
  const std::int32_t* offsets = m_token_offsets.data();
  const std::int32_t* positions = m_token_positions.data();
  Scalar* dembed = m_grads[0].data();
  Kokkos::parallel_for("wbaudit::sim::DecoderModel::backward::embed", Kokkos::RangePolicy<ExecSpace>(space, 0, V),
                       [=](const int v) {
                         Scalar* row = dembed + std::ptrdiff_t(v) * D;
                         for (int j = 0; j < D; ++j) {
                           row[j] = 0;
                         }
                         for (int i = offsets[v]; i < offsets[v + 1]; ++i) {
                           const Scalar* src = dx + std::ptrdiff_t(positions[i]) * D;
                           for (int j = 0; j < D; ++j) {
                             row[j] += src[j];
                           }
                         }
                       });
  space.fence();
}

template <class ExecSpace, class Scalar>
double DecoderModel<ExecSpace, Scalar>::loss_and_gradient(const ExecSpace& space, Tokens tokens) {
  const double value = forward(space, tokens, true);
  backward(space, tokens);
  return value;
}

template <class ExecSpace, class Scalar>
double DecoderModel<ExecSpace, Scalar>::loss(const ExecSpace& space, Tokens tokens) {
  return forward(space, tokens, false);
}

template <class ExecSpace, class Scalar>
std::size_t DecoderModel<ExecSpace, Scalar>::workspace_bytes() const {
  std::size_t n = 0;
  for (const Buffer* b :
       {&m_x,    &m_xmid,  &m_n1,      &m_n2,    &m_rstd1, &m_rstd2,   &m_qkv,      &m_probs,    &m_attn,
        &m_gate, &m_up,    &m_hidden,  &m_nf,    &m_rstdf, &m_logits,  &m_dx,       &m_dx_other, &m_dn,
        &m_dqkv, &m_dattn, &m_dhidden, &m_dgate, &m_dup,   &m_dscores, &m_rope_cos, &m_rope_sin}) {
    n += b->extent(0) * sizeof(Scalar);
  }
  n += m_row_loss.extent(0) * sizeof(double);
  n += (m_token_offsets.size() + m_token_positions.size()) * sizeof(std::int32_t);
  for (const Vector& g : m_grads) {
    n += g.extent(0) * sizeof(Scalar);
  }
  return n;
}

template <class ExecSpace, class Scalar>
double DecoderModel<ExecSpace, Scalar>::step_flops() const {
  const double T = m_rows, D = m_shape.width, F = m_shape.mlp_hidden, V = m_shape.vocab, L = m_shape.layers,
               S = m_shape.seq_len, B = m_batch;
  // Forward products 2 T (4 D^2 + 3 D F) per block + 2 T V D for the head; backward twice that (input and weight
  // gradients). Attention per block: QK^T and PV forward, dP, dV, dQ, dK backward, each 2 S^2 head_dim per head.
  const double products = 3.0 * (L * 2.0 * T * (4.0 * D * D + 3.0 * D * F) + 2.0 * T * V * D);
  const double attention = L * 6.0 * 2.0 * B * S * S * D;
  return products + attention;
}

template class DecoderModel<Kokkos::Serial, float>;
template class DecoderModel<Kokkos::Serial, double>;
#if defined(KOKKOS_ENABLE_OPENMP)
template class DecoderModel<Kokkos::OpenMP, float>;
template class DecoderModel<Kokkos::OpenMP, double>;
#endif

}  // namespace wbaudit::sim
