#pragma once
// One source for a report's Markdown and HTML: the report is built once as a list of blocks (headings, paragraphs,
// tables, figures, link lines) and rendered to both, so the two never say different things. Both renderings open
// with a contents list of the level-2 headings.
#include <string>
#include <utility>
#include <vector>

namespace wbaudit::runners::report {

class Document {
 public:
  explicit Document(std::string title) : m_title(std::move(title)) {}
  void heading(const std::string& text);  // a level-2 section (listed in the contents)
  void subheading(const std::string& text);
  void paragraph(const std::string& text);
  void table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);
  void figure(const std::string& stem, const std::string& caption);  // figures/STEM.png (md), .svg (html)
  void links(const std::string& lead, const std::vector<std::pair<std::string, std::string>>& label_href);

  std::string markdown() const;
  std::string html() const;

 private:
  enum class Kind { heading, subheading, paragraph, table, figure, links };
  struct Block {
    Kind kind;
    std::string text;
    std::vector<std::string> header;
    std::vector<std::vector<std::string>> rows;  // table rows; links: {label, href}
  };
  std::string m_title;
  std::vector<Block> m_blocks;
};

// "Crossings of the erased fraction" -> "crossings-of-the-erased-fraction" (the anchor both renderings use).
std::string anchor_of(const std::string& heading);

}  // namespace wbaudit::runners::report
