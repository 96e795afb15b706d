#pragma once
// Byte-level language modelling on a user's text file (docs/data.md): vocab 256 (one token per byte), the file read
// once, its last `validation_fraction` of bytes held out. Training rows are windows of seq_len + 1 bytes at offsets
// drawn from Philox keyed (data seed, step, row) inside the training part; validation rows are windows at fixed,
// evenly spaced offsets inside the held-out part. No training window ever overlaps the held-out bytes.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "sim/data/detail/philox_uniform.hpp"
#include "sim/data/token_source.hpp"

namespace wbaudit::sim {

// Largest text file accepted (held twice in memory, as host bytes and as their device copy): 1 GiB.
inline constexpr std::uintmax_t kByteTextMaxBytes = std::uintmax_t{1} << 30;

template <class ExecSpace>
class ByteText : public TokenSource<ExecSpace> {
 public:
  using typename TokenSource<ExecSpace>::memory_space;
  using typename TokenSource<ExecSpace>::Tokens;

  // Throws DataError for a missing, unreadable, empty or oversized file, a directory, or validation_fraction outside
  // (0, 1). Both parts must hold at least two bytes (one window of length 2); a seq_len too long for a part is
  // refused by the batch calls, with the sizes.
  ByteText(const std::filesystem::path& path, double validation_fraction, std::uint64_t data_seed);

  int vocab() const override { return 256; }
  void training_batch(const ExecSpace& space, std::int64_t step, int rows, int seq_len, Tokens out) const override;
  // Validation row r of batch k starts at held-out position floor(frac((k * rows + r) * phi) * positions), where
  // positions = held-out bytes - seq_len and phi the golden ratio's fraction: fixed windows, spread over the whole
  // held-out part (a Weyl sequence), independent of the data seed.
  void validation_batch(const ExecSpace& space, int k, int rows, int seq_len, Tokens out) const override;
  std::string describe() const override;

  const std::string& sha256() const { return m_sha256; }  // of the file's content, lower-case hex
  std::int64_t size() const { return static_cast<std::int64_t>(m_host.size()); }
  std::int64_t split() const { return m_split; }  // first held-out byte
  // The offsets (into the file) of the rows of a batch, as the batch calls use them (host-side, for tests and logs).
  std::vector<std::int64_t> training_offsets(std::int64_t step, int rows, int seq_len) const;
  std::vector<std::int64_t> validation_offsets(int k, int rows, int seq_len) const;

 private:
  void gather(const ExecSpace& space, const std::vector<std::int64_t>& offsets, int seq_len, Tokens out) const;

  std::filesystem::path m_path;
  std::uint64_t m_data_seed = 0;
  std::int64_t m_split = 0;
  std::string m_sha256;
  std::vector<std::uint8_t> m_host;
  Kokkos::View<std::uint8_t*, memory_space> m_bytes;
};

}  // namespace wbaudit::sim
