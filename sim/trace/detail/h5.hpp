#pragma once
// HDF5 C API helpers shared by the trace and checkpoint files: owned identifiers, fixed little-endian file types,
// attributes and 1-D/2-D datasets, with errors that name the file.
#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace wbaudit::sim {
struct Trace;
namespace detail {

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

inline void check(herr_t status, const std::string& what, const std::string& file) {
  if (status < 0) {
    throw TraceFileError(file + ": HDF5 error: " + what);
  }
}

template <class T>
inline hid_t native_type();
template <>
inline hid_t native_type<std::int64_t>() {
  return H5T_NATIVE_INT64;
}
template <>
inline hid_t native_type<double>() {
  return H5T_NATIVE_DOUBLE;
}
template <>
inline hid_t native_type<std::uint64_t>() {
  return H5T_NATIVE_UINT64;
}
template <>
inline hid_t native_type<float>() {
  return H5T_NATIVE_FLOAT;
}
template <>
inline hid_t native_type<std::uint32_t>() {
  return H5T_NATIVE_UINT32;
}

// File-side types are fixed little-endian so the file reads the same everywhere.
template <class T>
inline hid_t file_type();
template <>
inline hid_t file_type<std::int64_t>() {
  return H5T_STD_I64LE;
}
template <>
inline hid_t file_type<double>() {
  return H5T_IEEE_F64LE;
}
template <>
inline hid_t file_type<std::uint64_t>() {
  return H5T_STD_U64LE;
}
template <>
inline hid_t file_type<float>() {
  return H5T_IEEE_F32LE;
}
template <>
inline hid_t file_type<std::uint32_t>() {
  return H5T_STD_U32LE;
}

inline Handle string_type(const std::string& file) {
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose, "H5Tcopy", file);
  check(H5Tset_size(type.get(), H5T_VARIABLE), "H5Tset_size", file);
  check(H5Tset_cset(type.get(), H5T_CSET_UTF8), "H5Tset_cset", file);
  return Handle(H5Tcopy(type.get()), H5Tclose, "H5Tcopy", file);
}

