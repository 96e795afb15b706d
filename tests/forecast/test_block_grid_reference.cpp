// The grid of block-scaled formats (forecast/joint_grid.hpp, sim/trace/block_sample.hpp) against brute-force exact
// projections of real fp32 reference runs generated here: at every recorded step and learning-rate scale, the
// reference's w and u as the observation hook saw them (not the trace's copy), q(w) + fl32(s u) written back for the
// WHOLE tensor with sim::block_project, erased / nonzero. Exactly equal where a tensor's blocks are all sampled and,
// for a sampled tensor, at its anchor scales (where the reference records the exact projection); within 0.01 (the
// issue's target) elsewhere, at every recorded step (Adam's first included). Also: the trace does not depend on the
// execution space or thread count, and a reference without a sample is refused by name. Prints the worst |grid - exact|
// per format and scale (docs/forecasting.md, "Block formats at any learning-rate scale").
#include <gtest/gtest.h>

#include <unistd.h>
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "forecast/error.hpp"
#include "forecast/joint_grid.hpp"
#include "sim/precision/block_writeback.hpp"
#include "sim/precision/storage_format.hpp"
#include "sim/run.hpp"
#include "sim/trace/block_sample.hpp"

namespace wbaudit::forecast {
namespace {

const std::vector<std::string> kBlockFormats = {"mxfp8_e4m3", "mxfp4_e2m1", "mxfp4_e2m1:rceil", "nvfp4"};
const std::vector<double> kScales = {0.18, 0.25, 0.3, 0.5, 0.7, 1.0, 1.3, 1.7, 2.0, 2.8, 3.0, 4.0, 5.6};

sim::RunConfig two_layer(int input, int hidden, std::int64_t steps, std::int64_t every) {
  sim::RunConfig c;
  c.mode = sim::RunMode::reference;
  c.seed = 3;
  c.steps = steps;
  c.model.shape = {input, hidden, 4, sim::Activation::tanh};
  c.data.batch = 32;
  c.optimizer.kind = sim::OptimizerKind::adam;
  c.optimizer.lr = 4e-3;
  c.record.kind = sim::RecordKind::every_k;
  c.record.k = every;
  c.project_formats = kBlockFormats;
  return c;
}

sim::RunConfig decoder() {
  sim::RunConfig c;
  c.mode = sim::RunMode::reference;
  c.seed = 1;
  c.steps = 24;
  c.model.kind = "decoder";
  c.model.decoder = {};
  c.model.decoder.vocab = 64;
  c.model.decoder.width = 128;
  c.model.decoder.heads = 2;
  c.model.decoder.layers = 1;
  c.model.decoder.mlp_hidden = 160;  // attn.qkv [384 x 128]: MX 1536 blocks, NVFP4 3072 (sampled)
  c.model.decoder.seq_len = 8;
  c.model.decoder.init_std = 0.05;
  c.data.batch = 2;
  c.data.source = "markov";
  c.optimizer.kind = sim::OptimizerKind::adam;
  c.optimizer.lr = 3e-3;
  c.record.kind = sim::RecordKind::every_k;
  c.record.k = 6;
  c.project_formats = kBlockFormats;
  return c;
}

using Seen = std::map<std::pair<std::int64_t, int>, std::pair<std::vector<float>, std::vector<float>>>;

sim::Trace run_seen(const sim::RunConfig& cfg, Seen& seen) {
  sim::RunHooks hooks;
  hooks.on_update = [&](const sim::UpdateObservation& o) {
    seen[{o.step, o.tensor}] = {{o.weight_before.begin(), o.weight_before.end()},
                                {o.proposal.begin(), o.proposal.end()}};
  };
  return sim::run_cell(Kokkos::DefaultExecutionSpace(), cfg, {}, hooks);
}

// The brute force: q(w) + fl32(s u) written back for the whole tensor (block_project).
sim::BlockWritebackCounts exact_counts(const std::string& format, const sim::RowMajorShape& shape,
                                       const std::vector<float>& w, const std::vector<float>& u, double scale) {
  const sim::StorageFormat f = sim::storage_format_from_name(format);
  std::vector<float> us(u.size());
  for (std::size_t i = 0; i < u.size(); ++i) {
    us[i] = static_cast<float>(scale * static_cast<double>(u[i]));
  }
  using Unmanaged = Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>;
  return sim::block_project(Kokkos::Serial(), f.blocks, sim::RngKey{}, shape,
                            Kokkos::View<const float*, Kokkos::HostSpace>(Unmanaged(w.data(), w.size())),
                            Kokkos::View<const float*, Kokkos::HostSpace>(Unmanaged(us.data(), us.size())));
}

// Its erased / nonzero (NaN when nonzero == 0).
double exact_fraction(const std::string& format, const sim::RowMajorShape& shape, const std::vector<float>& w,
                      const std::vector<float>& u, double scale) {
  const sim::BlockWritebackCounts c = exact_counts(format, shape, w, u, scale);
  return c.nonzero == 0 ? std::nan("") : static_cast<double>(c.erased) / static_cast<double>(c.nonzero);
}

struct Worst {
  std::map<std::pair<std::string, double>, double> d, later;  // every recorded step; steps after 0
  int sampled = 0, whole = 0;
  int anchors = 0;  // (sampled tensor, step, anchor) checked
};

// Compares the grid of every group, format and scale with the brute force; `tolerance` for groups whose sample is a
// strict subset (0 where every block is sampled: exact equality).
void compare(const std::string& label, const sim::Trace& trace, const Seen& seen, double tolerance, Worst& worst) {
  for (const auto& g : trace.groups) {
    const FormatGrid grid = format_grid(trace, g.name, kBlockFormats, kScales);
    for (std::size_t f = 0; f < kBlockFormats.size(); ++f) {
      const sim::BlockSample& sample = g.projected.at(kBlockFormats[f]).block_sample;
      const sim::RowMajorShape shape{sample.rows, sample.cols};
      ASSERT_EQ(shape.size(), g.size) << g.name;
      const sim::StorageFormat storage = sim::storage_format_from_name(kBlockFormats[f]);
      const bool all = static_cast<std::int64_t>(sample.blocks.size()) == sim::block_count(storage.blocks, shape);
      (all ? worst.whole : worst.sampled) += 1;
      // A sampled tensor's anchors: the exact whole-tensor projection at each anchor scale, recorded count for count,
      // and the grid there equals it.
      EXPECT_EQ(sample.anchor_scales.empty(), all) << label << " " << g.name << " " << kBlockFormats[f];
      if (!all) {
        const std::vector<std::string> one_format = {kBlockFormats[f]};
        const FormatGrid at_anchors = format_grid(trace, g.name, one_format, sample.anchor_scales);
        for (std::size_t a = 0; a < sample.anchor_scales.size(); ++a) {
          for (std::size_t t = 0; t < trace.recorded_steps.size(); ++t) {
            const auto& [w, u] = seen.at({trace.recorded_steps[t], static_cast<int>(g.tensor_id)});
            const sim::BlockWritebackCounts exact =
                exact_counts(kBlockFormats[f], shape, w, u, sample.anchor_scales[a]);
            const sim::BlockWritebackCounts recorded = sim::block_sample_anchor(sample, t, a);
            const std::string where = label + " " + g.name + " " + kBlockFormats[f] + " anchor " +
                                      std::to_string(sample.anchor_scales[a]) + " step " +
                                      std::to_string(trace.recorded_steps[t]);
            EXPECT_EQ(recorded.nonzero, exact.nonzero) << where;
            EXPECT_EQ(recorded.erased, exact.erased) << where;
            EXPECT_EQ(recorded.erased_grid, exact.erased_grid) << where;
            EXPECT_EQ(recorded.erased_saturation, exact.erased_saturation) << where;
            EXPECT_EQ(recorded.erased_scale, exact.erased_scale) << where;
            if (exact.nonzero > 0) {
              EXPECT_EQ(at_anchors.at(0, a, t), static_cast<double>(exact.erased) / static_cast<double>(exact.nonzero))
                  << where;
            }
            ++worst.anchors;
          }
        }
      }
      for (std::size_t k = 0; k < kScales.size(); ++k) {
        for (std::size_t t = 0; t < trace.recorded_steps.size(); ++t) {
          const auto& [w, u] = seen.at({trace.recorded_steps[t], static_cast<int>(g.tensor_id)});
          const double exact = exact_fraction(kBlockFormats[f], shape, w, u, kScales[k]);
          const double got = grid.at(f, k, t);
          const std::string where = label + " " + g.name + " " + kBlockFormats[f] + " s " + std::to_string(kScales[k]) +
                                    " step " + std::to_string(trace.recorded_steps[t]);
          if (std::isnan(exact)) {
            EXPECT_TRUE(std::isnan(got)) << where;
            continue;
          }
          const bool anchor = std::find(sample.anchor_scales.begin(), sample.anchor_scales.end(), kScales[k]) !=
                              sample.anchor_scales.end();
          if (all || anchor) {
            EXPECT_EQ(got, exact) << where;
          } else {
            // Step 0 (Adam's first step, every |u| the learning rate) included: a block is erased or not almost whole
            // there, and the s = 1 anchor alone missed the target (0.0108 at s = 4 on the two-layer's
            // mxfp4_e2m1:rceil); the anchor nearest to s meets it (docs/forecasting.md).
            EXPECT_LE(std::abs(got - exact), tolerance) << where << ": grid " << got << " exact " << exact;
          }
          double& m = worst.d[{label + " " + kBlockFormats[f], kScales[k]}];
          m = std::max(m, std::abs(got - exact));
          if (trace.recorded_steps[t] > 0) {
            double& m1 = worst.later[{label + " " + kBlockFormats[f], kScales[k]}];
            m1 = std::max(m1, std::abs(got - exact));
          }
          if (kScales[k] == 1.0) {  // the engine's own projection at s = 1
            const double recorded = g.projected.at(kBlockFormats[f]).fraction[t];
            EXPECT_EQ(exact, recorded) << where;
          }
        }
      }
    }
  }
}

void print(const Worst& worst, bool later) {
  std::printf("  worst |grid - exact|%s (sampled tensors %d, whole %d)\n  %-28s", later ? ", steps after 0" : "",
              worst.sampled, worst.whole, "");
  for (const double s : kScales) std::printf(" %7g", s);
  std::printf("\n");
  std::string last;
  for (const auto& [key, d] : later ? worst.later : worst.d) {
    if (key.first != last) {
      std::printf("%s  %-28s", last.empty() ? "" : "\n", key.first.c_str());
      last = key.first;
    }
    std::printf(" %7.4f", d);
  }
  std::printf("\n");
}

// (1) Tensors of at most the budget's blocks: the grid is the exact projection at every scale (and nvfp4:2d too).
TEST(BlockGridReference, WholeSampleEqualsTheExactProjectionAtEveryScale) {
  sim::RunConfig cfg = two_layer(16, 64, 40, 10);
  Seen seen;
  const sim::Trace trace = run_seen(cfg, seen);
  Worst worst;
  compare("two-layer small", trace, seen, 0.0, worst);
  EXPECT_EQ(worst.sampled, 0);
  EXPECT_GT(worst.whole, 0);
  // nvfp4:2d's tiles, through the same path
  cfg.project_formats = {"nvfp4:2d"};
  Seen seen2;
  const sim::Trace t2 = run_seen(cfg, seen2);
  const std::vector<std::string> f2 = {"nvfp4:2d"};
  for (const auto& g : t2.groups) {
    const FormatGrid grid = format_grid(t2, g.name, f2, kScales);
    const sim::BlockSample& sample = g.projected.at("nvfp4:2d").block_sample;
    for (std::size_t k = 0; k < kScales.size(); ++k) {
      for (std::size_t t = 0; t < t2.recorded_steps.size(); ++t) {
        const auto& [w, u] = seen2.at({t2.recorded_steps[t], static_cast<int>(g.tensor_id)});
        const double exact = exact_fraction("nvfp4:2d", {sample.rows, sample.cols}, w, u, kScales[k]);
        if (std::isnan(exact)) continue;
        EXPECT_EQ(grid.at(0, k, t), exact) << g.name << " nvfp4:2d s " << kScales[k];
      }
    }
  }
}

// (2) Real references with sampled tensors: within 0.01 at every recorded step and scale.
TEST(BlockGridReference, WithinTargetOnTwoLayerAndDecoderReferences) {
  Worst worst;
  {
    Seen seen;
    // layer1.weight [1024 x 48]: 2048 MX blocks (1024 sampled), 3072 NVFP4 blocks (2048 sampled)
    const sim::Trace trace = run_seen(two_layer(48, 1024, 120, 12), seen);
    compare("two-layer", trace, seen, 0.01, worst);
  }
  {
    Seen seen;
    const sim::Trace trace = run_seen(decoder(), seen);
    compare("decoder", trace, seen, 0.01, worst);
  }
  EXPECT_GT(worst.sampled, 0) << "no tensor had a strict sample";
  EXPECT_GT(worst.anchors, 0) << "no anchor checked";
  print(worst, false);
  print(worst, true);
}

std::string bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// (3) The trace with block samples is the same file on the Serial space and at this test's thread count (the ctest
// entries run 1 and 2 threads), and streamed to disk it is the file write_trace writes.
TEST(BlockGridReference, TraceIsTheSameOnEveryExecutionSpaceAndStreamed) {
  const sim::RunConfig cfg = two_layer(48, 1024, 12, 4);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("wbaudit_block_grid_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  sim::write_trace(dir / "default.h5", sim::run_cell(Kokkos::DefaultExecutionSpace(), cfg, {}, {}));
  sim::write_trace(dir / "serial.h5", sim::run_cell(Kokkos::Serial(), cfg, {}, {}));
  sim::run_cell_to_file(Kokkos::DefaultExecutionSpace(), cfg, dir / "streamed.h5", {}, {});
  EXPECT_TRUE(bytes(dir / "default.h5") == bytes(dir / "serial.h5"));
  EXPECT_TRUE(bytes(dir / "default.h5") == bytes(dir / "streamed.h5"));
  // read back: the grid from the file equals the grid from memory
  const sim::Trace back = sim::read_trace(dir / "streamed.h5");
  const sim::TraceReader reader(dir / "streamed.h5");
  for (const auto& g : back.groups) {
    const FormatGrid a = format_grid(back, g.name, kBlockFormats, kScales);
    const FormatGrid b = format_grid(reader, g.name, kBlockFormats, kScales);
    ASSERT_EQ(a.values.size(), b.values.size());
    for (std::size_t i = 0; i < a.values.size(); ++i) {
      EXPECT_TRUE(a.values[i] == b.values[i] || (std::isnan(a.values[i]) && std::isnan(b.values[i]))) << g.name;
    }
  }
  std::filesystem::remove_all(dir);
}

// A reference without a sample for the format (written before them, or not declaring it) is refused by name; NVFP4
// outside the scales its tensor row decides too; per-tensor and block formats mix in one grid.
TEST(BlockGridReference, MissingSampleAndUndecidedScaleAreRefusedByName) {
  sim::RunConfig cfg = two_layer(16, 64, 20, 10);
  cfg.project_formats = {"mxfp8_e4m3", "nvfp4", "e4m3"};
  sim::Trace trace = sim::run_cell(cfg);
  const std::string group = trace.groups.front().name;
  const std::vector<std::string> mixed = {"e4m3", "mxfp8_e4m3", "bf16"};
  const std::vector<double> one = {1.0};
  const FormatGrid grid = format_grid(trace, group, mixed, one);
  const FormatGrid alone = format_grid(trace, group, std::vector<std::string>{"e4m3", "bf16"}, one);
  for (std::size_t t = 0; t < grid.steps.size(); ++t) {
    EXPECT_EQ(grid.at(0, 0, t), alone.at(0, 0, t));
    EXPECT_EQ(grid.at(2, 0, t), alone.at(1, 0, t));
    EXPECT_EQ(grid.at(1, 0, t), trace.groups.front().projected.at("mxfp8_e4m3").fraction[t]);
  }
  try {
    (void)format_grid(trace, group, std::vector<std::string>{"nvfp4"}, std::vector<double>{16.0});
    ADD_FAILURE() << "nvfp4 at s = 16 accepted";
  } catch (const ForecastError& e) {
    EXPECT_NE(std::string(e.what()).find("NVFP4"), std::string::npos) << e.what();
  }
  try {
    (void)format_grid(trace, group, std::vector<std::string>{"mxfp4_e2m1"}, one);
    ADD_FAILURE() << "a format the reference does not project accepted";
  } catch (const ForecastError& e) {
    EXPECT_NE(std::string(e.what()).find("no block sample for mxfp4_e2m1"), std::string::npos) << e.what();
  }
  for (auto& g : trace.groups) {
    g.projected.at("mxfp8_e4m3").block_sample = {};
  }
  try {
    (void)format_grid(trace, group, std::vector<std::string>{"mxfp8_e4m3"}, one);
    ADD_FAILURE() << "a trace without block samples accepted";
  } catch (const ForecastError& e) {
    EXPECT_NE(std::string(e.what()).find("this reference has no block sample for mxfp8_e4m3"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace wbaudit::forecast
