// Readers of realized trajectories: HDF5 (C API) and directories of .npy files (NumPy format 1.0-3.0, C order).
#include "audit/trajectory.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace wbaudit::audit {
namespace {

// ------------------------------------------------------------------------------------------------------------
// HDF5

class H5 {
 public:
  H5(hid_t id, herr_t (*close)(hid_t), const std::string& what) : m_id(id), m_close(close) {
    if (id < 0) {
      throw TrajectoryError(what);
    }
  }
  H5(const H5&) = delete;
  H5& operator=(const H5&) = delete;
  H5() = default;  // holds nothing
  H5(H5&& o) noexcept : m_id(o.m_id), m_close(o.m_close) { o.m_id = -1; }
  H5& operator=(H5&& o) noexcept {
    std::swap(m_id, o.m_id);
    std::swap(m_close, o.m_close);
    return *this;
  }
  ~H5() {
    if (m_id >= 0) {
      m_close(m_id);
    }
  }
  hid_t get() const { return m_id; }

 private:
  hid_t m_id = -1;
  herr_t (*m_close)(hid_t) = nullptr;
};

bool has_attribute(hid_t loc, const char* name) {
  return H5Aexists(loc, name) > 0;
}

std::string read_string_attribute(hid_t loc, const char* name, const std::string& where) {
  H5 attr(H5Aopen(loc, name, H5P_DEFAULT), H5Aclose, where + ": cannot open attribute " + name);
  H5 type(H5Aget_type(attr.get()), H5Tclose, where + ": attribute " + name + ": no type");
  if (H5Tget_class(type.get()) != H5T_STRING) {
    throw TrajectoryError(where + ": attribute " + name + " is not a string");
  }
  if (H5Tis_variable_str(type.get()) > 0) {
    H5 mem(H5Tcopy(H5T_C_S1), H5Tclose, "H5Tcopy");
    H5Tset_size(mem.get(), H5T_VARIABLE);
    H5Tset_cset(mem.get(), H5Tget_cset(type.get()));
    char* data = nullptr;
    if (H5Aread(attr.get(), mem.get(), &data) < 0) {
      throw TrajectoryError(where + ": cannot read attribute " + name);
    }
    std::string out = data ? data : "";
    H5free_memory(data);
    return out;
  }
  const std::size_t size = H5Tget_size(type.get());
  std::string out(size, '\0');
  if (H5Aread(attr.get(), type.get(), out.data()) < 0) {
    throw TrajectoryError(where + ": cannot read attribute " + name);
  }
  out.resize(std::strlen(out.c_str()));
  return out;
}

// An integer array attribute (a tensor's shape), at most 32 entries.
std::vector<std::int64_t> read_int64_array_attribute(hid_t loc, const char* name, const std::string& where) {
  H5 attr(H5Aopen(loc, name, H5P_DEFAULT), H5Aclose, where + ": cannot open attribute " + name);
  H5 type(H5Aget_type(attr.get()), H5Tclose, where + ": attribute " + name + ": no type");
  H5 space(H5Aget_space(attr.get()), H5Sclose, where + ": attribute " + name + ": no dataspace");
  const hssize_t count = H5Sget_simple_extent_npoints(space.get());
  if (H5Tget_class(type.get()) != H5T_INTEGER || count < 1 || count > 32) {
    throw TrajectoryError(where + ": attribute " + name + " must be 1 to 32 integers");
  }
  std::vector<std::int64_t> out(static_cast<std::size_t>(count));
  if (H5Aread(attr.get(), H5T_NATIVE_INT64, out.data()) < 0) {
    throw TrajectoryError(where + ": cannot read attribute " + name);
  }
  return out;
}

// A tensor's declared shape must be positive extents whose product is its size.
void check_tensor_shape(const TrajectoryTensor& info, const std::string& where) {
  std::int64_t product = 1;
  std::string text;
  for (const std::int64_t d : info.shape) {
    text += (text.empty() ? "" : ", ") + std::to_string(d);
    product = d > 0 && product <= info.size ? product * d : -1;
  }
  if (!info.shape.empty() && product != info.size) {
    throw TrajectoryError(where + ": shape [" + text + "] does not hold its " + std::to_string(info.size) +
                          " coordinates");
  }
}

template <class T>
T read_scalar_attribute(hid_t loc, const char* name, hid_t mem_type, const std::string& where) {
  H5 attr(H5Aopen(loc, name, H5P_DEFAULT), H5Aclose, where + ": cannot open attribute " + name);
  H5 type(H5Aget_type(attr.get()), H5Tclose, where + ": attribute " + name + ": no type");
  const H5T_class_t cls = H5Tget_class(type.get());
  if (cls != H5T_INTEGER && cls != H5T_FLOAT) {
    throw TrajectoryError(where + ": attribute " + name + " is not a number");
  }
  T value{};
  if (H5Aread(attr.get(), mem_type, &value) < 0) {
    throw TrajectoryError(where + ": cannot read attribute " + name);
  }
  return value;
}

std::vector<hsize_t> dataset_dims(hid_t dset, const std::string& where) {
  H5 space(H5Dget_space(dset), H5Sclose, where + ": no dataspace");
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) {
    throw TrajectoryError(where + ": no dataspace");
  }
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return dims;
}

