// Streamed traces (sim/trace/trace_writer.hpp, run_cell_to_file): the finished file is the in-memory trace's file byte
// for byte, and a target trace is the file wbaudit wrote before streaming (tests/sim/data/golden); a run killed by a
// signal at a chosen recorded step leaves a readable trace marked incomplete, holding exactly the steps recorded
// before, and resuming from a checkpoint finishes the same file into the uninterrupted run's bytes; the recorder's
// memory does not grow with the recorded steps; a full disk is a named error, never a crash; bad files name
// themselves.
#include <gnu/libc-version.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

#include <Kokkos_Core.hpp>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "partial_deflate.hpp"
#include "sim/checkpoint.hpp"
#include "sim/engine.hpp"
#include "sim/run.hpp"
#include "sim/trace/trace_reader.hpp"
#include "sim/trace/trace_writer.hpp"
#include "trace_compare.hpp"

namespace {

using namespace wbaudit::sim;
namespace fs = std::filesystem;

const fs::path kGolden = fs::path(WBAUDIT_SOURCE_DIR) / "tests/sim/data/golden";

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("wbaudit_stream_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

RunConfig two_layer(RunMode mode) {
  RunConfig c;
  c.mode = mode;
  c.seed = 13;
  c.steps = 24;
  c.model.shape = TwoLayerShape{6, 40, 3, Activation::tanh};  // layer1.weight: 240, so every group is small
  c.data.batch = 8;
  c.optimizer.kind = OptimizerKind::adam;
  c.optimizer.lr = 0.02;
  c.record.kind = RecordKind::every_k;
  c.record.k = 3;
  if (mode == RunMode::target) {
    c.target.format = "e4m3";
  } else {
    c.project_formats = {"bf16", "e4m3", "int4"};
    c.project_policies = {make_policy("stochastic", 0, "philox")};
  }
  return c;
}

RunConfig decoder(RunMode mode) {
  RunConfig c;
  c.mode = mode;
  c.seed = 5;
  c.steps = 14;
  c.model.kind = "decoder";
  c.model.decoder.vocab = 40;
  c.model.decoder.width = 32;  // embeddings of 1280: above the size groups keep exactly
  c.model.decoder.heads = 2;
  c.model.decoder.layers = 1;
  c.model.decoder.mlp_hidden = 48;
  c.model.decoder.seq_len = 8;
  c.model.decoder.init_std = 0.05;
  c.data.batch = 2;
  c.data.source = "markov";
  c.optimizer.kind = OptimizerKind::adam;
  c.optimizer.lr = 0.01;
  c.record.kind = RecordKind::every_k;
  c.record.k = 2;
  c.validation.every = 3;
  c.validation.batches = 1;
  if (mode == RunMode::target) {
    c.target.format = "e4m3";
    c.target.group_formats = {{"*norm*", "fp32"}};
    c.replay.checkpoints = 2;
    c.replay.steps = 2;
    c.replay.format = "int4";
  } else {
    c.project_formats = {"e4m3", "bf16"};
  }
  return c;
}

// The same cells with block-scaled formats (issue 29): held targets record block_events, references project them.
RunConfig with_blocks(RunConfig c) {
  if (c.mode == RunMode::target) {
    c.target.format = c.model.kind == "decoder" ? "mxfp8_e4m3" : "mxfp4_e2m1:rceil";
    if (c.model.kind != "decoder") c.target.group_formats = {{"layer1.bias", "nvfp4"}, {"layer2.bias", "fp32"}};
  } else {
    c.project_formats.push_back("mxfp4_e2m1");
    c.project_formats.push_back("nvfp4");
  }
  return c;
}

TEST(TraceStream, TheFinishedFileIsTheInMemoryTracesFileByteForByte) {
  const fs::path dir = scratch("same");
  for (const RunConfig& c : {two_layer(RunMode::reference), two_layer(RunMode::target), decoder(RunMode::reference),
                             decoder(RunMode::target), with_blocks(two_layer(RunMode::reference)),
                             with_blocks(two_layer(RunMode::target)), with_blocks(decoder(RunMode::target))}) {
    const std::string what = to_json(c).dump();
    write_trace(dir / "memory.h5", run_cell(c));
    run_cell_to_file(Kokkos::DefaultExecutionSpace(), c, dir / "streamed.h5");
    EXPECT_EQ(bytes(dir / "memory.h5"), bytes(dir / "streamed.h5")) << what;
    EXPECT_FALSE(fs::exists(partial_trace_path(dir / "streamed.h5"))) << "the partial file is removed";
    const Trace t = read_trace(dir / "streamed.h5");
    EXPECT_TRUE(t.complete);
    EXPECT_EQ(t.schema, c.mode == RunMode::reference ? kTraceSchema : kTraceSchemaV2);
    wbaudit::test::expect_same_trace(t, read_trace(dir / "memory.h5"));
    fs::remove(dir / "memory.h5");
    fs::remove(dir / "streamed.h5");
  }
  fs::remove_all(dir);
}

// The target trace of the golden cell, streamed today, is the file written before streamed traces existed, value by
// value, plus the numeric contract it was computed under (issue 30; the golden file predates the attribute). The
// contract's text is built here from its parts, not from sim::numeric_identity().
TEST(TraceStream, ATargetTraceIsTheFileWrittenBeforeStreamingPlusItsNumericContract) {
  const fs::path golden = kGolden / "two_layer_target_e4m3.h5";
  const Trace old = read_trace(golden);
  EXPECT_EQ(old.numeric_contract, "");
  const RunConfig c = run_config_from_json(nlohmann::json::parse(old.config_json));
  const fs::path dir = scratch("golden");
  run_cell_to_file(Kokkos::DefaultExecutionSpace(), c, dir / "trace.h5");
  Trace now = read_trace(dir / "trace.h5");
  __builtin_cpu_init();
  const bool fma = __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2");
  EXPECT_EQ(now.numeric_contract,
            std::string("wbaudit-gemm/1 fma-sequential-k; glibc ") + gnu_get_libc_version() + (fma ? " fma" : " sse2"));
  now.numeric_contract.clear();
  wbaudit::test::expect_same_trace(now, old);
  fs::remove_all(dir);
}

// A partial trace written under one numeric contract is not continued under another: the resume names both.
TEST(TraceStream, AResumeUnderAnotherNumericContractIsRefusedNamingBoth) {
  const fs::path golden = kGolden / "two_layer_target_e4m3.h5";
  const Trace full = read_trace(golden);
  const fs::path dir = scratch("contract");
  Trace header = full;  // the prototype: its header and the rows it holds
  header.numeric_contract = "wbaudit-gemm/1 fma-sequential-k; glibc 2.36 fma";
  Trace other = header;
  other.numeric_contract = "wbaudit-gemm/1 fma-sequential-k; glibc 2.36 sse2";
  { TraceWriter writer(dir / "trace.h5", header); }  // dropped unfinished: a partial file
  try {
    TraceWriter resumed = TraceWriter::resume(dir / "trace.h5", other, TraceRows{});
    ADD_FAILURE() << "a partial trace of another numeric contract was resumed";
  } catch (const TraceFileError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("numeric contract"), std::string::npos) << what;
    EXPECT_NE(what.find("glibc 2.36 sse2"), std::string::npos) << what;
    EXPECT_NE(what.find("glibc 2.36 fma"), std::string::npos) << what;
  }
  fs::remove_all(dir);
}

// The reference of the golden cell: schema 3 replaces the joint pairs by the margin histogram; every dataset of
// schema 1 and the kept w and u are the golden file's, value by value.
TEST(TraceStream, AReferenceKeepsEverySchema1DatasetOfTheGoldenFile) {
  const fs::path golden = kGolden / "two_layer_reference.h5";
  const Trace old = read_trace(golden);
  EXPECT_EQ(old.schema, kTraceSchemaV2);
  const RunConfig c = run_config_from_json(nlohmann::json::parse(old.config_json));
  const fs::path dir = scratch("golden_ref");
  run_cell_to_file(Kokkos::DefaultExecutionSpace(), c, dir / "trace.h5");
  Trace now = read_trace(dir / "trace.h5");
  EXPECT_EQ(now.schema, kTraceSchema);
  ASSERT_EQ(now.groups.size(), old.groups.size());
  for (std::size_t g = 0; g < now.groups.size(); ++g) {
    EXPECT_TRUE(now.groups[g].has_margin());
    EXPECT_TRUE(old.groups[g].has_pairs());
    EXPECT_EQ(now.groups[g].exact_w, old.groups[g].exact_w);
    EXPECT_EQ(now.groups[g].exact_u, old.groups[g].exact_u);
    EXPECT_EQ(now.groups[g].init_absmax, old.groups[g].init_absmax);
    // what expect_same_trace compares besides the joint record
    now.groups[g].margin.clear();
  }
  now.schema = old.schema;
  now.numeric_contract.clear();  // recorded since issue 30; the golden file predates it
  wbaudit::test::expect_same_trace(now, old);
  fs::remove_all(dir);
}

// TraceReadOptions::histograms false (what `evaluate` without the analytic grid and the sweep report read): the
// golden reference (schema 2, joint pairs) and a schema-3 reference (margin histogram) read without the ratio
// histogram, the joint record and the kept w/u, and with every other dataset equal to the full read.
TEST(TraceStream, ReadingWithoutHistogramsKeepsEverythingElse) {
  const fs::path dir = scratch("no_histograms");
  run_cell_to_file(Kokkos::DefaultExecutionSpace(), two_layer(RunMode::reference), dir / "trace.h5");
  TraceReadOptions lean;
  lean.histograms = false;
  for (const fs::path& file : {kGolden / "two_layer_reference.h5", dir / "trace.h5"}) {
    Trace full = read_trace(file);
    const Trace without = read_trace(file, lean);
    ASSERT_EQ(full.groups.size(), without.groups.size());
    for (std::size_t g = 0; g < full.groups.size(); ++g) {
      const GroupTrace& f = full.groups[g];
      const GroupTrace& w = without.groups[g];
      EXPECT_FALSE(f.ratio_histogram.empty());
      EXPECT_TRUE(f.has_joint());
      EXPECT_TRUE(f.has_exact());
      EXPECT_TRUE(w.ratio_histogram.empty()) << file;
      EXPECT_TRUE(w.margin.empty() && w.joint_keys.empty() && w.joint_counts.empty()) << file;
      EXPECT_TRUE(w.exact_w.empty() && w.exact_u.empty()) << file;
      EXPECT_EQ(w.projected.size(), f.projected.size());
      for (const auto& [name, series] : f.projected) {
        EXPECT_EQ(w.projected.at(name).erased, series.erased) << name;
      }
      EXPECT_EQ(w.nonzero, f.nonzero);
      EXPECT_EQ(w.zero_weight, f.zero_weight);
      full.groups[g].ratio_histogram.clear();
      full.groups[g].margin.clear();
      full.groups[g].joint_offsets.clear();
      full.groups[g].joint_keys.clear();
      full.groups[g].joint_counts.clear();
      full.groups[g].exact_w.clear();
      full.groups[g].exact_u.clear();
    }
    wbaudit::test::expect_same_trace(without, full);
  }
  fs::remove_all(dir);
}

// Runs TraceStreamChild.Run (below) in a fresh process of this test program, with `role`, the cell `c` (written to
// dir/config.json) and `args` in its environment; returns its wait status. A fresh program, not a fork: a process
// with a running OpenMP thread pool cannot use it again in a forked child (libgomp waits there for threads that were
// not copied).
int run_child(const std::string& role, const RunConfig& c, const fs::path& dir, const std::string& args) {
  std::ofstream(dir / "config.json") << to_json(c).dump();
  std::vector<std::string> env_text;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "WBAUDIT_STREAM_", 15) != 0) {
      env_text.emplace_back(*e);
    }
  }
  env_text.push_back("WBAUDIT_STREAM_CHILD=" + role);
  env_text.push_back("WBAUDIT_STREAM_DIR=" + dir.string());
  env_text.push_back("WBAUDIT_STREAM_ARGS=" + args);
  std::vector<char*> envp;
  for (std::string& e : env_text) {
    envp.push_back(e.data());
  }
  envp.push_back(nullptr);
  std::string exe = fs::read_symlink("/proc/self/exe").string(), filter = "--gtest_filter=TraceStreamChild.Run";
  char* argv[] = {exe.data(), filter.data(), nullptr};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execve(exe.c_str(), argv, envp.data());
    ::_exit(127);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) {
    return -1;
  }
  return status;
}

