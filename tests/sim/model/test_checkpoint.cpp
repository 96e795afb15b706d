// Checkpoints: resuming from any checkpoint gives the trace (and the trace file's bytes) of the uninterrupted run,
// for every policy and optimizer state; a checkpoint of another run, a truncated file or a foreign file is refused
// with a message naming it.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>

#include <Kokkos_Core.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "sim/checkpoint.hpp"
#include "sim/engine.hpp"
#include "sim/run.hpp"
#include "trace_compare.hpp"

namespace {

using namespace wbaudit::sim;
namespace fs = std::filesystem;

RunConfig config(RunMode mode, const std::string& policy, OptimizerKind opt) {
  RunConfig c;
  c.mode = mode;
  c.seed = 11;
  c.steps = 30;
  c.model.shape = TwoLayerShape{5, 9, 3, Activation::tanh};
  c.model.teacher_hidden = 4;
  c.data.batch = 6;
  c.data.noise = 0.1;
  c.optimizer.kind = opt;
  c.optimizer.lr = 0.03;
  c.schedule.kind = ScheduleKind::cosine;
  c.record.kind = RecordKind::every;
  if (mode == RunMode::target) {
    c.target.format = "e4m3";
    c.target.policy = policy;
  } else {
    c.project_formats = {"e4m3", "int4"};
  }
  return c;
}

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("wbaudit_ckpt_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

struct Case {
  RunMode mode;
  const char* policy;
  OptimizerKind opt;
};

class Resume : public ::testing::TestWithParam<Case> {};

TEST_P(Resume, FromEveryCheckpointIsBitwiseTheUninterruptedRun) {
  const Case k = GetParam();
  const RunConfig cfg = config(k.mode, k.policy, k.opt);
  const fs::path dir = scratch(std::string(k.policy) + std::to_string(static_cast<int>(k.opt)) +
                               std::to_string(static_cast<int>(k.mode)));
  RunHooks hooks;
  hooks.checkpoints.dir = dir / "ckpt";
  hooks.checkpoints.every = 7;
  std::vector<std::int64_t> written;
  hooks.on_checkpoint = [&](std::int64_t step, const fs::path& file) {
    EXPECT_TRUE(fs::exists(file));
    written.push_back(step);
  };
  const Trace full = run_cell(Kokkos::DefaultExecutionSpace(), cfg, {}, hooks);
  ASSERT_EQ(written, (std::vector<std::int64_t>{7, 14, 21, 28}));
  write_trace(dir / "full.h5", full);
  for (std::int64_t s : written) {
    RunHooks resume;
    resume.checkpoints.resume_from = dir / "ckpt" / ("checkpoint-" + std::to_string(s) + ".h5");
    const Trace resumed = run_cell(Kokkos::DefaultExecutionSpace(), cfg, {}, resume);
    SCOPED_TRACE("resumed at step " + std::to_string(s));
    wbaudit::test::expect_same_trace(full, resumed);
    write_trace(dir / "resumed.h5", resumed);
    EXPECT_EQ(bytes(dir / "full.h5"), bytes(dir / "resumed.h5"));
    fs::remove(dir / "resumed.h5");
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Policies, Resume,
                         ::testing::Values(Case{RunMode::reference, "nearest", OptimizerKind::adam},
                                           Case{RunMode::target, "nearest", OptimizerKind::adam},
                                           Case{RunMode::target, "stochastic", OptimizerKind::momentum},
                                           Case{RunMode::target, "deadzone-sr", OptimizerKind::sgd},
                                           Case{RunMode::target, "master", OptimizerKind::adamw}));

TEST(Checkpoint, StoresWeightsInTheStorageFormatAndTheOptimizerState) {
  const RunConfig cfg = config(RunMode::target, "nearest", OptimizerKind::adam);
  Training<Kokkos::DefaultExecutionSpace> training(Kokkos::DefaultExecutionSpace(), cfg);
  training.run(5);
  const fs::path dir = scratch("content");
  write_checkpoint(dir / "c.h5", training.checkpoint());
  const Checkpoint c = read_checkpoint(dir / "c.h5");
  EXPECT_EQ(c.step, 5);
  EXPECT_EQ(c.model_kind, "two_layer");
  ASSERT_EQ(c.tensors.size(), 4u);
  EXPECT_EQ(c.tensors[0].name, "layer1.weight");
  EXPECT_EQ(c.tensors[0].shape, (std::vector<std::int64_t>{9, 5}));
  EXPECT_EQ(c.tensors[0].weight.size(), 45u);
  EXPECT_EQ(c.tensors[0].second.size(), 45u);
  // Every stored weight is an e4m3 value: |w| * 2^k is an integer with at most 4 significant bits for some k.
  for (float w : c.tensors[0].weight) {
    int e = 0;
    const double m = std::frexp(static_cast<double>(w), &e);  // |m| in [0.5, 1)
    EXPECT_EQ(std::ldexp(m, 4), std::round(std::ldexp(m, 4))) << w;
  }
  EXPECT_EQ(c.trace.recorded_steps, (std::vector<std::int64_t>{0, 1, 2, 3, 4}));
  fs::remove_all(dir);
}

TEST(Checkpoint, RefusesAnotherRunATruncatedFileAndAForeignFile) {
  const RunConfig cfg = config(RunMode::target, "nearest", OptimizerKind::adam);
  const fs::path dir = scratch("bad");
  Training<Kokkos::DefaultExecutionSpace> training(Kokkos::DefaultExecutionSpace(), cfg);
  training.run(4);
  write_checkpoint(dir / "c.h5", training.checkpoint());

  RunConfig other = cfg;
  other.seed = 12;
  RunHooks hooks;
  hooks.checkpoints.resume_from = dir / "c.h5";
  try {
    run_cell(Kokkos::DefaultExecutionSpace(), other, {}, hooks);
    ADD_FAILURE() << "a checkpoint of another run was accepted";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("another run"), std::string::npos) << e.what();
  }

  const std::string full = bytes(dir / "c.h5");
  {
    std::ofstream out(dir / "truncated.h5", std::ios::binary);
    out.write(full.data(), static_cast<std::streamsize>(full.size() / 2));
  }
  hooks.checkpoints.resume_from = dir / "truncated.h5";
  try {
    run_cell(Kokkos::DefaultExecutionSpace(), cfg, {}, hooks);
    ADD_FAILURE() << "a truncated checkpoint was accepted";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("truncated.h5"), std::string::npos) << e.what();
  }

  const Trace trace = run_cell(cfg);
  write_trace(dir / "trace.h5", trace);
  EXPECT_THROW(read_checkpoint(dir / "trace.h5"), CheckpointError);
  EXPECT_THROW(read_checkpoint(dir / "missing.h5"), CheckpointError);
  fs::remove_all(dir);
}

TEST(GroupFormats, ExactNamesWinOverPatternsAndConflictsAreErrors) {
  const std::map<std::string, std::string> gf = {
      {"*.bias", "fp32"}, {"layer2.bias", "bf16"}, {"layer?.weight", "e5m2"}};
  EXPECT_EQ(storage_format_of("e4m3", gf, "layer2.bias"), "bf16");
  EXPECT_EQ(storage_format_of("e4m3", gf, "layer1.bias"), "fp32");
  EXPECT_EQ(storage_format_of("e4m3", gf, "layer1.weight"), "e5m2");
  EXPECT_EQ(storage_format_of("e4m3", gf, "other"), "e4m3");
  const std::map<std::string, std::string> clash = {{"layer*", "fp32"}, {"*weight", "bf16"}};
  EXPECT_THROW(storage_format_of("e4m3", clash, "layer1.weight"), ConfigError);
}

TEST(GroupFormats, Fp32GroupsTakeThePlainUpdateAndOthersTheirFormat) {
  RunConfig cfg = config(RunMode::target, "stochastic", OptimizerKind::adam);
  cfg.target.group_formats = {{"*.bias", "fp32"}};
  const Trace t = run_cell(cfg);
  // fp32 groups: nothing is ever erased at this learning rate in fp32; e4m3 groups erase some updates.
  std::int64_t bias_erased = 0, weight_erased = 0;
  for (const GroupTrace& g : t.groups) {
    for (std::int64_t e : g.erased) {
      (g.name.find("bias") != std::string::npos ? bias_erased : weight_erased) += e;
    }
  }
  EXPECT_EQ(bias_erased, 0);
  EXPECT_GT(weight_erased, 0);
  // The JSON round trip keeps the table (and cells without it keep their old canonical JSON).
  EXPECT_EQ(run_config_from_json(to_json(cfg)).target.group_formats, cfg.target.group_formats);
  EXPECT_FALSE(to_json(config(RunMode::target, "nearest", OptimizerKind::adam))["target"].contains("group_formats"));
}

}  // namespace

