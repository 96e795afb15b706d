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
#include "sim/precision/block_writeback.hpp"
#include "sim/precision/format.hpp"
#include "sim/precision/policy.hpp"
#include "sim/precision/rounding.hpp"
#include "sim/precision/storage_format.hpp"
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
  std::vector<std::string> rows;  // block formats: rows given on the command line
};

// ---- Block-scaled formats: a tensor of rows, one write-back explained per coordinate and block ----

// The values of one row: numbers separated by whitespace or commas; "V*N" stands for N copies of V.
std::vector<double> parse_row(const std::string& text, const std::string& where) {
  std::vector<double> out;
  std::string token;
  std::string spaced = text;
  for (char& c : spaced) {
    if (c == ',') {
      c = ' ';
    }
  }
  std::istringstream tokens(spaced);
  while (tokens >> token) {
    std::size_t copies = 1;
    std::string value = token;
    if (const auto star = token.find('*'); star != std::string::npos) {
      const std::string count = token.substr(star + 1);
      std::size_t n = 0;
      const auto r = std::from_chars(count.data(), count.data() + count.size(), n);
      if (count.empty() || r.ec != std::errc() || r.ptr != count.data() + count.size() || n == 0 || n > (1u << 24)) {
        throw std::invalid_argument(where + ": \"" + token + "\": the count after * must be an integer in 1..2^24");
      }
      copies = n;
      value = token.substr(0, star);
    }
    const double v = parse_value(value, where);
    out.insert(out.end(), copies, v);
  }
  return out;
}

std::string scale_text(const sim::BlockFormatSpec& fmt, int exp, float s_b, float s_enc) {
  if (fmt.family == sim::BlockFamily::mx) {
    return "X = 2^" + std::to_string(exp) + " (E8M0 " + code_text(sim::e8m0_encode(exp), 8) + ")";
  }
  return "s_b = " + decimal(s_b) + ", S_enc = " + decimal(s_enc);
}

nlohmann::json scale_json(const sim::BlockFormatSpec& fmt, int exp, float s_b, float s_enc) {
  if (fmt.family == sim::BlockFamily::mx) {
    return {{"exponent", exp}, {"scale", std::ldexp(1.0, exp)}, {"e8m0", sim::e8m0_encode(exp)}};
  }
  return {{"s_b", s_b}, {"s_enc", s_enc}};
}

// The input stream of `round`: the file, or stdin; `source` names it in messages.
struct Input {
  std::istream* in = &std::cin;
  std::ifstream file;
  std::string source = "<stdin>";
};

void open_input(const Args& a, Input& input) {
  if (a.file.empty()) {
    return;
  }
  input.source = a.file;
  input.file.open(a.file);
  if (!input.file) {
    throw std::invalid_argument("cannot open " + a.file + ": " + std::strerror(errno));
  }
  input.in = &input.file;
}

sim::WritebackPolicy single_value_policy(const Args& a) {
  const sim::WritebackPolicy policy = sim::make_policy(a.policy, a.sr_bits, a.sr_stream);
  if (policy.policy == sim::Policy::master) {
    throw std::invalid_argument("policy master keeps an fp32 copy and has no single-value rounding; use nearest");
  }
  return policy;
}

// A block format's tensor: its rows (from --row, or one row per non-comment line of the file or stdin), each with
// where it came from, all of one length.
struct BlockTensor {
  std::vector<std::vector<double>> rows;
  std::vector<std::string> row_where;
  sim::RowMajorShape shape;
  std::vector<float> values;  // row-major, fp32
};

BlockTensor read_block_tensor(const Args& a) {
  BlockTensor t;
  auto& rows = t.rows;
  auto& row_where = t.row_where;
  if (!a.rows.empty()) {
    if (!a.file.empty()) {
      throw std::invalid_argument("give the rows with --row or in a file, not both");
    }
    for (std::size_t r = 0; r < a.rows.size(); ++r) {
      row_where.push_back("--row " + std::to_string(r + 1));
      rows.push_back(parse_row(a.rows[r], row_where.back()));
    }
  } else {
    Input input;
    open_input(a, input);
    const std::string& source = input.source;
    std::string line;
    std::size_t line_no = 0;
    while (std::getline(*input.in, line)) {
      ++line_no;
      const std::string t = trim(line);
      if (t.empty() || t[0] == '#') {
        continue;
      }
      row_where.push_back(source + ":" + std::to_string(line_no));
      rows.push_back(parse_row(t, row_where.back()));
    }
    if (input.in->bad()) {
      throw std::runtime_error("error reading " + source);
    }
  }
  if (rows.empty()) {
    throw std::invalid_argument("no values: give rows with --row or one row per line of a file or stdin");
  }
  for (std::size_t r = 1; r < rows.size(); ++r) {
    if (rows[r].size() != rows[0].size()) {
      throw std::invalid_argument(row_where[r] + ": " + std::to_string(rows[r].size()) +
                                  " values; the tensor's rows have " + std::to_string(rows[0].size()) + " (" +
                                  row_where[0] + ")");
    }
  }
  t.shape = {static_cast<std::int64_t>(rows.size()), static_cast<std::int64_t>(rows[0].size())};
  for (std::size_t r = 0; r < rows.size(); ++r) {
    for (std::size_t c = 0; c < rows[r].size(); ++c) {
      const double v = rows[r][c];
      const auto f = static_cast<float>(v);
      if (!std::isfinite(f)) {
        throw std::invalid_argument(row_where[r] + ": value " + exact_text(v) + " (column " + std::to_string(c) +
                                    ") overflows fp32 (block formats hold fp32 values)");
      }
      t.values.push_back(f);
    }
  }
  return t;
}

