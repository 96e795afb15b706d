#pragma once
// CSV cells and rows shared by every table wbaudit writes (summary.csv, the skill report's tables, loss_summary.csv,
// grid.csv): RFC 4180 quoting, numbers by util::number_text (NaN empty, infinities "inf"/"-inf").
#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

#include "util/text.hpp"

namespace wbaudit::util {

// RFC 4180 quoting: a field holding a comma, quote or newline is quoted, inner quotes doubled.
std::string csv_field(const std::string& text);

// A number at round-trip precision (17 significant digits); NaN is an empty field (missing), infinities "inf".
inline std::string csv_number(double x) {
  return number_text(x, 17);
}

// A table built row by row: the header first, then rows of fields (already quoted with csv_field / csv_number, or
// added with the typed helpers). text() is the file's content.
class CsvWriter {
 public:
  explicit CsvWriter(const std::vector<std::string>& header);
  // One row of fields, each quoted as needed.
  CsvWriter& row(const std::vector<std::string>& fields);
  // A row under construction: field() appends text (quoted), number() a double, integer() an integer.
  CsvWriter& field(const std::string& text);
  CsvWriter& number(double x, int precision = 17);
  CsvWriter& integer(long long value);
  CsvWriter& end_row();
  std::string text() const { return m_out.str(); }

 private:
  std::ostringstream m_out;
  bool m_row_open = false;
  void separator();
};

}  // namespace wbaudit::util
