// The decoder on the training engine: an fp32 target under nearest is the reference run bitwise, traces do not
// depend on the thread count (tests run at 1 and 2 threads; the hash of the trace is compared across both runs of
// this test through a file written by the first), replay under the run's own policy reproduces the run, resume is
// bitwise, validation and the Markov optimum are recorded, bad input is refused with the value named, and every
// matrix-product path (the one each CPU family would take, forced here) gives the same trace and weights.
#include <gtest/gtest.h>
#include <unistd.h>

#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>

#include "sim/checkpoint.hpp"
#include "sim/engine.hpp"
#include "sim/model/detail/gemm.hpp"
#include "sim/run.hpp"
#include "trace_compare.hpp"

namespace {

using namespace wbaudit::sim;
namespace fs = std::filesystem;

RunConfig decoder_config(RunMode mode) {
  RunConfig c;
  c.mode = mode;
  c.seed = 5;
  c.steps = 12;
  c.model.kind = "decoder";
  c.model.decoder.vocab = 16;
  c.model.decoder.width = 16;
  c.model.decoder.heads = 2;
  c.model.decoder.layers = 2;
  c.model.decoder.mlp_hidden = 24;
  c.model.decoder.seq_len = 12;
  c.model.decoder.rotary_fraction = 0.5;
  c.model.decoder.init_std = 0.1;
  c.data.batch = 3;
  c.data.source = "markov";
  c.data.markov_order = 2;
  c.data.markov_branching = 3;
  c.optimizer.kind = OptimizerKind::adam;
  c.optimizer.lr = 0.01;
  c.record.kind = RecordKind::every;
  c.validation.every = 4;
  c.validation.batches = 2;
  if (mode == RunMode::target) {
    c.target.format = "e4m3";
    c.target.policy = "nearest";
    c.target.group_formats = {{"*norm*", "fp32"}};
  } else {
    c.project_formats = {"e4m3", "bf16"};
  }
  return c;
}

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("wbaudit_dec_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(DecoderEngine, Fp32NearestTargetIsTheReferenceBitwise) {
  const RunConfig ref = decoder_config(RunMode::reference);
  RunConfig tgt = ref;
  tgt.mode = RunMode::target;
  tgt.project_formats.clear();
  tgt.target = TargetConfig{"fp32", "nearest", 0, {}};
  const Trace a = run_cell(ref), b = run_cell(tgt);
  wbaudit::test::expect_same_doubles(a.loss, b.loss, "loss");
  wbaudit::test::expect_same_doubles(a.validation_loss, b.validation_loss, "validation_loss");
  for (const GroupTrace& g : b.groups) {
    for (std::int64_t e : g.erased) EXPECT_EQ(e, 0) << g.name;
  }
}

TEST(DecoderEngine, RecordsValidationAndTheOptimumAndNamesGroupsByTensor) {
  const Trace t = run_cell(decoder_config(RunMode::target));
  EXPECT_EQ(t.validation_steps, (std::vector<std::int64_t>{0, 4, 8, 12}));
  ASSERT_EQ(t.validation_loss.size(), 4u);
  for (double v : t.validation_loss) EXPECT_TRUE(std::isfinite(v) && v > 0);
  // The Markov language's optimum is below the uniform loss log V and above 0.
  EXPECT_GT(t.optimal_validation_loss, 0.0);
  EXPECT_LT(t.optimal_validation_loss, std::log(16.0));
  EXPECT_NO_THROW(t.group("blocks.0.attn.qkv.weight"));
  EXPECT_NO_THROW(t.group("lm_head.weight"));
  // Norm gains are kept in fp32: they never erase; the e4m3 matrices do at this learning rate.
  std::int64_t norm_erased = 0, matrix_erased = 0;
  for (const GroupTrace& g : t.groups) {
    for (std::int64_t e : g.erased) (g.name.find("norm") != std::string::npos ? norm_erased : matrix_erased) += e;
  }
  EXPECT_EQ(norm_erased, 0);
  EXPECT_GT(matrix_erased, 0);
}

TEST(DecoderEngine, TensorNamesFromTheConfigAreTheModelsOwn) {
  // model_tensor_names (what specs are validated against) must list exactly the groups a run's trace will have.
  RunConfig c = decoder_config(RunMode::target);
  c.model.decoder.layers = 3;
  c.steps = 1;
  const Trace t = run_cell(c);
  std::vector<std::string> from_trace;
  for (const GroupTrace& g : t.groups) from_trace.push_back(g.name);
  EXPECT_EQ(model_tensor_names(c.model), from_trace);
  EXPECT_EQ(model_tensor_names(c.model).size(), 3u * 7u + 3u);
  ModelConfig unknown;
  unknown.kind = "mlp";
  EXPECT_THROW(model_tensor_names(unknown), ConfigError);
}

TEST(DecoderEngine, ATrainedModelApproachesTheKnownOptimumOnAnEasySource) {
  // An order-1 Markov language over 8 tokens with 2 branches: the optimum is its entropy rate (closed form, checked
  // against brute force in tests/sim/data). A small fp32 decoder trained with Adam must come within 0.05 nats of it (it
  // reaches 0.444 vs 0.429), starting from about log 8 = 2.08; the bound fails for a model (or data) that does not
  // learn the transitions.
  RunConfig c;
  c.mode = RunMode::reference;
  c.seed = 3;
  c.steps = 400;
  c.model.kind = "decoder";
  c.model.decoder.vocab = 8;
  c.model.decoder.width = 32;
  c.model.decoder.heads = 2;
  c.model.decoder.layers = 1;
  c.model.decoder.mlp_hidden = 64;
  c.model.decoder.seq_len = 16;
  c.model.decoder.init_std = 0.05;
  c.data.batch = 16;
  c.data.source = "markov";
  c.data.markov_order = 1;
  c.data.markov_branching = 2;
  c.optimizer.kind = OptimizerKind::adam;
  c.optimizer.lr = 0.01;
  c.record.kind = RecordKind::log;
  c.record.points = 5;
  c.validation.every = 400;
  c.validation.batches = 8;
  const Trace t = run_cell(c);
  ASSERT_EQ(t.validation_steps.back(), 400);
  const double optimum = t.optimal_validation_loss;
  EXPECT_GT(t.validation_loss.front(), optimum + 0.5) << "the untrained model is already near the optimum";
  EXPECT_LT(t.validation_loss.back(), optimum + 0.05)
      << "start " << t.validation_loss.front() << ", optimum " << optimum;
  EXPECT_GE(t.validation_loss.back(), optimum - 0.05) << "below the entropy rate: the validation stream leaks";
}

TEST(DecoderEngine, TraceFileIsTheSameOnTheSerialSpaceAndOnEveryThreadCount) {
  // Runs at 1 and 2 OpenMP threads (the two ctest entries); each compares its trace file with the Serial space's.
  const fs::path dir = scratch("threads");
  write_trace(dir / "default.h5", run_cell(Kokkos::DefaultExecutionSpace(), decoder_config(RunMode::target), {}, {}));
  write_trace(dir / "serial.h5", run_cell(Kokkos::Serial(), decoder_config(RunMode::target), {}, {}));
  EXPECT_EQ(bytes(dir / "default.h5"), bytes(dir / "serial.h5"))
      << "the trace at " << Kokkos::DefaultExecutionSpace().concurrency() << " threads differs from the Serial one";
  fs::remove_all(dir);
}

TEST(DecoderEngine, TraceAndFinalWeightsAreTheSameOnEveryGemmPath) {
  // The matrix-product paths that different CPU families take (portable, AVX2 without AVX-512, AVX-512), forced in
  // turn on this machine, at this test's thread count and on the Serial space: a few steps of a target run (e4m3
  // nearest, whose erasures any weight difference would change) give the same trace file and final weights bit for
  // bit. Paths this CPU lacks are skipped.
  struct DefaultPathAtExit {
    ~DefaultPathAtExit() { detail::reset_gemm_isa(); }
  } restore;
  const fs::path dir = scratch("gemm_paths");
  RunConfig cfg = decoder_config(RunMode::target);
  cfg.steps = 5;
  std::string first_trace;
  std::vector<std::vector<float>> first_weights;
  std::string first_path;
  for (const detail::GemmIsa isa : {detail::GemmIsa::portable, detail::GemmIsa::avx2, detail::GemmIsa::avx512}) {
    if (!detail::gemm_isa_supported(isa)) {
      std::cout << "[ NOTE     ] this CPU cannot run the " << detail::gemm_isa_name(isa) << " path: not compared\n";
      continue;
    }
    detail::force_gemm_isa(isa);
    const auto run = [&](const auto& space, const std::string& name) {
      Training training(space, cfg);
      training.run(cfg.steps);
      write_trace(dir / (name + ".h5"), training.trace());
      std::vector<std::vector<float>> weights;
      for (int t = 0; t < training.model().tensor_count(); ++t) {
        const auto w = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), training.model().parameter(t));
        weights.emplace_back(w.data(), w.data() + w.extent(0));
      }
      const std::string label = std::string(detail::gemm_isa_name(isa)) + " " + name;
      if (first_path.empty()) {
        first_path = label;
        first_trace = bytes(dir / (name + ".h5"));
        first_weights = weights;
        return;
      }
      EXPECT_EQ(bytes(dir / (name + ".h5")), first_trace) << label << " against " << first_path;
      ASSERT_EQ(weights.size(), first_weights.size());
      for (std::size_t t = 0; t < weights.size(); ++t) {
        EXPECT_EQ(0, std::memcmp(weights[t].data(), first_weights[t].data(), weights[t].size() * sizeof(float)))
            << "tensor " << t << ", " << label << " against " << first_path;
      }
    };
    run(Kokkos::DefaultExecutionSpace(), "threads" + std::to_string(Kokkos::DefaultExecutionSpace().concurrency()));
    run(Kokkos::Serial(), "serial");
  }
  fs::remove_all(dir);
}