// --update for a block format: one fp32 proposal per coordinate, row-major. `rounded`: some value given was not an
// fp32 value and was rounded to one (the output says so).
std::vector<float> block_update(const Args& a, const sim::RowMajorShape& shape, bool& rounded) {
  const auto n = static_cast<std::size_t>(shape.size());
  std::vector<float> u;
  rounded = false;
  {
    const std::vector<double> ud = parse_row(*a.update, "--update");
    if (ud.size() != n) {
      throw std::invalid_argument("--update has " + std::to_string(ud.size()) + " values; the tensor has " +
                                  std::to_string(n) + " (" + std::to_string(shape.rows) + " x " +
                                  std::to_string(shape.cols) + ", row-major; V*N repeats V)");
    }
    for (std::size_t i = 0; i < n; ++i) {
      const auto f = static_cast<float>(ud[i]);
      if (!std::isfinite(f) || (f == 0 && ud[i] != 0)) {
        throw std::invalid_argument("--update value " + std::to_string(i) + " = " + exact_text(ud[i]) +
                                    (f == 0 ? " underflows" : " overflows") + " fp32 (proposals are fp32)");
      }
      rounded = rounded || static_cast<double>(f) != ud[i];
      u.push_back(f);
    }
  }
  return u;
}

nlohmann::json block_counts_json(const sim::BlockWritebackCounts& k) {
  return {{"nonzero", k.nonzero},
          {"erased", k.erased},
          {"erased_grid", k.erased_grid},
          {"erased_saturation", k.erased_saturation},
          {"erased_scale", k.erased_scale},
          {"applied", k.applied},
          {"collateral", k.collateral},
          {"flushed", k.flushed},
          {"saturated", k.saturated},
          {"sr_applied", k.sr_applied},
          {"sr_truncated", k.sr_truncated},
          {"blocks", k.blocks},
          {"blocks_skipped", k.blocks_skipped},
          {"rescaled_up", k.rescaled_up},
          {"rescaled_down", k.rescaled_down}};
}

// One line and one JSON object per block: its scale from the input, and with an update its scale after the
// write-back and how it changed.
nlohmann::json describe_blocks(const sim::BlockFormatSpec& fmt, const sim::RowMajorShape& shape,
                               const sim::BlockWritebackExplained& q, const sim::BlockWritebackExplained* wb,
                               std::ostringstream& text) {
  nlohmann::json blocks = nlohmann::json::array();
  const std::int64_t nblocks = sim::block_count(fmt, shape);
  for (std::int64_t b = 0; b < nblocks; ++b) {
    const sim::BlockLocation where = sim::block_at(fmt, shape, b);
    const sim::BlockScaleChange& s = q.scales[b];
    nlohmann::json jb = {{"block", b},
                         {"rows", {where.row_begin, where.row_end}},
                         {"columns", {where.col_begin, where.col_end}},
                         {"scale", scale_json(fmt, s.exp_new, s.s_b_new, s.s_enc_new)}};
    text << sim::describe_block(where) << ": " << scale_text(fmt, s.exp_new, s.s_b_new, s.s_enc_new);
    if (wb) {
      const sim::BlockScaleChange& c = wb->scales[b];
      const std::string change =
          c.skipped ? "skipped" : (c.order > 0 ? "rescaled up" : (c.order < 0 ? "rescaled down" : "unchanged"));
      jb["scale_after"] = scale_json(fmt, c.exp_new, c.s_b_new, c.s_enc_new);
      jb["scale_change"] = change;
      if (!c.skipped) {
        text << " -> " << scale_text(fmt, c.exp_new, c.s_b_new, c.s_enc_new);
      }
      text << " (" << change << ")";
    }
    text << "\n";
    blocks.push_back(jb);
  }
  return blocks;
}

