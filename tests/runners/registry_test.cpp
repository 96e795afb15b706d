// Preregistration (refused once outcomes exist unless retrospective) and the append-only, hash-chained deviation log.
#include "runners/store/registry.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "runners/store/identity.hpp"
#include "sim/run.hpp"

namespace fs = std::filesystem;
namespace wr = wbaudit::runners;

namespace {

std::vector<wr::StoredCell> cells() {
  std::vector<wr::StoredCell> out;
  out.push_back({"", "ref/seed=1", "reference", "", {{"schema", "wbaudit.cell/1"}, {"mode", "reference"}}});
  for (const char* f : {"e4m3", "bf16"})
    out.push_back({"",
                   std::string("target/") + f,
                   "target",
                   "ref/seed=1",
                   {{"schema", "wbaudit.cell/1"}, {"mode", "target"}, {"format", f}}});
  return out;
}

void spit(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}
std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void complete(const wr::SweepStore& store, const std::string& name) {
  wr::Attempt a = store.begin_attempt(store.find_by_name(name)->id);
  spit(a.dir() / "trace.h5", name);
  (void)store.finish_attempt(a, wr::AttemptStatus::complete, "", {"trace.h5"});
}

// A valid gate (the analysis must pass evaluate's parser to be registered).
std::string gate(double threshold) {
  return "[[gates]]\nname = \"skill\"\nstatistic = \"skill_vs_template\"\npredictor = \"source\"\n"
         "comparator = \">=\"\nthreshold = " +
         std::to_string(threshold) + "\n";
}

struct RegistryTest : ::testing::Test {
  fs::path dir = fs::temp_directory_path() / ("wbaudit_registry_" + wr::random_uuid());
  fs::path analysis = dir.string() + "_analysis.toml";
  void TearDown() override {
    ::unsetenv("WBAUDIT_KEY_FILE");
    fs::remove(dir.string() + "_key");
    fs::remove_all(dir.string() + "_key.heads");  // the journal's per-key record beside the key (journal.cpp)
    fs::remove_all(dir);
    fs::remove(analysis);
  }
};

}  // namespace

