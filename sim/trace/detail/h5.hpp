#pragma once
// HDF5 C API helpers shared by the trace and checkpoint files: owned identifiers, fixed little-endian file types,
// attributes and 1-D/2-D datasets, with errors that name the file.
#include <fcntl.h>
#include <hdf5.h>
#include <libdeflate.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/trace/detail/trace_file.hpp"
#include "sim/trace/trace_error.hpp"

namespace wbaudit::sim {
struct Trace;
struct GroupTrace;
struct MarginLayout;
namespace detail {

using sim::TraceFileError;

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
  Handle(Handle&& other) noexcept : m_id(other.m_id), m_close(other.m_close) { other.m_id = -1; }
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      if (m_id >= 0) {
        m_close(m_id);
      }
      m_id = other.m_id;
      m_close = other.m_close;
      other.m_id = -1;
    }
    return *this;
  }
  // Closes now, returning the close's status (a flush error surfaces here instead of being ignored).
  herr_t close() {
    const herr_t status = m_id >= 0 ? m_close(m_id) : 0;
    m_id = -1;
    return status;
  }
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

// A dataset's values as the finished file's writer takes them: all in memory (data), or, when data is null, read a
// block at a time by read(first, count, out) (values [first, first + count) of the dataset viewed flat, row-major):
// the partial file of a streamed trace, which TraceWriter::finish writes out without holding a whole dataset.
template <class T>
struct DatasetValues {
  const T* data = nullptr;
  std::size_t size = 0;  // values in the dataset
  std::function<void(std::size_t first, std::size_t count, T* out)> read;
};

// Writes `values` into the dataset `set`, created with its full extent (rank 1, or rank 2 with rows of `width`): from
// memory in one write of the whole extent, or read and written a block at a time, each block whole rows and, when
// `align` > 0, ending on a multiple of `align` values (a 1-D dataset's chunk): the blocks cover the dataset in order,
// so HDF5 meets the chunks in the order one whole write meets them (same chunk cache evictions, same file space
// allocations, the same bytes). `block_bytes` bounds the values held at once (at least one row, or one `align`).
template <class T>
inline void write_values(hid_t set, const DatasetValues<T>& values, int rank, hsize_t width, hsize_t align,
                         std::size_t block_bytes, const char* name, const std::string& file) {
  if (values.size == 0) {
    return;
  }
  if (values.data != nullptr) {
    check(H5Dwrite(set, native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data),
          std::string("write dataset ") + name, file);
    return;
  }
  const hsize_t unit = align > 0 ? align : width;  // a block is a whole number of units
  const hsize_t units = std::max<hsize_t>(1, block_bytes / sizeof(T) / unit);
  const hsize_t block = units * unit;
  std::vector<T> buffer(static_cast<std::size_t>(std::min<hsize_t>(block, values.size)));
  Handle space(H5Dget_space(set), H5Sclose, std::string("H5Dget_space ") + name, file);
  for (hsize_t first = 0; first < values.size; first += block) {
    const hsize_t count = std::min<hsize_t>(block, values.size - first);
    values.read(static_cast<std::size_t>(first), static_cast<std::size_t>(count), buffer.data());
    const hsize_t start[2] = {rank == 2 ? first / width : first, 0};
    const hsize_t extent[2] = {rank == 2 ? count / width : count, width};
    check(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, extent, nullptr),
          std::string("select ") + name, file);
    Handle memory(H5Screate_simple(rank, extent, nullptr), H5Sclose, "H5Screate_simple", file);  // the block's shape
    check(H5Dwrite(set, native_type<T>(), memory.get(), space.get(), H5P_DEFAULT, buffer.data()),
          std::string("write dataset ") + name, file);
  }
}

template <class T>
inline DatasetValues<T> in_memory(const std::vector<T>& data) {
  return DatasetValues<T>{data.data(), data.size(), {}};
}