std::string dtype_text(hid_t type) {
  const H5T_class_t cls = H5Tget_class(type);
  const std::size_t bits = H5Tget_size(type) * 8;
  if (cls == H5T_FLOAT) {
    return "float" + std::to_string(bits);
  }
  if (cls == H5T_INTEGER) {
    return (H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(bits);
  }
  return "non-numeric";
}

class Hdf5Trajectory final : public TrajectorySource {
 public:
  explicit Hdf5Trajectory(const std::filesystem::path& file)
      : m_file(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose, file.string() + ": cannot open as HDF5") {
    path = file;
    const std::string f = file.string();
    const hid_t root = m_file.get();
    if (!has_attribute(root, "schema")) {
      throw TrajectoryError(f + ": no schema attribute (expected \"" + std::string(kTrajectorySchema) + "\")");
    }
    const std::string schema = read_string_attribute(root, "schema", f);
    if (schema != kTrajectorySchema) {
      throw TrajectoryError(f + ": schema \"" + schema + "\" is not a trajectory (expected \"" + kTrajectorySchema +
                            "\"" +
                            (schema.rfind("wbaudit.trace", 0) == 0 ? "; this is a trace, not a trajectory" : "") + ")");
    }
    if (has_attribute(root, "format")) {
      format = read_string_attribute(root, "format", f);
    }
    if (has_attribute(root, "policy")) {
      policy = read_string_attribute(root, "policy", f);
    }
    if (has_attribute(root, "sr_bits")) {
      sr_bits = static_cast<int>(read_scalar_attribute<std::int64_t>(root, "sr_bits", H5T_NATIVE_INT64, f));
    }
    if (has_attribute(root, "sr_stream")) {
      sr_stream = read_string_attribute(root, "sr_stream", f);
    }
    if (has_attribute(root, "seed")) {
      seed = read_scalar_attribute<std::uint64_t>(root, "seed", H5T_NATIVE_UINT64, f);
    }
    read_steps(f);
    if (H5Lexists(root, "tensors", H5P_DEFAULT) <= 0) {
      throw TrajectoryError(f + ": no /tensors group");
    }
    H5 group(H5Gopen2(root, "tensors", H5P_DEFAULT), H5Gclose, f + ": cannot open /tensors");
    std::vector<std::string> names;
    if (has_attribute(root, "tensor_order")) {
      std::istringstream in(read_string_attribute(root, "tensor_order", f));
      for (std::string line; std::getline(in, line);) {
        if (!line.empty()) {
          names.push_back(line);
        }
      }
    } else {
      H5G_info_t info;
      if (H5Gget_info(group.get(), &info) < 0) {
        throw TrajectoryError(f + ": cannot list /tensors");
      }
      for (hsize_t i = 0; i < info.nlinks; ++i) {
        const ssize_t n = H5Lget_name_by_idx(group.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
        std::string name(static_cast<std::size_t>(n), '\0');
        H5Lget_name_by_idx(group.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size() + 1, H5P_DEFAULT);
        names.push_back(name);
      }
    }
    if (names.empty()) {
      throw TrajectoryError(f + ": /tensors holds no tensor");
    }
    for (std::size_t t = 0; t < names.size(); ++t) {
      open_tensor(group.get(), names[t], static_cast<std::uint32_t>(t), f);
    }
  }

  void read(std::size_t tensor, std::size_t k, std::int64_t begin, std::span<float> w, std::span<float> u,
            std::span<float> w_next) override {
    const Datasets& d = m_sets[tensor];
    const TrajectoryTensor& info = tensors[tensor];
    read_row(d.w.get(), k, begin, w, info.name + "/w");
    read_row(d.u.get(), k, begin, u, info.name + "/u");
    if (info.has_w_next) {
      read_row(d.w_next.get(), k, begin, w_next, info.name + "/w_next");
    } else {
      read_row(d.w.get(), k + 1, begin, w_next, info.name + "/w");
    }
  }

 private:
  struct Datasets {
    H5 w, u, w_next;
  };

  void read_steps(const std::string& f) {
    if (H5Lexists(m_file.get(), "steps", H5P_DEFAULT) <= 0) {
      throw TrajectoryError(f + ": no /steps dataset (the recorded step of each row)");
    }
    H5 dset(H5Dopen2(m_file.get(), "steps", H5P_DEFAULT), H5Dclose, f + ": cannot open /steps");
    H5 type(H5Dget_type(dset.get()), H5Tclose, f + ": /steps: no type");
    if (H5Tget_class(type.get()) != H5T_INTEGER) {
      throw TrajectoryError(f + ": /steps has dtype " + dtype_text(type.get()) + " (expected int64)");
    }
    const auto dims = dataset_dims(dset.get(), f + ": /steps");
    if (dims.size() != 1) {
      throw TrajectoryError(f + ": /steps must be one-dimensional, has rank " + std::to_string(dims.size()));
    }
    steps.resize(dims[0]);
    if (!steps.empty() && H5Dread(dset.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, steps.data()) < 0) {
      throw TrajectoryError(f + ": cannot read /steps");
    }
  }

  H5 open_float(hid_t group, const std::string& tensor, const char* name, const std::string& f) {
    const std::string where = f + ": tensor " + tensor + ": " + name;
    H5 dset(H5Dopen2(group, name, H5P_DEFAULT), H5Dclose, where + ": missing dataset");
    H5 type(H5Dget_type(dset.get()), H5Tclose, where + ": no type");
    if (H5Tget_class(type.get()) != H5T_FLOAT || H5Tget_size(type.get()) != 4) {
      throw TrajectoryError(where + " has dtype " + dtype_text(type.get()) +
                            " (expected float32: weights as stored values of the format, proposals in fp32)");
    }
    return dset;
  }

  void open_tensor(hid_t tensors_group, const std::string& name, std::uint32_t position, const std::string& f) {
    if (H5Lexists(tensors_group, name.c_str(), H5P_DEFAULT) <= 0) {
      throw TrajectoryError(f + ": tensor_order names " + name + ", which /tensors does not hold");
    }
    H5 g(H5Gopen2(tensors_group, name.c_str(), H5P_DEFAULT), H5Gclose, f + ": cannot open /tensors/" + name);
    TrajectoryTensor info;
    info.name = name;
    info.tensor_id = position;
    const std::string where = f + ": tensor " + name;
    if (has_attribute(g.get(), "tensor_id")) {
      info.tensor_id = static_cast<std::uint32_t>(
          read_scalar_attribute<std::uint64_t>(g.get(), "tensor_id", H5T_NATIVE_UINT64, where));
    }
    if (has_attribute(g.get(), "scale")) {
      info.scale = read_scalar_attribute<double>(g.get(), "scale", H5T_NATIVE_DOUBLE, where);
    }
    if (has_attribute(g.get(), "shape")) {
      info.shape = read_int64_array_attribute(g.get(), "shape", where);
    }
    info.has_w_next = H5Lexists(g.get(), "w_next", H5P_DEFAULT) > 0;
    H5 w = open_float(g.get(), name, "w", f);
    H5 u = open_float(g.get(), name, "u", f);
    const auto wd = dataset_dims(w.get(), where + ": w"), ud = dataset_dims(u.get(), where + ": u");
    if (wd.size() != 2 || ud.size() != 2) {
      throw TrajectoryError(where + ": w and u must be two-dimensional [rows, coordinates] (w has rank " +
                            std::to_string(wd.size()) + ", u rank " + std::to_string(ud.size()) + ")");
    }
    info.size = static_cast<std::int64_t>(ud[1]);
    check_tensor_shape(info, where);
    H5 w_next;
    std::vector<hsize_t> nd;
    if (info.has_w_next) {
      w_next = open_float(g.get(), name, "w_next", f);
      nd = dataset_dims(w_next.get(), where + ": w_next");
    }
    check_shapes(where, steps.size(), wd, ud, info.has_w_next ? &nd : nullptr);
    tensors.push_back(info);
    m_sets.push_back(Datasets{std::move(w), std::move(u), std::move(w_next)});
  }

  void check_shapes(const std::string& where, std::size_t T, const std::vector<hsize_t>& wd,
                    const std::vector<hsize_t>& ud, const std::vector<hsize_t>* nd);

  void read_row(hid_t dset, std::size_t row, std::int64_t begin, std::span<float> out, const std::string& what) {
    if (out.empty()) {
      return;
    }
    H5 space(H5Dget_space(dset), H5Sclose, path.string() + ": " + what + ": no dataspace");
    const hsize_t start[2] = {row, static_cast<hsize_t>(begin)}, count[2] = {1, out.size()};
    H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr);
    const hsize_t mem_count = out.size();
    H5 mem(H5Screate_simple(1, &mem_count, nullptr), H5Sclose, "H5Screate_simple");
    if (H5Dread(dset, H5T_NATIVE_FLOAT, mem.get(), space.get(), H5P_DEFAULT, out.data()) < 0) {
      throw TrajectoryError(path.string() + ": cannot read " + what + " row " + std::to_string(row) + " (step " +
                            std::to_string(steps[row < steps.size() ? row : steps.size() - 1]) + ")");
    }
  }

  H5 m_file;
  std::vector<Datasets> m_sets;
};

// Shapes shared by both containers: u [T, n]; w [T + 1, n] (consecutive steps) or w and w_next [T, n].
void check_row_shapes(const std::string& where, const std::vector<std::int64_t>& steps, std::int64_t w_rows,
                      std::int64_t w_cols, std::int64_t u_rows, std::int64_t u_cols, bool has_next, std::int64_t n_rows,
                      std::int64_t n_cols) {
  const auto T = static_cast<std::int64_t>(steps.size());
  if (u_rows != T) {
    throw TrajectoryError(where + ": u has " + std::to_string(u_rows) + " rows, steps has " + std::to_string(T));
  }
  if (w_cols != u_cols || (has_next && n_cols != u_cols)) {
    throw TrajectoryError(where + ": shape mismatch: w has " + std::to_string(w_cols) + " coordinates, u " +
                          std::to_string(u_cols) + (has_next ? ", w_next " + std::to_string(n_cols) : std::string()));
  }
  if (has_next) {
    if (w_rows != T || n_rows != T) {
      throw TrajectoryError(where + ": w has " + std::to_string(w_rows) + " rows and w_next " + std::to_string(n_rows) +
                            ", steps has " + std::to_string(T) + " (expected equal)");
    }
    return;
  }
  if (w_rows != T + 1) {
    throw TrajectoryError(where + ": w has " + std::to_string(w_rows) + " rows; without w_next it needs T + 1 = " +
                          std::to_string(T + 1) + " (w[t] for every step and the weights after the last)");
  }
  for (std::size_t k = 1; k < steps.size(); ++k) {
    if (steps[k] != steps[k - 1] + 1) {
      throw TrajectoryError(where + ": step " + std::to_string(steps[k - 1] + 1) + " is missing (steps jump from " +
                            std::to_string(steps[k - 1]) + " to " + std::to_string(steps[k]) +
                            "); without w_next the steps must be consecutive");
    }
  }
}

void check_steps(const std::string& f, const std::vector<std::int64_t>& steps) {
  if (steps.empty()) {
    throw TrajectoryError(f + ": steps is empty (no recorded step)");
  }
  for (std::size_t k = 0; k < steps.size(); ++k) {
    if (steps[k] < 0 || (k > 0 && steps[k] <= steps[k - 1])) {
      throw TrajectoryError(f + ": steps must be non-negative and strictly increasing; steps[" + std::to_string(k) +
                            "] = " + std::to_string(steps[k]));
    }
  }
}

void Hdf5Trajectory::check_shapes(const std::string& where, std::size_t, const std::vector<hsize_t>& wd,
                                  const std::vector<hsize_t>& ud, const std::vector<hsize_t>* nd) {
  check_steps(path.string(), steps);
  if (nd && nd->size() != 2) {
    throw TrajectoryError(where + ": w_next must be two-dimensional, has rank " + std::to_string(nd->size()));
  }
  check_row_shapes(where, steps, static_cast<std::int64_t>(wd[0]), static_cast<std::int64_t>(wd[1]),
                   static_cast<std::int64_t>(ud[0]), static_cast<std::int64_t>(ud[1]), nd != nullptr,
                   nd ? static_cast<std::int64_t>((*nd)[0]) : 0, nd ? static_cast<std::int64_t>((*nd)[1]) : 0);
}

// ------------------------------------------------------------------------------------------------------------
// .npy

struct NpyArray {
  std::filesystem::path file;
  std::string descr;
  std::vector<std::int64_t> shape;
  std::int64_t data_offset = 0;
};

std::string npy_shape_text(const std::vector<std::int64_t>& shape) {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return out + (shape.size() == 1 ? ",)" : ")");
}

// A tensor name from trajectory.json names files of the directory: it must stay inside it.
void check_tensor_file_name(const std::filesystem::path& dir, const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos) {
    throw TrajectoryError(dir.string() + ": tensor name \"" + name +
                          "\" is not a file name (a name must not be empty, \".\" or \"..\", or contain '/'): "
                          "its files would lie outside the trajectory directory");
  }
}

