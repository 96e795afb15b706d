#include "sim/precision/storage_format.hpp"

#include "util/text.hpp"

namespace wbaudit::sim {

std::vector<std::string> known_storage_format_names() {
  std::vector<std::string> names = known_format_names();
  for (auto& n : known_block_format_names()) {
    names.push_back(std::move(n));
  }
  return names;
}

StorageFormat storage_format_from_name(std::string_view name) {
  StorageFormat f;
  // The skip option may follow the base name or the format's own option; it is always written last.
  std::string base(name);
  bool skip = false;
  const std::string suffix = ":" + std::string(kSkipUnchangedBlocks);
  if (base.size() > suffix.size() && base.compare(base.size() - suffix.size(), suffix.size(), suffix) == 0) {
    skip = true;
    base.resize(base.size() - suffix.size());
  }
  const std::string_view stem = std::string_view(base).substr(0, base.find(':'));
  bool block_family = false;
  for (const auto& n : known_block_format_names()) {
    block_family = block_family || std::string_view(n).substr(0, n.find(':')) == stem;
  }
  if (!block_family) {
    if (skip || base.find(':') != std::string::npos) {
      (void)format_from_name(stem);  // an unknown base name is reported as such, listing the known names
      throw FormatError("format \"" + std::string(name) + "\": " + std::string(stem) +
                        " is a per-tensor format and takes no options (block formats take :floor, :rceil, :2d, :" +
                        std::string(kSkipUnchangedBlocks) + ")");
    }
    try {
      f.scalar = format_from_name(base);
    } catch (const FormatError&) {
      std::string known;
      for (const auto& n : known_storage_format_names()) {
        known += (known.empty() ? "" : ", ") + n;
      }
      throw FormatError("unknown format \"" + std::string(name) + "\"" +
                        util::did_you_mean(name, known_storage_format_names()) + " (known: " + known + ")");
    }
    f.name = base;
    return f;
  }
  try {
    f.blocks = block_format_from_name(base);
  } catch (const FormatError& e) {
    throw FormatError(std::string(e.what()) +
                      (skip ? "" : "; the write-back option is :" + std::string(kSkipUnchangedBlocks)));
  }
  f.block = true;
  f.scalar = f.blocks.element;
  f.options.skip_unchanged_blocks = skip;
  f.name = std::string(f.blocks.name) + (skip ? suffix : "");
  return f;
}

bool is_block_storage_name(std::string_view name) {
  try {
    return storage_format_from_name(name).block;
  } catch (const FormatError&) {
    return false;
  }
}

RowMajorShape row_major_shape(const std::vector<std::int64_t>& dims) {
  RowMajorShape s;
  if (dims.empty()) {
    s.rows = 1;
    s.cols = 1;
    return s;
  }
  s.cols = dims.back();
  s.rows = 1;
  for (std::size_t i = 0; i + 1 < dims.size(); ++i) {
    s.rows *= dims[i];
  }
  return s;
}

}  // namespace wbaudit::sim