template <class T>
inline void write_dataset(hid_t loc, const char* name, const DatasetValues<T>& values, const std::vector<hsize_t>& dims,
                          const std::string& file, std::size_t block_bytes = kFinishBlockBytes) {
  Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose, "H5Screate_simple",
               file);
  Handle dcpl(untimed_plist(H5P_DATASET_CREATE), H5Pclose, "creation property list", file);
  Handle set(H5Dcreate2(loc, name, file_type<T>(), space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT), H5Dclose,
             std::string("create dataset ") + name, file);
  write_values(set.get(), values, static_cast<int>(dims.size()), dims.size() == 2 ? dims[1] : 1, 0, block_bytes, name,
               file);
}

template <class T>
inline void write_dataset(hid_t loc, const char* name, const std::vector<T>& data, const std::vector<hsize_t>& dims,
                          const std::string& file) {
  write_dataset(loc, name, in_memory(data), dims, file);
}

// A 1-D dataset stored chunked and deflated (shuffle + deflate level 6): for the large sparse datasets.
template <class T>
inline void write_compressed_vector(hid_t loc, const char* name, const DatasetValues<T>& values,
                                    const std::string& file, std::size_t block_bytes = kFinishBlockBytes) {
  if (values.size == 0) {
    write_dataset(loc, name, std::vector<T>{}, {0}, file);
    return;
  }
  const hsize_t n = values.size;
  Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose, "H5Screate_simple", file);
  Handle dcpl(untimed_plist(H5P_DATASET_CREATE), H5Pclose, "creation property list", file);
  const hsize_t chunk = n < 65536 ? n : 65536;
  check(H5Pset_chunk(dcpl.get(), 1, &chunk), std::string("chunk dataset ") + name, file);
  check(H5Pset_shuffle(dcpl.get()), std::string("shuffle filter for ") + name, file);
  check(H5Pset_deflate(dcpl.get(), 6), std::string("deflate filter for ") + name, file);
  Handle set(H5Dcreate2(loc, name, file_type<T>(), space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT), H5Dclose,
             std::string("create dataset ") + name, file);
  write_values(set.get(), values, 1, 1, chunk, block_bytes, name, file);
}

template <class T, class Allocator>
inline void write_compressed_vector(hid_t loc, const char* name, const std::vector<T, Allocator>& data,
                                    const std::string& file) {
  write_compressed_vector(loc, name, DatasetValues<T>{data.data(), data.size(), {}}, file);
}

// A [rows, width] dataset stored one row per chunk with shuffle + deflate (level 6): schema 3's per-step histograms,
// which a reader takes one recorded step at a time. Empty (rows 0): contiguous, like write_dataset.
template <class T>
inline void write_compressed_rows(hid_t loc, const char* name, const DatasetValues<T>& values, hsize_t rows,
                                  hsize_t width, const std::string& file, std::size_t block_bytes = kFinishBlockBytes) {
  if (values.size != rows * width) {
    throw TraceFileError(file + ": " + name + " holds " + std::to_string(values.size) + " values for " +
                         std::to_string(rows) + " rows of " + std::to_string(width));
  }
  if (rows == 0 || width == 0) {
    write_dataset(loc, name, values, {rows, width}, file);
    return;
  }
  const hsize_t dims[2] = {rows, width}, chunk[2] = {1, width};
  Handle space(H5Screate_simple(2, dims, nullptr), H5Sclose, "H5Screate_simple", file);
  Handle dcpl(untimed_plist(H5P_DATASET_CREATE), H5Pclose, "creation property list", file);
  check(H5Pset_chunk(dcpl.get(), 2, chunk), std::string("chunk dataset ") + name, file);
  check(H5Pset_shuffle(dcpl.get()), std::string("shuffle filter for ") + name, file);
  check(H5Pset_deflate(dcpl.get(), 6), std::string("deflate filter for ") + name, file);
  Handle set(H5Dcreate2(loc, name, file_type<T>(), space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT), H5Dclose,
             std::string("create dataset ") + name, file);
  write_values(set.get(), values, 2, width, 0, block_bytes, name, file);
}

template <class T>
inline void write_compressed_rows(hid_t loc, const char* name, const std::vector<T>& data, hsize_t rows, hsize_t width,
                                  const std::string& file) {
  write_compressed_rows(loc, name, in_memory(data), rows, width, file);
}