// A child process runs a streamed cell with checkpoints every `every` steps and kills itself (SIGKILL, from the code)
// right after recorded step `kill_at` is on disk.
void run_and_kill(const RunConfig& c, const fs::path& dir, std::int64_t kill_at, std::int64_t every) {
  const int status = run_child("kill", c, dir, std::to_string(kill_at) + " " + std::to_string(every));
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "exit " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1)
      << " (3: an error, 4: never reached the step, 127: not started)";
}

// The child side of run_child: skipped unless a test started it.
TEST(TraceStreamChild, Run) {
  const char* role = std::getenv("WBAUDIT_STREAM_CHILD");
  if (role == nullptr) {
    GTEST_SKIP() << "run by the other tests, in a child process";
  }
  const fs::path dir = std::getenv("WBAUDIT_STREAM_DIR");
  std::istringstream args(std::getenv("WBAUDIT_STREAM_ARGS"));
  const RunConfig c = run_config_from_json(nlohmann::json::parse(bytes(dir / "config.json")));
  if (std::string(role) == "kill") {
    std::int64_t kill_at = 0, every = 0;
    args >> kill_at >> every;
    RunHooks hooks;
    hooks.checkpoints.dir = dir / "ckpt";
    hooks.checkpoints.every = every;
    hooks.on_recorded = [kill_at](std::int64_t step) {
      if (step == kill_at) {
        ::raise(SIGKILL);
      }
    };
    try {
      run_cell_to_file(Kokkos::DefaultExecutionSpace(), c, dir / "trace.h5", {}, hooks);
    } catch (...) {
      ::_exit(3);
    }
    ::_exit(4);  // not killed
  }
  // "full": the run under a file-size limit
  rlim_t limit = 0;
  args >> limit;
  std::signal(SIGXFSZ, SIG_IGN);
  const struct rlimit r { limit, limit };
  ::setrlimit(RLIMIT_FSIZE, &r);
  int code = 3;  // finished: the limit did not bite
  try {
    run_cell_to_file(Kokkos::DefaultExecutionSpace(), c, dir / "trace.h5");
  } catch (const TraceFileError& e) {
    const std::string what = e.what();
    const bool named =
        what.find(dir.string()) != std::string::npos && what.find(std::strerror(EFBIG)) != std::string::npos;
    code = named ? 0 : 4;
    if (!named) {
      std::fprintf(stderr, "message: %s\n", e.what());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "other: %s\n", e.what());
    code = 5;
  }
  if (fs::exists(dir / "trace.h5")) {
    code = 6;
  }
  H5close();
  ::_exit(code);
}

