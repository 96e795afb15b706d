#include "sim/checkpoint.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "sim/trace/detail/h5.hpp"

namespace wbaudit::sim {

using namespace detail;  // NOLINT: the HDF5 helpers of detail/h5.hpp

namespace {

std::int64_t product(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) {
    n *= d;
  }
  return n;
}

void write_tensor(hid_t loc, const std::string& name, const std::vector<float>& values,
                  const std::vector<std::int64_t>& shape, const std::string& file) {
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  if (static_cast<std::int64_t>(values.size()) != product(shape)) {
    dims = {static_cast<hsize_t>(values.size())};
  }
  write_dataset(loc, name.c_str(), values, dims, file);
}

void write_section(hid_t root, const char* section, const Checkpoint& c, std::vector<float> TensorState::*member,
                   const std::string& file) {
  bool any = false;
  for (const TensorState& t : c.tensors) {
    any = any || !(t.*member).empty();
  }
  if (!any) {
    return;
  }
  Handle g = create_group(root, section, file);
  for (const TensorState& t : c.tensors) {
    if (!(t.*member).empty()) {
      write_tensor(g.get(), t.name, t.*member, t.shape, file);
    }
  }
}

void read_section(hid_t root, const char* section, Checkpoint& c, std::vector<float> TensorState::*member,
                  const std::string& file) {
  if (!has_link(root, section)) {
    return;
  }
  Handle g = open_group(root, section, file);
  for (TensorState& t : c.tensors) {
    if (has_link(g.get(), t.name)) {
      t.*member = read_dataset<float>(g.get(), t.name, std::string("/") + section + "/", file);
      if (static_cast<std::int64_t>((t.*member).size()) != product(t.shape)) {
        throw CheckpointError(file + ": /" + section + "/" + t.name + " has " + std::to_string((t.*member).size()) +
                              " values, expected " + std::to_string(product(t.shape)));
      }
    }
  }
}

// The checkpoint's content. Like a trace it is built in memory and written with plain POSIX writes (write_file:
// detail::in_memory_file_image, write_new_file), so a full disk is a named error; the bytes are the same HDF5 file as
// before, read by read_checkpoint unchanged.
void write_content(hid_t root, const std::string& file, const Checkpoint& c) {
  write_string_attribute(root, "schema", c.streamed ? kCheckpointSchemaStreamed : kCheckpointSchema, file);
  write_string_attribute(root, "config_json", c.config_json, file);
  write_string_attribute(root, "model_kind", c.model_kind, file);
  write_scalar_attribute<std::int64_t>(root, "step", c.step, file);
  std::string order;
  for (const TensorState& t : c.tensors) {
    order += (order.empty() ? "" : "\n") + t.name;
  }
  write_string_attribute(root, "tensor_order", order, file);
  if (c.streamed) {
    write_scalar_attribute<std::int64_t>(root, "trace_steps", c.streamed_rows.steps, file);
    write_scalar_attribute<std::int64_t>(root, "trace_validations", c.streamed_rows.validations, file);
    write_scalar_attribute<std::int64_t>(root, "trace_replays", c.streamed_rows.replays, file);
  }
  // /weights/<name> carries the tensor's shape (PyTorch layout); the other sections follow it.
  Handle weights = create_group(root, "weights", file);
  for (const TensorState& t : c.tensors) {
    write_tensor(weights.get(), t.name, t.weight, t.shape, file);
  }
  write_section(root, "optimizer_first", c, &TensorState::first, file);
  write_section(root, "optimizer_second", c, &TensorState::second, file);
  write_section(root, "master", c, &TensorState::master, file);
  Handle trace = create_group(root, "trace", file);
  write_trace_to(trace.get(), c.trace, file);
}

void write_file(const std::string& file, const Checkpoint& c) {
  write_new_file(file, in_memory_file_image(file, [&](hid_t root) { write_content(root, file, c); }), "checkpoint");
}

}  // namespace

void write_checkpoint(const std::filesystem::path& path, const Checkpoint& checkpoint) {
  const std::filesystem::path tmp =
      path.parent_path() / (path.filename().string() + ".tmp." + std::to_string(::getpid()));
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  try {
    write_file(tmp.string(), checkpoint);
  } catch (const std::exception& e) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw CheckpointError(std::string("write_checkpoint: ") + e.what());
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw CheckpointError(path.string() + ": cannot move the finished checkpoint into place: " + ec.message());
  }
}

Checkpoint read_checkpoint(const std::filesystem::path& path) {
  const std::string file = path.string();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  if (!std::filesystem::is_regular_file(path)) {
    throw CheckpointError(file + ": no such checkpoint file");
  }
  if (H5Fis_hdf5(file.c_str()) <= 0) {
    throw CheckpointError(file + ": not an HDF5 file (truncated or corrupt checkpoint?)");
  }
  try {
    Handle h5(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose, "open file", file);
    const hid_t root = h5.get();
    const std::string schema = H5Aexists(root, "schema") > 0 ? read_string_attribute(root, "schema", file) : "";
    if (schema != kCheckpointSchema && schema != kCheckpointSchemaStreamed) {
      throw CheckpointError(file + ": not a wbaudit checkpoint (expected schema " + kCheckpointSchema + " or " +
                            kCheckpointSchemaStreamed + ")");
    }
    Checkpoint c;
    c.streamed = schema == kCheckpointSchemaStreamed;
    if (c.streamed) {
      c.streamed_rows.steps = read_scalar_attribute<std::int64_t>(root, "trace_steps", file);
      c.streamed_rows.validations = read_scalar_attribute<std::int64_t>(root, "trace_validations", file);
      c.streamed_rows.replays = read_scalar_attribute<std::int64_t>(root, "trace_replays", file);
    }
    c.config_json = read_string_attribute(root, "config_json", file);
    c.model_kind = read_string_attribute(root, "model_kind", file);
    c.step = read_scalar_attribute<std::int64_t>(root, "step", file);
    const std::string order = read_string_attribute(root, "tensor_order", file);
    Handle weights = open_group(root, "weights", file);
    std::size_t b = 0;
    while (b < order.size()) {
      std::size_t e = order.find('\n', b);
      if (e == std::string::npos) {
        e = order.size();
      }
      TensorState t;
      t.name = order.substr(b, e - b);
      b = e + 1;
      Handle set(H5Dopen2(weights.get(), t.name.c_str(), H5P_DEFAULT), H5Dclose, "open dataset /weights/" + t.name,
                 file);
      Handle space(H5Dget_space(set.get()), H5Sclose, "H5Dget_space /weights/" + t.name, file);
      const int rank = H5Sget_simple_extent_ndims(space.get());
      std::vector<hsize_t> dims(static_cast<std::size_t>(rank > 0 ? rank : 0));
      if (rank < 0 || H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0) {
        throw CheckpointError(file + ": cannot read the shape of /weights/" + t.name);
      }
      t.shape.assign(dims.begin(), dims.end());
      t.weight = read_dataset<float>(weights.get(), t.name, "/weights/", file);
      c.tensors.push_back(std::move(t));
    }
    read_section(root, "optimizer_first", c, &TensorState::first, file);
    read_section(root, "optimizer_second", c, &TensorState::second, file);
    read_section(root, "master", c, &TensorState::master, file);
    Handle trace = open_group(root, "trace", file);
    c.trace = read_trace_from(trace.get(), file);
    return c;
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& e) {
    throw CheckpointError(std::string("read_checkpoint: ") + e.what());
  }
}

}  // namespace wbaudit::sim
