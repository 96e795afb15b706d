// run_cell with the two-layer model held persistent-native in block-scaled formats (issue 29): every recorded
// write-back is replayed from the captured w[t], u[t] by a brute-force scalar re-implementation of the MX E2M1
// definitions written here (the floor and rceil scale rules, nearest-even on the E2M1 table by search, the event
// causes as docs/formats.md defines them), and the trace's counts must equal the recount. NVFP4 cells are checked
// for the counts that follow from w, u and w' alone. Trace round trip through HDF5 with its block events.
#include <gtest/gtest.h>
#include <unistd.h>

#include <Kokkos_Core.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include "sim/precision/block_expected.hpp"
#include "sim/run.hpp"
#include "sim/trace/trace.hpp"
#include "sim/trace/trace_writer.hpp"

namespace {

using namespace wbaudit::sim;

constexpr long double kE2M1[8] = {0.0L, 0.5L, 1.0L, 1.5L, 2.0L, 3.0L, 4.0L, 6.0L};

RunConfig block_config(const std::string& format, const std::map<std::string, std::string>& group_formats) {
  RunConfig c;
  c.mode = RunMode::target;
  c.seed = 5;
  c.steps = 30;
  // layer1.weight rows: a 32-block and a short 8-block. ReLU: a hidden unit inactive on a batch gives its column of
  // layer2.weight zero proposals beside nonzero ones in the same block (the coordinates collateral moves can reach).
  c.model.shape = TwoLayerShape{40, 10, 3, Activation::relu};
  c.model.teacher_hidden = 5;
  c.model.teacher_seed = 44;
  c.data.batch = 8;
  c.data.noise = 0.05;
  c.optimizer.kind = OptimizerKind::sgd;
  c.optimizer.lr = 0.5;
  c.record.kind = RecordKind::every;
  c.target = TargetConfig{format, "nearest", 0, group_formats};
  return c;
}

struct Captured {
  std::map<std::pair<std::int64_t, int>, std::vector<float>> before, proposal, after;
  RunHooks hooks() {
    RunHooks h;
    h.on_update = [this](const UpdateObservation& o) {
      const auto key = std::make_pair(o.step, o.tensor);
      before[key].assign(o.weight_before.begin(), o.weight_before.end());
      proposal[key].assign(o.proposal.begin(), o.proposal.end());
      after[key].assign(o.weight_after.begin(), o.weight_after.end());
    };
    return h;
  }
};

// floor(log2 a) for a > 0.
int floor_log2(long double a) {
  int e = 0;
  std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1)
  return e - 1;
}

// The MX exponent of a block with largest magnitude amax (E2M1: emax_elem 2, max_elem 6), clamped below at -127.
int mx_exponent(long double amax, bool rceil) {
  if (amax == 0) {
    return -127;
  }
  int E = floor_log2(amax) - 2;  // floor: OCP MX v1.0
  if (rceil) {                   // the smallest E with amax <= 6 * 2^E
    E -= 2;
    while (amax > 6.0L * std::ldexp(1.0L, E)) {
      ++E;
    }
  }
  return std::max(E, -127);
}

struct Rounded {
  long double value;
  bool saturated;
};
// Nearest-even on the E2M1 table at scale 2^E by search: the closest table entry, ties to the even index.
Rounded round_e2m1(long double v, int E) {
  const long double x = std::fabs(v) / std::ldexp(1.0L, E);
  if (x >= 6) {
    return {std::copysign(6.0L, v) * std::ldexp(1.0L, E), x > 6};
  }
  int best = 0;
  for (int k = 1; k < 8; ++k) {
    const long double dk = std::fabs(x - kE2M1[k]), db = std::fabs(x - kE2M1[best]);
    if (dk < db || (dk == db && k % 2 == 0)) {
      best = k;
    }
  }
  return {std::copysign(kE2M1[best], v) * std::ldexp(1.0L, E), false};
}

struct Recount {
  std::int64_t nonzero = 0, erased = 0, grid = 0, saturation = 0, scale = 0, applied = 0, collateral = 0, flushed = 0,
               saturated = 0, up = 0, down = 0;
};

