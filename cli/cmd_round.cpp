// wbaudit round --format F [...] [FILE]: round values into a format and classify single write-backs, for exploring
// a format by hand or from scripts. Output is buffered and printed only when every input line is valid.
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "sim/precision/format.hpp"
#include "sim/precision/policy.hpp"
#include "sim/precision/rounding.hpp"
#include "sim/precision/writeback.hpp"

namespace wbaudit::cli {
namespace {

std::string decimal(float v) {  // shortest text that reads back as the same float
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string hexfloat(float v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, std::fabs(v), std::chars_format::hex);
  return std::string(std::signbit(v) ? "-0x" : "0x") + std::string(buf, r.ptr);
}

std::string neighbour(double v) {  // +-inf: no neighbour in the format
  return std::isfinite(v) ? decimal(static_cast<float>(v)) : "none";
}

std::string code_text(std::uint32_t code, int bits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%0*x", (bits + 3) / 4, code);
  return buf;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) {
    return "";
  }
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

// Decimal or hex-float (0x1.8p-3) text; the whole text must be consumed and the value finite.
double parse_value(const std::string& text, const std::string& where) {
  if (const auto nul = text.find('\0'); nul != std::string::npos) {  // strtod would stop there, silently
    throw std::invalid_argument(where + ": a NUL byte at column " + std::to_string(nul + 1) + " (not a text line)");
  }
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(begin, &end);
  if (end == begin || *end != '\0') {
    throw std::invalid_argument(where + ": not a number: \"" + text + "\"");
  }
  if (errno == ERANGE && std::fabs(v) > 1) {
    throw std::invalid_argument(where + ": value out of range (beyond double): \"" + text + "\"");
  }
  if (errno == ERANGE && v == 0) {
    throw std::invalid_argument(where + ": \"" + text + "\" underflows to 0 in double; give 0 to mean zero");
  }
  if (!std::isfinite(v)) {
    throw std::invalid_argument(where + ": non-finite value \"" + text + "\" (NaN/inf are not rounded)");
  }
  return v;
}

// A seed is a decimal integer in [0, 2^64): "-1", "18446744073709551616" or "1e23" are refused, never wrapped.
std::uint64_t parse_seed(const std::string& text) {
  std::uint64_t v = 0;
  const char* end = text.data() + text.size();
  const auto r = std::from_chars(text.data(), end, v);
  if (text.empty() || r.ec != std::errc() || r.ptr != end) {
    throw std::invalid_argument("--seed: \"" + text + "\" is not a decimal integer in [0, 2^64)" +
                                (r.ec == std::errc::result_out_of_range ? " (too large)" : ""));
  }
  return v;
}

std::string exact_text(double v) {  // 17 significant digits: the double as read
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

struct Args {
  std::string format;
  std::string policy = "nearest";
  std::string seed_text = "0";
  std::uint64_t seed = 0;
  std::uint64_t step = 0;  // the stochastic draws' key: (seed, step, tensor), coordinate = value index
  std::uint32_t tensor = 0;
  int sr_bits = 0;
  std::string sr_stream = "philox";
  std::optional<std::string> update;
  std::optional<double> scale;
  std::optional<double> absmax;
  bool json = false;
  std::string file;
};

void run_round(Args a) {
  a.seed = parse_seed(a.seed_text);
  sim::FormatSpec fmt = sim::format_from_name(a.format);
  if ((a.scale || a.absmax) && fmt.kind != sim::FormatKind::integer) {
    throw std::invalid_argument(std::string(a.scale ? "--scale" : "--absmax") +
                                " applies only to integer formats, not " + a.format);
  }
  if (a.scale && a.absmax) {
    throw std::invalid_argument("give --scale or --absmax, not both");
  }
  if (a.scale) {
    const auto s = static_cast<float>(*a.scale);
    if (!(*a.scale > 0) || !std::isfinite(s)) {
      throw std::invalid_argument("--scale " + exact_text(*a.scale) + " must be a positive finite fp32 value");
    }
    // A usable scale is an fp32 value whose level multiples are exact in fp32; offer the simulator's rounding of
    // the given one (16 significant bits, rounded up) when it is not.
    const int level_max = (1 << (fmt.bits - 1)) - 1;
    const float usable = sim::int_scale_for_absmax(fmt.bits, *a.scale * level_max);
    bool ok = static_cast<double>(s) == *a.scale;
    if (ok) {
      try {
        sim::int_format(fmt.bits, s);
      } catch (const std::exception&) {
        ok = false;
      }
    }
    if (!ok) {
      throw std::invalid_argument("--scale " + exact_text(*a.scale) + " is not a usable scale for " + a.format +
                                  " (an fp32 value whose level multiples are exact in fp32); use --scale " +
                                  exact_text(usable) + " (the simulator's rounding of it) or --absmax " +
                                  exact_text(*a.scale * level_max));
    }
    fmt = sim::int_format(fmt.bits, s);
  }
  if (a.absmax) {
    if (!(*a.absmax > 0) || !std::isfinite(*a.absmax)) {
      throw std::invalid_argument("--absmax " + exact_text(*a.absmax) + " must be positive and finite");
    }
    fmt = sim::int_format(fmt.bits, sim::int_scale_for_absmax(fmt.bits, *a.absmax));
  }
  const sim::WritebackPolicy policy = sim::make_policy(a.policy, a.sr_bits, a.sr_stream);
  if (policy.policy == sim::Policy::master) {
    throw std::invalid_argument("policy master keeps an fp32 copy and has no single-value rounding; use nearest");
  }
  const sim::FormatParams p = sim::format_params(fmt);
  std::optional<float> u;
  bool u_rounded = false;  // the given proposal is not an fp32 value: it was rounded to one (and the output says so)
  if (a.update) {
    const double ud = parse_value(trim(*a.update), "--update");
    u = static_cast<float>(ud);  // proposals are fp32
    if (!std::isfinite(*u)) {
      throw std::invalid_argument("--update " + *a.update + " overflows fp32");
    }
    if (*u == 0 && ud != 0) {
      throw std::invalid_argument("--update " + *a.update +
                                  " underflows to 0 in fp32 (proposals are fp32; the "
                                  "smallest nonzero is 1.4e-45)");
    }
    u_rounded = static_cast<double>(*u) != ud;
  }

  std::istream* in = &std::cin;
  std::ifstream file;
  const std::string source = a.file.empty() ? "<stdin>" : a.file;
  if (!a.file.empty()) {
    file.open(a.file);
    if (!file) {
      throw std::invalid_argument("cannot open " + a.file + ": " + std::strerror(errno));
    }
    in = &file;
  }
  const sim::RngKey key{a.seed, a.step, a.tensor};
  nlohmann::json rows = nlohmann::json::array();
  std::ostringstream text;
  // Columns padded to a width, never cut: a long input stays whole.
  const auto row_text = [](const std::vector<std::string>& cols) {
    static const int widths[] = {24, 14, 18, 8, 14, 14, 0};
    std::string out;
    for (std::size_t i = 0; i < cols.size(); ++i) {
      out += cols[i];
      if (i + 1 < cols.size()) {
        out += std::string(cols[i].size() < static_cast<std::size_t>(widths[i]) ? widths[i] - cols[i].size() : 0, ' ');
        out += ' ';
      }
    }
    return out;
  };
  text << row_text({"input", "rounded", "hex", "code", "pred", "succ", "note"});
  if (u) {
    text << "  | u = " << decimal(*u) << " (" << hexfloat(*u) << ")"
         << (u_rounded ? " [--update " + trim(*a.update) + " rounded to fp32]" : "") << ": result event";
  }
  text << "\n";
  std::string line;
  std::size_t line_no = 0, index = 0;
  while (std::getline(*in, line)) {
    ++line_no;
    const std::string t = trim(line);
    if (t.empty() || t[0] == '#') {
      continue;
    }
    const double v = parse_value(t, source + ":" + std::to_string(line_no));
    const sim::Bracket b = sim::bracket_of(p, sim::ExactSum{v, 0.0});
    double rounded = sim::nearest_of(b);
    bool random = false;
    if (policy.policy == sim::Policy::stochastic) {
      sim::PhiloxStream stream = sim::sr_stream_of(policy, key, index);
      const auto s = sim::stochastic_of(b, policy.sr_bits, stream);
      rounded = s.value;
      random = s.random;
    }
    const auto r = static_cast<float>(rounded);
    const std::uint32_t code = sim::encode_value(p, r);
    const double lo = sim::pred(p, r), hi = sim::succ(p, r);
    const bool exact = b.exact && !b.saturated;  // a saturated input is not represented exactly
    std::string note = b.saturated ? "saturated" : (exact ? "exact" : "rounded");
    if (random) {
      note += ",random";
    }
    nlohmann::json row = {{"line", line_no},
                          {"input", t},
                          {"rounded", decimal(r)},
                          {"hex", hexfloat(r)},
                          {"code", code_text(code, fmt.bits)},
                          {"pred", neighbour(lo)},
                          {"succ", neighbour(hi)},
                          {"saturated", b.saturated},
                          {"exact", exact}};
    text << row_text({t, decimal(r), hexfloat(r), code_text(code, fmt.bits), neighbour(lo), neighbour(hi), note});
    if (u) {
      // The write-back of w = the rounded value with proposal u (the same policy and seed; coordinate = value index).
      const auto w = static_cast<float>(sim::round_nearest(p, v));
      const sim::WritebackOutcome o = sim::writeback_value(p, policy, key, index, w, *u);
      std::string event = *u == 0 ? "zero" : (o.value == w ? "erased" : "applied");
      if (o.saturated) {
        event += ",saturated";
      }
      if (o.random) {
        event += ",random";
      }
      if (o.truncated) {
        event += ",sr-truncated";
      }
      row["update"] = {{"w", decimal(w)},
                       {"u", decimal(*u)},
                       {"result", decimal(o.value)},
                       {"result_hex", hexfloat(o.value)},
                       {"event", event},
                       {"erased", *u != 0 && o.value == w},
                       {"saturated", o.saturated},
                       {"gap_up", sim::gap_up(p, w)},
                       {"gap_down", sim::gap_down(p, w)}};
      text << "  | w = " << decimal(w) << ": " << decimal(o.value) << " " << event;
    }
    text << "\n";
    rows.push_back(row);
    ++index;
  }
  if (in->bad()) {
    throw std::runtime_error("error reading " + source);
  }
  if (a.json) {
    nlohmann::json out = {{"format", fmt.name},
                          {"policy", sim::policy_name(policy.policy)},
                          {"sr_bits", policy.sr_bits},
                          {"seed", a.seed},
                          {"step", a.step},
                          {"tensor", a.tensor},
                          {"update_rounded_to_fp32", u_rounded},
                          {"values", rows}};
    if (policy.stream != sim::SrStream::philox) {
      out["sr_stream"] = sim::sr_stream_name(policy.stream);
    }
    if (fmt.kind == sim::FormatKind::integer) {
      out["scale"] = fmt.int_scale;
    }
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << text.str();
  }
}

}  // namespace

void add_round_command(CLI::App& app) {
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("round", "Round values into a format and classify single write-backs");
  cmd->add_option("--format", args->format, "Target format (see `wbaudit formats`)")->required();
  cmd->add_option("--policy", args->policy, "nearest (default), stochastic or deadzone-sr");
  cmd->add_option("--seed", args->seed_text,
                  "Seed of the stochastic draws, a decimal integer in [0, 2^64) (coordinate = index of the value)");
  cmd->add_option(
      "--step", args->step,
      "Step of the stochastic draws' key (seed, step, tensor), as the simulator keys a write-back (default 0)");
  cmd->add_option("--tensor", args->tensor, "Tensor id of the stochastic draws' key (default 0)");
  cmd->add_option("--sr-bits", args->sr_bits, "0: exact SR probabilities (default); r in 1..32: r-bit hardware SR");
  cmd->add_option("--sr-stream", args->sr_stream,
                  "SR's random stream: philox (default) or philox-packed (--sr-bits r in 1..16: floor(32/r) values "
                  "share one Philox word; 0: two values, 16 bits each, exact probabilities)");
  cmd->add_option("--update", args->update,
                  "Also write back w = q(value) with this fp32 proposal u and print the event "
                  "(erased, applied, saturated)");
  cmd->add_option("--scale", args->scale, "Scale of an integer format, an fp32 value (default 1)");
  cmd->add_option("--absmax", args->absmax,
                  "Integer formats: the scale the simulator derives from this absmax (absmax / level max, in fp32)");
  cmd->add_flag("--json", args->json, "Machine-readable output");
  cmd->add_option("file", args->file, "File with one value per line (decimal or hex-float); default: stdin");
  cmd->footer(
      "Values are read as doubles and rounded exactly (ties to even; beyond max finite: saturated).\n"
      "Examples:\n"
      "  printf '1.3\\n464\\n0x1.8p-9\\n' | wbaudit round --format e4m3\n"
      "  echo 1 | wbaudit round --format bf16 --update 0x1p-8          # erased: tie, 1 is even\n"
      "  echo 1 | wbaudit round --format bf16 --update 0.001 --policy stochastic --seed 3");
  cmd->callback([args] { run_round(*args); });
}

namespace {
[[maybe_unused]] const bool registered = register_command(90, add_round_command);
}  // namespace

}  // namespace wbaudit::cli
