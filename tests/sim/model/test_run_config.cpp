// The cell JSON (docs/contracts.md): strict parsing with key paths, canonical round trip.
#include <gtest/gtest.h>

#include "sim/run.hpp"

namespace {

using namespace wbaudit::sim;
using nlohmann::json;

const char* kExample = R"({
  "schema": "wbaudit.cell/1", "mode": "target", "seed": 1, "steps": 2000,
  "model": {"kind": "two_layer", "input_dim": 16, "hidden": 64, "output_dim": 4, "activation": "tanh",
            "teacher_hidden": 64, "teacher_seed": 1000, "init_scale": 1.0},
  "data": {"batch": 64, "noise": 0.0},
  "optimizer": {"kind": "adam", "lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "momentum": 0.9,
                "weight_decay": 0.0},
  "schedule": {"kind": "cosine", "warmup_steps": 0, "period": 1000, "min_lr_ratio": 0.0, "step_size": 1000,
               "gamma": 0.1},
  "record": {"kind": "log", "k": 10, "points": 100},
  "target": {"format": "e4m3", "policy": "nearest", "sr_bits": 0}
})";

TEST(RunConfig, ContractExampleParsesAndRoundTrips) {
  const RunConfig c = run_config_from_json(json::parse(kExample));
  EXPECT_EQ(c.mode, RunMode::target);
  EXPECT_EQ(c.steps, 2000);
  EXPECT_EQ(c.model.shape.hidden, 64);
  EXPECT_EQ(c.optimizer.kind, OptimizerKind::adam);
  EXPECT_EQ(c.optimizer.lr, 1e-3);
  EXPECT_EQ(c.schedule.kind, ScheduleKind::cosine);
  EXPECT_EQ(c.record.points, 100);
  EXPECT_EQ(c.target.format, "e4m3");
  const json canonical = to_json(c);
  EXPECT_EQ(canonical, json::parse(kExample));  // the example is already complete
  EXPECT_EQ(to_json(run_config_from_json(canonical)).dump(), canonical.dump());

  json ref = json::parse(kExample);
  ref["mode"] = "reference";
  ref.erase("target");
  ref["project_formats"] = {"bf16", "e4m3"};
  const RunConfig r = run_config_from_json(ref);
  EXPECT_EQ(r.project_formats, (std::vector<std::string>{"bf16", "e4m3"}));
  EXPECT_EQ(to_json(r), ref);
  EXPECT_FALSE(to_json(r).contains("project_policies"));  // absent when empty: nearest-only reference ids unchanged
  // margin_formats: absent when empty (every format recorded, ids unchanged); given, kept in the layout's order
  EXPECT_FALSE(to_json(r).contains("margin_formats"));
  EXPECT_EQ(reference_margin_layout(r), default_margin_layout());
  json some = ref;
  some["margin_formats"] = {"int8", "e5m2"};
  const RunConfig rm = run_config_from_json(some);
  EXPECT_EQ(rm.margin_formats, (std::vector<std::string>{"e5m2", "int8"}));
  EXPECT_EQ(reference_margin_layout(rm).formats, rm.margin_formats);
  EXPECT_EQ(to_json(rm).at("margin_formats"), (json{"e5m2", "int8"}));
  EXPECT_EQ(to_json(run_config_from_json(to_json(rm))), to_json(rm));
  ref["project_policies"] =
      json::array({{{"policy", "stochastic"}, {"sr_bits", 0}}, {{"policy", "deadzone-sr"}, {"sr_bits", 8}}});
  const RunConfig rp = run_config_from_json(ref);
  ASSERT_EQ(rp.project_policies.size(), 2u);
  EXPECT_EQ(rp.project_policies[1].policy, Policy::deadzone_sr);
  EXPECT_EQ(rp.project_policies[1].sr_bits, 8);
  EXPECT_EQ(to_json(rp), ref);
  // target.sr_stream: absent from the canonical JSON at its default (every earlier cell keeps its id), written when
  // philox-packed, and carried into the policy the run uses
  EXPECT_FALSE(to_json(c).at("target").contains("sr_stream"));
  json packed = json::parse(kExample);
  packed["target"]["policy"] = "stochastic";
  packed["target"]["sr_bits"] = 8;
  packed["target"]["sr_stream"] = "philox-packed";
  const RunConfig pc = run_config_from_json(packed);
  EXPECT_EQ(pc.target.sr_stream, "philox-packed");
  EXPECT_EQ(to_json(pc), packed);
  packed["target"]["sr_stream"] = "philox";
  EXPECT_FALSE(to_json(run_config_from_json(packed)).at("target").contains("sr_stream"));
  // Missing keys take the documented defaults; the canonical form spells them out.
  const json minimal = to_json(run_config_from_json(json::object()));
  EXPECT_EQ(minimal.at("optimizer").at("kind"), "adam");
  EXPECT_EQ(minimal.at("steps"), 2000);
}