// The write-back of one tensor [rows x cols] in MX E2M1 (32-element blocks along rows), recounted; the realized w'
// must equal the brute-force result.
Recount recount_mx(const std::vector<float>& w, const std::vector<float>& u, const std::vector<float>& next,
                   std::int64_t rows, std::int64_t cols, bool rceil, const std::string& where) {
  Recount r;
  for (std::int64_t row = 0; row < rows; ++row) {
    for (std::int64_t c0 = 0; c0 < cols; c0 += 32) {
      const std::int64_t c1 = std::min(cols, c0 + 32);
      long double amax_old = 0, amax_new = 0;
      for (std::int64_t c = c0; c < c1; ++c) {
        const std::int64_t i = row * cols + c;
        const long double v = static_cast<long double>(w[i]) + static_cast<long double>(u[i]);
        EXPECT_EQ(v - w[i], static_cast<long double>(u[i])) << where << ": w + u not exact in long double at " << i;
        amax_old = std::max(amax_old, std::fabs(static_cast<long double>(w[i])));
        amax_new = std::max(amax_new, std::fabs(v));
      }
      const int E_old = mx_exponent(amax_old, rceil), E_new = mx_exponent(amax_new, rceil);
      r.up += E_new > E_old;
      r.down += E_new < E_old;
      const long double top_old = 6.0L * std::ldexp(1.0L, E_old);
      for (std::int64_t c = c0; c < c1; ++c) {
        const std::int64_t i = row * cols + c;
        const Rounded q = round_e2m1(static_cast<long double>(w[i]) + static_cast<long double>(u[i]), E_new);
        EXPECT_EQ(static_cast<long double>(next[i]), q.value)
            << where << ": coordinate " << i << " w " << w[i] << " u " << u[i];
        r.saturated += q.saturated;
        const bool moved = q.value != static_cast<long double>(w[i]);
        if (u[i] != 0) {
          ++r.nonzero;
          if (moved) {
            ++r.applied;
          } else {
            ++r.erased;
            const bool outward = (u[i] > 0 && w[i] > 0) || (u[i] < 0 && w[i] < 0);
            if (E_new != E_old) {
              ++r.scale;
            } else if (std::fabs(static_cast<long double>(w[i])) == top_old && outward) {
              ++r.saturation;
            } else {
              ++r.grid;
            }
          }
        } else if (moved) {
          ++r.collateral;
          r.flushed += w[i] != 0 && q.value == 0;
        }
      }
    }
  }
  return r;
}

std::pair<std::int64_t, std::int64_t> shape_of(const RunConfig& c, int tensor) {
  const std::int64_t d = c.model.shape.input_dim, h = c.model.shape.hidden, o = c.model.shape.output_dim;
  switch (tensor) {
    case 0:
      return {h, d};
    case 1:
      return {1, h};
    case 2:
      return {o, h};
    default:
      return {1, o};
  }
}