inline void write_string_attribute(hid_t loc, const char* name, const std::string& value, const std::string& file) {
  Handle type = string_type(file);
  Handle space(H5Screate(H5S_SCALAR), H5Sclose, "H5Screate", file);
  Handle attr(H5Acreate2(loc, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
              std::string("create attribute ") + name, file);
  const char* data = value.c_str();
  check(H5Awrite(attr.get(), type.get(), &data), std::string("write attribute ") + name, file);
}

template <class T>
inline void write_scalar_attribute(hid_t loc, const char* name, T value, const std::string& file) {
  Handle space(H5Screate(H5S_SCALAR), H5Sclose, "H5Screate", file);
  Handle attr(H5Acreate2(loc, name, file_type<T>(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
              std::string("create attribute ") + name, file);
  check(H5Awrite(attr.get(), native_type<T>(), &value), std::string("write attribute ") + name, file);
}

// Creation property lists without object timestamps, so that the same trace always gives the same bytes (and the
// same SHA-256 in attempt manifests) whatever the thread count, rank count or time of the run.
inline hid_t untimed_plist(hid_t cls) {
  hid_t id = H5Pcreate(cls);
  if (id >= 0 && H5Pset_obj_track_times(id, false) < 0) {
    H5Pclose(id);
    return -1;
  }
  return id;
}

template <class T>
inline void write_dataset(hid_t loc, const char* name, const std::vector<T>& data, const std::vector<hsize_t>& dims,
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

// A 1-D dataset stored chunked and deflated (shuffle + deflate level 6): for the large sparse datasets.
template <class T, class Allocator>
inline void write_compressed_vector(hid_t loc, const char* name, const std::vector<T, Allocator>& data,
                                    const std::string& file) {
  if (data.empty()) {
    write_dataset(loc, name, std::vector<T>{}, {0}, file);
    return;
  }
  const hsize_t n = data.size();
  Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose, "H5Screate_simple", file);
  Handle dcpl(untimed_plist(H5P_DATASET_CREATE), H5Pclose, "creation property list", file);
  const hsize_t chunk = n < 65536 ? n : 65536;
  check(H5Pset_chunk(dcpl.get(), 1, &chunk), std::string("chunk dataset ") + name, file);
  check(H5Pset_shuffle(dcpl.get()), std::string("shuffle filter for ") + name, file);
  check(H5Pset_deflate(dcpl.get(), 6), std::string("deflate filter for ") + name, file);
  Handle set(H5Dcreate2(loc, name, file_type<T>(), space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT), H5Dclose,
             std::string("create dataset ") + name, file);
  check(H5Dwrite(set.get(), native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()),
        std::string("write dataset ") + name, file);
}

template <class T>
inline void write_vector(hid_t loc, const char* name, const std::vector<T>& data, const std::string& file) {
  write_dataset(loc, name, data, {static_cast<hsize_t>(data.size())}, file);
}

inline Handle create_group(hid_t loc, const std::string& name, const std::string& file) {
  Handle gcpl(untimed_plist(H5P_GROUP_CREATE), H5Pclose, "creation property list", file);
  return Handle(H5Gcreate2(loc, name.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), H5Gclose, "create group " + name,
                file);
}

inline Handle open_group(hid_t loc, const std::string& name, const std::string& file) {
  if (H5Lexists(loc, name.c_str(), H5P_DEFAULT) <= 0) {
    throw TraceFileError(file + ": not a wbaudit trace: missing group " + name);
  }
  return Handle(H5Gopen2(loc, name.c_str(), H5P_DEFAULT), H5Gclose, "open group " + name, file);
}

inline bool has_link(hid_t loc, const std::string& name) {
  return H5Lexists(loc, name.c_str(), H5P_DEFAULT) > 0;
}

inline std::string read_string_attribute(hid_t loc, const char* name, const std::string& file) {
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

// The trace's attributes, datasets and groups written into / read from an open file or group.
// The link names of an HDF5 group, in name order.
// The bytes of an HDF5 file built in memory (HDF5's core driver, no backing store), `file` naming it in messages;
// fill(root) writes its content. HDF5 never touches the disk, so a full disk is an ordinary write error in
// write_new_file (ENOSPC, named), never a file id HDF5 cannot close (which crashed its exit-time cleanup).
template <class Fill>
std::vector<unsigned char> in_memory_file_image(const std::string& file, Fill&& fill) {
  Handle fcpl(untimed_plist(H5P_FILE_CREATE), H5Pclose, "creation property list", file);
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "access property list", file);
  check(H5Pset_fapl_core(fapl.get(), 1 << 20, /*backing_store=*/false), "H5Pset_fapl_core", file);
  Handle h5(H5Fcreate(file.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get()), H5Fclose, "create file", file);
  fill(h5.get());
  check(H5Fflush(h5.get(), H5F_SCOPE_GLOBAL), "flush", file);
  const ssize_t size = H5Fget_file_image(h5.get(), nullptr, 0);
  if (size < 0) {
    throw TraceFileError(file + ": HDF5 error: H5Fget_file_image");
  }
  std::vector<unsigned char> image(static_cast<std::size_t>(size));
  if (H5Fget_file_image(h5.get(), image.data(), image.size()) != size) {
    throw TraceFileError(file + ": HDF5 error: H5Fget_file_image");
  }
  return image;
}

// Writes `bytes` to the new file `file` (O_EXCL) with plain POSIX writes; a failure (a full disk named as ENOSPC)
// throws TraceFileError naming the file and `what` ("trace", "checkpoint").
inline void write_new_file(const std::string& file, const std::vector<unsigned char>& bytes, const std::string& what) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw TraceFileError(file + ": cannot create the " + what + ": " + std::strerror(errno));
  }
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      ::close(fd);
      throw TraceFileError(file + ": cannot write the " + what + " (" + std::to_string(bytes.size()) +
                           " bytes): " + std::strerror(err));
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) {
    throw TraceFileError(file + ": cannot write the " + what + ": " + std::strerror(errno));
  }
}

inline std::vector<std::string> link_names(hid_t loc, const std::string& where, const std::string& file) {
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

void write_trace_to(hid_t root, const Trace& trace, const std::string& file);
Trace read_trace_from(hid_t root, const std::string& file);

}  // namespace detail
}  // namespace wbaudit::sim