TEST_F(RegistryTest, RegistersBeforeOutcomesAndRefusesAfter) {
  const auto store = wr::SweepStore::create(dir, "spec", cells());
  const std::string text = "required_cells = [\"target/e4m3\"]\n" + gate(0.2);
  spit(analysis, text);
  const auto r = wr::register_analysis(store, analysis, false, "alice");
  EXPECT_EQ(r.sha256, wr::sha256_hex(text));
  EXPECT_EQ(r.outcome_cells, std::vector<std::string>{"target/e4m3"});
  EXPECT_EQ(slurp(dir / "registry" / r.sha256 / "analysis.toml"), text);
  EXPECT_FALSE(r.retrospective);
  // The same analysis cannot be registered twice.
  EXPECT_THROW((void)wr::register_analysis(store, analysis, false), wr::RegistryError);
  ASSERT_TRUE(wr::find_registration(dir, text).has_value());
  EXPECT_EQ(wr::find_registration(dir, text)->who, "alice");
  EXPECT_FALSE(wr::find_registration(dir, text + " ").has_value());
  auto problems = wr::required_cell_problems(store, *wr::find_registration(dir, text));
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].reason, "missing");

  // Once target/bf16 has an outcome, an analysis naming it (here: every target, the default) is refused...
  complete(store, "target/bf16");
  const std::string all_targets = gate(0.3);
  spit(analysis, all_targets);
  try {
    (void)wr::register_analysis(store, analysis, false);
    FAIL() << "registered after the outcome existed";
  } catch (const wr::RegistryError& e) {
    EXPECT_NE(std::string(e.what()).find("target/bf16"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(wr::find_registration(dir, all_targets).has_value());
  // ...unless retrospective, which records what was already there.
  const auto retro = wr::register_analysis(store, analysis, true);
  EXPECT_TRUE(retro.retrospective);
  EXPECT_EQ(retro.outcomes_present_at_registration, std::vector<std::string>{"target/bf16"});
  EXPECT_EQ(retro.outcome_cells, (std::vector<std::string>{"target/e4m3", "target/bf16"}));
  EXPECT_EQ(wr::registrations(dir).size(), 2u);
}

TEST_F(RegistryTest, PatternsAndBadAnalyses) {
  const auto store = wr::SweepStore::create(dir, "spec", cells());
  spit(analysis, "[analysis]\nrequired_cells = [\"target/*\", \"ref/seed=1\"]\n");
  EXPECT_EQ(wr::analysis_outcome_cells(store, analysis),
            (std::vector<std::string>{"target/e4m3", "target/bf16", "ref/seed=1"}));
  spit(analysis, "required_cells = [\"target/fp6\"]\n");
  EXPECT_THROW((void)wr::analysis_outcome_cells(store, analysis), wr::RegistryError);
  spit(analysis, "required_cells = \"target/e4m3\"\n");
  EXPECT_THROW((void)wr::analysis_outcome_cells(store, analysis), wr::RegistryError);
  spit(analysis, "required_cells = [\n");
  try {
    (void)wr::analysis_outcome_cells(store, analysis);
    FAIL();
  } catch (const wr::RegistryError& e) {
    EXPECT_NE(std::string(e.what()).find(analysis.string() + ":"), std::string::npos) << e.what();
  }
}

// toml++ names a redefined dotted key mangled ("ananalysis.required_cells"); every TOML reader of the registry says
// the file, the line and the key as written.
TEST_F(RegistryTest, DuplicateKeysAreNamedAsWritten) {
  const auto store = wr::SweepStore::create(dir, "spec", cells());
  spit(analysis, "analysis.required_cells = [\"target/*\"]\nanalysis.required_cells = [\"ref/*\"]\n");
  for (int reader = 0; reader < 2; ++reader) {
    try {
      if (reader == 0) (void)wr::analysis_outcome_cells(store, analysis);
      if (reader == 1) (void)wr::register_analysis(store, analysis, false);
      FAIL() << "a duplicate key was accepted";
    } catch (const wr::RegistryError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(analysis.string() + ":2: duplicate key \"analysis.required_cells\""), std::string::npos)
          << what;
      EXPECT_EQ(what.find("ananalysis"), std::string::npos) << what;
    }
  }
}

TEST_F(RegistryTest, AnAnalysisEvaluateWouldRefuseIsNeverFrozen) {
  const auto store = wr::SweepStore::create(dir, "spec", cells());
  for (const std::string& bad : {std::string("[analysis]\npredictors = [\"sourse\", \"template\"]\n"),
                                 std::string("[[gates]]\nname = \"g\"\nstatistic = \"rmse\"\npredictor = "
                                             "\"source\"\ncomparator = \"<=\"\nthreshold = 0.1\n")}) {
    spit(analysis, bad);
    try {
      (void)wr::register_analysis(store, analysis, false);
      FAIL() << "registered an invalid analysis:\n" << bad;
    } catch (const wr::RegistryError& e) {
      EXPECT_NE(std::string(e.what()).find(analysis.string() + ":"), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(wr::registrations(dir).empty());
  EXPECT_FALSE(fs::exists(dir / "registry") && !fs::is_empty(dir / "registry"));
}

TEST_F(RegistryTest, DeviationLogIsAppendOnlyAndChained) {
  const auto store = wr::SweepStore::create(dir, "spec", cells());
  EXPECT_TRUE(wr::read_deviations(dir).empty());
  (void)wr::record_deviation(store, "reran on partition b", "node failure", {"target/e4m3"}, "bob");
  const std::string first = slurp(dir / "deviations.jsonl");
  (void)wr::record_deviation(store, "dropped seed", "diverged", {store.find_by_name("target/bf16")->id});
  const std::string both = slurp(dir / "deviations.jsonl");
  EXPECT_EQ(both.substr(0, first.size()), first);  // appended, earlier bytes untouched
  const auto log = wr::read_deviations(dir);
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0].who, "bob");
  EXPECT_EQ(log[0].why, "node failure");
  EXPECT_EQ(log[1].cells, std::vector<std::string>{"target/bf16"});  // ids resolve to names
  // The first entry chains to the empty log: printf '' | sha256sum
  EXPECT_NE(first.find("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"), std::string::npos);
  EXPECT_THROW((void)wr::record_deviation(store, "x", "y", {"no/such/cell"}), wr::RegistryError);
  EXPECT_THROW((void)wr::record_deviation(store, "x", "", {}), wr::RegistryError);
  // Editing an earlier entry breaks the chain, and a broken log is not extended.
  std::string edited = both;
  edited.replace(edited.find("node failure"), 12, "node_failure");
  spit(dir / "deviations.jsonl", edited);
  EXPECT_THROW((void)wr::read_deviations(dir), wr::RegistryError);
  EXPECT_THROW((void)wr::record_deviation(store, "x", "y", {}), wr::RegistryError);
  // So does removing the first line.
  spit(dir / "deviations.jsonl", both.substr(first.size()));
  EXPECT_THROW((void)wr::read_deviations(dir), wr::RegistryError);
}

// The registry and the deviation log are signed with the sweep's key (the HMAC of journal.hpp): an edited
// registration.json, an edited last deviation (no later prev_sha256 covers it) or a deviation appended by hand with
// a correct chain hash is flagged; without the key nothing is verified and each says so.
TEST_F(RegistryTest, RegistrationsAndDeviationsAreSigned) {
  const fs::path key = dir.string() + "_key";
  ::setenv("WBAUDIT_KEY_FILE", key.c_str(), 1);
  const auto store = wr::SweepStore::create(dir, "spec", cells());
  ASSERT_TRUE(store.can_verify()) << store.key_problem();
  spit(analysis, gate(0.2));
  const auto reg = wr::register_analysis(store, analysis, false, "alice");
  (void)wr::record_deviation(store, "reran on partition b", "node failure", {"target/e4m3"}, "bob");
  ASSERT_EQ(wr::registrations(dir, &store).size(), 1u);
  EXPECT_EQ(wr::registrations(dir, &store)[0].signature_problem, "");
  ASSERT_EQ(wr::read_deviations(dir, &store).size(), 1u);
  EXPECT_EQ(wr::read_deviations(dir, &store)[0].signature_problem, "");

  // An edited registration (who registered it) keeps its frozen analysis and hash, but not its signature.
  const fs::path record = dir / "registry" / reg.sha256 / "registration.json";
  const std::string signed_record = slurp(record);
  std::string edited = signed_record;
  edited.replace(edited.find("\"alice\""), 7, "\"carol\"");
  spit(record, edited);
  const auto regs = wr::registrations(dir, &store);
  ASSERT_EQ(regs.size(), 1u);
  EXPECT_EQ(regs[0].who, "carol");
  EXPECT_NE(regs[0].signature_problem.find("not signed by this sweep's key"), std::string::npos)
      << regs[0].signature_problem;
  EXPECT_EQ(wr::find_registration(dir, slurp(analysis), &store)->signature_problem, regs[0].signature_problem);
  // Unsigned (hand-made, or written before records were signed).
  nlohmann::json unsigned_record = nlohmann::json::parse(signed_record);
  unsigned_record.erase("hmac");
  spit(record, unsigned_record.dump(1) + "\n");
  EXPECT_NE(wr::registrations(dir, &store)[0].signature_problem.find("not signed"), std::string::npos);
  spit(record, signed_record);
  EXPECT_EQ(wr::registrations(dir, &store)[0].signature_problem, "");

  // The last deviation edited: the chain cannot see it; the journal, which recorded the log's end, does (a record
  // problem: the log is refused), and so does its signature.
  const fs::path log = dir / "deviations.jsonl";
  const std::string one = slurp(log);
  std::string why = one;
  why.replace(why.find("node failure"), 12, "cosmic rays!");
  spit(log, why);
  try {
    (void)wr::read_deviations(dir, &store);
    ADD_FAILURE() << "an edited deviation log was read";
  } catch (const wr::RegistryError& e) {
    EXPECT_NE(std::string(e.what()).find("differ from those the journal recorded"), std::string::npos) << e.what();
  }
  EXPECT_EQ(wr::read_deviations(dir)[0].signature_problem, "");  // not checked without the store
  {
    const nlohmann::json edited_entry = nlohmann::json::parse(why);
    EXPECT_NE(store.signature_problem(wr::kDeviationSchema, edited_entry).find("not signed by this sweep's key"),
              std::string::npos);
  }
  // A deviation appended by hand with the right chain hash: the chain holds, the signature is missing.
  nlohmann::json forged = {{"schema", wr::kDeviationSchema},
                           {"who", "mallory"},
                           {"when", "2026-01-01T00:00:00Z"},
                           {"what", "nothing"},
                           {"why", "because"},
                           {"cells", nlohmann::json::array()},
                           {"prev_sha256", wr::sha256_hex(one)}};
  spit(log, one + forged.dump() + "\n");
  const auto devs = wr::read_deviations(dir, &store);
  ASSERT_EQ(devs.size(), 2u);
  EXPECT_EQ(devs[0].signature_problem, "");
  EXPECT_EQ(devs[1].line, 2);
  EXPECT_NE(devs[1].signature_problem.find("not signed"), std::string::npos) << devs[1].signature_problem;

  // Without the key: nothing is verified, and each record says so.
  ::unsetenv("WBAUDIT_KEY_FILE");
  fs::remove(key);
  const auto keyless = wr::SweepStore::open(dir);
  EXPECT_NE(wr::registrations(dir, &keyless)[0].signature_problem.find("cannot be verified"), std::string::npos);
  EXPECT_NE(wr::read_deviations(dir, &keyless)[0].signature_problem.find("cannot be verified"), std::string::npos);
}

// Issue 31: a group the sweep's target runs do not have is refused at registration, naming the analysis file, its
// line and the known groups (the cells here are default two-layer runs: layer1.weight, layer1.bias, layer2.weight,
// layer2.bias), and nothing is frozen.
TEST_F(RegistryTest, AnUnknownGroupIsRefusedBeforeFreezing) {
  auto with_models = cells();
  for (auto& cell : with_models) {
    // Real run configurations (the default two-layer model), so that the sweep has parameter groups.
    wbaudit::sim::RunConfig config;
    config.mode = cell.role == "target" ? wbaudit::sim::RunMode::target : wbaudit::sim::RunMode::reference;
    if (cell.role == "target") {
      config.target.format = cell.config.at("format").get<std::string>();
    }
    cell.config = wbaudit::sim::to_json(config);
  }
  const auto store = wr::SweepStore::create(dir, "spec", with_models);
  spit(analysis, "[analysis]\ngroups = [\"layer1.weight\", \"layer2.wieght\"]\n" + gate(0.2));
  try {
    (void)wr::register_analysis(store, analysis, false, "alice");
    FAIL() << "an unknown group was registered";
  } catch (const wr::RegistryError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(analysis.string() + ":2: analysis.groups: \"layer2.wieght\" is not a parameter group"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("did you mean \"layer2.weight\""), std::string::npos) << m;
    EXPECT_NE(m.find("known: layer1.bias, layer1.weight, layer2.bias, layer2.weight"), std::string::npos) << m;
  }
  EXPECT_FALSE(fs::exists(dir / "registry"));
  spit(analysis, "[analysis]\ngroups = [\"layer1.weight\", \"layer2.weight\"]\n" + gate(0.2));
  EXPECT_NO_THROW((void)wr::register_analysis(store, analysis, false, "alice"));
}
