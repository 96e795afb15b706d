// docs/specs.md against the parsers: its two key tables list exactly the keys the sweep-spec and analysis-spec
// parsers accept (a key missing from either side fails), with the parser's grid-axis and model-kind columns, and the
// documented defaults of the run configuration are sim::RunConfig's. The parsers' tables are the ones they refuse
// unknown keys with, so a key added to a parser without a docs row (or documented but refused) fails here.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "runners/spec/analysis_spec.hpp"
#include "runners/spec/sweep_spec.hpp"
#include "sim/model_registry.hpp"
#include "sim/run.hpp"

namespace {

using nlohmann::json;

struct Row {
  std::vector<std::string> cells;  // trimmed, the key without backticks first
  int line = 0;
};

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t");
  const auto e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// The rows of the first table after the heading `heading` (a line equal to it), header and separator skipped.
std::vector<Row> table_after(const std::string& heading) {
  std::ifstream in(std::string(WBAUDIT_SOURCE_DIR) + "/docs/specs.md");
  EXPECT_TRUE(in) << "docs/specs.md not found";
  std::vector<Row> rows;
  std::string line;
  int number = 0;
  bool after = false, in_table = false;
  int header_lines = 0;
  while (std::getline(in, line)) {
    ++number;
    if (!after) {
      after = line == heading;
      continue;
    }
    if (line.rfind("|", 0) != 0) {
      if (in_table) break;
      continue;
    }
    in_table = true;
    if (header_lines++ < 2) continue;  // the header and |---|
    Row row;
    row.line = number;
    std::stringstream cells(line.substr(1));
    std::string cell;
    while (std::getline(cells, cell, '|')) row.cells.push_back(trim(cell));
    std::string& key = row.cells.at(0);
    EXPECT_TRUE(key.size() > 2 && key.front() == '`' && key.back() == '`')
        << "docs/specs.md:" << number << ": the key is not in backticks: " << key;
    key = key.substr(1, key.size() - 2);
    rows.push_back(row);
  }
  EXPECT_TRUE(after) << "docs/specs.md has no heading \"" << heading << "\"";
  return rows;
}

template <class Set>
void expect_same_keys(const Set& documented, const Set& parsed, const std::string& what) {
  for (const auto& k : parsed)
    EXPECT_TRUE(documented.count(k)) << what << ": the parser accepts \"" << k << "\", docs/specs.md omits it";
  for (const auto& k : documented)
    EXPECT_TRUE(parsed.count(k)) << what << ": docs/specs.md lists \"" << k << "\", the parser refuses it";
}

TEST(SpecKeys, SweepSpecTableIsExactlyTheParsersKeys) {
  const auto rows = table_after("### Sweep spec keys");
  ASSERT_GT(rows.size(), 40u);
  std::map<std::string, Row> documented;
  for (const auto& r : rows) {
    ASSERT_EQ(r.cells.size(), 7u) << "docs/specs.md:" << r.line << ": expected 7 columns";
    EXPECT_TRUE(documented.emplace(r.cells[0], r).second) << "docs/specs.md:" << r.line << ": listed twice";
  }
  std::set<std::string> doc_keys, parser_keys;
  for (const auto& [k, r] : documented) doc_keys.insert(k);
  const auto keys = wbaudit::runners::sweep_spec_keys();
  for (const auto& k : keys) parser_keys.insert(k.path);
  expect_same_keys(doc_keys, parser_keys, "sweep spec");
  for (const auto& k : keys) {
    const auto it = documented.find(k.path);
    if (it == documented.end()) continue;
    EXPECT_EQ(it->second.cells[4], k.grid_axis ? "yes" : "no")
        << "docs/specs.md:" << it->second.line << ": " << k.path << ": the axis column";
    EXPECT_EQ(it->second.cells[5], k.models) << "docs/specs.md:" << it->second.line << ": " << k.path << ": models";
  }
}

TEST(SpecKeys, AnalysisSpecTableIsExactlyTheParsersKeys) {
  const auto rows = table_after("### Analysis spec keys");
  ASSERT_GT(rows.size(), 20u);
  std::set<std::string> doc_keys;
  for (const auto& r : rows) {
    ASSERT_EQ(r.cells.size(), 5u) << "docs/specs.md:" << r.line << ": expected 5 columns";
    EXPECT_TRUE(doc_keys.insert(r.cells[0]).second) << "docs/specs.md:" << r.line << ": listed twice";
  }
  const auto keys = wbaudit::runners::analysis_spec_keys();
  const std::set<std::string> parser_keys(keys.begin(), keys.end());
  expect_same_keys(doc_keys, parser_keys, "analysis spec");
}

// A documented default in backticks is the JSON value sim::RunConfig defaults to, for the model kind of the row.
TEST(SpecKeys, DocumentedRunDefaultsAreTheSimulatorsDefaults) {
  auto defaults = [](const std::string& kind) {
    wbaudit::sim::RunConfig c;
    c.mode = wbaudit::sim::RunMode::target;
    c.model.kind = kind;
    c.replay.checkpoints = 1;  // so that to_json writes [replay] and [validation], whose defaults it otherwise omits
    c.validation.every = 1;
    json j = wbaudit::sim::to_json(c);
    j["replay"]["checkpoints"] = wbaudit::sim::ReplayConfig{}.checkpoints;
    j["validation"]["every"] = wbaudit::sim::ValidationConfig{}.every;
    // written by to_json only when not the default (the ids of earlier cells): their defaults from the structs
    j["target"]["sr_stream"] = wbaudit::sim::TargetConfig{}.sr_stream;
    j["replay"]["sr_stream"] = wbaudit::sim::ReplayConfig{}.sr_stream;
    return j;
  };
  std::map<std::string, json> by_kind;
  for (const wbaudit::sim::ModelDescriptor* model : wbaudit::sim::registered_models()) {
    by_kind[model->kind()] = defaults(model->kind());
  }
  int checked = 0;
  for (const auto& r : table_after("### Sweep spec keys")) {
    const std::string& d = r.cells.at(2);
    if (d.size() < 2 || d.front() != '`' || d.back() != '`') continue;
    const json value = json::parse(d.substr(1, d.size() - 2));
    // The row's model column: "any" (the default model's value) or the kinds it applies to (the first one's).
    const std::string& models = r.cells.at(5);
    const std::string kind = models == "any" ? wbaudit::sim::ModelConfig{}.kind : models.substr(0, models.find(','));
    const json::json_pointer pointer("/" + [&] {
      std::string p = r.cells[0];
      for (auto& ch : p) ch = ch == '.' ? '/' : ch;
      return p;
    }());
    const json& config = by_kind.at(kind);
    if (r.cells[0] == "model.kind") {
      EXPECT_EQ(value, json(wbaudit::sim::ModelConfig{}.kind)) << "docs/specs.md:" << r.line;
      ++checked;
      continue;
    }
    ASSERT_TRUE(config.contains(pointer)) << "docs/specs.md:" << r.line << ": " << r.cells[0] << " has no default";
    EXPECT_EQ(value, config.at(pointer)) << "docs/specs.md:" << r.line << ": " << r.cells[0] << " defaults to "
                                         << config.at(pointer).dump() << ", documented " << d;
    ++checked;
  }
  EXPECT_GT(checked, 50);
}

// The tables are the ones the parsers refuse with: a key outside them is an error naming it, one inside is read.
TEST(SpecKeys, ParsersRefuseWhatTheTablesOmit) {
  const std::string base = "steps = 10\n[model]\nkind = \"two_layer\"\n[target]\nformat = \"bf16\"\n";
  EXPECT_NO_THROW(wbaudit::runners::parse_sweep_spec(base + "[grid]\nseed = [1]\n", "spec.toml"));
  try {
    wbaudit::runners::parse_sweep_spec(base + "[sweep]\nmax_cell = 3\n[grid]\nseed = [1]\n", "spec.toml");
    ADD_FAILURE() << "sweep.max_cell accepted";
  } catch (const wbaudit::runners::SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("spec.toml:7: sweep.max_cell: unknown key (known: name, description, "
                                         "max_cells)"),
              std::string::npos)
        << e.what();
  }
  // An empty analysis (or only comments) is refused, not silently the defaults.
  for (const std::string empty : {"", "# nothing yet\n\n"}) {
    try {
      wbaudit::runners::parse_analysis_spec(empty, "a.toml");
      ADD_FAILURE() << "an empty analysis was accepted";
    } catch (const wbaudit::runners::AnalysisError& e) {
      EXPECT_NE(std::string(e.what()).find("a.toml: the analysis spec is empty"), std::string::npos) << e.what();
    }
  }
  try {
    wbaudit::runners::parse_analysis_spec("[crossing]\nburnin = 3\n", "a.toml");
    ADD_FAILURE() << "crossing.burnin accepted";
  } catch (const wbaudit::runners::AnalysisError& e) {
    EXPECT_NE(std::string(e.what()).find("crossing.burnin: unknown key"), std::string::npos) << e.what();
  }
}

}  // namespace
