#pragma once
// Writing a finished trace file (shared by write_trace and TraceWriter::finish): HDF5 writes the file itself under a
// temporary name in the destination's directory, into disk space reserved before it starts (so that a full disk is
// an ordinary, named error before HDF5 writes anything, never a file HDF5 cannot close), and it is renamed into place
// once closed.
#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

namespace wbaudit::sim {
struct Trace;
class TraceReader;
namespace detail {

// The most bytes of values finishing a streamed trace holds at once: one block of one dataset (write_trace_from_reader;
// docs/trace-format.md, "Streaming").
inline constexpr std::size_t kFinishBlockBytes = std::size_t{4} << 20;

// Reserves `bytes` past the current end of the open file (posix_fallocate); throws TraceFileError naming the file and
// the reason (ENOSPC, EFBIG) when the disk or the process's file-size limit cannot hold them.
void reserve_file_space(hid_t file_id, std::uint64_t bytes, const std::string& file);

// Creates `path`'s temporary, reserves `bound` bytes, calls fill(root, temporary name), closes it and renames it into
// place; nothing is left behind on error.
void write_final_trace(const std::filesystem::path& path, std::uint64_t bound,
                       const std::function<void(hid_t, const std::string&)>& fill);

// An upper bound on the bytes of the finished file of a trace with this header and these row counts.
std::uint64_t finished_trace_bound(const Trace& header, std::size_t steps, std::size_t validations,
                                   std::size_t replays);

// The finished file of the trace `reader` reads, with `steps` (the run's optimizer steps) when given: byte for byte
// what write_trace writes for that trace. Each dataset of each group is read and written a block of at most
// `block_bytes` of values at a time (at least one recorded step's row, or one chunk of a 1-D dataset), so what it
// holds besides the reader's header is one block, whatever the number of recorded steps.
void write_trace_from_reader(const std::filesystem::path& path, const TraceReader& reader,
                             std::optional<std::int64_t> steps = std::nullopt,
                             std::size_t block_bytes = kFinishBlockBytes);

}  // namespace detail
}  // namespace wbaudit::sim