NpyArray read_npy_header(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  const std::string f = file.string();
  if (!in) {
    throw TrajectoryError(f + ": cannot open");
  }
  char magic[8];
  if (!in.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0) {
    throw TrajectoryError(f + ": not a .npy file (bad magic)");
  }
  const int major = static_cast<unsigned char>(magic[6]);
  std::uint32_t header_len = 0;
  if (major == 1) {
    unsigned char b[2];
    in.read(reinterpret_cast<char*>(b), 2);
    header_len = b[0] | (b[1] << 8);
  } else if (major == 2 || major == 3) {
    unsigned char b[4];
    in.read(reinterpret_cast<char*>(b), 4);
    header_len = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<std::uint32_t>(b[3]) << 24);
  } else {
    throw TrajectoryError(f + ": unsupported .npy version " + std::to_string(major));
  }
  // The header is read only as far as the file reaches: a corrupt length must not allocate gigabytes.
  std::error_code size_error;
  const auto file_bytes = std::filesystem::file_size(file, size_error);
  const std::uintmax_t prefix = major == 1 ? 10 : 12;
  if (size_error || header_len > file_bytes || file_bytes - header_len < prefix) {
    throw TrajectoryError(f + ": truncated .npy header (it says " + std::to_string(header_len) +
                          " bytes, the file has " + std::to_string(size_error ? 0 : file_bytes) + ")");
  }
  std::string header(header_len, '\0');
  if (!in.read(header.data(), header_len)) {
    throw TrajectoryError(f + ": truncated .npy header");
  }
  NpyArray a;
  a.file = file;
  a.data_offset = (major == 1 ? 10 : 12) + static_cast<std::int64_t>(header_len);
  auto value_after = [&](const std::string& key) {
    const auto p = header.find("'" + key + "'");
    if (p == std::string::npos) {
      throw TrajectoryError(f + ": .npy header lacks " + key);
    }
    return header.find(':', p) + 1;
  };
  auto p = header.find_first_of("'\"", value_after("descr"));
  a.descr = header.substr(p + 1, header.find_first_of("'\"", p + 1) - p - 1);
  p = header.find_first_not_of(' ', value_after("fortran_order"));
  if (header.compare(p, 4, "True") == 0) {
    throw TrajectoryError(f + ": Fortran-ordered array (save it C-contiguous: np.ascontiguousarray)");
  }
  p = header.find('(', value_after("shape"));
  const auto e = p == std::string::npos ? std::string::npos : header.find(')', p);
  if (e == std::string::npos) {
    throw TrajectoryError(f + ": .npy header: shape is not a tuple");
  }
  std::istringstream dims(header.substr(p + 1, e - p - 1));
  for (std::string item; std::getline(dims, item, ',');) {
    const auto first = item.find_first_not_of(' ');
    if (first == std::string::npos) {
      continue;
    }
    const auto last = item.find_last_not_of(' ');
    const std::string digits = item.substr(first, last - first + 1);
    if (digits.empty() || digits.size() > 15 || digits.find_first_not_of("0123456789") != std::string::npos) {
      throw TrajectoryError(f + ": .npy header: shape entry \"" + digits + "\" is not a size");
    }
    a.shape.push_back(std::stoll(digits));
  }
  // Sizes are checked against the file before anything is allocated from them (no overflow: each factor < 10^15,
  // and the product is compared step by step with the file's size).
  const std::int64_t item =
      a.descr.size() == 3 && std::isdigit(static_cast<unsigned char>(a.descr[2])) ? a.descr[2] - '0' : 0;
  const auto bytes = static_cast<std::int64_t>(file_bytes);
  std::int64_t promised = item;
  for (const auto d : a.shape) {
    if (d != 0 && promised > (bytes - a.data_offset) / d + 1) {
      promised = bytes + 1;  // beyond the file whatever the other factors are
      break;
    }
    promised *= d;
  }
  if (item > 0 && bytes < a.data_offset + promised) {
    throw TrajectoryError(f + ": truncated: " + std::to_string(bytes) + " bytes, less than its header promises (" +
                          npy_shape_text(a.shape) + " of " + a.descr + ")");
  }
  return a;
}

