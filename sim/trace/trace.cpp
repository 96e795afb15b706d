// trace.h5 through the HDF5 C API; the layout is documented in docs/trace-format.md.
#include "sim/trace/trace.hpp"

#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>
#include <system_error>

namespace wbaudit::sim {

const GroupTrace& Trace::group(const std::string& name) const {
  for (const GroupTrace& g : groups) {
    if (g.name == name) {
      return g;
    }
  }
  std::string known;
  for (const GroupTrace& g : groups) {
    known += (known.empty() ? "" : ", ") + g.name;
  }
  throw std::out_of_range("trace has no group \"" + name + "\" (groups: " + known + ")");
}

namespace {

class TraceFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Owns one HDF5 identifier.
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t), const std::string& what, const std::string& file)
      : m_id(id), m_close(close) {
    if (id < 0) {
      throw TraceFileError(file + ": HDF5 error: " + what);
    }
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() {
    if (m_id >= 0) {
      m_close(m_id);
    }
  }
  hid_t get() const { return m_id; }

 private:
  hid_t m_id;
  herr_t (*m_close)(hid_t);
};

void check(herr_t status, const std::string& what, const std::string& file) {
  if (status < 0) {
    throw TraceFileError(file + ": HDF5 error: " + what);
  }
}

template <class T>
hid_t native_type();
template <>
hid_t native_type<std::int64_t>() {
  return H5T_NATIVE_INT64;
}
template <>
hid_t native_type<double>() {
  return H5T_NATIVE_DOUBLE;
}
template <>
hid_t native_type<std::uint64_t>() {
  return H5T_NATIVE_UINT64;
}
template <>
hid_t native_type<std::uint32_t>() {
  return H5T_NATIVE_UINT32;
}

// File-side types are fixed little-endian so the file reads the same everywhere.
template <class T>
hid_t file_type();
template <>
hid_t file_type<std::int64_t>() {
  return H5T_STD_I64LE;
}
template <>
hid_t file_type<double>() {
  return H5T_IEEE_F64LE;
}
template <>
hid_t file_type<std::uint64_t>() {
  return H5T_STD_U64LE;
}
template <>
hid_t file_type<std::uint32_t>() {
  return H5T_STD_U32LE;
}

Handle string_type(const std::string& file) {
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose, "H5Tcopy", file);
  check(H5Tset_size(type.get(), H5T_VARIABLE), "H5Tset_size", file);
  check(H5Tset_cset(type.get(), H5T_CSET_UTF8), "H5Tset_cset", file);
  return Handle(H5Tcopy(type.get()), H5Tclose, "H5Tcopy", file);
}