template <class T>
inline void write_vector(hid_t loc, const char* name, const DatasetValues<T>& values, const std::string& file,
                         std::size_t block_bytes = kFinishBlockBytes) {
  write_dataset(loc, name, values, {static_cast<hsize_t>(values.size)}, file, block_bytes);
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

// ---- Datasets with a row dimension (per recorded step), read and written a block of rows at a time ----

// The extent of a dataset of rank 1 or 2: rows (first dimension) and the elements per row (1 for rank 1).
struct RowExtent {
  hsize_t rows = 0, width = 1;
};

inline RowExtent row_extent(hid_t set, const std::string& where, const std::string& file) {
  Handle space(H5Dget_space(set), H5Sclose, "H5Dget_space " + where, file);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 1 || rank > 2) {
    throw TraceFileError(file + ": " + where + " has rank " + std::to_string(rank));
  }
  hsize_t dims[2] = {0, 1};
  check(H5Sget_simple_extent_dims(space.get(), dims, nullptr), "extent of " + where, file);
  return RowExtent{dims[0], rank == 2 ? dims[1] : 1};
}

// Reads `count` elements starting at element `first` of a dataset, viewed as flat (row-major), into out.
template <class T>
void read_elements(hid_t set, hsize_t first, hsize_t count, T* out, const std::string& where, const std::string& file) {
  if (count == 0) {
    return;
  }
  Handle space(H5Dget_space(set), H5Sclose, "H5Dget_space " + where, file);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  hsize_t dims[2] = {0, 1};
  check(H5Sget_simple_extent_dims(space.get(), dims, nullptr), "extent of " + where, file);
  if (rank == 2) {
    // rows [first / width, (first + count) / width) in full: callers read whole rows of a 2-D dataset
    const hsize_t width = dims[1];
    if (width == 0 || first % width != 0 || count % width != 0) {
      throw TraceFileError(file + ": " + where + ": a read of " + std::to_string(count) + " elements at " +
                           std::to_string(first) + " is not whole rows of " + std::to_string(width));
    }
    const hsize_t start[2] = {first / width, 0}, block[2] = {count / width, width};
    check(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, block, nullptr), "select " + where, file);
    // a memory space of the selection's own shape: HDF5 then copies whole rows (a 1-D memory space against the 2-D
    // selection sent it through its element-wise selection iterator, ~10% of finishing a trace)
    Handle memory(H5Screate_simple(2, block, nullptr), H5Sclose, "H5Screate_simple", file);
    check(H5Dread(set, native_type<T>(), memory.get(), space.get(), H5P_DEFAULT, out), "read dataset " + where, file);
    return;
  }
  check(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, &first, nullptr, &count, nullptr), "select " + where, file);
  Handle memory(H5Screate_simple(1, &count, nullptr), H5Sclose, "H5Screate_simple", file);
  check(H5Dread(set, native_type<T>(), memory.get(), space.get(), H5P_DEFAULT, out), "read dataset " + where, file);
}

// A dataset growing by rows: unlimited first dimension, `width` elements per row (rank 1 when width is 0),
// `chunk_rows` rows per chunk, shuffle + deflate when compressed, no chunk cache (a written chunk is not kept in
// memory: the writer's memory must not grow with the rows).
template <class T>
Handle create_row_dataset(hid_t loc, const std::string& name, hsize_t width, hsize_t chunk_rows, bool compressed,
                          const std::string& file) {
  const int rank = width == 0 ? 1 : 2;
  const hsize_t dims[2] = {0, width}, maxdims[2] = {H5S_UNLIMITED, width}, chunk[2] = {chunk_rows, width};
  Handle space(H5Screate_simple(rank, dims, maxdims), H5Sclose, "H5Screate_simple", file);
  Handle dcpl(untimed_plist(H5P_DATASET_CREATE), H5Pclose, "creation property list", file);
  check(H5Pset_chunk(dcpl.get(), rank, chunk), "chunk dataset " + name, file);
  if (compressed) {
    check(H5Pset_shuffle(dcpl.get()), "shuffle filter for " + name, file);
    check(H5Pset_deflate(dcpl.get(), 1), "deflate filter for " + name, file);
  }
  Handle dapl(H5Pcreate(H5P_DATASET_ACCESS), H5Pclose, "access property list", file);
  check(H5Pset_chunk_cache(dapl.get(), 0, 0, H5D_CHUNK_CACHE_W0_DEFAULT), "chunk cache of " + name, file);
  return Handle(H5Dcreate2(loc, name.c_str(), file_type<T>(), space.get(), H5P_DEFAULT, dcpl.get(), dapl.get()),
                H5Dclose, "create dataset " + name, file);
}

