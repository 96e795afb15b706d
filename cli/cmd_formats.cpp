// wbaudit formats [--json]: the built-in number formats and their parameters (docs/science.md §2, docs/formats.md).
#include <charconv>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli/commands.hpp"
#include "sim/precision/block_format.hpp"
#include "sim/precision/format.hpp"

namespace wbaudit::cli {
namespace {

std::string shortest(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string specials_of(const sim::FormatSpec& f) {
  if (f.kind == sim::FormatKind::integer) {
    return "none (code -2^(K-1) unused)";
  }
  if (f.has_inf) {
    return "inf, NaN";
  }
  if (f.has_nan) {
    return "NaN = S.1111.111 only (no inf)";
  }
  return "none (all codes finite)";
}

nlohmann::json block_row(const std::string& name) {
  const sim::BlockFormatSpec f = sim::block_format_from_name(name);
  const bool mx = f.family == sim::BlockFamily::mx;
  const bool integer = f.element.kind == sim::FormatKind::integer;
  nlohmann::json row = {{"name", name},
                        {"family", mx ? "mx" : "nvfp4"},
                        {"element", integer ? std::string("int8 (levels -127..127 times 2^-6)") : f.element.name},
                        {"element_bits", f.element.bits},
                        {"max_elem", f.max_elem},
                        {"layout", f.tiles_2d ? "16x16 tiles" : std::to_string(f.block_size) + " along rows"},
                        {"block_size", f.block_size},
                        {"tiles_2d", f.tiles_2d}};
  if (mx) {
    row["scale"] = "E8M0 2^E, E in [-127, 127]";
    row["scale_rule"] = f.rule == sim::ScaleRule::floor ? "floor" : "rceil";
    row["emax_elem"] = f.emax_elem;
  } else {
    row["scale"] = "E4M3 block scale s_b, fp32 tensor scale S_enc = 2688 / amax";
    row["scale_rule"] = "s_b = RNE_e4m3(amax_b * S_enc / 6)";
  }
  return row;
}

}  // namespace

void add_formats_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand("formats", "The built-in number formats and their parameters");
  cmd->add_flag("--json", *json, "Machine-readable output");
  cmd->footer(
      "Floating formats round to nearest (ties to even) or stochastically; overflow saturates to max finite.\n"
      "intK holds scale * n, n in [-(2^(K-1)-1), 2^(K-1)-1]; the scale is per tensor (values shown for scale 1).\n"
      "Block-scaled formats (second table) hold blocks of elements sharing a scale recomputed at every write-back;\n"
      "options: MX :floor (default, OCP) or :rceil (NVIDIA); nvfp4:2d (16x16 tiles); any block format\n"
      ":skip_unchanged_blocks (blocks whose update is all zero are not re-quantized).\n"
      "See docs/formats.md.\n"
      "Examples:\n"
      "  wbaudit formats\n"
      "  wbaudit formats --json");
  cmd->callback([json] {
    std::ostringstream out;
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& name : sim::known_format_names()) {
      const sim::FormatSpec f = sim::format_from_name(name);
      const bool integer = f.kind == sim::FormatKind::integer;
      nlohmann::json row = {{"name", name},
                            {"kind", integer ? "integer" : "floating"},
                            {"bits", f.bits},
                            {"max_finite", f.max_finite},
                            {"min_normal", f.min_normal},
                            {"min_subnormal", f.min_subnormal},
                            {"specials", specials_of(f)}};
      if (integer) {
        row["max_level"] = f.int_max_level;
        row["scale"] = "per tensor; values shown for scale 1 (multiply by the scale)";
      } else {
        row["exp_bits"] = f.exp_bits;
        row["man_bits"] = f.man_bits;
        row["bias"] = f.bias;
        row["subnormals"] = f.subnormals;
      }
      rows.push_back(row);
    }
    nlohmann::json block_rows = nlohmann::json::array();
    for (const auto& name : sim::known_block_format_names()) {
      block_rows.push_back(block_row(name));
    }
    if (*json) {
      out << nlohmann::json{{"formats", rows}, {"block_formats", block_rows}}.dump(2) << "\n";
    } else {
      char line[256];
      std::snprintf(line, sizeof line, "%-6s %-9s %4s %3s %3s %5s  %-24s %-24s %-24s %s\n", "name", "kind", "bits", "E",
                    "M", "bias", "max finite", "min normal", "min subnormal", "specials");
      out << line;
      for (const auto& r : rows) {
        const bool integer = r["kind"] == "integer";
        const std::string e = integer ? "-" : std::to_string(r["exp_bits"].get<int>());
        const std::string m = integer ? "-" : std::to_string(r["man_bits"].get<int>());
        const std::string bias = integer ? "-" : std::to_string(r["bias"].get<int>());
        const std::string max =
            integer ? std::to_string(r["max_level"].get<int>()) + " * scale" : shortest(r["max_finite"].get<double>());
        const std::string min_normal = integer ? "1 * scale" : shortest(r["min_normal"].get<double>());
        const std::string min_sub = integer ? "1 * scale" : shortest(r["min_subnormal"].get<double>());
        std::snprintf(line, sizeof line, "%-6s %-9s %4d %3s %3s %5s  %-24s %-24s %-24s %s\n",
                      r["name"].get<std::string>().c_str(), r["kind"].get<std::string>().c_str(), r["bits"].get<int>(),
                      e.c_str(), m.c_str(), bias.c_str(), max.c_str(), min_normal.c_str(), min_sub.c_str(),
                      r["specials"].get<std::string>().c_str());
        out << line;
      }
      out << "\nBlock-scaled formats\n";
      std::snprintf(line, sizeof line, "%-18s %-6s %-8s %4s %9s  %-15s %-6s %s\n", "name", "family", "element", "bits",
                    "max elem", "blocks", "rule", "scale");
      out << line;
      for (const auto& r : block_rows) {
        const std::string element = r["element"].get<std::string>().substr(0, 4);
        std::snprintf(line, sizeof line, "%-18s %-6s %-8s %4d %9s  %-15s %-6s %s\n",
                      r["name"].get<std::string>().c_str(), r["family"].get<std::string>().c_str(), element.c_str(),
                      r["element_bits"].get<int>(), shortest(r["max_elem"].get<double>()).c_str(),
                      r["layout"].get<std::string>().c_str(),
                      r["family"] == "mx" ? r["scale_rule"].get<std::string>().c_str() : "-",
                      r["scale"].get<std::string>().c_str());
        out << line;
      }
    }
    std::cout << out.str();
  });
}

namespace {
[[maybe_unused]] const bool registered = register_command(80, add_formats_command);
}  // namespace

}  // namespace wbaudit::cli
