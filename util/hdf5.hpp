#pragma once
// The HDF5 handle: one owned identifier (file, group, dataset, dataspace, type, attribute), closed with the right
// function when it goes out of scope; a negative identifier is an error that names what failed.
#include <hdf5.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace wbaudit::util {

class Hdf5Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Hdf5Handle {
 public:
  Hdf5Handle() = default;  // holds nothing
  // Takes ownership of id; throws Hdf5Error(message) when id < 0.
  Hdf5Handle(hid_t id, herr_t (*close)(hid_t), const std::string& message) : m_id(id), m_close(close) {
    if (id < 0) {
      throw Hdf5Error(message);
    }
  }
  Hdf5Handle(const Hdf5Handle&) = delete;
  Hdf5Handle& operator=(const Hdf5Handle&) = delete;
  Hdf5Handle(Hdf5Handle&& other) noexcept : m_id(other.m_id), m_close(other.m_close) { other.m_id = -1; }
  Hdf5Handle& operator=(Hdf5Handle&& other) noexcept {
    std::swap(m_id, other.m_id);
    std::swap(m_close, other.m_close);
    return *this;
  }
  ~Hdf5Handle() {
    if (m_id >= 0 && m_close != nullptr) {
      m_close(m_id);
    }
  }
  hid_t get() const { return m_id; }

 private:
  hid_t m_id = -1;
  herr_t (*m_close)(hid_t) = nullptr;
};

}  // namespace wbaudit::util