TEST(RunCellBlocks, MxE2M1CountsEqualBruteForceRecount) {
  // layer1.* in mxfp4_e2m1 (floor), layer2.* in mxfp4_e2m1:rceil.
  const RunConfig cfg = block_config("mxfp4_e2m1", {{"layer2.*", "mxfp4_e2m1:rceil"}});
  Captured cap;
  const Trace t = run_cell(Kokkos::DefaultExecutionSpace(), cfg, {}, cap.hooks());
  Recount total;
  ASSERT_EQ(t.recorded_steps.size(), static_cast<std::size_t>(cfg.steps));
  for (std::size_t r = 0; r < t.recorded_steps.size(); ++r) {
    const std::int64_t step = t.recorded_steps[r];
    for (int tensor = 0; tensor < kTwoLayerTensors; ++tensor) {
      const auto key = std::make_pair(step, tensor);
      const auto [rows, cols] = shape_of(cfg, tensor);
      const GroupTrace& g = t.groups[tensor];
      const std::string where = g.name + " step " + std::to_string(step);
      const Recount c = recount_mx(cap.before.at(key), cap.proposal.at(key), cap.after.at(key), rows, cols,
                                   /*rceil=*/tensor >= 2, where);
      ASSERT_FALSE(g.block_events.empty()) << where;
      const BlockEventSeries& b = g.block_events;
      EXPECT_EQ(g.block_format, tensor >= 2 ? "mxfp4_e2m1:rceil" : "mxfp4_e2m1");
      EXPECT_EQ(b.blocks, rows * ((cols + 31) / 32)) << where;
      EXPECT_EQ(g.nonzero[r], c.nonzero) << where;
      EXPECT_EQ(g.erased[r], c.erased) << where;
      EXPECT_EQ(g.applied[r], c.applied) << where;
      EXPECT_EQ(g.saturated[r], c.saturated) << where;
      EXPECT_EQ(b.erased_grid[r], c.grid) << where;
      EXPECT_EQ(b.erased_saturation[r], c.saturation) << where;
      EXPECT_EQ(b.erased_scale[r], c.scale) << where;
      EXPECT_EQ(b.collateral[r], c.collateral) << where;
      EXPECT_EQ(b.flushed[r], c.flushed) << where;
      EXPECT_EQ(b.rescaled_up[r], c.up) << where;
      EXPECT_EQ(b.rescaled_down[r], c.down) << where;
      total.erased += c.erased;
      total.applied += c.applied;
      total.grid += c.grid;
      total.scale += c.scale;
      total.saturation += c.saturation;
      total.collateral += c.collateral;
      total.flushed += c.flushed;
      total.up += c.up;
      total.down += c.down;
    }
  }
  // Not vacuous: erasures in the grid, updates applied, rescales and collateral moves all occur.
  EXPECT_GT(total.grid, 0);
  EXPECT_GT(total.applied, 0);
  EXPECT_GT(total.up + total.down, 0);
  EXPECT_GT(total.collateral, 0);
  EXPECT_GT(total.scale, 0);
  EXPECT_GT(total.saturation, 0);
  RecordProperty("flushed", std::to_string(total.flushed));

  // The trace with its block events survives HDF5 and is a well-formed record.
  EXPECT_TRUE(trace_problems(t).empty()) << trace_problems(t).front();
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("wbaudit_run_blocks_" + std::to_string(::getpid()) + ".h5");
  write_trace(file, t);
  const Trace back = read_trace(file);
  std::filesystem::remove(file);
  for (std::size_t g = 0; g < t.groups.size(); ++g) {
    const BlockEventSeries &a = t.groups[g].block_events, &b = back.groups[g].block_events;
    EXPECT_EQ(back.groups[g].block_format, t.groups[g].block_format);
    EXPECT_EQ(a.blocks, b.blocks);
    EXPECT_EQ(a.erased_grid, b.erased_grid);
    EXPECT_EQ(a.erased_saturation, b.erased_saturation);
    EXPECT_EQ(a.erased_scale, b.erased_scale);
    EXPECT_EQ(a.collateral, b.collateral);
    EXPECT_EQ(a.flushed, b.flushed);
    EXPECT_EQ(a.rescaled_up, b.rescaled_up);
    EXPECT_EQ(a.rescaled_down, b.rescaled_down);
  }
}

