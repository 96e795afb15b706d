// `wbaudit audit`'s engine (audit/trajectory*): simulator trajectories dumped through the observation hook are
// consistent and their counts equal the simulator's trace; planted inconsistencies are found exactly; both layouts
// (w with T + 1 rows, and w / w_next) and chunking give the same result.
#include <gtest/gtest.h>
#include <unistd.h>

#include <Kokkos_Core.hpp>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <tuple>

#include "audit/trajectory.hpp"
#include "audit/trajectory_audit.hpp"
#include "sim/run.hpp"
#include "tests/sim/model/format_table.hpp"

namespace wa = wbaudit::audit;

namespace {

namespace fs = std::filesystem;
using namespace wbaudit;

// A plain .npy writer (format 1.0), independent of the reader under test.
template <class T>
void write_npy(const fs::path& path, const char* descr, std::vector<std::int64_t> shape, const std::vector<T>& data) {
  std::string dims;
  for (auto d : shape) {
    dims += std::to_string(d) + ", ";
  }
  if (shape.size() > 1) {
    dims.resize(dims.size() - 2);
  }
  std::string header = "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  while ((10 + header.size() + 1) % 64 != 0) {
    header += ' ';
  }
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  const auto len = static_cast<std::uint16_t>(header.size());
  const char len_bytes[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  out.write(len_bytes, 2);
  out << header;
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * sizeof(T)));
}

struct Row {
  std::vector<float> w, u, w_next;
};

// A captured simulator run: rows[(tensor, step)].
struct Captured {
  std::map<std::pair<int, std::int64_t>, Row> rows;
  sim::Trace trace;
};

sim::RunConfig config(const std::string& policy, sim::RecordKind record) {
  sim::RunConfig c;
  c.mode = sim::RunMode::target;
  c.seed = 11;
  c.steps = 30;
  c.model.shape = sim::TwoLayerShape{6, 10, 3, sim::Activation::tanh};
  c.model.teacher_hidden = 5;
  c.data.batch = 8;
  c.optimizer.lr = 0.5 * std::ldexp(1.0, -4);  // a mix of erased and applied updates in e4m3
  c.record.kind = record;
  c.record.k = 4;
  c.target = sim::TargetConfig{"e4m3", policy, 0};
  return c;
}

Captured capture(const sim::RunConfig& cfg) {
  Captured cap;
  sim::RunHooks hooks;
  hooks.on_update = [&cap](const sim::UpdateObservation& o) {
    Row& r = cap.rows[{o.tensor, o.step}];
    r.w.assign(o.weight_before.begin(), o.weight_before.end());
    r.u.assign(o.proposal.begin(), o.proposal.end());
    r.w_next.assign(o.weight_after.begin(), o.weight_after.end());
  };
  cap.trace = sim::run_cell(Kokkos::DefaultExecutionSpace(), cfg, {}, hooks);
  return cap;
}

