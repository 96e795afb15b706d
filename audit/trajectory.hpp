#pragma once
// A realized low-precision trajectory on disk, the input of `wbaudit audit`: per tensor and recorded step, the
// stored weights w[t] (values of the format, as float32), the fp32 proposals u[t] and the weights w[t+1] after the
// write-back. Two containers hold it (layout: docs/python.md, "The trajectory layout"):
//   - an HDF5 file (schema attribute "wbaudit.trajectory/1"; /steps, /tensors/<name>/{w,u[,w_next]}),
//   - a directory of .npy files (steps.npy, <name>.w.npy, <name>.u.npy[, <name>.w_next.npy], optional
//     trajectory.json with the attributes).
// Rows are read in slices of coordinates so that a trajectory larger than memory streams through.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace wbaudit::audit {

inline constexpr const char* kTrajectorySchema = "wbaudit.trajectory/1";

// A malformed trajectory; the message names the file, the tensor, the dataset and the offending value.
class TrajectoryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct TrajectoryTensor {
  std::string name;
  std::uint32_t tensor_id = 0;  // SR stream key; default: position in the tensor order
  std::int64_t size = 0;        // coordinates
  std::optional<double> scale;  // intK formats: the per-tensor scale
  bool has_w_next = false;      // false: w has T + 1 rows and w[t+1] is row k + 1 (consecutive steps)
  // The tensor's shape (attribute "shape" of /tensors/<name>, or "shape" in trajectory.json's tensors), its product
  // the size; empty when not given. Block formats need it: their blocks run along the last dimension.
  std::vector<std::int64_t> shape;
};

class TrajectorySource {
 public:
  virtual ~TrajectorySource() = default;
  // Reads row k (recorded step steps[k]) of tensor `tensor`: coordinates [begin, begin + u.size()); an empty span
  // is not read (without w_next, w_next is row k + 1 of w).
  virtual void read(std::size_t tensor, std::size_t k, std::int64_t begin, std::span<float> w, std::span<float> u,
                    std::span<float> w_next) = 0;

  std::filesystem::path path;
  std::optional<std::string> format;  // attributes of the file, when present
  std::optional<std::string> policy;
  std::optional<int> sr_bits;
  std::optional<std::string> sr_stream;  // SR's random stream ("philox" when absent)
  std::optional<std::uint64_t> seed;
  std::vector<std::int64_t> steps;  // [T] strictly increasing
  std::vector<TrajectoryTensor> tensors;
};

// Opens an HDF5 trajectory or a .npy directory and validates its shapes, dtypes and steps (a step missing from a
// w without w_next, extents that differ between w, u and w_next, a dtype other than float32, another schema) before
// any data is read. Throws TrajectoryError.
std::unique_ptr<TrajectorySource> open_trajectory(const std::filesystem::path& path);

}  // namespace wbaudit::audit