// Opens a dataset of a partial trace for appending (no chunk cache, as created).
inline Handle open_row_dataset(hid_t loc, const std::string& name, const std::string& where, const std::string& file) {
  if (!has_link(loc, name)) {
    throw TraceFileError(file + ": partial trace: missing dataset " + where + name);
  }
  Handle dapl(H5Pcreate(H5P_DATASET_ACCESS), H5Pclose, "access property list", file);
  check(H5Pset_chunk_cache(dapl.get(), 0, 0, H5D_CHUNK_CACHE_W0_DEFAULT), "chunk cache of " + where + name, file);
  return Handle(H5Dopen2(loc, name.c_str(), dapl.get()), H5Dclose, "open dataset " + where + name, file);
}

// Sets the dataset's row count to `rows` (growing or cutting it).
inline void set_rows(hid_t set, hsize_t rows, const std::string& where, const std::string& file) {
  RowExtent e = row_extent(set, where, file);
  const hsize_t dims[2] = {rows, e.width};
  check(H5Dset_extent(set, dims), "extend " + where, file);
}

// Writes `nrows` rows of a dataset made by create_row_dataset with `width` elements per row (0: rank 1, as created)
// at row `at`, growing it to at + nrows rows; `type`: data's memory type. The streaming writer knows every dataset's
// shape, so HDF5 is not asked for the extent first (a dataspace per dataset per recorded step).
inline void write_rows(hid_t set, hsize_t at, hsize_t nrows, hsize_t width, hid_t type, const void* data,
                       const std::string& where, const std::string& file) {
  if (nrows == 0) {
    return;
  }
  const int rank = width == 0 ? 1 : 2;
  const hsize_t dims[2] = {at + nrows, width};
  check(H5Dset_extent(set, dims), "extend " + where, file);
  Handle space(H5Dget_space(set), H5Sclose, "H5Dget_space " + where, file);
  const hsize_t start[2] = {at, 0}, block[2] = {nrows, width};
  check(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, block, nullptr), "select " + where, file);
  Handle memory(H5Screate_simple(rank, block, nullptr), H5Sclose, "H5Screate_simple", file);
  check(H5Dwrite(set, type, memory.get(), space.get(), H5P_DEFAULT, data), "write " + where, file);
}

// One chunk of `nbytes` bytes (elements of `size` bytes) of a dataset with shuffle + deflate (create_row_dataset's
// filters), as HDF5's filter pipeline reads it back: H5Z's shuffle transposes the bytes of the elements (byte j of
// element i to j * n + i; nothing to do for 1-byte elements or a single element), then a zlib stream, which
// H5Z_filter_deflate inflates. The stream is libdeflate's at level 1 (1.4-1.6x faster than zlib's compress2 on a
// margin histogram's row, about as small), so the bytes differ from those HDF5's own filter would store: only the
// partial file holds them, and finish() writes every value again through HDF5's filters. `shuffled`: nbytes of
// scratch; `out`: row_chunk_bound(nbytes) bytes, `out_bytes` set to the chunk's size. Returns false if the
// compressor cannot be allocated or the stream does not fit (neither should happen). Pure computation on the
// calling thread's own compressor, so chunks are made in parallel.
inline std::size_t row_chunk_bound(std::size_t nbytes) {
  return libdeflate_zlib_compress_bound(nullptr, nbytes);
}
inline bool shuffle_deflate(const unsigned char* in, std::size_t nbytes, std::size_t size, unsigned char* shuffled,
                            unsigned char* out, std::size_t& out_bytes) {
  const std::size_t n = size > 0 ? nbytes / size : 0;
  const unsigned char* src = in;
  if (size > 1 && n > 1) {
    for (std::size_t j = 0; j < size; ++j) {  // byte plane by byte plane: sequential stores (twice as fast)
      unsigned char* plane = shuffled + j * n;
      const unsigned char* from = in + j;
      for (std::size_t i = 0; i < n; ++i) {
        plane[i] = from[i * size];
      }
    }
    // the bytes past the last whole element stay where they are (a row is whole elements: none)
    std::memcpy(shuffled + n * size, in + n * size, nbytes - n * size);
    src = shuffled;
  }
  struct Free {
    void operator()(libdeflate_compressor* c) const { libdeflate_free_compressor(c); }
  };
  thread_local const std::unique_ptr<libdeflate_compressor, Free> compressor(libdeflate_alloc_compressor(1));
  if (!compressor) {
    return false;
  }
  out_bytes = libdeflate_zlib_compress(compressor.get(), src, nbytes, out, row_chunk_bound(nbytes));
  return out_bytes > 0;
}