// The killed run and its resumption alternate WBAUDIT_PARTIAL_DEFLATE (the partial file's histograms filtered or
// not, docs/trace-format.md): a resumed writer appends to the datasets the partial file has.
TEST(TraceStream, AKilledRunLeavesAnIncompleteTraceAndResumeFinishesItIntoTheUninterruptedFile) {
  const wbaudit::test::PartialDeflate env(nullptr);  // restored at the end, whatever happens in the loop
  int k = 0;
  for (const RunConfig& c : {two_layer(RunMode::reference), decoder(RunMode::reference), decoder(RunMode::target),
                             with_blocks(two_layer(RunMode::reference)), with_blocks(two_layer(RunMode::target))}) {
    const bool deflate_first = k++ % 2 == 1;
    const std::string what = to_json(c).dump() + (deflate_first ? " (killed deflating)" : " (killed raw)");
    const fs::path dir = scratch("kill");
    run_cell_to_file(Kokkos::DefaultExecutionSpace(), c, dir / "full.h5");
    const Trace full = read_trace(dir / "full.h5");
    const std::int64_t kill_at = full.recorded_steps[full.recorded_steps.size() / 2 + 1];
    wbaudit::test::PartialDeflate::set(deflate_first ? "1" : "0");  // the child inherits it
    run_and_kill(c, dir, kill_at, 4);
    const fs::path partial = partial_trace_path(dir / "trace.h5");
    ASSERT_TRUE(fs::exists(partial)) << what;
    EXPECT_FALSE(fs::exists(dir / "trace.h5")) << "nothing half-written under the final name";
    try {
      read_trace(partial);
      ADD_FAILURE() << "an incomplete trace read as complete";
    } catch (const TraceIncompleteError& e) {
      EXPECT_NE(std::string(e.what()).find(partial.string()), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("step " + std::to_string(kill_at)), std::string::npos) << e.what();
    }
    const Trace part = read_trace(partial, TraceReadOptions{true});
    EXPECT_FALSE(part.complete);
    ASSERT_FALSE(part.recorded_steps.empty());
    EXPECT_EQ(part.recorded_steps.back(), kill_at) << what << ": a crash loses at most the step in progress";
    {  // its steps are the full run's first steps, row for row
      const TraceReader whole(dir / "full.h5");
      const TraceReader cut(partial, TraceReadOptions{true});
      for (std::size_t g = 0; g < cut.group_count(); ++g) {
        const GroupTrace a = cut.read_group(g, 0, cut.recorded_steps());
        const GroupTrace b = whole.read_group(g, 0, cut.recorded_steps());
        EXPECT_EQ(a.nonzero, b.nonzero) << what;
        EXPECT_EQ(a.margin, b.margin) << what;
        EXPECT_EQ(a.erased, b.erased) << what;
        EXPECT_EQ(a.exact_u, b.exact_u) << what;
        EXPECT_EQ(a.block_events.erased_scale, b.block_events.erased_scale) << what;
        EXPECT_EQ(a.block_events.collateral, b.block_events.collateral) << what;
        for (const auto& [format, p] : a.projected) {
          EXPECT_EQ(p.block_events.erased_grid, b.projected.at(format).block_events.erased_grid) << what;
        }
      }
    }  // (closed: a reader holding the partial file would keep its resumed writer out)
    // resume from the last checkpoint (at or before the kill): the same file, finished into the uninterrupted bytes
    std::int64_t last = 0;
    for (const auto& e : fs::directory_iterator(dir / "ckpt")) {
      const std::string n = e.path().filename().string();
      if (n.rfind("checkpoint-", 0) == 0 && n.size() > 14 && n.substr(n.size() - 3) == ".h5")
        last = std::max<std::int64_t>(last, std::stoll(n.substr(11, n.size() - 14)));
    }
    ASSERT_GT(last, 0) << what;
    ASSERT_LE(last, kill_at);
    RunHooks resume;
    resume.checkpoints.resume_from = dir / "ckpt" / ("checkpoint-" + std::to_string(last) + ".h5");
    wbaudit::test::PartialDeflate::set(deflate_first ? "0" : "1");
    run_cell_to_file(Kokkos::DefaultExecutionSpace(), c, dir / "trace.h5", {}, resume);
    EXPECT_FALSE(fs::exists(partial));
    EXPECT_EQ(bytes(dir / "trace.h5"), bytes(dir / "full.h5")) << what;
    fs::remove_all(dir);
  }
}

