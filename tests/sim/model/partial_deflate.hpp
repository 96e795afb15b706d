#pragma once
// WBAUDIT_PARTIAL_DEFLATE (how the trace writer stores a partial file's histogram rows, docs/trace-format.md) set for a
// scope and restored after it, also when an ASSERT leaves the test early; child processes started within inherit it.
#include <cstdlib>
#include <optional>
#include <string>

namespace wbaudit::test {

class PartialDeflate {
 public:
  explicit PartialDeflate(const char* value) {  // nullptr: unset
    const char* old = std::getenv("WBAUDIT_PARTIAL_DEFLATE");
    if (old != nullptr) {
      m_old = old;
    }
    set(value);
  }
  ~PartialDeflate() { set(m_old ? m_old->c_str() : nullptr); }
  PartialDeflate(const PartialDeflate&) = delete;
  PartialDeflate& operator=(const PartialDeflate&) = delete;

  static void set(const char* value) {
    if (value == nullptr) {
      ::unsetenv("WBAUDIT_PARTIAL_DEFLATE");
    } else {
      ::setenv("WBAUDIT_PARTIAL_DEFLATE", value, 1);
    }
  }

 private:
  std::optional<std::string> m_old;
};

}  // namespace wbaudit::test
