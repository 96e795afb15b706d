#pragma once
// A GPT-NeoX-style decoder-only transformer: token embedding; `layers` blocks of RMSNorm -> causal multi-head
// attention with rotary position embeddings (NeoX "rotate-half") -> residual, RMSNorm -> SwiGLU MLP -> residual
// (or GPT-NeoX's parallel residual x + attn(n1(x)) + mlp(n2(x))); final RMSNorm; untied LM head; mean cross-entropy
// in nats over batch x positions. No biases. Architecture, tensor layout and kernels: docs/decoder.md.
//
// Matrix products go through wbaudit's own GEMM (sim/model/detail/gemm.hpp: one fused multiply-add per k in order
// for every element, on every instruction set) on the View data, each product split into fixed row blocks that
// Kokkos spreads over its threads; every other reduction runs in a fixed order. Neither depends on the thread count or
// the CPU, so the loss and every gradient are bitwise identical at any thread count and on every CPU.
#include <Kokkos_Core.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace wbaudit::sim {

struct DecoderShape {
  int vocab = 256, width = 128, heads = 4, layers = 2, mlp_hidden = 344, seq_len = 128;
  double rotary_fraction = 1.0, rotary_base = 10000.0, norm_eps = 1e-5;
  bool parallel_residual = false;
};

// Throws std::invalid_argument naming the value: non-positive sizes, heads not dividing width, rotary_fraction
// outside [0, 1], rotary_base <= 0 (or not finite), norm_eps < 0 (or not finite).
void validate(const DecoderShape& shape);

// Tensors per block and their offsets from the block's first tensor id (1 + 7 * block).
inline constexpr int kDecoderBlockTensors = 7;
namespace decoder_block {
inline constexpr int attn_norm = 0, attn_qkv = 1, attn_out = 2, mlp_norm = 3, mlp_gate = 4, mlp_up = 5, mlp_down = 6;
}

// Rotated dimensions of each head: 2 * floor(head_dim * rotary_fraction / 2).
int rotary_dim(const DecoderShape& shape);

// The decoder's tensors, names with their shapes, in tensor order (see DecoderModel), from the shape alone: nothing
// is allocated or validated. DecoderModel is built from this list, and specs are checked against its names.
std::vector<std::pair<std::string, std::vector<std::int64_t>>> decoder_tensors(const DecoderShape& shape);

template <class ExecSpace, class Scalar = float>  // float for training; double for gradient checks
class DecoderModel {
 public:
  using memory_space = typename ExecSpace::memory_space;
  using Vector = Kokkos::View<Scalar*, memory_space>;
  using Tokens = Kokkos::View<const std::int32_t*, memory_space>;  // [batch x (seq_len + 1)] row-major
  static_assert(Kokkos::SpaceAccessibility<Kokkos::HostSpace, memory_space>::accessible,
                "DecoderModel runs host matrix products on its Views: the execution space must use host memory");

  DecoderModel(const DecoderShape& shape, int batch);

  const DecoderShape& shape() const { return m_shape; }
  int batch() const { return m_batch; }

  // Tensors in a fixed order (the index is the tensor id, used for RNG keys and traces): embed.weight
  // [vocab x width]; per block i: blocks.i.attn_norm.weight [width], blocks.i.attn.qkv.weight [3*width x width]
  // (rows q, k, v; head h is a contiguous head_dim slice of each), blocks.i.attn.out.weight [width x width],
  // blocks.i.mlp_norm.weight [width], blocks.i.mlp.gate.weight, blocks.i.mlp.up.weight [mlp_hidden x width],
  // blocks.i.mlp.down.weight [width x mlp_hidden]; final_norm.weight [width]; lm_head.weight [vocab x width].
  // Matrices are PyTorch nn.Linear layout: [out x in] row-major, y = x W^T.
  int tensor_count() const { return static_cast<int>(m_names.size()); }
  const std::string& tensor_name(int tensor) const;
  std::vector<std::int64_t> tensor_shape(int tensor) const;
  std::int64_t tensor_size(int tensor) const;
  std::int64_t parameter_count() const;
  Vector parameter(int tensor) const;  // flat views, row-major
  Vector gradient(int tensor) const;