TEST(RunCellBlocks, Nvfp4CountsFollowFromTheRealizedValues) {
  // nvfp4 on the weights, nvfp4:2d on layer1.weight, fp32 biases (the plain update; no block events).
  const RunConfig cfg =
      block_config("nvfp4", {{"layer1.weight", "nvfp4:2d"}, {"layer1.bias", "fp32"}, {"layer2.bias", "fp32"}});
  Captured cap;
  const Trace t = run_cell(Kokkos::DefaultExecutionSpace(), cfg, {}, cap.hooks());
  std::int64_t moved_total = 0;
  for (std::size_t r = 0; r < t.recorded_steps.size(); ++r) {
    for (int tensor = 0; tensor < kTwoLayerTensors; ++tensor) {
      const GroupTrace& g = t.groups[tensor];
      const auto key = std::make_pair(t.recorded_steps[r], tensor);
      const auto &w = cap.before.at(key), &u = cap.proposal.at(key), &next = cap.after.at(key);
      if (tensor % 2 == 1) {
        EXPECT_TRUE(g.block_events.empty()) << g.name << " is held in fp32";
        continue;
      }
      std::int64_t nonzero = 0, erased = 0, applied = 0, collateral = 0, flushed = 0;
      for (std::size_t i = 0; i < w.size(); ++i) {
        const bool moved = next[i] != w[i];
        if (u[i] != 0) {
          ++nonzero;
          erased += !moved;
          applied += moved;
        } else if (moved) {
          ++collateral;
          flushed += w[i] != 0 && next[i] == 0;
        }
      }
      const BlockEventSeries& b = g.block_events;
      const std::string where = g.name + " step " + std::to_string(t.recorded_steps[r]);
      EXPECT_EQ(g.nonzero[r], nonzero) << where;
      EXPECT_EQ(g.erased[r], erased) << where;
      EXPECT_EQ(g.applied[r], applied) << where;
      EXPECT_EQ(b.erased_grid[r] + b.erased_saturation[r] + b.erased_scale[r], erased) << where;
      EXPECT_EQ(b.collateral[r], collateral) << where;
      EXPECT_EQ(b.flushed[r], flushed) << where;
      moved_total += applied;
    }
  }
  EXPECT_GT(moved_total, 0);
  EXPECT_EQ(t.groups[0].block_events.blocks, 1 * 3);  // [10 x 40] in 16x16 tiles: 1 tile-row x 3 tile-columns
  EXPECT_EQ(t.groups[2].block_events.blocks, 3 * 1);  // [3 x 10] in 16-element blocks along rows
}

TEST(RunCellBlocks, BlockFormatsInSpecsAndTheirBadInput) {
  // target.format and group_formats accept block formats; options are checked, and block formats are not projected.
  nlohmann::json j = to_json(block_config("mxfp8_e4m3:rceil", {{"layer1.*", "nvfp4:skip_unchanged_blocks"}}));
  EXPECT_NO_THROW(run_config_from_json(j));
  j["target"]["format"] = "mxfp8_e4m3:ceil";
  try {
    run_config_from_json(j);
    ADD_FAILURE() << "an unknown scale rule was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("target.format"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("unknown scale rule \"ceil\" (known: floor, rceil)"), std::string::npos)
        << e.what();
  }
  j["target"]["format"] = "mxfp8_e4m3";
  j["target"]["group_formats"] = {{"layer2.weight", "e4m3:skip_unchanged_blocks"}};
  EXPECT_THROW(run_config_from_json(j), ConfigError);
  nlohmann::json ref = to_json(block_config("fp32", {}));
  ref["mode"] = "reference";
  ref.erase("target");
  ref["project_formats"] = {"mxfp4_e2m1", "nvfp4:2d", "e4m3"};
  EXPECT_NO_THROW(run_config_from_json(ref));
  ref["project_formats"] = {"nvfp4:3d"};
  EXPECT_THROW(run_config_from_json(ref), ConfigError);
}

// q(w) blockwise under nearest (MX E2M1, scales from w itself), by brute force.
std::vector<float> quantize_mx(const std::vector<float>& w, std::int64_t rows, std::int64_t cols, bool rceil) {
  std::vector<float> q(w.size());
  for (std::int64_t row = 0; row < rows; ++row) {
    for (std::int64_t c0 = 0; c0 < cols; c0 += 32) {
      const std::int64_t c1 = std::min(cols, c0 + 32);
      long double amax = 0;
      for (std::int64_t c = c0; c < c1; ++c) {
        amax = std::max(amax, std::fabs(static_cast<long double>(w[row * cols + c])));
      }
      const int E = mx_exponent(amax, rceil);
      for (std::int64_t c = c0; c < c1; ++c) {
        q[row * cols + c] = static_cast<float>(round_e2m1(w[row * cols + c], E).value);
      }
    }
  }
  return q;
}