// Stores chunk r of `nrows` chunks (chunks[r], sizes[r] bytes, filtered as shuffle_deflate makes them) as row at + r
// of a compressed dataset of create_row_dataset (one row of `width` per chunk), growing it to at + nrows rows:
// H5Dwrite_chunk with the filter mask 0 (every filter applied), HDF5 neither copying nor filtering the rows.
inline void write_row_chunks(hid_t set, hsize_t at, hsize_t nrows, hsize_t width, const unsigned char* const* chunks,
                             const std::size_t* sizes, const std::string& where, const std::string& file) {
  if (nrows == 0) {
    return;
  }
  const hsize_t dims[2] = {at + nrows, width};
  check(H5Dset_extent(set, dims), "extend " + where, file);
  for (hsize_t r = 0; r < nrows; ++r) {
    const hsize_t offset[2] = {at + r, 0};
    check(H5Dwrite_chunk(set, H5P_DEFAULT, 0, offset, sizes[r], chunks[r]), "write chunk of " + where, file);
  }
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
    if (n < 0 && errno == EINTR) {
      continue;
    }
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

// The canonical layout of a finished trace (docs/trace-format.md), in the order the file is written: the root
// attributes, the per-step root datasets and group order, each group, then validation, replay and (schema 3)
// `complete`. write_trace_to writes all of it; the streaming writer's finish writes the same, a group at a time.
// pairs / margin: whether some group has schema 2's joint pairs / schema 3's margin histogram (their layout
// attributes).
void write_trace_header(hid_t root, const Trace& trace, const std::string& file, bool pairs, bool margin);
void write_margin_layout(hid_t root, const MarginLayout& margin, const std::string& file);
void write_trace_steps(hid_t root, const Trace& trace, const std::string& file);
// Where write_trace_group takes a group's per-step values when not from its GroupTrace's vectors: the partial file of
// a streamed trace (TraceWriter::finish), read a block of at most block_bytes at a time. int64s / doubles / floats
// (path, width, first, count, out): values [first, first + count) of the group's dataset `path` ("nonzero",
// "joint/margin", "projected/e4m3/expected/stochastic/erased", ...) of `width` values per recorded step, viewed flat,
// row-major (TraceReader::read_group_values); `steps`: the recorded steps.
struct GroupValues {
  std::size_t steps = 0;
  std::size_t block_bytes = kFinishBlockBytes;
  std::function<void(const std::string&, std::size_t, std::size_t, std::size_t, std::int64_t*)> int64s;
  std::function<void(const std::string&, std::size_t, std::size_t, std::size_t, double*)> doubles;
  std::function<void(const std::string&, std::size_t, std::size_t, std::size_t, float*)> floats;
};
// With `from`, g gives the group's header and which datasets it holds (its rows of one recorded step, as the partial
// file holds them), and every per-step dataset is written from `from` a block at a time (schema 2's joint pairs are
// written from memory only).
void write_trace_group(hid_t groups, const Trace& trace, const GroupTrace& g, const std::string& file,
                       const GroupValues* from = nullptr);
void write_trace_tail(hid_t root, const Trace& trace, const std::string& file);
void write_trace_to(hid_t root, const Trace& trace, const std::string& file);
Trace read_trace_from(hid_t root, const std::string& file);

}  // namespace detail
}  // namespace wbaudit::sim