TEST(DecoderEngine, ResumeIsBitwiseAndReplayUnderTheSamePolicyReproducesTheRun) {
  RunConfig cfg = decoder_config(RunMode::target);
  const fs::path dir = scratch("resume");
  RunHooks hooks;
  hooks.checkpoints.dir = dir;
  hooks.checkpoints.every = 5;
  const Trace full = run_cell(Kokkos::DefaultExecutionSpace(), cfg, {}, hooks);
  RunHooks resume;
  resume.checkpoints.resume_from = dir / "checkpoint-5.h5";
  wbaudit::test::expect_same_trace(full, run_cell(Kokkos::DefaultExecutionSpace(), cfg, {}, resume));

  // Replay: from the checkpoints at 6 and 12 (of 12 steps), 2 steps under the run's own format and policy. The
  // replay from step 6 must end on the run's own weights at step 8: its validation loss is the run's at step 8.
  RunConfig rep = cfg;
  rep.replay.checkpoints = 2;
  rep.replay.steps = 2;
  rep.replay.format = "e4m3";
  rep.replay.group_formats = cfg.target.group_formats;
  rep.replay.policies = {"nearest", "stochastic"};
  const Trace r = run_cell(rep);
  EXPECT_EQ(r.replay_checkpoints, (std::vector<std::int64_t>{6, 12}));
  ASSERT_EQ(r.replays.size(), 2u);
  EXPECT_EQ(r.replays[0].policy, "nearest");
  ASSERT_EQ(r.replays[0].validation_loss.size(), 2u);
  ASSERT_EQ(full.validation_steps[2], 8);
  EXPECT_EQ(r.replays[0].validation_loss[0], full.validation_loss[2]);
  // The replays change nothing of the run itself.
  wbaudit::test::expect_same_doubles(full.loss, r.loss, "loss");
  fs::remove_all(dir);
}