TEST(RunCellBlocks, ReferenceProjectsBlockFormatsAsBruteForce) {
  // A reference run projecting mxfp4_e2m1 and mxfp4_e2m1:rceil: at each recorded step, the events of writing back
  // q(w) + u (nearest) on the fp32 state, by cause, recounted by brute force.
  RunConfig cfg = block_config("fp32", {});
  cfg.mode = RunMode::reference;
  cfg.steps = 12;
  cfg.project_formats = {"mxfp4_e2m1", "mxfp4_e2m1:rceil"};
  Captured cap;
  const Trace t = run_cell(Kokkos::DefaultExecutionSpace(), cfg, {}, cap.hooks());
  std::int64_t erased = 0, collateral = 0;
  for (std::size_t r = 0; r < t.recorded_steps.size(); ++r) {
    for (int tensor = 0; tensor < kTwoLayerTensors; ++tensor) {
      const auto key = std::make_pair(t.recorded_steps[r], tensor);
      const auto [rows, cols] = shape_of(cfg, tensor);
      const GroupTrace& g = t.groups[tensor];
      for (const bool rceil : {false, true}) {
        const std::string name = rceil ? "mxfp4_e2m1:rceil" : "mxfp4_e2m1";
        const std::string where = g.name + " step " + std::to_string(key.first) + " " + name;
        const std::vector<float> q = quantize_mx(cap.before.at(key), rows, cols, rceil);
        const std::vector<float>& u = cap.proposal.at(key);
        // The projection modifies nothing, so w' is the brute-force write-back of q(w) + u itself (recount_mx then
        // classifies each coordinate; its check of w' holds by construction here).
        std::vector<float> realized = q;
        for (std::int64_t row = 0; row < rows; ++row) {
          for (std::int64_t c0 = 0; c0 < cols; c0 += 32) {
            const std::int64_t c1 = std::min(cols, c0 + 32);
            long double amax = 0;
            for (std::int64_t c = c0; c < c1; ++c) {
              const std::int64_t i = row * cols + c;
              amax = std::max(amax, std::fabs(static_cast<long double>(q[i]) + static_cast<long double>(u[i])));
            }
            const int E = mx_exponent(amax, rceil);
            for (std::int64_t c = c0; c < c1; ++c) {
              const std::int64_t i = row * cols + c;
              realized[i] = static_cast<float>(
                  round_e2m1(static_cast<long double>(q[i]) + static_cast<long double>(u[i]), E).value);
            }
          }
        }
        const Recount c = recount_mx(q, u, realized, rows, cols, rceil, where);
        const ProjectedSeries& p = g.projected.at(name);
        const BlockEventSeries& b = p.block_events;
        EXPECT_EQ(p.erased[r], c.erased) << where;
        EXPECT_EQ(b.blocks, rows * ((cols + 31) / 32)) << where;
        EXPECT_EQ(b.erased_grid[r], c.grid) << where;
        EXPECT_EQ(b.erased_saturation[r], c.saturation) << where;
        EXPECT_EQ(b.erased_scale[r], c.scale) << where;
        EXPECT_EQ(b.collateral[r], c.collateral) << where;
        EXPECT_EQ(b.flushed[r], c.flushed) << where;
        EXPECT_EQ(b.rescaled_up[r], c.up) << where;
        EXPECT_EQ(b.rescaled_down[r], c.down) << where;
        erased += c.erased;
        collateral += c.collateral;
      }
    }
  }
  EXPECT_GT(erased, 0);
  EXPECT_GT(collateral, 0);
  EXPECT_TRUE(trace_problems(t).empty()) << trace_problems(t).front();
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("wbaudit_ref_blocks_" + std::to_string(::getpid()) + ".h5");
  write_trace(file, t);
  const Trace back = read_trace(file);
  std::filesystem::remove(file);
  const BlockEventSeries &a = t.groups[2].projected.at("mxfp4_e2m1:rceil").block_events,
                         &b = back.groups[2].projected.at("mxfp4_e2m1:rceil").block_events;
  EXPECT_EQ(a.blocks, b.blocks);
  EXPECT_EQ(a.erased_scale, b.erased_scale);
  EXPECT_EQ(a.collateral, b.collateral);
  EXPECT_EQ(a.rescaled_down, b.rescaled_down);
}