void write_string_attribute(hid_t loc, const char* name, const std::string& value, const std::string& file) {
  Handle type = string_type(file);
  Handle space(H5Screate(H5S_SCALAR), H5Sclose, "H5Screate", file);
  Handle attr(H5Acreate2(loc, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
              std::string("create attribute ") + name, file);
  const char* data = value.c_str();
  check(H5Awrite(attr.get(), type.get(), &data), std::string("write attribute ") + name, file);
}

template <class T>
void write_scalar_attribute(hid_t loc, const char* name, T value, const std::string& file) {
  Handle space(H5Screate(H5S_SCALAR), H5Sclose, "H5Screate", file);
  Handle attr(H5Acreate2(loc, name, file_type<T>(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
              std::string("create attribute ") + name, file);
  check(H5Awrite(attr.get(), native_type<T>(), &value), std::string("write attribute ") + name, file);
}

// Creation property lists without object timestamps, so that the same trace always gives the same bytes (and the
// same SHA-256 in attempt manifests) whatever the thread count, rank count or time of the run.
hid_t untimed_plist(hid_t cls) {
  hid_t id = H5Pcreate(cls);
  if (id >= 0 && H5Pset_obj_track_times(id, false) < 0) {
    H5Pclose(id);
    return -1;
  }
  return id;
}

template <class T>
void write_dataset(hid_t loc, const char* name, const std::vector<T>& data, const std::vector<hsize_t>& dims,
                   const std::string& file) {
  Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose, "H5Screate_simple",
               file);
  Handle dcpl(untimed_plist(H5P_DATASET_CREATE), H5Pclose, "creation property list", file);
  Handle set(H5Dcreate2(loc, name, file_type<T>(), space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT), H5Dclose,
             std::string("create dataset ") + name, file);
  if (!data.empty()) {
    check(H5Dwrite(set.get(), native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()),
          std::string("write dataset ") + name, file);
  }
}

template <class T>
void write_vector(hid_t loc, const char* name, const std::vector<T>& data, const std::string& file) {
  write_dataset(loc, name, data, {static_cast<hsize_t>(data.size())}, file);
}

Handle create_group(hid_t loc, const std::string& name, const std::string& file) {
  Handle gcpl(untimed_plist(H5P_GROUP_CREATE), H5Pclose, "creation property list", file);
  return Handle(H5Gcreate2(loc, name.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), H5Gclose, "create group " + name,
                file);
}

Handle open_group(hid_t loc, const std::string& name, const std::string& file) {
  if (H5Lexists(loc, name.c_str(), H5P_DEFAULT) <= 0) {
    throw TraceFileError(file + ": not a wbaudit trace: missing group " + name);
  }
  return Handle(H5Gopen2(loc, name.c_str(), H5P_DEFAULT), H5Gclose, "open group " + name, file);
}

bool has_link(hid_t loc, const std::string& name) {
  return H5Lexists(loc, name.c_str(), H5P_DEFAULT) > 0;
}

std::string read_string_attribute(hid_t loc, const char* name, const std::string& file) {
  if (H5Aexists(loc, name) <= 0) {
    throw TraceFileError(file + ": not a wbaudit trace: missing attribute " + name);
  }
  Handle attr(H5Aopen(loc, name, H5P_DEFAULT), H5Aclose, std::string("open attribute ") + name, file);
  Handle type = string_type(file);
  char* data = nullptr;
  check(H5Aread(attr.get(), type.get(), &data), std::string("read attribute ") + name, file);
  std::string value = data ? data : "";
  H5free_memory(data);
  return value;
}

template <class T>
T read_scalar_attribute(hid_t loc, const char* name, const std::string& file) {
  if (H5Aexists(loc, name) <= 0) {
    throw TraceFileError(file + ": not a wbaudit trace: missing attribute " + name);
  }
  Handle attr(H5Aopen(loc, name, H5P_DEFAULT), H5Aclose, std::string("open attribute ") + name, file);
  T value{};
  check(H5Aread(attr.get(), native_type<T>(), &value), std::string("read attribute ") + name, file);
  return value;
}

template <class T>
std::vector<T> read_dataset(hid_t loc, const std::string& name, const std::string& where, const std::string& file) {
  if (!has_link(loc, name)) {
    throw TraceFileError(file + ": not a wbaudit trace: missing dataset " + where + name);
  }
  Handle set(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), H5Dclose, "open dataset " + where + name, file);
  Handle space(H5Dget_space(set.get()), H5Sclose, "H5Dget_space " + where + name, file);
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n < 0) {
    throw TraceFileError(file + ": HDF5 error: extent of " + where + name);
  }
  std::vector<T> data(static_cast<std::size_t>(n));
  if (n > 0) {
    check(H5Dread(set.get(), native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()),
          "read dataset " + where + name, file);
  }
  return data;
}

template <class T>
std::vector<T> read_optional(hid_t loc, const std::string& name, const std::string& where, const std::string& file) {
  return has_link(loc, name) ? read_dataset<T>(loc, name, where, file) : std::vector<T>{};
}

// The link names of an HDF5 group, in name order.
std::vector<std::string> link_names(hid_t loc, const std::string& where, const std::string& file) {
  H5G_info_t info;
  check(H5Gget_info(loc, &info), "H5Gget_info " + where, file);
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t len = H5Lget_name_by_idx(loc, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (len < 0) {
      throw TraceFileError(file + ": HDF5 error: link name in " + where);
    }
    std::string name(static_cast<std::size_t>(len), '\0');
    H5Lget_name_by_idx(loc, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size() + 1, H5P_DEFAULT);
    names.push_back(name);
  }
  return names;
}

