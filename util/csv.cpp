#include "util/csv.hpp"

namespace wbaudit::util {

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) {
    return text;
  }
  std::string out = "\"";
  for (const char c : text) {
    out += c == '"' ? std::string("\"\"") : std::string(1, c);
  }
  return out + "\"";
}

CsvWriter::CsvWriter(const std::vector<std::string>& header) {
  row(header);
}

CsvWriter& CsvWriter::row(const std::vector<std::string>& fields) {
  for (const auto& f : fields) {
    field(f);
  }
  return end_row();
}

void CsvWriter::separator() {
  if (m_row_open) {
    m_out << ',';
  }
  m_row_open = true;
}

CsvWriter& CsvWriter::field(const std::string& text) {
  separator();
  m_out << csv_field(text);
  return *this;
}

CsvWriter& CsvWriter::number(double x, int precision) {
  separator();
  m_out << number_text(x, precision);
  return *this;
}

CsvWriter& CsvWriter::integer(long long value) {
  separator();
  m_out << value;
  return *this;
}

CsvWriter& CsvWriter::end_row() {
  m_out << '\n';
  m_row_open = false;
  return *this;
}

}  // namespace wbaudit::util
