#pragma once
// Rotary position embedding, GPT-NeoX "rotate-half" convention (Su et al. 2021; GPT-NeoX's RotaryEmbedding):
// the first rotary_dim = 2 * half dimensions of a head are rotated, pair i being (x[i], x[half + i]) with angle
// pos * inv_freq_i, inv_freq_i = base^(-2i / rotary_dim):
//   x_rot = x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x2, x1), cos/sin = cat(f, f).
// The remaining head dimensions pass through unchanged.
#include <Kokkos_Core.hpp>
#include <cmath>

namespace wbaudit::sim::detail {

// cos/sin tables [seq_len x half] (row = position), angles and their cos/sin computed in double and rounded once.
template <class View>
void fill_rope_tables(View cos_table, View sin_table, int seq_len, int rotary_dim, double base) {
  using Scalar = typename View::value_type;
  const int half = rotary_dim / 2;
  auto c = Kokkos::create_mirror_view(cos_table);
  auto s = Kokkos::create_mirror_view(sin_table);
  for (int pos = 0; pos < seq_len; ++pos) {
    for (int i = 0; i < half; ++i) {
      const double inv_freq = std::pow(base, -2.0 * i / rotary_dim);
      const double angle = pos * inv_freq;
      c(pos * half + i) = static_cast<Scalar>(std::cos(angle));
      s(pos * half + i) = static_cast<Scalar>(std::sin(angle));
    }
  }
  Kokkos::deep_copy(cos_table, c);
  Kokkos::deep_copy(sin_table, s);
}

// Rotates one head vector in place: pair (x1, x2) = (x[i], x[half + i]) -> (x1 c - x2 s, x2 c + x1 s).
template <class Scalar>
KOKKOS_INLINE_FUNCTION void rope_rotate(Scalar* x, const Scalar* cos_row, const Scalar* sin_row, int half) {
  for (int i = 0; i < half; ++i) {
    const Scalar x1 = x[i], x2 = x[half + i];
    x[i] = x1 * cos_row[i] - x2 * sin_row[i];
    x[half + i] = x2 * cos_row[i] + x1 * sin_row[i];
  }
}

// The transpose (= inverse) rotation, applied to a gradient: dx = R^T dy.
template <class Scalar>
KOKKOS_INLINE_FUNCTION void rope_rotate_transpose(Scalar* g, const Scalar* cos_row, const Scalar* sin_row, int half) {
  for (int i = 0; i < half; ++i) {
    const Scalar g1 = g[i], g2 = g[half + i];
    g[i] = g1 * cos_row[i] + g2 * sin_row[i];
    g[half + i] = g2 * cos_row[i] - g1 * sin_row[i];
  }
}

}  // namespace wbaudit::sim::detail
