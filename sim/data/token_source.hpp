#pragma once
// The token sources of language models (docs/data.md): every batch is a pure function of (data seed, step) or
// (data seed, validation index), so traces are bitwise identical for any thread count and a checkpoint needs only
// the step to resume the data stream.
#include <Kokkos_Core.hpp>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

namespace wbaudit::sim {

// Bad data configuration or input file (the message names the value or the file).
class DataError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Token batches for language models: row-major [rows x (seq_len + 1)] int32; a model reads columns 0..seq_len-1 as
// inputs and 1..seq_len as targets. Every batch is a pure function of (seed, step) or (seed, k): bitwise identical
// for any thread count, and a step number is the whole data position (checkpoints store only the step).
template <class ExecSpace>
class TokenSource {
 public:
  using memory_space = typename ExecSpace::memory_space;
  using Tokens = Kokkos::View<std::int32_t*, memory_space>;
  virtual ~TokenSource() = default;
  virtual int vocab() const = 0;  // tokens are in [0, vocab)
  // Both batch calls throw DataError for rows < 1, seq_len < 1, out.extent(0) != rows * (seq_len + 1), or a
  // sequence the source cannot supply.
  virtual void training_batch(const ExecSpace& space, std::int64_t step, int rows, int seq_len, Tokens out) const = 0;
  virtual void validation_batch(const ExecSpace& space, int k, int rows, int seq_len,
                                Tokens out) const = 0;  // held out
  virtual std::optional<double> optimal_loss(int /*seq_len*/) const {
    return std::nullopt;
  }                                          // nats/token, mean over targets
  virtual std::string describe() const = 0;  // one line for logs and reports
};

namespace detail {
// Shared precondition of both batch calls (message prefixed by the source and the call).
inline void check_batch_shape(const char* where, int rows, int seq_len, std::size_t extent) {
  if (rows < 1) {
    throw DataError(std::string(where) + ": rows must be >= 1, got " + std::to_string(rows));
  }
  if (seq_len < 1) {
    throw DataError(std::string(where) + ": seq_len must be >= 1, got " + std::to_string(seq_len));
  }
  const std::size_t want = static_cast<std::size_t>(rows) * (static_cast<std::size_t>(seq_len) + 1);
  if (extent != want) {
    throw DataError(std::string(where) + ": output has " + std::to_string(extent) + " tokens, rows * (seq_len + 1) = " +
                    std::to_string(rows) + " * " + std::to_string(seq_len + 1) + " = " + std::to_string(want));
  }
}
}  // namespace detail

}  // namespace wbaudit::sim