void write_file(const std::string& file, const Trace& trace) {
  Handle fcpl(untimed_plist(H5P_FILE_CREATE), H5Pclose, "creation property list", file);
  Handle h5(H5Fcreate(file.c_str(), H5F_ACC_EXCL, fcpl.get(), H5P_DEFAULT), H5Fclose, "create file", file);
  const hid_t root = h5.get();
  write_string_attribute(root, "schema", trace.schema, file);
  write_string_attribute(root, "mode", trace.mode, file);
  write_string_attribute(root, "format", trace.format, file);
  write_string_attribute(root, "policy", trace.policy, file);
  write_scalar_attribute<std::uint64_t>(root, "seed", trace.seed, file);
  write_scalar_attribute<std::int64_t>(root, "steps", trace.steps, file);
  write_string_attribute(root, "config_json", trace.config_json, file);
  write_scalar_attribute<double>(root, "histogram_d_min", trace.histogram.d_min, file);
  write_scalar_attribute<double>(root, "histogram_bin_width", trace.histogram.bin_width, file);
  write_scalar_attribute<std::int64_t>(root, "histogram_bins", trace.histogram.bins, file);
  write_vector(root, "recorded_steps", trace.recorded_steps, file);
  write_vector(root, "loss", trace.loss, file);
  write_vector(root, "learning_rate", trace.learning_rate, file);

  std::string order;
  for (const GroupTrace& g : trace.groups) {
    order += (order.empty() ? "" : "\n") + g.name;
  }
  write_string_attribute(root, "group_order", order, file);
  Handle groups = create_group(root, "groups", file);
  for (const GroupTrace& g : trace.groups) {
    if (g.name.empty() || g.name.find('/') != std::string::npos || g.name.find('\n') != std::string::npos) {
      throw TraceFileError(file + ": invalid group name \"" + g.name + "\"");
    }
    Handle gh = create_group(groups.get(), g.name, file);
    write_scalar_attribute<std::uint32_t>(gh.get(), "tensor_id", g.tensor_id, file);
    write_scalar_attribute<std::int64_t>(gh.get(), "size", g.size, file);
    write_vector(gh.get(), "nonzero", g.nonzero, file);
    if (trace.mode != "reference" || !g.erased.empty()) {
      write_vector(gh.get(), "erased", g.erased, file);
      write_vector(gh.get(), "saturated", g.saturated, file);
      write_vector(gh.get(), "applied", g.applied, file);
      write_vector(gh.get(), "erased_fraction", g.erased_fraction, file);
    }
    if (!g.zero_weight.empty() || !g.ratio_histogram.empty() || !g.projected.empty()) {
      write_vector(gh.get(), "zero_weight", g.zero_weight, file);
      const auto bins = static_cast<hsize_t>(trace.histogram.bins);
      if (bins == 0 || g.ratio_histogram.size() % bins != 0) {
        throw TraceFileError(file + ": group " + g.name + ": ratio_histogram has " +
                             std::to_string(g.ratio_histogram.size()) + " entries, not a multiple of " +
                             std::to_string(trace.histogram.bins) + " bins");
      }
      write_dataset(gh.get(), "ratio_histogram", g.ratio_histogram, {g.ratio_histogram.size() / bins, bins}, file);
      Handle projected = create_group(gh.get(), "projected", file);
      for (const auto& [format, series] : g.projected) {
        Handle fh = create_group(projected.get(), format, file);
        write_vector(fh.get(), "erased", series.erased, file);
        write_vector(fh.get(), "fraction", series.fraction, file);
        if (!series.expected.empty()) {
          Handle expected = create_group(fh.get(), "expected", file);
          for (const auto& [policy, e] : series.expected) {
            if (policy.empty() || policy.find('/') != std::string::npos) {
              throw TraceFileError(file + ": group " + g.name + " format " + format + ": invalid projection name \"" +
                                   policy + "\"");
            }
            Handle ph = create_group(expected.get(), policy, file);
            write_vector(ph.get(), "erased", e.erased, file);
            write_vector(ph.get(), "fraction", e.fraction, file);
          }
        }
      }
    }
  }
  check(H5Fflush(root, H5F_SCOPE_GLOBAL), "flush", file);
}

}  // namespace

void write_trace(const std::filesystem::path& path, const Trace& trace) {
  const std::filesystem::path tmp =
      path.parent_path() / (path.filename().string() + ".tmp." + std::to_string(::getpid()));
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors become exceptions with the file name, not stderr dumps
  try {
    write_file(tmp.string(), trace);
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw TraceFileError(path.string() + ": cannot move the finished trace into place: " + ec.message());
  }
}

