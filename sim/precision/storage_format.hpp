#pragma once
// The formats a tensor can be held in, both families behind one name: per-tensor formats (format.hpp: fp32, bf16,
// e4m3, ..., intK) and block-scaled formats (block_format.hpp: mxfp8_e4m3, ..., mxint8, each :floor or :rceil; nvfp4,
// nvfp4:2d). A block format may carry the write-back option `skip_unchanged_blocks` as a further `:`-separated option
// ("mxfp4_e2m1:rceil:skip_unchanged_blocks"). Sweep specs (target.format, group_formats, replay.format), the engine,
// `wbaudit formats` / `wbaudit round` and the Python module resolve names here.
#include <string>
#include <string_view>
#include <vector>

#include "sim/precision/block_format.hpp"
#include "sim/precision/block_writeback.hpp"
#include "sim/precision/format.hpp"

namespace wbaudit::sim {

inline constexpr std::string_view kSkipUnchangedBlocks = "skip_unchanged_blocks";

struct StorageFormat {
  std::string name;               // canonical: "e4m3", "mxfp4_e2m1:rceil", "nvfp4:2d:skip_unchanged_blocks"
  bool block = false;             // a block-scaled format
  FormatSpec scalar;              // per-tensor formats: the format; block formats: the element format
  BlockFormatSpec blocks;         // block formats only
  BlockWritebackOptions options;  // block formats only (skip_unchanged_blocks)
};

// Resolves a name of either family. Throws FormatError: an unknown name lists the known names of both families; an
// unknown option of a block format names it and the known options; skip_unchanged_blocks on a per-tensor format is
// refused (it has no blocks).
StorageFormat storage_format_from_name(std::string_view name);
// Every canonical name: the per-tensor formats, then the block formats (without the skip option).
std::vector<std::string> known_storage_format_names();
bool is_block_storage_name(std::string_view name);  // no throw: false for a per-tensor or unknown name

// The row-major shape of a tensor with dimensions dims for the block layout: cols = the last dimension, rows = the
// product of the others (a 1-D tensor is one row; a scalar one element).
RowMajorShape row_major_shape(const std::vector<std::int64_t>& dims);

}  // namespace wbaudit::sim