TEST(RunCellBlocks, ReferenceRecordsExpectedProjectionsOfBlockFormats) {
  // project_policies reach block formats: at each recorded step, projected/<block format>/expected/<policy> holds
  // expected_block_erasure of the captured state (tested against every draw of the real write-back in
  // tests/sim/precision/test_block_expected.cpp), laid out as for a per-tensor format; the streamed file equals the
  // trace in memory and reads back the same values.
  RunConfig cfg = block_config("fp32", {});
  cfg.mode = RunMode::reference;
  cfg.steps = 8;
  cfg.project_formats = {"mxfp4_e2m1", "nvfp4:2d", "mxint8:rceil", "e4m3"};
  cfg.project_policies = {{Policy::stochastic, 0}, {Policy::stochastic, 4}, {Policy::deadzone_sr, 0}};
  Captured cap;
  const Trace t = run_cell(Kokkos::DefaultExecutionSpace(), cfg, {}, cap.hooks());
  auto view = [](const std::vector<float>& v) {
    Kokkos::View<float*> out("wbaudit::test::run_blocks::v", v.size());
    auto h = Kokkos::create_mirror_view(out);
    for (std::size_t i = 0; i < v.size(); ++i) h(i) = v[i];
    Kokkos::deep_copy(out, h);
    return Kokkos::View<const float*>(out);
  };
  bool differs_from_nearest = false;
  for (int tensor = 0; tensor < kTwoLayerTensors; ++tensor) {
    const GroupTrace& g = t.groups[tensor];
    const auto [rows, cols] = shape_of(cfg, tensor);
    for (const char* name : {"mxfp4_e2m1", "nvfp4:2d", "mxint8:rceil"}) {
      const ProjectedSeries& p = g.projected.at(name);
      ASSERT_EQ(p.expected.size(), cfg.project_policies.size()) << g.name << " " << name;
      for (const WritebackPolicy& policy : cfg.project_policies) {
        const std::string where = g.name + " " + name + " " + projection_name(policy);
        const ExpectedSeries& e = p.expected.at(projection_name(policy));
        ASSERT_EQ(e.erased.size(), t.recorded_steps.size()) << where;
        ASSERT_EQ(e.fraction.size(), t.recorded_steps.size()) << where;
        ASSERT_TRUE(g.projected.at("e4m3").expected.contains(projection_name(policy))) << where;
        for (std::size_t r = 0; r < t.recorded_steps.size(); ++r) {
          const std::int64_t step = t.recorded_steps[r];
          const auto key = std::make_pair(step, tensor);
          const ExpectedErasure want = expected_block_erasure(
              block_format_from_name(name), policy,
              RngKey{cfg.seed, static_cast<std::uint64_t>(step), static_cast<std::uint32_t>(tensor)},
              RowMajorShape{rows, cols}, view(cap.before.at(key)), view(cap.proposal.at(key)));
          EXPECT_EQ(e.erased[r], want.expected_erased) << where << " step " << step;
          EXPECT_EQ(want.nonzero, g.nonzero[r]) << where;
          if (want.nonzero > 0) {
            EXPECT_EQ(e.fraction[r], want.expected_erased / static_cast<double>(want.nonzero)) << where;
          } else {
            EXPECT_TRUE(std::isnan(e.fraction[r])) << where;
          }
          differs_from_nearest = differs_from_nearest || std::fabs(e.fraction[r] - p.fraction[r]) > 0.05;
        }
      }
    }
  }
  EXPECT_TRUE(differs_from_nearest) << "SR and nearest projections coincide: the test could not tell them apart";
  EXPECT_TRUE(trace_problems(t).empty()) << trace_problems(t).front();
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("wbaudit_ref_block_expected_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  write_trace(dir / "memory.h5", t);
  run_cell_to_file(Kokkos::DefaultExecutionSpace(), cfg, dir / "streamed.h5", {}, RunHooks{});
  std::ifstream a(dir / "memory.h5", std::ios::binary), b(dir / "streamed.h5", std::ios::binary);
  EXPECT_TRUE(std::string(std::istreambuf_iterator<char>(a), {}) == std::string(std::istreambuf_iterator<char>(b), {}))
      << "the streamed file differs from the trace in memory";
  const Trace back = read_trace(dir / "streamed.h5");
  std::filesystem::remove_all(dir);
  for (std::size_t g = 0; g < t.groups.size(); ++g) {
    for (const auto& [format, p] : t.groups[g].projected) {
      const ProjectedSeries& q = back.groups[g].projected.at(format);
      ASSERT_EQ(q.expected.size(), p.expected.size()) << format;
      for (const auto& [policy, e] : p.expected) {
        EXPECT_EQ(q.expected.at(policy).erased, e.erased) << format << " " << policy;
      }
    }
  }
}

TEST(RunCellBlocks, NonFiniteProposalNamesTensorStepAndBlock) {
  RunConfig cfg = block_config("mxfp4_e2m1", {});
  cfg.optimizer.lr = 3e38;  // proposals lr * g overflow fp32 where |g| > 1.14
  try {
    run_cell(Kokkos::DefaultExecutionSpace(), cfg, {}, RunHooks{});
    ADD_FAILURE() << "ran with non-finite proposals";
  } catch (const std::exception& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("layer"), std::string::npos) << m;
    EXPECT_NE(m.find("step 0"), std::string::npos) << m;
    EXPECT_NE(m.find("block "), std::string::npos) << m;
    RecordProperty("message", m);
  }
}