std::string npy_dtype(const std::string& descr) {
  if (descr == "<f4") {
    return "float32";
  }
  if (descr == "<f8") {
    return "float64";
  }
  if (descr == "<f2") {
    return "float16";
  }
  if (descr == "<i8") {
    return "int64";
  }
  if (descr == "<i4") {
    return "int32";
  }
  return descr;
}

class NpyTrajectory final : public TrajectorySource {
 public:
  explicit NpyTrajectory(const std::filesystem::path& dir) {
    path = dir;
    const std::string d = dir.string();
    nlohmann::json meta = nlohmann::json::object();
    const auto meta_file = dir / "trajectory.json";
    if (std::filesystem::exists(meta_file)) {
      std::ifstream in(meta_file);
      try {
        meta = nlohmann::json::parse(in);
      } catch (const nlohmann::json::exception& e) {
        throw TrajectoryError(meta_file.string() + ": not valid JSON: " + e.what());
      }
      if (meta.value("schema", std::string(kTrajectorySchema)) != kTrajectorySchema) {
        throw TrajectoryError(meta_file.string() + ": schema \"" + meta["schema"].get<std::string>() + "\" is not \"" +
                              kTrajectorySchema + "\"");
      }
      if (meta.contains("format")) {
        format = meta["format"].get<std::string>();
      }
      if (meta.contains("policy")) {
        policy = meta["policy"].get<std::string>();
      }
      if (meta.contains("sr_bits")) {
        sr_bits = meta["sr_bits"].get<int>();
      }
      if (meta.contains("sr_stream")) {
        sr_stream = meta["sr_stream"].get<std::string>();
      }
      if (meta.contains("seed")) {
        seed = meta["seed"].get<std::uint64_t>();
      }
    }
    const auto steps_file = dir / "steps.npy";
    if (!std::filesystem::exists(steps_file)) {
      throw TrajectoryError(d + ": no steps.npy (the recorded step of each row)");
    }
    const NpyArray s = read_npy_header(steps_file);
    if ((s.descr != "<i8" && s.descr != "<i4") || s.shape.size() != 1) {
      throw TrajectoryError(steps_file.string() + ": expected a one-dimensional int64 array, got " +
                            npy_dtype(s.descr) + " of rank " + std::to_string(s.shape.size()));
    }
    steps.resize(static_cast<std::size_t>(s.shape[0]));
    {
      std::ifstream in(steps_file, std::ios::binary);
      in.seekg(s.data_offset);
      for (auto& v : steps) {
        if (s.descr == "<i8") {
          in.read(reinterpret_cast<char*>(&v), 8);
        } else {
          std::int32_t x;
          in.read(reinterpret_cast<char*>(&x), 4);
          v = x;
        }
      }
    }
    check_steps(steps_file.string(), steps);

    std::vector<std::string> names;
    if (meta.contains("tensors")) {
      for (const auto& t : meta["tensors"]) {
        names.push_back(t.at("name").get<std::string>());
      }
    } else {
      std::set<std::string> found;
      for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        const std::string n = entry.path().filename().string();
        if (n.size() > 6 && n.ends_with(".u.npy")) {
          found.insert(n.substr(0, n.size() - 6));
        }
      }
      names.assign(found.begin(), found.end());
    }
    if (names.empty()) {
      throw TrajectoryError(d + ": no tensor (<name>.u.npy) in the directory");
    }
    for (std::size_t t = 0; t < names.size(); ++t) {
      TrajectoryTensor info;
      info.name = names[t];
      check_tensor_file_name(dir, info.name);
      info.tensor_id = static_cast<std::uint32_t>(t);
      if (meta.contains("tensors")) {
        const auto& j = meta["tensors"][t];
        if (j.contains("tensor_id")) {
          info.tensor_id = j["tensor_id"].get<std::uint32_t>();
        }
        if (j.contains("scale")) {
          info.scale = j["scale"].get<double>();
        }
        if (j.contains("shape")) {
          info.shape = j["shape"].get<std::vector<std::int64_t>>();
        }
      }
      const std::string where = d + ": tensor " + info.name;
      Files files;
      files.w = open_float(dir, info.name, "w");
      files.u = open_float(dir, info.name, "u");
      info.has_w_next = std::filesystem::exists(dir / (info.name + ".w_next.npy"));
      if (info.has_w_next) {
        files.w_next = open_float(dir, info.name, "w_next");
      }
      info.size = files.u.shape[1];
      check_tensor_shape(info, where);
      check_row_shapes(where, steps, files.w.shape[0], files.w.shape[1], files.u.shape[0], files.u.shape[1],
                       info.has_w_next, info.has_w_next ? files.w_next.shape[0] : 0,
                       info.has_w_next ? files.w_next.shape[1] : 0);
      tensors.push_back(info);
      m_files.push_back(std::move(files));
    }
  }

  ~NpyTrajectory() override {
    for (auto& [file, fd] : m_fds) {
      ::close(fd);
    }
  }

  void read(std::size_t tensor, std::size_t k, std::int64_t begin, std::span<float> w, std::span<float> u,
            std::span<float> w_next) override {
    const Files& f = m_files[tensor];
    read_row(f.w, k, begin, w);
    read_row(f.u, k, begin, u);
    if (tensors[tensor].has_w_next) {
      read_row(f.w_next, k, begin, w_next);
    } else {
      read_row(f.w, k + 1, begin, w_next);
    }
  }

 private:
  struct Files {
    NpyArray w, u, w_next;
  };

  static NpyArray open_float(const std::filesystem::path& dir, const std::string& tensor, const std::string& what) {
    const auto file = dir / (tensor + "." + what + ".npy");
    if (!std::filesystem::exists(file)) {
      throw TrajectoryError(dir.string() + ": tensor " + tensor + ": missing " + file.filename().string());
    }
    NpyArray a = read_npy_header(file);
    if (a.descr != "<f4") {
      throw TrajectoryError(file.string() + ": tensor " + tensor + ": " + what + " has dtype " + npy_dtype(a.descr) +
                            " (expected float32: weights as stored values of the format, proposals in fp32)");
    }
    if (a.shape.size() != 2) {
      throw TrajectoryError(file.string() + ": tensor " + tensor + ": " + what +
                            " must be two-dimensional [rows, coordinates], has rank " + std::to_string(a.shape.size()));
    }
    return a;
  }

  int fd_of(const std::filesystem::path& file) {
    auto it = m_fds.find(file.string());
    if (it != m_fds.end()) {
      return it->second;
    }
    const int fd = ::open(file.c_str(), O_RDONLY);
    if (fd < 0) {
      throw TrajectoryError(file.string() + ": cannot open: " + std::strerror(errno));
    }
    m_fds.emplace(file.string(), fd);
    return fd;
  }

  void read_row(const NpyArray& a, std::size_t row, std::int64_t begin, std::span<float> out) {
    const int fd = fd_of(a.file);
    const auto offset = a.data_offset + (static_cast<std::int64_t>(row) * a.shape[1] + begin) * 4;
    auto* dst = reinterpret_cast<char*>(out.data());
    std::size_t left = out.size() * 4;
    off_t at = offset;
    while (left > 0) {
      const ssize_t n = ::pread(fd, dst, left, at);
      if (n <= 0) {
        throw TrajectoryError(a.file.string() + ": read error at byte " + std::to_string(at));
      }
      dst += n;
      at += n;
      left -= static_cast<std::size_t>(n);
    }
  }

  std::vector<Files> m_files;
  std::map<std::string, int> m_fds;
};

}  // namespace

std::unique_ptr<TrajectorySource> open_trajectory(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path)) {
    throw TrajectoryError(path.string() + ": no such file or directory");
  }
  if (std::filesystem::is_directory(path)) {
    try {
      return std::make_unique<NpyTrajectory>(path);
    } catch (const nlohmann::json::exception& e) {  // a member of trajectory.json of the wrong type
      throw TrajectoryError((path / "trajectory.json").string() + ": " + e.what());
    } catch (const std::invalid_argument& e) {
      throw TrajectoryError(path.string() + ": " + e.what());
    } catch (const std::out_of_range& e) {
      throw TrajectoryError(path.string() + ": " + e.what());
    }
  }
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    throw TrajectoryError(path.string() + ": neither an HDF5 file nor a directory of .npy files");
  }
  return std::make_unique<Hdf5Trajectory>(path);
}

}  // namespace wbaudit::audit