void run_block_round(const Args& a, const sim::StorageFormat& sf) {
  const sim::BlockFormatSpec& fmt = sf.blocks;
  if (a.scale || a.absmax) {
    throw std::invalid_argument(std::string(a.scale ? "--scale" : "--absmax") + " applies only to intK formats; " +
                                sf.name + " computes its scales from the values");
  }
  const sim::WritebackPolicy policy = single_value_policy(a);
  const BlockTensor tensor = read_block_tensor(a);
  const auto& rows = tensor.rows;
  const sim::RowMajorShape shape = tensor.shape;
  const std::vector<float>& input = tensor.values;
  const auto n = static_cast<std::size_t>(shape.size());
  bool u_rounded = false;
  const std::vector<float> u = a.update ? block_update(a, shape, u_rounded) : std::vector<float>{};
  const sim::RngKey key{a.seed, a.step, a.tensor};
  // q(input): the rounding of the input values (the scales they imply), under nearest.
  std::vector<float> w = input;
  const std::vector<float> zeros(n, 0.0f);
  const sim::BlockWritebackExplained q =
      sim::block_writeback_explain(fmt, sim::WritebackPolicy{}, key, shape, w, zeros, {});
  std::optional<sim::BlockWritebackExplained> wb;
  std::vector<float> result = w;
  if (a.update) {
    wb = sim::block_writeback_explain(fmt, policy, key, shape, result, u, sf.options);
  }
  const std::int64_t nblocks = sim::block_count(fmt, shape);
  std::ostringstream text;
  text << "format " << sf.name << ", tensor [" << shape.rows << " x " << shape.cols << "], " << nblocks
       << (nblocks == 1 ? " block" : " blocks");
  if (a.update) {
    text << "; write-back of w = q(input) with u under " << sim::policy_name(policy.policy)
         << (policy.sr_bits > 0 ? " (sr_bits " + std::to_string(policy.sr_bits) + ")" : "")
         << (u_rounded ? " [--update rounded to fp32]" : "");
  }
  text << "\n";
  const nlohmann::json blocks = describe_blocks(fmt, shape, q, wb ? &*wb : nullptr, text);
  nlohmann::json values = nlohmann::json::array();
  std::ostringstream line;  // one coordinate's row (printed without trailing blanks)
  text << (wb ? "index  row col  input            w = q(input)     u                w'               event\n"
              : "index  row col  input            rounded          note\n");
  const auto pad = [](const std::string& s, std::size_t width) {
    return s + std::string(s.size() < width ? width - s.size() : 1, ' ');
  };
  for (std::size_t i = 0; i < n; ++i) {
    const auto r = static_cast<std::int64_t>(i) / shape.cols, c = static_cast<std::int64_t>(i) % shape.cols;
    nlohmann::json v = {{"index", i},
                        {"row", r},
                        {"column", c},
                        {"input", exact_text(rows[r][c])},
                        {"rounded", decimal(w[i])},
                        {"saturated", static_cast<bool>(q.saturated[i])}};
    line.str("");
    line << pad(std::to_string(i), 7) << pad(std::to_string(r), 4) << pad(std::to_string(c), 5)
         << pad(decimal(input[i]), 17) << pad(decimal(w[i]), 17);
    if (wb) {
      const std::string event = sim::block_event_name(wb->events[i]);
      v["u"] = decimal(u[i]);
      v["result"] = decimal(result[i]);
      v["event"] = event;
      v["result_saturated"] = static_cast<bool>(wb->saturated[i]);
      line << pad(decimal(u[i]), 17) << pad(decimal(result[i]), 17) << event << (wb->saturated[i] ? ",saturated" : "");
    } else if (q.saturated[i]) {
      line << "saturated";
    }
    std::string row = line.str();
    row.erase(row.find_last_not_of(' ') + 1);
    text << row << "\n";
    values.push_back(v);
  }
  nlohmann::json out = {{"format", sf.name},
                        {"shape", {shape.rows, shape.cols}},
                        {"policy", sim::policy_name(policy.policy)},
                        {"sr_bits", policy.sr_bits},
                        {"seed", a.seed},
                        {"step", a.step},
                        {"tensor", a.tensor},
                        {"update_rounded_to_fp32", u_rounded},
                        {"blocks", blocks},
                        {"values", values}};
  if (wb) {
    const sim::BlockWritebackCounts& k = wb->counts;
    out["counts"] = block_counts_json(k);
    text << "events: nonzero " << k.nonzero << ", erased " << k.erased << " (grid " << k.erased_grid << ", saturation "
         << k.erased_saturation << ", scale " << k.erased_scale << "), applied " << k.applied << ", collateral "
         << k.collateral << " (flushed " << k.flushed << "), saturated " << k.saturated << "; blocks " << k.blocks
         << ", rescaled up " << k.rescaled_up << ", rescaled down " << k.rescaled_down << ", skipped "
         << k.blocks_skipped << "\n";
  }
  if (policy.stream != sim::SrStream::philox) {
    out["sr_stream"] = sim::sr_stream_name(policy.stream);
  }
  std::cout << (a.json ? out.dump(2) + "\n" : text.str());
}