TEST(RunCellBlocks, DecoderHeldInMxfp8CountsFollowFromTheRealizedValues) {
  // The decoder on the same engine: matrices in mxfp8_e4m3 under stochastic rounding, norms in fp32; a reference
  // projecting nvfp4 and mxfp6_e2m3:rceil.
  RunConfig c;
  c.mode = RunMode::target;
  c.seed = 5;
  c.steps = 6;
  c.model.kind = "decoder";
  c.model.decoder.vocab = 16;
  c.model.decoder.width = 16;
  c.model.decoder.heads = 2;
  c.model.decoder.layers = 1;
  c.model.decoder.mlp_hidden = 40;  // rows of 40: a 32-block and a short 8-block
  c.model.decoder.seq_len = 8;
  c.model.decoder.rotary_fraction = 0.5;
  c.model.decoder.init_std = 0.1;
  c.data.batch = 2;
  c.data.source = "markov";
  c.data.markov_order = 2;
  c.data.markov_branching = 3;
  c.optimizer.kind = OptimizerKind::adam;
  c.optimizer.lr = 0.01;
  c.record.kind = RecordKind::every;
  c.target = TargetConfig{"mxfp8_e4m3", "stochastic", 0, {{"*norm*", "fp32"}}};
  Captured cap;
  const Trace t = run_cell(Kokkos::DefaultExecutionSpace(), c, {}, cap.hooks());
  std::int64_t block_groups = 0, applied_total = 0;
  for (std::size_t r = 0; r < t.recorded_steps.size(); ++r) {
    for (std::size_t tensor = 0; tensor < t.groups.size(); ++tensor) {
      const GroupTrace& g = t.groups[tensor];
      if (g.name.find("norm") != std::string::npos) {
        EXPECT_TRUE(g.block_events.empty()) << g.name;
        continue;
      }
      ASSERT_FALSE(g.block_events.empty()) << g.name;
      block_groups += r == 0;
      const auto key = std::make_pair(t.recorded_steps[r], static_cast<int>(tensor));
      const auto &w = cap.before.at(key), &u = cap.proposal.at(key), &next = cap.after.at(key);
      std::int64_t nonzero = 0, erased = 0, applied = 0, collateral = 0, flushed = 0;
      for (std::size_t i = 0; i < w.size(); ++i) {
        const bool moved = next[i] != w[i];
        if (u[i] != 0) {
          ++nonzero;
          erased += !moved;
          applied += moved;
        } else if (moved) {
          ++collateral;
          flushed += w[i] != 0 && next[i] == 0;
        }
      }
      const BlockEventSeries& b = g.block_events;
      const std::string where = g.name + " step " + std::to_string(t.recorded_steps[r]);
      EXPECT_EQ(g.nonzero[r], nonzero) << where;
      EXPECT_EQ(g.erased[r], erased) << where;
      EXPECT_EQ(g.applied[r], applied) << where;
      EXPECT_EQ(b.erased_grid[r] + b.erased_saturation[r] + b.erased_scale[r], erased) << where;
      EXPECT_EQ(b.collateral[r], collateral) << where;
      EXPECT_EQ(b.flushed[r], flushed) << where;
      applied_total += applied;
    }
  }
  EXPECT_GT(block_groups, 0);
  EXPECT_GT(applied_total, 0);
  EXPECT_TRUE(trace_problems(t).empty()) << trace_problems(t).front();

  RunConfig ref = c;
  ref.mode = RunMode::reference;
  ref.target = TargetConfig{};
  ref.project_formats = {"nvfp4", "mxfp6_e2m3:rceil"};
  const Trace rt = run_cell(Kokkos::DefaultExecutionSpace(), ref, {}, RunHooks{});
  for (const GroupTrace& g : rt.groups) {
    for (const char* f : {"nvfp4", "mxfp6_e2m3:rceil"}) {
      const ProjectedSeries& p = g.projected.at(f);
      ASSERT_EQ(p.erased.size(), rt.recorded_steps.size()) << g.name << " " << f;
      for (std::size_t r = 0; r < p.erased.size(); ++r) {
        const BlockEventSeries& b = p.block_events;
        EXPECT_EQ(b.erased_grid[r] + b.erased_saturation[r] + b.erased_scale[r], p.erased[r]) << g.name << " " << f;
        EXPECT_LE(p.erased[r], g.nonzero[r]) << g.name << " " << f;
      }
    }
  }
}

}  // namespace