  // Norm gains 1; every matrix N(0, init_std^2) from GaussianStream{seed, decoder_init} keyed (tensor id, 0,
  // coordinate), with the output projections (attn.out, mlp.down) scaled by 1/sqrt(2 * layers) (GPT-NeoX).
  void initialize(const ExecSpace& space, std::uint64_t seed, double init_std);

  // Inputs are columns 0..seq_len-1 of each row, targets columns 1..seq_len. Fills every gradient(t) and returns the
  // mean cross-entropy in nats (summed in double in a fixed order). Tokens outside [0, vocab) throw naming the value.
  double loss_and_gradient(const ExecSpace& space, Tokens tokens);
  double loss(const ExecSpace& space, Tokens tokens);  // forward only (validation), same value as above

  std::size_t workspace_bytes() const;  // activations + scratch, for memory reports

  // After loss(): the logits [batch * seq_len x vocab] (row = b * seq_len + position) and the cross-entropy of each
  // position (after loss_and_gradient() the logits buffer holds dL/dlogits instead).
  Kokkos::View<const Scalar*, memory_space> logits() const { return m_logits; }
  Kokkos::View<const double*, memory_space> position_losses() const { return m_row_loss; }

  // Matrix-product and attention FLOPs of one loss_and_gradient call (as executed: attention over the full
  // seq_len x seq_len score matrix), for throughput reports.
  double step_flops() const;

 private:
  using Buffer = Kokkos::View<Scalar*, memory_space>;
  void check_tokens(Tokens tokens) const;
  double forward(const ExecSpace& space, Tokens tokens, bool with_gradient);
  void backward(const ExecSpace& space, Tokens tokens);
  int block_tensor(int block, int which) const { return 1 + kDecoderBlockTensors * block + which; }

  DecoderShape m_shape;
  int m_batch = 0;
  int m_rows = 0;  // batch * seq_len
  int m_rotary_dim = 0;
  std::vector<std::string> m_names;
  std::vector<std::vector<std::int64_t>> m_shapes;
  std::vector<Vector> m_params;
  std::vector<Vector> m_grads;

  // Saved activations, one slab per layer (row-major [rows x columns]).
  Buffer m_x;       // [(layers + 1) x rows x width] residual stream entering each block, then the final one
  Buffer m_xmid;    // [layers x rows x width] after the attention residual (sequential residual only)
  Buffer m_n1;      // [layers x rows x width] attn_norm output
  Buffer m_n2;      // [layers x rows x width] mlp_norm output
  Buffer m_rstd1;   // [layers x rows] 1 / sqrt(mean(x^2) + eps) of attn_norm
  Buffer m_rstd2;   // [layers x rows]
  Buffer m_qkv;     // [layers x rows x 3 width] q and k after the rotation, v
  Buffer m_probs;   // [layers x batch x heads x seq x seq] attention probabilities (0 above the diagonal)
  Buffer m_attn;    // [layers x rows x width] attention output, heads concatenated (input of attn.out)
  Buffer m_gate;    // [layers x rows x mlp_hidden] gate pre-activation
  Buffer m_up;      // [layers x rows x mlp_hidden]
  Buffer m_hidden;  // [layers x rows x mlp_hidden] silu(gate) * up (input of mlp.down)
  Buffer m_nf;      // [rows x width] final_norm output
  Buffer m_rstdf;   // [rows]
  Buffer m_logits;  // [rows x vocab] logits, then dL/dlogits
  Kokkos::View<double*, memory_space> m_row_loss;  // [rows] cross-entropy of each position
  // Backward scratch.
  Buffer m_dx, m_dx_other, m_dn, m_dqkv, m_dattn, m_dhidden, m_dgate, m_dup, m_dscores;
  Buffer m_rope_cos, m_rope_sin;              // [seq_len x rotary_dim / 2]
  std::vector<std::int32_t> m_token_offsets;  // embedding gradient: input positions grouped by token
  std::vector<std::int32_t> m_token_positions;
};

}  // namespace wbaudit::sim
