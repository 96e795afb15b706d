#include "sim/data/byte_text.hpp"

#include <array>
#include <fstream>
#include <iomanip>
#include <memory>
#include <sstream>
#include <system_error>

#include "util/hash.hpp"

namespace wbaudit::sim {

namespace {

// frac(i * phi) as a 53-bit fraction: the Weyl sequence of the golden ratio in 64-bit fixed point.
double weyl_fraction(std::uint64_t i) {
  const std::uint64_t x = i * 0x9E3779B97F4A7C15ULL;
  return static_cast<double>(x >> 11) * 0x1p-53;
}

}  // namespace

template <class ExecSpace>
ByteText<ExecSpace>::ByteText(const std::filesystem::path& path, double validation_fraction, std::uint64_t data_seed)
    : m_path(path), m_data_seed(data_seed) {
  const std::string where = "data.path: " + path.string();
  if (!(validation_fraction > 0.0 && validation_fraction < 1.0)) {
    std::ostringstream os;
    os << "data.validation_fraction: must lie in (0, 1), got " << validation_fraction;
    throw DataError(os.str());
  }
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    throw DataError(where + ": no such file");
  }
  if (std::filesystem::is_directory(status)) {
    throw DataError(where + ": is a directory, not a text file");
  }
  const std::uintmax_t bytes = std::filesystem::file_size(path, ec);
  if (ec) {
    throw DataError(where + ": cannot read its size (" + ec.message() + ")");
  }
  if (bytes == 0) {
    throw DataError(where + ": the file is empty");
  }
  if (bytes > kByteTextMaxBytes) {
    throw DataError(where + ": " + std::to_string(bytes) + " bytes is above the limit of " +
                    std::to_string(kByteTextMaxBytes) + " bytes (1 GiB)");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw DataError(where + ": cannot open it for reading");
  }
  m_host.resize(static_cast<std::size_t>(bytes));
  in.read(reinterpret_cast<char*>(m_host.data()), static_cast<std::streamsize>(bytes));
  if (in.gcount() != static_cast<std::streamsize>(bytes)) {
    throw DataError(where + ": read " + std::to_string(in.gcount()) + " of " + std::to_string(bytes) + " bytes");
  }
  const auto size = static_cast<std::int64_t>(bytes);
  m_split = size - static_cast<std::int64_t>(validation_fraction * static_cast<double>(size));
  if (m_split < 2 || size - m_split < 2) {
    std::ostringstream os;
    os << where << ": " << size << " bytes split at validation_fraction " << validation_fraction << " into " << m_split
       << " training and " << size - m_split << " held-out bytes; each part needs at least 2";
    throw DataError(os.str());
  }
  m_sha256 = util::sha256_hex(std::string_view(reinterpret_cast<const char*>(m_host.data()), m_host.size()));
  m_bytes = Kokkos::View<std::uint8_t*, memory_space>(
      Kokkos::view_alloc(Kokkos::WithoutInitializing, "wbaudit::data::ByteText::bytes"), m_host.size());
  auto host = Kokkos::create_mirror_view(m_bytes);
  std::copy(m_host.begin(), m_host.end(), host.data());
  Kokkos::deep_copy(m_bytes, host);
}

template <class ExecSpace>
std::vector<std::int64_t> ByteText<ExecSpace>::training_offsets(std::int64_t step, int rows, int seq_len) const {
  const std::int64_t positions = m_split - seq_len;  // starts of a window of seq_len + 1 bytes inside [0, split)
  if (positions < 1) {
    throw DataError("data.path: " + m_path.string() + ": the training part has " + std::to_string(m_split) +
                    " bytes, fewer than one window of seq_len + 1 = " + std::to_string(seq_len + 1));
  }
  if (step < 0) {
    throw DataError("ByteText::training_batch: step must be >= 0, got " + std::to_string(step));
  }
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(rows));
  for (int r = 0; r < rows; ++r) {
    const double u = detail::philox_uniform(m_data_seed, detail::TokenDomain::text_training,
                                            static_cast<std::uint32_t>(r), 0u, static_cast<std::uint64_t>(step));
    offsets[static_cast<std::size_t>(r)] = detail::uniform_index(u, positions);
  }
  return offsets;
}

template <class ExecSpace>
std::vector<std::int64_t> ByteText<ExecSpace>::validation_offsets(int k, int rows, int seq_len) const {
  const std::int64_t held_out = size() - m_split;
  const std::int64_t positions = held_out - seq_len;
  if (positions < 1) {
    throw DataError("data.path: " + m_path.string() + ": the held-out part has " + std::to_string(held_out) +
                    " bytes, fewer than one window of seq_len + 1 = " + std::to_string(seq_len + 1) +
                    " (raise data.validation_fraction or shorten model.seq_len)");
  }
  if (k < 0) {
    throw DataError("ByteText::validation_batch: k must be >= 0, got " + std::to_string(k));
  }
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(rows));
  for (int r = 0; r < rows; ++r) {
    const auto i = static_cast<std::uint64_t>(k) * static_cast<std::uint64_t>(rows) + static_cast<std::uint64_t>(r);
    offsets[static_cast<std::size_t>(r)] = m_split + detail::uniform_index(weyl_fraction(i + 1), positions);
  }
  return offsets;
}

template <class ExecSpace>
void ByteText<ExecSpace>::gather(const ExecSpace& space, const std::vector<std::int64_t>& offsets, int seq_len,
                                 Tokens out) const {
  const auto rows = static_cast<int>(offsets.size());
  Kokkos::View<std::int64_t*, memory_space> starts("wbaudit::data::ByteText::starts", offsets.size());
  auto host = Kokkos::create_mirror_view(starts);
  std::copy(offsets.begin(), offsets.end(), host.data());
  Kokkos::deep_copy(space, starts, host);
  const int row_length = seq_len + 1;
  const auto bytes = m_bytes;
  Kokkos::parallel_for(
      "wbaudit::data::ByteText::gather",
      Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(space, {0, 0}, {rows, row_length}),
      KOKKOS_LAMBDA(const int r, const int p) {
        out(static_cast<std::size_t>(r) * row_length + p) = static_cast<std::int32_t>(bytes(starts(r) + p));
      });
  space.fence();
}

template <class ExecSpace>
void ByteText<ExecSpace>::training_batch(const ExecSpace& space, std::int64_t step, int rows, int seq_len,
                                         Tokens out) const {
  detail::check_batch_shape("ByteText::training_batch", rows, seq_len, out.extent(0));
  gather(space, training_offsets(step, rows, seq_len), seq_len, out);
}

template <class ExecSpace>
void ByteText<ExecSpace>::validation_batch(const ExecSpace& space, int k, int rows, int seq_len, Tokens out) const {
  detail::check_batch_shape("ByteText::validation_batch", rows, seq_len, out.extent(0));
  gather(space, validation_offsets(k, rows, seq_len), seq_len, out);
}

template <class ExecSpace>
std::string ByteText<ExecSpace>::describe() const {
  std::ostringstream os;
  os << "byte text: " << m_path.string() << " (" << size() << " bytes, sha256 " << m_sha256.substr(0, 12)
     << "), training bytes [0, " << m_split << "), held out [" << m_split << ", " << size() << "), data seed "
     << m_data_seed;
  return os.str();
}

template class ByteText<Kokkos::Serial>;
#if defined(KOKKOS_ENABLE_OPENMP)
template class ByteText<Kokkos::OpenMP>;
#endif

}  // namespace wbaudit::sim