// A disk that fills while a checkpoint is written (here: a file-size limit, so write(2) fails with EFBIG exactly as
// with ENOSPC) is a CheckpointError naming the file and the errno text, leaves no temporary behind, and HDF5's own
// cleanup afterwards (H5close, what runs at exit) does not crash: the checkpoint is built in memory and written with
// plain writes, so HDF5 never holds a file it cannot close.
TEST(Checkpoint, AFullDiskIsANamedErrorAndNotACrash) {
  const RunConfig cfg = config(RunMode::target, "nearest", OptimizerKind::adam);
  Training<Kokkos::DefaultExecutionSpace> training(Kokkos::DefaultExecutionSpace(), cfg);
  training.run(3);
  const Checkpoint checkpoint = training.checkpoint();
  const fs::path dir = scratch("full");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    const rlim_t limit = 2048;  // far below the checkpoint's size
    const struct rlimit r { limit, limit };
    ::setrlimit(RLIMIT_FSIZE, &r);
    int code = 3;  // written: the limit did not bite
    try {
      write_checkpoint(dir / "c.h5", checkpoint);
    } catch (const CheckpointError& e) {
      const std::string what = e.what();
      code = what.find("c.h5") != std::string::npos && what.find(std::strerror(EFBIG)) != std::string::npos ? 0 : 4;
    } catch (...) {
      code = 5;
    }
    for (const auto& entry : fs::directory_iterator(dir)) {
      (void)entry;
      code = code == 0 ? 6 : code;  // a temporary (or a partial checkpoint) left behind
    }
    H5close();
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the writer died by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "3: written despite the limit, 4: unclear message, 5: another exception, "
                                       "6: a file left behind";
  write_checkpoint(dir / "c.h5", checkpoint);  // without the limit it is written and reads back
  EXPECT_EQ(read_checkpoint(dir / "c.h5").step, 3);
  fs::remove_all(dir);
}