// What the recorder holds between steps while streaming is the same after every recorded step (the rows go to disk):
// counted by the recorder itself, so the test is deterministic (bench/decoder_engine_bench.cpp measures the
// process's peak memory).
TEST(TraceStream, TheRecorderHoldsTheSameBytesAfterEveryRecordedStep) {
  for (RunConfig c : {two_layer(RunMode::reference), decoder(RunMode::reference), decoder(RunMode::target)}) {
    c.record.kind = RecordKind::every;
    const fs::path dir = scratch("bytes");
    Training<Kokkos::DefaultExecutionSpace> training(Kokkos::DefaultExecutionSpace(), c);
    TraceWriter writer(dir / "trace.h5", training.mutable_trace());
    training.stream_to(&writer);
    std::vector<std::size_t> held;
    for (std::int64_t s = 0; s < c.steps; ++s) {
      training.step();
      held.push_back(training.recorder_bytes() + writer.held_bytes());
    }
    EXPECT_EQ(writer.rows().steps, c.steps);
    for (std::size_t s = 1; s < held.size(); ++s) EXPECT_EQ(held[s], held[0]) << "after step " << s;
    training.stream_to(nullptr);
    writer.finish();
    EXPECT_EQ(read_trace(dir / "trace.h5").recorded_steps.size(), static_cast<std::size_t>(c.steps));
    fs::remove_all(dir);
  }
}