// A per-tensor format with --scale or --absmax applied (integer formats only; refused for any other).
sim::FormatSpec scalar_format(const Args& a, sim::FormatSpec fmt) {
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
  return fmt;
}

// --update for a per-tensor format: one fp32 proposal (`rounded`: the value given was not an fp32 value).
std::optional<float> scalar_update(const Args& a, bool& rounded) {
  std::optional<float> u;
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
    rounded = static_cast<double>(*u) != ud;
  }

  return u;
}

// The write-back of w with proposal u at coordinate `index`: its JSON object, and its text appended to `text`.
nlohmann::json scalar_writeback(const sim::FormatParams& p, const sim::WritebackPolicy& policy, const sim::RngKey& key,
                                std::size_t index, float w, float u, std::ostringstream& text) {
  const sim::WritebackOutcome o = sim::writeback_value(p, policy, key, index, w, u);
  std::string event = u == 0 ? "zero" : (o.value == w ? "erased" : "applied");
  if (o.saturated) {
    event += ",saturated";
  }
  if (o.random) {
    event += ",random";
  }
  if (o.truncated) {
    event += ",sr-truncated";
  }
  text << "  | w = " << decimal(w) << ": " << decimal(o.value) << " " << event;
  return {{"w", decimal(w)},
          {"u", decimal(u)},
          {"result", decimal(o.value)},
          {"result_hex", hexfloat(o.value)},
          {"event", event},
          {"erased", u != 0 && o.value == w},
          {"saturated", o.saturated},
          {"gap_up", sim::gap_up(p, w)},
          {"gap_down", sim::gap_down(p, w)}};
}

void run_round(Args a) {
  a.seed = parse_seed(a.seed_text);
  const sim::StorageFormat storage = sim::storage_format_from_name(a.format);
  if (storage.block) {
    run_block_round(a, storage);
    return;
  }
  if (!a.rows.empty()) {
    throw std::invalid_argument("--row applies to block formats (" + a.format + " rounds one value per line)");
  }
  const sim::FormatSpec fmt = scalar_format(a, storage.scalar);
  const sim::WritebackPolicy policy = single_value_policy(a);
  const sim::FormatParams p = sim::format_params(fmt);
  bool u_rounded = false;  // the given proposal is not an fp32 value: it was rounded to one (and the output says so)
  const std::optional<float> u = scalar_update(a, u_rounded);

  Input input;
  open_input(a, input);
  std::istream* in = input.in;
  const std::string& source = input.source;
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
      row["update"] = scalar_writeback(p, policy, key, index, static_cast<float>(sim::round_nearest(p, v)), *u, text);
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
  cmd->add_option("--row", args->rows,
                  "Block formats: one row of the tensor (values separated by spaces or commas, V*N repeats V); "
                  "repeat for more rows");
  cmd->add_flag("--json", args->json, "Machine-readable output");
  cmd->add_option("file", args->file,
                  "File with one value per line (decimal or hex-float); block formats: one row per line; "
                  "default: stdin");
  cmd->footer(
      "Values are read as doubles and rounded exactly (ties to even; beyond max finite: saturated).\n"
      "Examples:\n"
      "  printf '1.3\\n464\\n0x1.8p-9\\n' | wbaudit round --format e4m3\n"
      "  echo 1 | wbaudit round --format bf16 --update 0x1p-8          # erased: tie, 1 is even\n"
      "  echo 1 | wbaudit round --format bf16 --update 0.001 --policy stochastic --seed 3\n"
      "Block formats (mxfp8_e4m3, ..., nvfp4:2d; see the formats subcommand) round a tensor given as rows (--row or "
      "one\n"
      "row per line); --update gives u for every coordinate, row-major, and prints each coordinate's event "
      "(erased:grid,\n"
      "erased:saturation, erased:scale, applied, collateral, collateral:flushed) and each block's scale change:\n"
      "  wbaudit round --format mxfp4_e2m1 --row '3 0.25*31' --update '1 0*31'   # scale up, 31 elements flush");
  cmd->callback([args] { run_round(*args); });
}

namespace {
[[maybe_unused]] const bool registered = register_command(90, add_round_command);
}  // namespace

}  // namespace wbaudit::cli
