#include "runners/report/document.hpp"

#include <cctype>
#include <sstream>

#include "runners/report/figure.hpp"

namespace wbaudit::runners::report {
namespace {

std::string md_cell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|') {
      out += "\\|";
    } else if (c == '\n') {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string anchor_of(const std::string& heading) {
  std::string out;
  for (char c : heading) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if ((c == ' ' || c == '-') && !out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  while (!out.empty() && out.back() == '-') {
    out.pop_back();
  }
  return out;
}

void Document::heading(const std::string& text) {
  m_blocks.push_back({Kind::heading, text, {}, {}});
}
void Document::subheading(const std::string& text) {
  m_blocks.push_back({Kind::subheading, text, {}, {}});
}
void Document::paragraph(const std::string& text) {
  m_blocks.push_back({Kind::paragraph, text, {}, {}});
}
void Document::table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  m_blocks.push_back({Kind::table, {}, header, rows});
}
void Document::figure(const std::string& stem, const std::string& caption) {
  m_blocks.push_back({Kind::figure, caption, {stem}, {}});
}
void Document::links(const std::string& lead, const std::vector<std::pair<std::string, std::string>>& label_href) {
  Block b{Kind::links, lead, {}, {}};
  for (auto& [label, href] : label_href) {
    b.rows.push_back({label, href});
  }
  m_blocks.push_back(b);
}

std::string Document::markdown() const {
  std::ostringstream md;
  md << "# " << m_title << "\n\nContents:";
  bool first = true;
  for (auto& b : m_blocks) {
    if (b.kind != Kind::heading) {
      continue;
    }
    md << (first ? " " : " · ") << "[" << b.text << "](#" << anchor_of(b.text) << ")";
    first = false;
  }
  md << "\n";
  for (auto& b : m_blocks) {
    switch (b.kind) {
      case Kind::heading:
        md << "\n## " << b.text << "\n";
        break;
      case Kind::subheading:
        md << "\n### " << b.text << "\n";
        break;
      case Kind::paragraph:
        md << "\n" << b.text << "\n";
        break;
      case Kind::table: {
        md << "\n|";
        for (auto& h : b.header) {
          md << " " << md_cell(h) << " |";
        }
        md << "\n|";
        for (std::size_t i = 0; i < b.header.size(); ++i) {
          md << "---|";
        }
        md << "\n";
        for (auto& row : b.rows) {
          md << "|";
          for (auto& cell : row) {
            md << " " << md_cell(cell) << " |";
          }
          md << "\n";
        }
        break;
      }
      case Kind::figure:
        md << "\n![" << md_cell(b.text) << "](figures/" << b.header[0] << ".png)\n\n*" << b.text << "*\n";
        break;
      case Kind::links:
        md << "\n" << b.text;
        for (std::size_t i = 0; i < b.rows.size(); ++i) {
          md << (i ? ", " : " ") << "[" << b.rows[i][0] << "](" << b.rows[i][1] << ")";
        }
        md << "\n";
        break;
    }
  }
  return md.str();
}

std::string Document::html() const {
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" << html_escape(m_title)
    << "</title>\n<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
       "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;"
       "text-align:left}th{background:#f0f0f0}figure{margin:1.5em 0}figcaption{font-size:13px;color:#555}"
       "nav{font-size:14px}</style></head><body>\n<h1>"
    << html_escape(m_title) << "</h1>\n<nav>Contents:";
  bool first = true;
  for (auto& b : m_blocks) {
    if (b.kind != Kind::heading) {
      continue;
    }
    h << (first ? " " : " · ") << "<a href=\"#" << anchor_of(b.text) << "\">" << html_escape(b.text) << "</a>";
    first = false;
  }
  h << "</nav>\n";
  for (auto& b : m_blocks) {
    switch (b.kind) {
      case Kind::heading:
        h << "<h2 id=\"" << anchor_of(b.text) << "\">" << html_escape(b.text) << "</h2>\n";
        break;
      case Kind::subheading:
        h << "<h3>" << html_escape(b.text) << "</h3>\n";
        break;
      case Kind::paragraph:
        h << "<p>" << html_escape(b.text) << "</p>\n";
        break;
      case Kind::table: {
        h << "<table><tr>";
        for (auto& c : b.header) {
          h << "<th>" << html_escape(c) << "</th>";
        }
        h << "</tr>\n";
        for (auto& row : b.rows) {
          h << "<tr>";
          for (auto& c : row) {
            h << "<td>" << html_escape(c) << "</td>";
          }
          h << "</tr>\n";
        }
        h << "</table>\n";
        break;
      }
      case Kind::figure:
        h << "<figure><img src=\"figures/" << b.header[0] << ".svg\" alt=\"" << html_escape(b.text) << "\"><figcaption>"
          << html_escape(b.text) << "</figcaption></figure>\n";
        break;
      case Kind::links:
        h << "<p>" << html_escape(b.text);
        for (std::size_t i = 0; i < b.rows.size(); ++i) {
          h << (i ? ", " : " ") << "<a href=\"" << html_escape(b.rows[i][1]) << "\">" << html_escape(b.rows[i][0])
            << "</a>";
        }
        h << "</p>\n";
        break;
    }
  }
  h << "</body></html>\n";
  return h.str();
}

}  // namespace wbaudit::runners::report