// A disk that fills while a streamed trace is written (a file-size limit: write(2) and posix_fallocate fail with
// EFBIG as with ENOSPC): at the start (the partial file's first reservation), during the run (a step's reservation)
// and at the end (the finished file's) it is a TraceFileError naming the file and the errno text, and HDF5's own
// cleanup afterwards (H5close, what runs at exit) does not crash; the partial file stays, readable and marked
// incomplete, with every step recorded before the error.
TEST(TraceStream, AFullDiskIsANamedErrorAndNotACrash) {
  RunConfig c = two_layer(RunMode::reference);
  c.record.kind =
      RecordKind::every;  // 24 steps: ~5 MB of histograms before compression, what the finished file reserves
  const std::size_t all = recorded_steps(c.record, c.steps).size();
  // 4 KiB: the partial file's first reservation fails. 5 MiB: with the partial's rows deflated
  // (WBAUDIT_PARTIAL_DEFLATE=1) every step's reservation (the file's end plus one step's rows and slack for HDF5's
  // indexes, ~4 MiB) fits and the finished file's (~6.6 MiB) does not; with them stored raw (the default) the
  // partial file itself reaches the limit during the run.
  for (const char* deflate : {"1", "0"}) {
    const wbaudit::test::PartialDeflate env(deflate);  // the child inherits it
    for (const rlim_t limit : {rlim_t{4096}, rlim_t{5} << 20}) {
      const fs::path dir = scratch("full");
      const int status = run_child("full", c, dir, std::to_string(limit));
      ASSERT_TRUE(WIFEXITED(status)) << "the writer died by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
      EXPECT_EQ(WEXITSTATUS(status), 0) << "deflate " << deflate << ", limit " << limit << ": 3 finished despite "
                                        << "the limit, 4 unclear message, 5 another exception, 6 a finished file left "
                                        << "behind";
      if (limit > 4096) {
        const Trace part = read_trace(partial_trace_path(dir / "trace.h5"), TraceReadOptions{true});
        EXPECT_FALSE(part.complete);
        if (std::string(deflate) == "1") {  // the run itself went through: complete in all but the flag
          EXPECT_EQ(part.recorded_steps.size(), all);
        } else {  // the steps before the full disk
          EXPECT_GT(part.recorded_steps.size(), 0u);
          EXPECT_LT(part.recorded_steps.size(), all);
        }
      }
      fs::remove_all(dir);
    }
  }
}