TEST(DecoderEngine, BadInputIsRefusedNamingTheValue) {
  nlohmann::json j = to_json(decoder_config(RunMode::target));
  j["model"]["heads"] = 3;
  try {
    run_config_from_json(j);
    ADD_FAILURE() << "3 heads for width 16 accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("3 heads do not divide width 16"), std::string::npos) << e.what();
  }
  j = to_json(decoder_config(RunMode::target));
  j["model"]["rotary_fraction"] = 1.5;
  EXPECT_THROW(run_config_from_json(j), ConfigError);
  j = to_json(decoder_config(RunMode::target));
  j["model"]["kind"] = "transformer";
  try {
    run_config_from_json(j);
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("known: decoder, two_layer"), std::string::npos) << e.what();
  }
  RunConfig text = decoder_config(RunMode::target);
  text.model.decoder.vocab = 256;
  text.data.source = "text";
  const fs::path dir = scratch("text");
  text.data.path = (dir / "empty.txt").string();
  std::ofstream(dir / "empty.txt").close();
  try {
    run_cell(text);
    ADD_FAILURE() << "an empty text file accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("empty.txt"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(DecoderEngine, ACheckpointOfAnotherModelIsRefusedNamingBoth) {
  // A two-layer run's checkpoint handed to a decoder run: refused before any state is restored, naming both kinds.
  RunConfig two_layer;
  two_layer.mode = RunMode::target;
  two_layer.steps = 4;
  two_layer.model.shape = TwoLayerShape{5, 9, 3, Activation::tanh};
  two_layer.target.format = "e4m3";
  const fs::path dir = scratch("foreign_model");
  Training<Kokkos::DefaultExecutionSpace> training(Kokkos::DefaultExecutionSpace(), two_layer);
  training.run(2);
  write_checkpoint(dir / "two_layer.h5", training.checkpoint());
  RunHooks hooks;
  hooks.checkpoints.resume_from = dir / "two_layer.h5";
  try {
    run_cell(Kokkos::DefaultExecutionSpace(), decoder_config(RunMode::target), {}, hooks);
    ADD_FAILURE() << "a two_layer checkpoint was accepted by a decoder run";
  } catch (const CheckpointError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("written by a two_layer model, this run is decoder"), std::string::npos) << what;
    EXPECT_NE(what.find("step 2"), std::string::npos) << what;
  }
  fs::remove_all(dir);
}