namespace {

std::string file_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void expect_same_block_events(const BlockEventSeries& a, const BlockEventSeries& b, const std::string& where) {
  EXPECT_EQ(a.blocks, b.blocks) << where;
  for (const BlockEventField& f : kBlockEventFields) EXPECT_EQ(a.*f.series, b.*f.series) << where << " " << f.name;
}

}  // namespace

TEST(RunCellBlocks, StreamedTraceEqualsTheTraceInMemory) {
  // The block events are streamed per recorded step like the other series (trace_writer.hpp): the finished file of
  // run_cell_to_file is byte for byte write_trace of run_cell's trace, for block targets (held groups and an fp32
  // group) and a reference projecting block and per-tensor formats.
  RunConfig ref = block_config("fp32", {});
  ref.mode = RunMode::reference;
  ref.steps = 6;
  ref.project_formats = {"e4m3", "mxfp4_e2m1:rceil", "nvfp4"};
  RunConfig held = block_config("mxfp4_e2m1", {{"layer1.bias", "fp32"}});
  held.steps = 9;
  held.record.kind = RecordKind::every;
  for (const RunConfig& cfg : {held, block_config("nvfp4", {}), ref}) {
    const std::string where = cfg.mode == RunMode::reference ? "reference" : cfg.target.format;
    const Trace t = run_cell(Kokkos::DefaultExecutionSpace(), cfg, {}, RunHooks{});
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("wbaudit_stream_blocks_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    write_trace(dir / "memory.h5", t);
    run_cell_to_file(Kokkos::DefaultExecutionSpace(), cfg, dir / "streamed.h5", {}, RunHooks{});
    EXPECT_FALSE(std::filesystem::exists(partial_trace_path(dir / "streamed.h5"))) << where;
    EXPECT_TRUE(file_bytes(dir / "memory.h5") == file_bytes(dir / "streamed.h5")) << where << ": the files differ";
    const Trace back = read_trace(dir / "streamed.h5");
    std::filesystem::remove_all(dir);
    ASSERT_EQ(back.groups.size(), t.groups.size());
    bool any = false;
    for (std::size_t g = 0; g < t.groups.size(); ++g) {
      const GroupTrace &a = t.groups[g], &b = back.groups[g];
      EXPECT_EQ(a.block_format, b.block_format) << where << " " << a.name;
      expect_same_block_events(a.block_events, b.block_events, where + " " + a.name);
      any = any || !a.block_events.empty();
      for (const auto& [format, p] : a.projected) {
        expect_same_block_events(p.block_events, b.projected.at(format).block_events, where + " " + format);
        EXPECT_EQ(p.block_events.empty(), format == "e4m3") << where << " " << format;
        any = any || !p.block_events.empty();
      }
    }
    EXPECT_TRUE(any) << where << ": no block events";
    EXPECT_TRUE(trace_problems(back).empty()) << where << ": " << trace_problems(back).front();
  }
}
