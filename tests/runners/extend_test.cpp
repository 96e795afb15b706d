// Extending a sweep (runners/store/extend.hpp): which cells a changed spec adds, and each way a spec that changes an
// existing cell is refused, naming what changed. Expected plans written by hand from the cell lists below.
#include "runners/store/extend.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runners/store/identity.hpp"

namespace wr = wbaudit::runners;
using nlohmann::json;

namespace {

json reference_config(int seed, const std::vector<std::string>& formats, int steps = 30) {
  return {{"schema", "test"}, {"seed", seed}, {"steps", steps}, {"project_formats", formats}};
}
json target_config(int seed, const std::string& format, int steps = 30) {
  return {{"schema", "test"}, {"seed", seed}, {"steps", steps}, {"target", {{"format", format}}}};
}
wr::StoredCell cell(const std::string& name, const std::string& role, const std::string& reference, json config) {
  wr::StoredCell c{"", name, role, reference, std::move(config)};
  c.id = wr::cell_id(c.config);
  return c;
}
// The sweep as it ran: seed 7, bf16.
std::vector<wr::StoredCell> stored() {
  return {cell("reference/seed=7", "reference", "", reference_config(7, {"bf16"})),
          cell("target/seed=7", "target", "reference/seed=7", target_config(7, "bf16"))};
}
std::string refusal(const std::vector<wr::StoredCell>& proposed) {
  try {
    (void)wr::plan_extension(stored(), proposed);
  } catch (const wr::StoreError& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST(Extend, ASeedAddsItsReferenceAndTarget) {
  auto proposed = stored();
  proposed.push_back(cell("reference/seed=8", "reference", "", reference_config(8, {"bf16"})));
  proposed.push_back(cell("target/seed=8", "target", "reference/seed=8", target_config(8, "bf16")));
  const auto plan = wr::plan_extension(stored(), proposed);
  ASSERT_EQ(plan.added.size(), 2U);
  EXPECT_EQ(plan.added[0].name, "reference/seed=8");
  EXPECT_EQ(plan.added[1].name, "target/seed=8");
  EXPECT_EQ(plan.added[1].reference, "reference/seed=8");
  EXPECT_EQ(plan.added[1].id, wr::cell_id(target_config(8, "bf16")));
  EXPECT_TRUE(plan.notes.empty());
  // The same cells: nothing added.
  EXPECT_TRUE(wr::plan_extension(stored(), stored()).added.empty());
}

TEST(Extend, ExistingCellsTakeTheNewSpecsNames) {
  // The new spec names the seed-7 cells otherwise (as a seed axis added to [grid] does); they are renamed, ids
  // unchanged, and a new target of seed 7 names the reference by its new name.
  std::vector<wr::StoredCell> proposed = {cell("reference/s7", "reference", "", reference_config(7, {"bf16"})),
                                          cell("target/s7", "target", "reference/s7", target_config(7, "bf16"))};
  json sr = target_config(7, "bf16");
  sr["target"]["sr"] = true;
  proposed.push_back(cell("target/s7/sr", "target", "reference/s7", sr));
  const auto plan = wr::plan_extension(stored(), proposed);
  ASSERT_EQ(plan.added.size(), 1U);
  EXPECT_EQ(plan.added[0].name, "target/s7/sr");
  EXPECT_EQ(plan.added[0].reference, "reference/s7");
  const std::vector<std::pair<std::string, std::string>> renamed = {
      {wr::cell_id(reference_config(7, {"bf16"})), "reference/s7"},
      {wr::cell_id(target_config(7, "bf16")), "target/s7"}};
  EXPECT_EQ(plan.renamed, renamed);
  ASSERT_EQ(plan.notes.size(), 2U);
  EXPECT_EQ(plan.notes[0],
            "cell reference/seed=7 is now named reference/s7 (the new spec's name; its id and attempts are unchanged)");
  // A new cell may take a name an existing cell leaves.
  proposed.push_back(cell("target/seed=7", "target", "reference/s7", target_config(7, "e4m3")));
  EXPECT_EQ(wr::plan_extension(stored(), proposed).added.size(), 2U);
}

TEST(Extend, AChangedSharedSettingIsRefusedNamingIt) {
  std::vector<wr::StoredCell> proposed = {
      cell("reference/seed=7", "reference", "", reference_config(7, {"bf16"}, 40)),
      cell("target/seed=7", "target", "reference/seed=7", target_config(7, "bf16", 40))};
  const std::string why = refusal(proposed);
  EXPECT_NE(why.find("changes the existing cell reference/seed=7"), std::string::npos) << why;
  EXPECT_NE(why.find("steps: 30 -> 40"), std::string::npos) << why;
  EXPECT_NE(why.find("an extension only adds cells"), std::string::npos) << why;
}

TEST(Extend, ADroppedCellIsRefused) {
  const std::string why = refusal({stored()[0]});
  EXPECT_NE(why.find("the existing cell target/seed=7 (id "), std::string::npos) << why;
  EXPECT_NE(why.find("is not in the new spec"), std::string::npos) << why;
}

TEST(Extend, AReferenceThatWouldProjectMoreStaysUnlessANewTargetNeedsIt) {
  // Another format with references of its own (its learning rate differs): the existing reference would project
  // e4m3 too; it stays as it ran.
  std::vector<wr::StoredCell> proposed = {
      cell("reference/seed=7", "reference", "", reference_config(7, {"bf16", "e4m3"})),
      cell("target/seed=7", "target", "reference/seed=7", target_config(7, "bf16")),
      cell("reference/seed=7/lr=2", "reference", "", reference_config(7, {"bf16", "e4m3"})),
      cell("target/seed=7/e4m3", "target", "reference/seed=7/lr=2", target_config(7, "e4m3"))};
  proposed[2].config["lr"] = 2;
  proposed[2].id = wr::cell_id(proposed[2].config);
  const auto plan = wr::plan_extension(stored(), proposed);
  ASSERT_EQ(plan.added.size(), 2U);
  ASSERT_EQ(plan.notes.size(), 1U);
  EXPECT_EQ(plan.notes[0],
            "reference reference/seed=7 stays as it ran (the new spec would also have it project project_formats: "
            "[\"bf16\"] -> [\"bf16\",\"e4m3\"])");
  // A new e4m3 target on the existing reference would need it to project e4m3.
  proposed[3].reference = "reference/seed=7";
  const std::string why = refusal(proposed);
  EXPECT_NE(why.find("the new cell target/seed=7/e4m3 would use the existing reference reference/seed=7, which does "
                     "not project its format e4m3"),
            std::string::npos)
      << why;
}

TEST(Extend, ConfigDifferencesArePathsWithBothValues) {
  const json a = {{"steps", 30}, {"model", {{"hidden", 16}, {"kind", "two_layer"}}}};
  const json b = {{"steps", 30}, {"model", {{"hidden", 32}, {"kind", "two_layer"}}}, {"lr", 0.5}};
  const std::vector<std::string> expected = {"lr: (absent) -> 0.5", "model.hidden: 16 -> 32"};
  EXPECT_EQ(wr::config_differences(a, b), expected);
  EXPECT_TRUE(wr::config_differences(a, a).empty());
}