TEST(TraceStream, BadFilesAreNamedWithWhatIsWrong) {
  const fs::path dir = scratch("bad");
  const RunConfig c = decoder(RunMode::reference);
  run_and_kill(c, dir, 6, 100);
  const fs::path partial = partial_trace_path(dir / "trace.h5");
  // a partial and a finished trace cut short (a copy of their first part, as a disk that lost the end would leave it,
  // cut within the space HDF5 had allocated: the physical file may hold reserved space beyond it)
  run_cell_to_file(Kokkos::DefaultExecutionSpace(), c, dir / "done.h5");
  for (const fs::path& whole : {partial, dir / "done.h5"}) {
    haddr_t eoa = 0;
    {
      const hid_t f = H5Fopen(whole.c_str(), H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, H5P_DEFAULT);
      const hid_t g = f >= 0 ? f : H5Fopen(whole.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
      ASSERT_GE(g, 0) << whole;
      H5Fget_eoa(g, &eoa);
      H5Fclose(g);
    }
    const std::string all = bytes(whole);
    for (const std::size_t keep : {static_cast<std::size_t>(eoa) / 2, std::size_t{600}}) {
      std::ofstream(dir / "cut.h5", std::ios::binary).write(all.data(), static_cast<std::streamsize>(keep));
      try {
        read_trace(dir / "cut.h5", TraceReadOptions{true});
        ADD_FAILURE() << "a cut copy of " << whole << " (" << keep << " bytes) was read";
      } catch (const TraceFileError& e) {
        EXPECT_NE(std::string(e.what()).find("cut.h5"), std::string::npos) << e.what();
      }
    }
  }
  // a finished trace missing a group's margin histogram: the reader names it
  {
    const hid_t f = H5Fopen((dir / "done.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    EXPECT_GE(H5Ldelete(f, "/groups/embed.weight/joint/margin", H5P_DEFAULT), 0);
    H5Fclose(f);
  }
  try {
    read_trace(dir / "done.h5");
    ADD_FAILURE() << "a trace without its margin histogram was read";
  } catch (const TraceFileError& e) {
    EXPECT_NE(std::string(e.what()).find("done.h5"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("embed.weight"), std::string::npos) << e.what();
  }
  // resuming a partial trace written by another configuration
  RunConfig other = c;
  other.seed += 1;
  Training<Kokkos::DefaultExecutionSpace> training(Kokkos::DefaultExecutionSpace(), other);
  try {
    (void)TraceWriter::resume(dir / "trace.h5", training.mutable_trace(), TraceRows{});
    ADD_FAILURE() << "a partial trace of another run was continued";
  } catch (const TraceFileError& e) {
    EXPECT_NE(std::string(e.what()).find("seed " + std::to_string(other.seed) + " (the file's " +
                                         std::to_string(c.seed) + ")"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("trace.h5.partial"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
