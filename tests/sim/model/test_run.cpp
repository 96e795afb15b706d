// run_cell end to end on small runs, checked against independent recomputations from the captured w[t], u[t]:
// fp32 target == reference, exact target counts, projected events and histogram at step 0, thread independence.
#include <gtest/gtest.h>
#include <unistd.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "format_table.hpp"
#include "sim/precision/writeback.hpp"
#include "sim/run.hpp"
#include "trace_compare.hpp"

namespace {

using namespace wbaudit::sim;
using wbaudit::test::FormatTable;

RunConfig small_config(RunMode mode) {
  RunConfig c;
  c.mode = mode;
  c.seed = 3;
  c.steps = 25;
  c.model.shape = TwoLayerShape{6, 10, 3, Activation::tanh};
  c.model.teacher_hidden = 5;
  c.model.teacher_seed = 44;
  c.data.batch = 8;
  c.data.noise = 0.05;
  c.optimizer.kind = OptimizerKind::adam;
  c.optimizer.lr = 0.5 * std::ldexp(1.0, -4);  // c = 0.5 for e4m3: a mix of erased and applied updates
  c.record.kind = RecordKind::every;
  return c;
}

struct Captured {
  std::map<std::pair<std::int64_t, int>, UpdateObservation> obs;
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

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(RunCell, Fp32NearestTargetEqualsReferenceBitwise) {
  RunConfig ref_cfg = small_config(RunMode::reference);
  ref_cfg.steps = 60;
  RunConfig tgt_cfg = ref_cfg;
  tgt_cfg.mode = RunMode::target;
  tgt_cfg.target = TargetConfig{"fp32", "nearest", 0, {}};
  Captured ref, tgt;
  const Trace rt = run_cell(Kokkos::DefaultExecutionSpace(), ref_cfg, {}, ref.hooks());
  const Trace tt = run_cell(Kokkos::DefaultExecutionSpace(), tgt_cfg, {}, tgt.hooks());
  ASSERT_EQ(ref.after.size(), tgt.after.size());
  for (const auto& [key, w] : ref.after) {
    EXPECT_TRUE(same_bits(w, tgt.after.at(key))) << "step " << key.first << " tensor " << key.second;
  }
  wbaudit::test::expect_same_doubles(rt.loss, tt.loss, "loss");
  EXPECT_LT(rt.loss.back(), rt.loss.front());  // it trains
}

void check_recount(const std::string& policy) {
  RunConfig cfg = small_config(RunMode::target);
  cfg.target = TargetConfig{"e4m3", policy, 0, {}};
  Captured cap;
  const Trace t = run_cell(Kokkos::DefaultExecutionSpace(), cfg, {}, cap.hooks());
  const FormatTable e4m3 = FormatTable::e4m3();
  std::int64_t total_erased = 0, total_nonzero = 0;
  for (std::size_t r = 0; r < t.recorded_steps.size(); ++r) {
    const std::int64_t step = t.recorded_steps[r];
    for (int tensor = 0; tensor < kTwoLayerTensors; ++tensor) {
      const auto key = std::make_pair(step, tensor);
      const auto &w = cap.before.at(key), &u = cap.proposal.at(key), &next = cap.after.at(key);
      std::int64_t nonzero = 0, erased = 0, saturated = 0, applied = 0;
      for (std::size_t i = 0; i < w.size(); ++i) {
        ASSERT_EQ(e4m3.nearest(w[i]), static_cast<double>(w[i])) << "w not in e4m3";
        const long double sum = static_cast<long double>(w[i]) + static_cast<long double>(u[i]);
        const double q = e4m3.nearest(sum);
        if (std::fabs(sum) > e4m3.max_finite()) {
          ++saturated;
        }
        if (next[i] != w[i]) {
          ++applied;
        }
        if (u[i] != 0.0f) {
          ++nonzero;
          if (policy == "nearest") {
            if (q == static_cast<double>(w[i])) {
              ++erased;
            }
          } else if (next[i] == w[i]) {
            ++erased;
          }
        }
        if (policy == "nearest") {
          EXPECT_EQ(static_cast<double>(next[i]), q) << "step " << step << " tensor " << tensor << " i " << i;
        } else {  // SR lands on one of the two neighbours of w + u
          const double lo = std::min(q, static_cast<double>(next[i])), hi = std::max(q, static_cast<double>(next[i]));
          EXPECT_TRUE(next[i] == q || (lo <= sum && sum <= hi)) << "step " << step << " i " << i;
        }
      }
      const GroupTrace& g = t.groups[tensor];
      EXPECT_EQ(g.nonzero[r], nonzero) << g.name << " step " << step;
      EXPECT_EQ(g.erased[r], erased) << g.name << " step " << step;
      EXPECT_EQ(g.saturated[r], saturated) << g.name << " step " << step;
      EXPECT_EQ(g.applied[r], applied) << g.name << " step " << step;
      if (nonzero > 0) {
        EXPECT_DOUBLE_EQ(g.erased_fraction[r], static_cast<double>(erased) / nonzero);
      }
      total_erased += erased;
      total_nonzero += nonzero;
    }
  }
  // Not vacuous: some updates are erased and some are not.
  EXPECT_GT(total_erased, 0);
  EXPECT_LT(total_erased, total_nonzero);
}

TEST(RunCell, TargetCountsEqualIndependentRecountNearest) {
  check_recount("nearest");
}
TEST(RunCell, TargetCountsEqualIndependentRecountStochastic) {
  check_recount("stochastic");
}

TEST(RunCell, ProjectionAndHistogramAtStepZeroEqualPlainRecomputation) {
  RunConfig cfg = small_config(RunMode::reference);
  cfg.record = RecordConfig{RecordKind::log, 1, 8};
  cfg.project_formats = {"bf16", "e4m3", "e5m2"};
  cfg.optimizer.lr = 2e-3;  // between the formats' thresholds: each projects a different erased share
  Captured cap;
  const Trace t = run_cell(Kokkos::DefaultExecutionSpace(), cfg, {}, cap.hooks());
  ASSERT_EQ(t.recorded_steps.front(), 0);
  const std::map<std::string, FormatTable> tables = {
      {"bf16", FormatTable::bf16()}, {"e4m3", FormatTable::e4m3()}, {"e5m2", FormatTable::e5m2()}};
  const RatioHistogramLayout layout = t.histogram;
  for (int tensor = 0; tensor < kTwoLayerTensors; ++tensor) {
    const auto &w = cap.before.at({0, tensor}), &u = cap.proposal.at({0, tensor});
    const GroupTrace& g = t.groups[tensor];
    std::int64_t nonzero = 0, zero_weight = 0;
    std::vector<std::int64_t> hist(layout.bins, 0);
    for (std::size_t i = 0; i < w.size(); ++i) {
      if (u[i] == 0.0f) {
        continue;
      }
      ++nonzero;
      if (w[i] == 0.0f) {
        ++zero_weight;
        continue;
      }
      int e = 0;
      std::frexp(static_cast<double>(w[i]), &e);  // |w| in [2^(e-1), 2^e): floor(log2|w|) = e - 1
      const double d = (e - 1) - std::log2(std::fabs(static_cast<double>(u[i])));
      const long b = static_cast<long>(std::floor((d - layout.d_min) / layout.bin_width));
      ++hist[std::clamp<long>(b, 0, layout.bins - 1)];
    }
    EXPECT_EQ(g.nonzero[0], nonzero);
    EXPECT_EQ(g.zero_weight[0], zero_weight);
    EXPECT_EQ(std::vector<std::int64_t>(g.ratio_histogram.begin(), g.ratio_histogram.begin() + layout.bins), hist)
        << g.name;
    for (const auto& [name, table] : tables) {
      std::int64_t erased = 0;
      for (std::size_t i = 0; i < w.size(); ++i) {
        const double qw = table.nearest(w[i]);
        if (u[i] != 0.0f && table.nearest(static_cast<long double>(qw) + u[i]) == qw) {
          ++erased;
        }
      }
      EXPECT_EQ(g.projected.at(name).erased[0], erased) << g.name << " " << name;
      EXPECT_DOUBLE_EQ(g.projected.at(name).fraction[0], static_cast<double>(erased) / nonzero)
          << g.name << " " << name;
    }
  }
  // Not vacuous: e4m3 projects some erasure on layer1.weight and bf16 projects less of it.
  const GroupTrace& l1 = t.group("layer1.weight");
  EXPECT_GT(l1.projected.at("e4m3").erased[0], 0);
  EXPECT_LT(l1.projected.at("bf16").erased[0], l1.projected.at("e4m3").erased[0]);
}

// The per-policy projections of a reference trace (project_policies): at every recorded step, for each format and
// policy, the expected erased fraction equals the sum over coordinates of P(q(q(w) + u) == q(w)) worked out by hand
// from the captured state and the table of the format's values (neighbours toward / away from zero, the exact or
// r-bit truncated probability of moving away).
// margin_formats: the reference's margin histogram holds those formats only, in the default's order; each of their
// blocks (counters and moments) equals the default recording's block of that format at every step and tensor, and
// everything else the trace holds is the default's.
TEST(RunCell, MarginFormatsRecordTheirBlocksOfTheDefaultRecording) {
  RunConfig cfg = small_config(RunMode::reference);
  cfg.project_formats = {"bf16", "e4m3", "int4"};
  const Trace all = run_cell(Kokkos::DefaultExecutionSpace(), cfg);
  cfg.margin_formats = {"int4", "e4m3"};
  const Trace some = run_cell(Kokkos::DefaultExecutionSpace(), cfg);
  ASSERT_EQ(some.margin.formats, (std::vector<std::string>{"e4m3", "int4"}));
  ASSERT_EQ(all.margin.formats.size(), 14u);
  const auto block = static_cast<std::size_t>(all.margin.rows.block());
  const auto moments = static_cast<std::size_t>(all.margin.rows.moments());
  ASSERT_EQ(some.recorded_steps, all.recorded_steps);
  for (std::size_t g = 0; g < all.groups.size(); ++g) {
    const GroupTrace &a = all.groups[g], &b = some.groups[g];
    EXPECT_EQ(b.nonzero, a.nonzero);
    EXPECT_EQ(b.ratio_histogram, a.ratio_histogram);
    for (const auto& f : cfg.project_formats) {
      EXPECT_EQ(b.projected.at(f).erased, a.projected.at(f).erased) << a.name << " " << f;
    }
    ASSERT_EQ(b.margin.size(), all.recorded_steps.size() * some.margin.bins());
    for (std::size_t t = 0; t < all.recorded_steps.size(); ++t) {
      const std::int64_t* x = a.margin.data() + t * all.margin.bins();
      const std::int64_t* y = b.margin.data() + t * some.margin.bins();
      for (std::size_t f = 0; f < some.margin.formats.size(); ++f) {
        const auto& names = all.margin.formats;
        const auto k =
            static_cast<std::size_t>(std::find(names.begin(), names.end(), some.margin.formats[f]) - names.begin());
        for (std::size_t i = 0; i < block; ++i) {
          ASSERT_EQ(y[f * block + i], x[k * block + i]) << a.name << " step " << t << " " << names[k] << " " << i;
        }
        for (std::size_t i = 0; i < moments; ++i) {
          ASSERT_EQ(y[some.margin.moments_begin() + f * moments + i], x[all.margin.moments_begin() + k * moments + i])
              << a.name << " step " << t << " " << names[k] << " moment " << i;
        }
      }
    }
  }
}

TEST(RunCell, ExpectedProjectionsPerPolicyEqualHandComputedProbabilities) {
  RunConfig cfg = small_config(RunMode::reference);
  cfg.record = RecordConfig{RecordKind::log, 1, 6};
  cfg.project_formats = {"bf16", "e4m3"};
  cfg.project_policies = {{Policy::stochastic, 0}, {Policy::stochastic, 4}};
  cfg.optimizer.lr = 2e-3;
  Captured cap;
  const Trace t = run_cell(Kokkos::DefaultExecutionSpace(), cfg, {}, cap.hooks());
  const std::map<std::string, FormatTable> tables = {{"bf16", FormatTable::bf16()}, {"e4m3", FormatTable::e4m3()}};
  bool differs_from_nearest = false;
  for (std::size_t k = 0; k < t.recorded_steps.size(); ++k) {
    const std::int64_t step = t.recorded_steps[k];
    for (int tensor = 0; tensor < kTwoLayerTensors; ++tensor) {
      const auto &w = cap.before.at({step, tensor}), &u = cap.proposal.at({step, tensor});
      const GroupTrace& g = t.groups[tensor];
      for (const auto& [name, table] : tables) {
        const auto& mags = table.values;  // ascending magnitudes, 0 first
        for (int r : {0, 4}) {
          long double expected = 0;
          std::int64_t nonzero = 0;
          for (std::size_t i = 0; i < w.size(); ++i) {
            if (u[i] == 0.0f) continue;
            ++nonzero;
            const double qw = table.nearest(w[i]);
            const long double x = static_cast<long double>(qw) + u[i];
            const long double a = std::fabs(x);
            const double sign = x < 0 ? -1.0 : 1.0;
            if (a > mags.back()) {
              expected += sign * mags.back() == qw;
              continue;
            }
            const std::size_t hi = std::upper_bound(mags.begin(), mags.end(), static_cast<double>(a)) - mags.begin();
            std::size_t h = hi;
            while (h > 0 && static_cast<long double>(mags[h - 1]) > a) --h;
            while (h < mags.size() && static_cast<long double>(mags[h]) <= a) ++h;
            const double toward = mags[h - 1];                    // largest magnitude <= |x|
            if (static_cast<long double>(toward) == a) continue;  // on the grid: x != qw, applied
            const double away = mags[h];
            long double p = (a - toward) / (static_cast<long double>(away) - toward);
            if (r > 0) p = std::floor(std::ldexp(p, r)) / std::ldexp(1.0L, r);
            expected += (sign * toward == qw ? 1 - p : 0) + (sign * away == qw ? p : 0);
          }
          const std::string key = r == 0 ? "stochastic" : "stochastic-r" + std::to_string(r);
          const auto& series = g.projected.at(name).expected.at(key);
          ASSERT_EQ(series.fraction.size(), t.recorded_steps.size());
          EXPECT_NEAR(series.erased[k], static_cast<double>(expected), 1e-9) << g.name << " " << name << " " << key;
          EXPECT_NEAR(series.fraction[k], static_cast<double>(expected) / nonzero, 1e-12);
          differs_from_nearest =
              differs_from_nearest || std::fabs(series.fraction[k] - g.projected.at(name).fraction[k]) > 0.05;
        }
      }
    }
  }
  EXPECT_TRUE(differs_from_nearest) << "SR and nearest projections coincide: the test could not tell them apart";
}

TEST(RunCell, BitwiseIdenticalOnSerialAndOpenMP) {
  std::vector<RunConfig> configs;
  RunConfig ref = small_config(RunMode::reference);
  ref.model.shape = TwoLayerShape{16, 64, 4, Activation::tanh};
  ref.data.batch = 32;
  ref.steps = 120;
  ref.record = RecordConfig{RecordKind::every_k, 7, 2};
  ref.project_formats = {"bf16", "e4m3", "int4"};
  configs.push_back(ref);
  RunConfig sr = ref;
  sr.mode = RunMode::target;
  sr.project_formats.clear();
  sr.target = TargetConfig{"e4m3", "stochastic", 0, {}};
  configs.push_back(sr);
  RunConfig packed = sr;
  packed.target = TargetConfig{"e4m3", "stochastic", 8, {}, "philox-packed"};
  configs.push_back(packed);
  RunConfig master = sr;
  master.target = TargetConfig{"e5m2", "master", 0, {}};
  master.optimizer.kind = OptimizerKind::adamw;
  master.optimizer.weight_decay = 0.01;
  master.schedule.kind = ScheduleKind::cosine_restarts;
  master.schedule.period = 40;
  configs.push_back(master);
  for (const RunConfig& cfg : configs) {
    const Trace serial = run_cell(Kokkos::Serial(), cfg);
    const Trace parallel = run_cell(Kokkos::DefaultExecutionSpace(), cfg);
    SCOPED_TRACE(to_json(cfg).dump());
    wbaudit::test::expect_same_trace(serial, parallel);
  }
}

// The opt-in stream philox-packed is what the run uses: the same r-bit SR run from the default stream and from
// philox-packed lands on different neighbours (same seed), and each equals the write-back of its own stream
// recomputed coordinate by coordinate from the captured w and u.
TEST(RunCell, TargetRunUsesItsNamedSrStream) {
  std::map<std::string, Captured> caps;
  for (const std::string stream : {"philox", "philox-packed"}) {
    RunConfig cfg = small_config(RunMode::target);
    cfg.steps = 20;
    cfg.target = TargetConfig{"e4m3", "stochastic", 8, {}, stream};
    run_cell(Kokkos::DefaultExecutionSpace(), cfg, {}, caps[stream].hooks());
  }
  std::int64_t differ = 0, checked = 0;
  const FormatParams p = format_params(format_from_name("e4m3"));
  for (const auto& [stream, cap] : caps) {
    const WritebackPolicy pol = make_policy("stochastic", 8, stream);
    for (const auto& [key, next] : cap.after) {
      const auto &w = cap.before.at(key), &u = cap.proposal.at(key);
      for (std::size_t i = 0; i < w.size(); ++i) {
        const RngKey rk{small_config(RunMode::target).seed, static_cast<std::uint64_t>(key.first),
                        static_cast<std::uint32_t>(key.second)};
        ASSERT_EQ(next[i], writeback_value(p, pol, rk, i, w[i], u[i]).value)
            << stream << " step " << key.first << " tensor " << key.second << " i " << i;
        ++checked;
      }
    }
  }
  for (const auto& [key, next] : caps["philox"].after) {
    const auto& other = caps["philox-packed"].after.at(key);
    for (std::size_t i = 0; i < next.size(); ++i) differ += next[i] != other[i];
  }
  EXPECT_GT(checked, 0);
  EXPECT_GT(differ, 0);
}

TEST(RunCell, IntegerTargetUsesPerTensorScale) {
  RunConfig cfg = small_config(RunMode::target);
  cfg.target = TargetConfig{"int4", "nearest", 0, {}};
  Captured cap;
  const Trace t = run_cell(Kokkos::DefaultExecutionSpace(), cfg, {}, cap.hooks());
  for (int tensor = 0; tensor < kTwoLayerTensors; ++tensor) {
    // Initial weights sit on at most 15 symmetric levels s * n, n in -7..7.
    std::vector<float> levels = cap.before.at({0, tensor});
    std::sort(levels.begin(), levels.end());
    levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
    EXPECT_LE(levels.size(), 15u) << t.groups[tensor].name;
    const GroupTrace& g = t.groups[tensor];
    for (std::size_t r = 0; r < g.erased.size(); ++r) {
      EXPECT_LE(g.erased[r], g.nonzero[r]);
    }
  }
}

TEST(RunCell, NonFiniteProposalNamesTensorAndStep) {
  for (RunMode mode : {RunMode::reference, RunMode::target}) {
    RunConfig cfg = small_config(mode);
    if (mode == RunMode::target) {
      cfg.target = TargetConfig{"bf16", "nearest", 0, {}};
    }
    cfg.optimizer.kind = OptimizerKind::sgd;
    cfg.optimizer.lr = 1e37;
    try {
      run_cell(Kokkos::DefaultExecutionSpace(), cfg);
      FAIL() << "no error";
    } catch (const std::runtime_error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("tensor layer"), std::string::npos) << m;
      EXPECT_NE(m.find("at step "), std::string::npos) << m;
    }
  }
}

TEST(RunCell, RunTraceRoundTripsThroughHdf5) {
  RunConfig cfg = small_config(RunMode::reference);
  cfg.project_formats = {"e4m3", "int8"};
  const Trace t = run_cell(Kokkos::DefaultExecutionSpace(), cfg);
  const auto dir = std::filesystem::temp_directory_path() / ("wbaudit_run_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  write_trace(dir / "trace.h5", t);
  wbaudit::test::expect_same_trace(t, read_trace(dir / "trace.h5"));
  EXPECT_EQ(run_config_from_json(nlohmann::json::parse(t.config_json)).project_formats, cfg.project_formats);
  std::filesystem::remove_all(dir);
}

}  // namespace