std::string error_of(const json& j) {
  try {
    run_config_from_json(j);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

TEST(RunConfig, MalformedConfigsNameTheKeyPath) {
  const json base = json::parse(kExample);
  struct Case {
    std::string pointer;  // JSON pointer to set
    json value;
    std::string prefix;  // expected start of the message
  };
  const std::vector<Case> cases = {
      {"/optimizer/lr", "fast", "optimizer.lr: expected a number"},
      {"/optimizer/lr", -1.0, "optimizer.lr: must be positive"},
      {"/optimizer/foo", 1, "optimizer.foo: unknown key"},
      {"/bogus", 1, "bogus: unknown key"},
      {"/steps", 0, "steps: must be positive"},
      {"/steps", -5, "steps: must be positive"},
      {"/steps", 1.5, "steps: expected an integer"},
      {"/seed", -1, "seed: expected a non-negative integer"},
      {"/model/hidden", 0, "model.hidden: must be positive"},
      {"/model/hidden", "64", "model.hidden: expected an integer"},
      {"/model/activation", "swish", "model.activation: unknown activation"},
      {"/model/kind", "transformer", "model.kind: unknown model"},
      {"/data", json::array(), "data: expected an object"},
      {"/data/batch", 0, "data.batch: must be positive"},
      {"/schedule/kind", "linear", "schedule.kind: unknown schedule"},
      {"/schedule/period", 0, "schedule.period: must be positive"},
      {"/record/kind", "sometimes", "record.kind: unknown recording schedule"},
      {"/record/points", 1, "record.points: must be at least 2"},
      {"/target/format", "e4m4", "target.format: "},
      {"/target/policy", "truncate", "target.policy: "},
      {"/target/sr_bits", 40, "target.sr_bits: "},
      {"/target/extra", true, "target.extra: unknown key"},
      {"/target/sr_stream", "mersenne", "target.sr_stream: unknown SR stream \"mersenne\""},
      {"/target/sr_stream", 1, "target.sr_stream: expected a string"},
      {"/target/sr_stream", "philox-packed", "target.sr_stream: SR stream \"philox-packed\" needs stochastic"},
      {"/mode", "audit", "mode: unknown mode"},
      {"/schema", "wbaudit.cell/2", "schema: unsupported schema"},
      {"/project_formats", json::array({"bf16"}), "project_formats: only allowed in reference mode"},
  };
  for (const Case& c : cases) {
    json j = base;
    j[json::json_pointer(c.pointer)] = c.value;
    const std::string message = error_of(j);
    EXPECT_EQ(message.rfind(c.prefix, 0), 0u) << c.pointer << " -> " << message;
  }
  json no_target = base;
  no_target.erase("target");
  EXPECT_EQ(error_of(no_target).rfind("target: required in target mode", 0), 0u);
  json ref = base;
  ref.erase("target");
  ref["mode"] = "reference";
  ref["project_formats"] = {"bf16", "fp7"};
  EXPECT_EQ(error_of(ref).rfind("project_formats[1]: ", 0), 0u) << error_of(ref);
  ref["project_formats"] = {"bf16", "bf16"};
  EXPECT_EQ(error_of(ref).rfind("project_formats[1]: duplicate", 0), 0u) << error_of(ref);
  ref["project_formats"] = "bf16";
  EXPECT_EQ(error_of(ref).rfind("project_formats: expected an array", 0), 0u);
  // project_policies: strict, named by index and key.
  ref["project_formats"] = {"bf16"};
  const std::pair<json, std::string> policy_cases[] = {
      {json::array({{{"policy", "nearest"}}}), "project_policies[0].policy: \"nearest\" has no expected projection"},
      {json::array({{{"policy", "master"}}}), "project_policies[0].policy: "},
      {json::array({{{"policy", "sto"}}}), "project_policies[0].policy: "},
      {json::array({{{"sr_bits", 8}}}), "project_policies[0].policy: missing"},
      {json::array({{{"policy", "stochastic"}, {"sr_bits", 33}}}), "project_policies[0].sr_bits: must be in 0..32"},
      {json::array({{{"policy", "stochastic"}, {"bits", 8}}}), "project_policies[0].bits: unknown key"},
      {json::array({{{"policy", "stochastic"}}, {{"policy", "stochastic"}, {"sr_bits", 0}}}),
       "project_policies[1]: duplicate"},
      {json("stochastic"), "project_policies: expected an array"},
  };
  for (const auto& [value, prefix] : policy_cases) {
    ref["project_policies"] = value;
    EXPECT_EQ(error_of(ref).rfind(prefix, 0), 0u) << value.dump() << " -> " << error_of(ref);
  }
  json target_with_policies = base;
  target_with_policies["project_policies"] = json::array({{{"policy", "stochastic"}}});
  EXPECT_EQ(error_of(target_with_policies).rfind("project_policies: only allowed in reference mode", 0), 0u);
  EXPECT_EQ(error_of(json::array()).rfind("cell: expected an object", 0), 0u);
  // margin_formats: reference mode, an array of the margin histogram's formats without repeats
  json margin = ref;
  margin.erase("project_policies");
  const std::pair<json, std::string> margin_cases[] = {
      {json("e4m3"), "margin_formats: expected an array"},
      {json::array({"e4m3", 3}), "margin_formats[1]: expected a string"},
      {json::array({"e4m3", "e4m3"}), "margin_formats: margin histogram: format \"e4m3\" listed twice (entry 1)"},
      {json::array({"nvfp4"}), "margin_formats: margin histogram: format \"nvfp4\" (entry 0) is not one"},
      {json::array(), "margin_formats: margin histogram: no formats"},
  };
  for (const auto& [value, prefix] : margin_cases) {
    margin["margin_formats"] = value;
    EXPECT_EQ(error_of(margin).rfind(prefix, 0), 0u) << value.dump() << " -> " << error_of(margin);
  }
  json target_with_margin = base;
  target_with_margin["margin_formats"] = json::array({"e4m3"});
  EXPECT_EQ(error_of(target_with_margin).rfind("margin_formats: only allowed in reference mode", 0), 0u);
}

}  // namespace