// Writes the captured rows at `steps` as a .npy trajectory directory; consecutive: w has T + 1 rows; shapes: each
// tensor's shape in trajectory.json (block formats need them).
fs::path write_trajectory(const Captured& cap, const std::vector<std::int64_t>& steps, bool consecutive,
                          const std::string& name, const std::vector<std::vector<std::int64_t>>& shapes = {}) {
  const fs::path dir = fs::temp_directory_path() / ("wbaudit_traj_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  write_npy(dir / "steps.npy", "<i8", {static_cast<std::int64_t>(steps.size())}, steps);
  for (int t = 0; t < sim::kTwoLayerTensors; ++t) {
    std::vector<float> w, u, n;
    for (auto s : steps) {
      const Row& r = cap.rows.at({t, s});
      w.insert(w.end(), r.w.begin(), r.w.end());
      u.insert(u.end(), r.u.begin(), r.u.end());
      n.insert(n.end(), r.w_next.begin(), r.w_next.end());
    }
    const auto size = static_cast<std::int64_t>(cap.rows.at({t, steps[0]}).u.size());
    const auto T = static_cast<std::int64_t>(steps.size());
    const std::string tn = sim::kTwoLayerTensorNames[t];
    if (consecutive) {
      const Row& last = cap.rows.at({t, steps.back()});
      w.insert(w.end(), last.w_next.begin(), last.w_next.end());
      write_npy(dir / (tn + ".w.npy"), "<f4", {T + 1, size}, w);
    } else {
      write_npy(dir / (tn + ".w.npy"), "<f4", {T, size}, w);
      write_npy(dir / (tn + ".w_next.npy"), "<f4", {T, size}, n);
    }
    write_npy(dir / (tn + ".u.npy"), "<f4", {T, size}, u);
  }
  // Tensor order as in the simulator (tensor id = position).
  std::ofstream meta(dir / "trajectory.json");
  meta << "{\"tensors\": [";
  for (int t = 0; t < sim::kTwoLayerTensors; ++t) {
    meta << (t ? "," : "") << "{\"name\": \"" << sim::kTwoLayerTensorNames[t] << "\", \"tensor_id\": " << t;
    if (!shapes.empty()) {
      meta << ", \"shape\": " << nlohmann::json(shapes[static_cast<std::size_t>(t)]).dump();
    }
    meta << "}";
  }
  meta << "]}";
  return dir;
}

wa::TrajectoryAudit audit(const fs::path& dir, const std::string& policy, std::int64_t chunk = 1 << 22,
                          std::optional<std::uint64_t> seed = std::nullopt) {
  auto source = wa::open_trajectory(dir);
  wa::TrajectoryAuditOptions o;
  o.format = "e4m3";
  o.policy = sim::make_policy(policy);
  o.chunk = chunk;
  o.seed = seed;  // the run's seed: the SR fast path replays the draws
  o.groups = {{"layer1", {"layer1.weight", "layer1.bias"}}};
  return wa::audit_trajectory(*source, o);
}

class SimulatorTrajectory : public ::testing::TestWithParam<std::string> {};

TEST_P(SimulatorTrajectory, IsConsistentAndCountsEqualTheTrace) {
  const std::string policy = GetParam();
  for (const bool consecutive : {true, false}) {
    const auto record = consecutive ? sim::RecordKind::every : sim::RecordKind::every_k;
    const Captured cap = capture(config(policy, record));
    const auto& steps = cap.trace.recorded_steps;
    const fs::path dir = write_trajectory(cap, steps, consecutive, policy);
    for (const auto& [chunk, seed] : {std::pair<std::int64_t, std::optional<std::uint64_t>>{1 << 22, std::nullopt},
                                      {7, std::nullopt},
                                      {1 << 22, 11},
                                      {7, 11}}) {
      SCOPED_TRACE("chunk " + std::to_string(chunk) + (seed ? ", seed 11" : ""));
      const wa::TrajectoryAudit a = audit(dir, policy, chunk, seed);
      EXPECT_TRUE(a.consistent()) << policy << ": " << (a.listed.empty() ? "" : a.listed[0].reason);
      ASSERT_EQ(a.groups.size(), sim::kTwoLayerTensors + 1u);
      std::int64_t erased = 0, applied = 0;
      for (int t = 0; t < sim::kTwoLayerTensors; ++t) {
        const sim::GroupTrace& g = cap.trace.groups[t];
        ASSERT_EQ(a.groups[t], g.name);
        for (std::size_t k = 0; k < steps.size(); ++k) {
          const wa::AuditCounts& c = a.counts[t][k];
          EXPECT_EQ(c.nonzero, g.nonzero[k]) << g.name << " step " << steps[k];
          EXPECT_EQ(c.erased, g.erased[k]) << g.name << " step " << steps[k];
          EXPECT_EQ(c.saturated, g.saturated[k]) << g.name << " step " << steps[k];
          EXPECT_EQ(c.applied, g.applied[k]) << g.name << " step " << steps[k];
          erased += c.erased;
          applied += c.applied;
        }
      }
      EXPECT_GT(erased, 0);  // the run exercises both events
      EXPECT_GT(applied, 0);
      for (std::size_t k = 0; k < steps.size(); ++k) {  // the declared union is the sum of its tensors
        EXPECT_EQ(a.counts[4][k].erased, cap.trace.groups[0].erased[k] + cap.trace.groups[1].erased[k]);
      }
      // The audit's trace reproduces the simulator's counts in the trace schema.
      const sim::Trace tr = wa::audit_as_trace(a, dir.string());
      EXPECT_EQ(tr.groups[2].erased, cap.trace.groups[2].erased);
      EXPECT_EQ(tr.recorded_steps, steps);
    }
    fs::remove_all(dir);
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, SimulatorTrajectory, ::testing::Values("nearest", "stochastic", "deadzone-sr"));

// The e4m3 value `codes` codes away from v in magnitude, from an independent table.
float move_codes(float v, int codes) {
  const auto table = test::FormatTable::e4m3();
  const auto it = std::find(table.values.begin(), table.values.end(), std::fabs(static_cast<double>(v)));
  EXPECT_NE(it, table.values.end());
  auto c = static_cast<int>(it - table.values.begin()) + codes;
  if (c >= static_cast<int>(table.values.size())) {
    c -= 2 * codes;
  }
  return std::copysign(static_cast<float>(table.values[static_cast<std::size_t>(c)]), v);
}

TEST(PlantedInconsistencies, AreFoundExactly) {
  for (const std::string policy : {"nearest", "stochastic"}) {
    Captured cap = capture(config(policy, sim::RecordKind::every));
    const auto& steps = cap.trace.recorded_steps;
    // (tensor, step, index) -> what was planted
    std::set<std::tuple<std::string, std::int64_t, std::int64_t>> planted;
    auto plant = [&](int t, std::int64_t step, std::size_t i, float value) {
      cap.rows.at({t, step}).w_next[i] = value;
      planted.insert({sim::kTwoLayerTensorNames[t], step, static_cast<std::int64_t>(i)});
    };
    {  // a flipped bit: the second-lowest e4m3 mantissa bit of the float32 encoding (bit 21: two codes away, so
       // never the other SR neighbour, which flipping the lowest bit can legitimately produce)
      const float v = cap.rows.at({0, 3}).w_next[2];
      plant(0, 3, 2, std::bit_cast<float>(std::bit_cast<std::uint32_t>(v) ^ (1u << 21)));
    }
    {  // a value off the e4m3 grid
      const float v = cap.rows.at({2, 7}).w_next[5];
      plant(2, 7, 5, v == 0 ? 1e-7f : std::nextafter(v, 2 * v));
    }
    // under SR: a result two codes away from the realized neighbour, hence not a neighbour of w + u; under nearest
    // the same plant is simply not the nearest value
    plant(1, 12, 0, move_codes(cap.rows.at({1, 12}).w_next[0], 2));
    const fs::path dir = write_trajectory(cap, steps, /*consecutive=*/false, "planted_" + policy);
    const wa::TrajectoryAudit a = audit(dir, policy);
    // Each plant is found twice: as a write-back inconsistent with the policy, and as a break of the chain (the
    // steps are consecutive and w_next is stored, so step t's w[t+1] must be the w recorded at t + 1).
    std::set<std::tuple<std::string, std::int64_t, std::int64_t>> found, chain_breaks;
    for (const auto& c : a.listed) {
      const bool chain = c.reason.find("does not chain") != std::string::npos;
      (chain ? chain_breaks : found).insert({c.tensor, c.step, c.index});
    }
    EXPECT_EQ(found, planted) << policy;
    EXPECT_EQ(chain_breaks, planted) << policy;
    EXPECT_EQ(a.inconsistent, 6);
    for (const auto& c : a.listed) {
      if (c.reason.find("does not chain") != std::string::npos) {
        continue;
      }
      if (c.tensor == "layer2.weight") {
        EXPECT_NE(c.reason.find("not representable"), std::string::npos) << c.reason;
      }
      if (c.tensor == "layer1.bias" && policy == "stochastic") {
        EXPECT_NE(c.reason.find("neighbours"), std::string::npos) << c.reason;
        EXPECT_NE(c.expected_low, c.expected_high);
      }
    }
    fs::remove_all(dir);
  }
}

TEST(TrajectoryErrors, NameTheProblem) {
  const Captured cap = capture(config("nearest", sim::RecordKind::every));
  std::vector<std::int64_t> steps = {0, 1, 2, 4};  // step 3 missing; w has T + 1 rows
  const fs::path dir = write_trajectory(cap, steps, /*consecutive=*/true, "missing");
  try {
    wa::open_trajectory(dir);
    FAIL() << "a missing step was accepted";
  } catch (const wa::TrajectoryError& e) {
    EXPECT_NE(std::string(e.what()).find("step 3 is missing"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
  // NaN proposal: an error naming tensor, step and coordinate.
  Captured bad = cap;
  bad.rows.at({3, 2}).u[1] = std::numeric_limits<float>::quiet_NaN();
  const fs::path nan_dir = write_trajectory(bad, {0, 1, 2}, false, "nan");
  try {
    audit(nan_dir, "nearest");
    FAIL() << "a NaN proposal was accepted";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("tensor layer2.bias, step 2, coordinate 1"), std::string::npos) << m;
  }
  fs::remove_all(nan_dir);
}

namespace {

// The two e4m3 values around x (equal when x is one), from the independent table; saturating at the largest.
std::pair<double, double> e4m3_neighbours(long double x) {
  const auto table = wbaudit::test::FormatTable::e4m3();
  const long double a = std::fabs(x);
  if (a >= table.max_finite()) {
    return {std::copysign(table.max_finite(), static_cast<double>(x)),
            std::copysign(table.max_finite(), static_cast<double>(x))};
  }
  std::size_t h = 0;
  while (h < table.values.size() && static_cast<long double>(table.values[h]) <= a) {
    ++h;
  }
  const double lo = table.values[h - 1], hi = static_cast<long double>(lo) == a ? lo : table.values[h];
  return x < 0 ? std::pair{-hi, -lo} : std::pair{lo, hi};
}

}  // namespace

// Issue 30: with the run's seed, SR is audited by replaying its draws, so a w[t+1] that is the *other* neighbour
// (legal under "one of the two neighbours", wrong for this run's draws) is a replay mismatch; without the seed it
// stays a neighbour check. Planted at three coordinates whose w + u lies strictly between two e4m3 values (found with
// the independent table), each flipped to the other neighbour; every 4th step recorded (with w_next), so the flips
// do not also break the chain between consecutive steps.
TEST(StrictReplay, TheOtherSrNeighbourIsAMismatchWithTheSeed) {
  Captured cap = capture(config("stochastic", sim::RecordKind::every_k));
  const auto& steps = cap.trace.recorded_steps;
  std::set<std::tuple<std::string, std::int64_t, std::int64_t>> planted;
  for (const auto& [key, row] : cap.rows) {
    if (planted.size() == 3 || key.second < 5 || std::find(steps.begin(), steps.end(), key.second) == steps.end()) {
      continue;
    }
    for (std::size_t i = 0; i < row.u.size() && planted.size() < 3; ++i) {
      const long double x = static_cast<long double>(row.w[i]) + static_cast<long double>(row.u[i]);
      const auto [lo, hi] = e4m3_neighbours(x);
      if (lo == hi || (row.w_next[i] != static_cast<float>(lo) && row.w_next[i] != static_cast<float>(hi))) {
        continue;
      }
      cap.rows.at(key).w_next[i] =
          row.w_next[i] == static_cast<float>(lo) ? static_cast<float>(hi) : static_cast<float>(lo);
      planted.insert({sim::kTwoLayerTensorNames[key.first], key.second, static_cast<std::int64_t>(i)});
      break;  // one per (tensor, step)
    }
  }
  ASSERT_EQ(planted.size(), 3u);
  const fs::path dir = write_trajectory(cap, steps, /*consecutive=*/false, "replay");
  EXPECT_TRUE(audit(dir, "stochastic").consistent());  // a neighbour check only: both neighbours are legal
  for (const std::int64_t chunk : {std::int64_t{1} << 22, std::int64_t{7}}) {
    const wa::TrajectoryAudit a = audit(dir, "stochastic", chunk, 11);
    EXPECT_EQ(a.inconsistent, 3);
    std::int64_t mismatched = 0;
    for (int t = 0; t < sim::kTwoLayerTensors; ++t) {
      for (const auto& c : a.counts[t]) {
        mismatched += c.replay_mismatched;
      }
    }
    EXPECT_EQ(mismatched, 3);
    std::set<std::tuple<std::string, std::int64_t, std::int64_t>> found;
    for (const auto& c : a.listed) {
      found.insert({c.tensor, c.step, c.index});
      EXPECT_NE(c.reason.find("replay mismatch"), std::string::npos) << c.reason;
    }
    EXPECT_EQ(found, planted);
  }
  fs::remove_all(dir);
}

// Issue 30: where w[t+1] is stored apart from w (w_next) and the next recorded step is t + 1, the trajectory must
// chain: a w recorded at step t + 1 that is not the w[t+1] of step t is found, even when both write-backs are
// consistent on their own (here the last step's w changed, and its w_next recomputed under nearest with the table).
TEST(Chaining, ABreakBetweenConsecutiveRecordedStepsIsFound) {
  Captured cap = capture(config("nearest", sim::RecordKind::every));
  const auto& steps = cap.trace.recorded_steps;
  const std::int64_t last = steps.back();
  Row& row = cap.rows.at({1, last});
  const std::size_t i = 3;
  row.w[i] = move_codes(row.w[i] == 0 ? 0.015625f : row.w[i], 1);
  row.w_next[i] = static_cast<float>(wbaudit::test::FormatTable::e4m3().nearest(static_cast<long double>(row.w[i]) +
                                                                                static_cast<long double>(row.u[i])));
  const fs::path dir = write_trajectory(cap, steps, /*consecutive=*/false, "chain");
  const wa::TrajectoryAudit a = audit(dir, "nearest");
  EXPECT_EQ(a.inconsistent, 1);
  EXPECT_EQ(a.counts[1][steps.size() - 2].chain_breaks, 1);  // found at the step before, whose w[t+1] differs
  ASSERT_EQ(a.listed.size(), 1u);
  EXPECT_EQ(a.listed[0].step, last - 1);
  EXPECT_EQ(a.listed[0].index, static_cast<std::int64_t>(i));
  EXPECT_NE(a.listed[0].reason.find("does not chain"), std::string::npos) << a.listed[0].reason;
  EXPECT_EQ(a.chain_checked, static_cast<std::int64_t>(steps.size() - 1) * (6 * 10 + 10 + 10 * 3 + 3));
  fs::remove_all(dir);
}

// ---- Block-scaled formats (audit/block_audit.hpp; issue 29) ----

wa::TrajectoryAudit audit_block(const fs::path& dir, const std::string& format, const std::string& policy,
                                std::optional<std::uint64_t> seed = std::nullopt) {
  auto source = wa::open_trajectory(dir);
  wa::TrajectoryAuditOptions o;
  o.format = format;
  o.policy = sim::make_policy(policy);
  o.seed = seed;
  return wa::audit_trajectory(*source, o);
}

// One tensor "m" of shape [1, 32] (one MX block) at steps 0 and 1, w / w_next layout.
fs::path write_block_trajectory(const std::string& name, const std::vector<float>& w, const std::vector<float>& u,
                                const std::vector<float>& w_next, const std::string& shape_json) {
  const fs::path dir = fs::temp_directory_path() / ("wbaudit_btraj_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  write_npy(dir / "steps.npy", "<i8", {2}, std::vector<std::int64_t>{0, 1});
  write_npy(dir / "m.w.npy", "<f4", {2, 32}, w);
  write_npy(dir / "m.u.npy", "<f4", {2, 32}, u);
  write_npy(dir / "m.w_next.npy", "<f4", {2, 32}, w_next);
  std::ofstream(dir / "trajectory.json") << "{\"tensors\": [{\"name\": \"m\"" << shape_json << "}]}";
  return dir;
}

// The worked example (b), by hand, floor MX E2M1: w = [3.0, 0.25 x 31] has X = 2^(floor(log2 3) - 2) = 0.5
// (3.0 / 0.5 = 6, the largest element; 0.25 / 0.5 = 0.5 exact). Step 0: u_0 = 0.9, v_0 = 3.9 keeps X = 0.5 and
// 7.8 saturates to 6: w_0 stays 3.0, erased by saturation, nothing else moves. Step 1: u_0 = 1.0, v_0 = 4.0 raises X to
// 1: w_0 -> 4.0, and each 0.25 / 1 is the tie between 0 and 0.5, rounded to the even 0: 31 collateral flushes.
struct HandBlockExample {
  std::vector<float> w, u, w_next;
  HandBlockExample() {
    std::vector<float> w0(32, 0.25f);
    w0[0] = 3.0f;
    std::vector<float> after(32, 0.0f);
    after[0] = 4.0f;
    w = w0;
    w.insert(w.end(), w0.begin(), w0.end());
    u.assign(64, 0.0f);
    u[0] = 0.9f;
    u[32] = 1.0f;
    w_next = w0;
    w_next.insert(w_next.end(), after.begin(), after.end());
  }
};

TEST(BlockTrajectory, TheWorkedExampleIsConsistentWithItsCausesByHand) {
  const HandBlockExample ex;
  const fs::path dir = write_block_trajectory("hand", ex.w, ex.u, ex.w_next, ", \"shape\": [1, 32]");
  const wa::TrajectoryAudit a = audit_block(dir, "mxfp4_e2m1", "nearest");
  EXPECT_TRUE(a.consistent()) << (a.listed.empty() ? "" : a.listed[0].reason);
  const wa::AuditCounts& s0 = a.counts[0][0];
  EXPECT_EQ(s0.nonzero, 1);
  EXPECT_EQ(s0.erased, 1);
  EXPECT_EQ(s0.applied, 0);
  EXPECT_EQ(s0.block.erased_saturation, 1);
  EXPECT_EQ(s0.block.erased_grid + s0.block.erased_scale + s0.block.collateral + s0.block.rescaled_up, 0);
  const wa::AuditCounts& s1 = a.counts[0][1];
  EXPECT_EQ(s1.nonzero, 1);
  EXPECT_EQ(s1.erased, 0);
  EXPECT_EQ(s1.applied, 1);
  EXPECT_EQ(s1.block.collateral, 31);
  EXPECT_EQ(s1.block.flushed, 31);
  EXPECT_EQ(s1.block.rescaled_up, 1);
  EXPECT_EQ(s1.block.blocks, 1);
  EXPECT_EQ(a.chain_checked, 32);  // step 0's w[t+1] against the w recorded at step 1
  const sim::Trace tr = wa::audit_as_trace(a, dir.string());
  EXPECT_EQ(tr.groups[0].block_format, "mxfp4_e2m1");
  EXPECT_EQ(tr.groups[0].block_events.flushed, (std::vector<std::int64_t>{0, 31}));
  EXPECT_EQ(tr.groups[0].block_events.erased_saturation, (std::vector<std::int64_t>{1, 0}));
  fs::remove_all(dir);
}

TEST(BlockTrajectory, APlantedValueAndBadInputAreNamed) {
  HandBlockExample ex;
  ex.w_next[32 + 5] = 0.25f;  // the collateral flush did not happen at coordinate 5 of step 1
  fs::path dir = write_block_trajectory("planted", ex.w, ex.u, ex.w_next, ", \"shape\": [1, 32]");
  const wa::TrajectoryAudit a = audit_block(dir, "mxfp4_e2m1", "nearest");
  EXPECT_EQ(a.inconsistent, 1);
  ASSERT_EQ(a.listed.size(), 1u);
  EXPECT_EQ(a.listed[0].step, 1);
  EXPECT_EQ(a.listed[0].index, 5);
  EXPECT_EQ(a.listed[0].expected_low, 0.0f);
  EXPECT_NE(a.listed[0].reason.find("block write-back"), std::string::npos) << a.listed[0].reason;
  // SR in a block format is audited by replaying the run's draws: no seed, no audit
  EXPECT_THROW(audit_block(dir, "mxfp4_e2m1", "stochastic"), std::invalid_argument);
  fs::remove_all(dir);
  const HandBlockExample ok;
  dir = write_block_trajectory("noshape", ok.w, ok.u, ok.w_next, "");
  try {
    audit_block(dir, "mxfp4_e2m1", "nearest");
    ADD_FAILURE() << "a block audit without the tensor's shape";
  } catch (const wa::TrajectoryError& e) {
    EXPECT_NE(std::string(e.what()).find("needs the tensor's shape"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
  dir = write_block_trajectory("badshape", ok.w, ok.u, ok.w_next, ", \"shape\": [2, 32]");
  try {
    (void)wa::open_trajectory(dir);
    ADD_FAILURE() << "a shape that does not hold the tensor was accepted";
  } catch (const wa::TrajectoryError& e) {
    EXPECT_NE(std::string(e.what()).find("shape [2, 32] does not hold its 32 coordinates"), std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

// The simulator's own block-format runs (two-layer 6-10-3: rows of 6 and 10 coordinates, so every MX block is a short
// one), dumped through the observation hook: consistent (SR replayed from the run's seed) and with the trace's counts
// and causes, step by step.
class SimulatorBlockTrajectory : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(SimulatorBlockTrajectory, IsConsistentAndCountsEqualTheTrace) {
  const auto& [format, policy] = GetParam();
  sim::RunConfig c = config(policy, sim::RecordKind::every);
  c.target.format = format;
  c.optimizer.lr = 0.02;  // erased, applied and collateral events in each format
  const Captured cap = capture(c);
  const auto& steps = cap.trace.recorded_steps;
  const fs::path dir = write_trajectory(cap, steps, /*consecutive=*/true, "block", {{10, 6}, {10}, {3, 10}, {3}});
  const wa::TrajectoryAudit a = audit_block(dir, format, policy, std::uint64_t{11});
  EXPECT_TRUE(a.consistent()) << (a.listed.empty() ? "" : a.listed[0].reason);
  std::int64_t erased = 0, applied = 0;
  for (int t = 0; t < sim::kTwoLayerTensors; ++t) {
    const sim::GroupTrace& g = cap.trace.groups[static_cast<std::size_t>(t)];
    ASSERT_EQ(g.block_format, format);
    for (std::size_t k = 0; k < steps.size(); ++k) {
      const wa::AuditCounts& ac = a.counts[static_cast<std::size_t>(t)][k];
      const std::string at = g.name + " step " + std::to_string(steps[k]);
      EXPECT_EQ(ac.nonzero, g.nonzero[k]) << at;
      EXPECT_EQ(ac.erased, g.erased[k]) << at;
      EXPECT_EQ(ac.applied, g.applied[k]) << at;
      EXPECT_EQ(ac.block.erased_grid, g.block_events.erased_grid[k]) << at;
      EXPECT_EQ(ac.block.erased_saturation, g.block_events.erased_saturation[k]) << at;
      EXPECT_EQ(ac.block.erased_scale, g.block_events.erased_scale[k]) << at;
      EXPECT_EQ(ac.block.collateral, g.block_events.collateral[k]) << at;
      EXPECT_EQ(ac.block.flushed, g.block_events.flushed[k]) << at;
      EXPECT_EQ(ac.block.rescaled_up, g.block_events.rescaled_up[k]) << at;
      EXPECT_EQ(ac.block.rescaled_down, g.block_events.rescaled_down[k]) << at;
      erased += ac.erased;
      applied += ac.applied;
    }
  }
  EXPECT_GT(erased, 0);
  EXPECT_GT(applied, 0);
  if (policy == "stochastic") {  // another seed replays other draws: the trajectory is not that run's
    EXPECT_FALSE(audit_block(dir, format, policy, std::uint64_t{12}).consistent());
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(FormatsAndPolicies, SimulatorBlockTrajectory,
                         ::testing::Combine(::testing::Values("mxfp4_e2m1", "mxfp4_e2m1:rceil", "mxfp8_e4m3", "nvfp4"),
                                            ::testing::Values("nearest", "stochastic")),
                         [](const auto& info) {
                           std::string name = std::get<0>(info.param) + "_" + std::get<1>(info.param);
                           for (char& ch : name) {
                             ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           }
                           return name;
                         });

}  // namespace