TEST(DecoderEngine, ADivergingRunStopsAtTheStepThatWentNonFiniteAndKeepsItsCheckpoints) {
  // fp32 SGD at lr 1e30: the first update throws the weights to ~1e29 and the next forward overflows. The run must
  // stop with the step (and, for a non-finite proposal, the tensor) named, and every checkpoint written before that
  // step must stay whole and readable (checkpoints are written to a temporary name, then renamed).
  RunConfig cfg = decoder_config(RunMode::reference);
  cfg.optimizer.kind = OptimizerKind::sgd;
  cfg.optimizer.lr = 1e30;
  const fs::path dir = scratch("diverge");
  RunHooks hooks;
  hooks.checkpoints.dir = dir;
  hooks.checkpoints.every = 1;
  std::string what;
  try {
    run_cell(Kokkos::DefaultExecutionSpace(), cfg, {}, hooks);
    ADD_FAILURE() << "a run at lr 1e30 finished";
  } catch (const std::exception& e) {
    what = e.what();
  }
  const bool loss = what.find("training loss is ") != std::string::npos;
  const bool proposal = what.find("non-finite weight or proposal in tensor ") != std::string::npos;
  EXPECT_TRUE(loss || proposal) << what;
  const auto at = what.find(" at step ");
  ASSERT_NE(at, std::string::npos) << what;
  const std::int64_t failed = std::stoll(what.substr(at + 9));
  EXPECT_GE(failed, 1) << what;  // step 0's loss is that of the initial weights, finite
  EXPECT_LT(failed, cfg.steps) << what;
  int checkpoints = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    EXPECT_EQ(name.rfind("checkpoint-", 0), 0u) << "left behind: " << name;
    const Checkpoint c = read_checkpoint(entry.path());  // whole: a truncated or half-written file throws
    EXPECT_LE(c.step, failed) << name;
    EXPECT_EQ(c.model_kind, "decoder");
    ++checkpoints;
  }
  EXPECT_GE(checkpoints, 1);
  fs::remove_all(dir);
}

}  // namespace