Trace read_trace(const std::filesystem::path& path) {
  const std::string file = path.string();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  if (!std::filesystem::exists(path)) {
    throw TraceFileError(file + ": no such trace file");
  }
  if (H5Fis_hdf5(file.c_str()) <= 0) {
    throw TraceFileError(file + ": not an HDF5 file");
  }
  Handle h5(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose, "open file", file);
  const hid_t root = h5.get();
  Trace trace;
  trace.schema = read_string_attribute(root, "schema", file);
  if (trace.schema != kTraceSchema) {
    throw TraceFileError(file + ": unsupported trace schema \"" + trace.schema + "\" (expected " + kTraceSchema + ")");
  }
  trace.mode = read_string_attribute(root, "mode", file);
  trace.format = read_string_attribute(root, "format", file);
  trace.policy = read_string_attribute(root, "policy", file);
  trace.seed = read_scalar_attribute<std::uint64_t>(root, "seed", file);
  trace.steps = read_scalar_attribute<std::int64_t>(root, "steps", file);
  trace.config_json = read_string_attribute(root, "config_json", file);
  trace.histogram.d_min = read_scalar_attribute<double>(root, "histogram_d_min", file);
  trace.histogram.bin_width = read_scalar_attribute<double>(root, "histogram_bin_width", file);
  trace.histogram.bins = static_cast<int>(read_scalar_attribute<std::int64_t>(root, "histogram_bins", file));
  trace.recorded_steps = read_dataset<std::int64_t>(root, "recorded_steps", "/", file);
  trace.loss = read_dataset<double>(root, "loss", "/", file);
  trace.learning_rate = read_dataset<double>(root, "learning_rate", "/", file);

  const std::string order = read_string_attribute(root, "group_order", file);
  Handle groups = open_group(root, "groups", file);
  std::size_t begin = 0;
  while (begin < order.size()) {
    std::size_t end = order.find('\n', begin);
    if (end == std::string::npos) {
      end = order.size();
    }
    GroupTrace g;
    g.name = order.substr(begin, end - begin);
    begin = end + 1;
    const std::string where = "/groups/" + g.name + "/";
    const std::string projected_where = where + "projected";
    Handle gh = open_group(groups.get(), g.name, file);
    g.tensor_id = read_scalar_attribute<std::uint32_t>(gh.get(), "tensor_id", file);
    g.size = read_scalar_attribute<std::int64_t>(gh.get(), "size", file);
    g.nonzero = read_dataset<std::int64_t>(gh.get(), "nonzero", where, file);
    g.erased = read_optional<std::int64_t>(gh.get(), "erased", where, file);
    g.saturated = read_optional<std::int64_t>(gh.get(), "saturated", where, file);
    g.applied = read_optional<std::int64_t>(gh.get(), "applied", where, file);
    g.erased_fraction = read_optional<double>(gh.get(), "erased_fraction", where, file);
    g.zero_weight = read_optional<std::int64_t>(gh.get(), "zero_weight", where, file);
    g.ratio_histogram = read_optional<std::int64_t>(gh.get(), "ratio_histogram", where, file);
    if (has_link(gh.get(), "projected")) {
      Handle projected = open_group(gh.get(), "projected", file);
      H5G_info_t info;
      check(H5Gget_info(projected.get(), &info), "H5Gget_info " + where + "projected", file);
      for (hsize_t i = 0; i < info.nlinks; ++i) {
        const ssize_t len =
            H5Lget_name_by_idx(projected.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
        if (len < 0) {
          std::string message = file;
          message += ": HDF5 error: link name in " + projected_where;
          throw TraceFileError(message);
        }
        std::string name(static_cast<std::size_t>(len), '\0');
        H5Lget_name_by_idx(projected.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size() + 1,
                           H5P_DEFAULT);
        Handle fh = open_group(projected.get(), name, file);
        std::string fwhere = projected_where;
        fwhere += "/" + name + "/";
        ProjectedSeries series;
        series.erased = read_dataset<std::int64_t>(fh.get(), "erased", fwhere, file);
        series.fraction = read_dataset<double>(fh.get(), "fraction", fwhere, file);
        if (has_link(fh.get(), "expected")) {
          Handle expected = open_group(fh.get(), "expected", file);
          for (const std::string& policy : link_names(expected.get(), fwhere + "expected", file)) {
            Handle ph = open_group(expected.get(), policy, file);
            const std::string pwhere = fwhere + "expected/" + policy + "/";
            ExpectedSeries e;
            e.erased = read_dataset<double>(ph.get(), "erased", pwhere, file);
            e.fraction = read_dataset<double>(ph.get(), "fraction", pwhere, file);
            series.expected.emplace(policy, std::move(e));
          }
        }
        g.projected.emplace(name, std::move(series));
      }
    }
    trace.groups.push_back(std::move(g));
  }
  return trace;
}

}  // namespace wbaudit::sim
