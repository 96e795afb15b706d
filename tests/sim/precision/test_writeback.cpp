// The write-back kernel: bitwise invariance across execution spaces (Serial vs OpenMP), thread counts, chunk sizes
// and slicing; bad input; the master, projection and quantize kernels; the exact audit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <span>
#include <string>

#include "reference_formats.hpp"
#include "sim/precision/audit.hpp"
#include "sim/precision/format.hpp"
#include "sim/precision/policy.hpp"
#include "sim/precision/writeback.hpp"
#include "sim/precision/writeback_blocks.hpp"

using namespace wbaudit::sim;
using wbaudit::test::SplitMix;

namespace {

struct Data {
  std::vector<float> w, u;
};

// w: format values (nearest of random draws, via the reference table), u: proposals over many scales.
Data make_data(const FormatSpec& fmt, const wbaudit::test::RefFormat& ref, int n, std::uint64_t seed) {
  const auto table = wbaudit::test::ref_table(ref);
  SplitMix rng{seed};
  Data d;
  for (int i = 0; i < n; ++i) {
    const auto w = static_cast<float>(table[rng.below(table.size())].value);
    const double scale = std::max(std::fabs(static_cast<double>(w)), fmt.min_subnormal);
    d.w.push_back(w);
    d.u.push_back(rng.below(10) == 0 ? 0.0f
                                     : static_cast<float>((rng.uniform() - 0.5) * scale *
                                                          std::ldexp(1.0, -static_cast<int>(rng.below(14)))));
  }
  return d;
}

template <class Space>
WritebackCounts run(const FormatSpec& fmt, const WritebackPolicy& pol, const Data& d, std::vector<float>& out,
                    const WritebackOptions& opt = {}) {
  using MS = typename Space::memory_space;
  const auto n = d.w.size();
  Kokkos::View<float*, MS> w("w", n);
  Kokkos::View<float*, MS> u("u", n);
  auto hw = Kokkos::create_mirror_view(w);
  auto hu = Kokkos::create_mirror_view(u);
  for (std::size_t i = 0; i < n; ++i) {
    hw(i) = d.w[i];
    hu(i) = d.u[i];
  }
  Kokkos::deep_copy(w, hw);
  Kokkos::deep_copy(u, hu);
  const WritebackCounts c = writeback(Space{}, fmt, pol, RngKey{77, 12, 4}, w, Kokkos::View<const float*, MS>(u), opt);
  Kokkos::deep_copy(hw, w);
  out.assign(hw.data(), hw.data() + n);
  return c;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<std::pair<FormatSpec, wbaudit::test::RefFormat>> test_formats() {
  std::vector<std::pair<FormatSpec, wbaudit::test::RefFormat>> f;
  for (const auto& ref : wbaudit::test::ref_float_formats()) {
    if (ref.name == "bf16" || ref.name == "e4m3" || ref.name == "e2m1") {
      f.emplace_back(format_from_name(ref.name), ref);
    }
  }
  f.emplace_back(int_format(4, 0.375f), wbaudit::test::ref_int_format(4, 0.375));
  return f;
}

const WritebackPolicy kPolicies[] = {{Policy::nearest, 0},
                                     {Policy::stochastic, 0},
                                     {Policy::stochastic, 3},
                                     {Policy::deadzone_sr, 0},
                                     {Policy::deadzone_sr, 8},
                                     {Policy::stochastic, 8, SrStream::philox_packed},
                                     {Policy::stochastic, 0, SrStream::philox_packed}};

}  // namespace

// Under every implementation of the block loops this CPU supports (AVX-512, AVX2, portable), each forced in turn:
// the same results on the serial and OpenMP spaces, at any chunking and for slices, and across the implementations.
TEST(Writeback, BitwiseIdenticalAcrossSpacesThreadsChunksAndSlices) {
  std::printf("OpenMP concurrency: %d\n", Kokkos::OpenMP().concurrency());
  std::map<std::string, std::vector<float>> first_isa;  // (format, policy) -> the first implementation's result
  for (const auto isa : {detail::BlockIsa::avx512, detail::BlockIsa::avx2, detail::BlockIsa::portable}) {
    if (!detail::block_isa_supported(isa)) {
      std::printf("%s loops: not supported by this CPU\n", detail::block_isa_name(isa));
      continue;
    }
    ASSERT_EQ(detail::force_block_isa(isa), isa);
    std::printf("%s loops\n", detail::block_isa_name(isa));
    for (const auto& [fmt, ref] : test_formats()) {
      const Data d = make_data(fmt, ref, 30011, 8);
      for (const auto& pol : kPolicies) {
        const std::string label = std::string(fmt.name) + " " + policy_name(pol.policy) +
                                  " r=" + std::to_string(pol.sr_bits) + " " + sr_stream_name(pol.stream);
        SCOPED_TRACE(label + " (" + detail::block_isa_name(isa) + " loops)");
        std::vector<float> serial, omp, chunked;
        const WritebackCounts cs = run<Kokkos::Serial>(fmt, pol, d, serial);
        const auto [it, fresh] = first_isa.emplace(label, serial);
        EXPECT_TRUE(fresh || bitwise_equal(it->second, serial)) << "differs from the first implementation's result";
        const WritebackCounts co = run<Kokkos::OpenMP>(fmt, pol, d, omp);
        EXPECT_EQ(cs, co);
        EXPECT_TRUE(bitwise_equal(serial, omp));
        for (int chunk : {1, 7, 4096}) {
          WritebackOptions opt;
          opt.chunk_size = chunk;
          EXPECT_EQ(run<Kokkos::OpenMP>(fmt, pol, d, chunked, opt), cs);
          EXPECT_TRUE(bitwise_equal(serial, chunked)) << "chunk " << chunk;
        }
        // Two slices with their coordinate offsets give the whole tensor's result.
        const std::size_t cut = 12345;
        Data a{{d.w.begin(), d.w.begin() + cut}, {d.u.begin(), d.u.begin() + cut}};
        Data b{{d.w.begin() + cut, d.w.end()}, {d.u.begin() + cut, d.u.end()}};
        std::vector<float> ra, rb;
        WritebackOptions first, second;
        second.first_coordinate = cut;
        WritebackCounts sum = run<Kokkos::OpenMP>(fmt, pol, a, ra, first);
        sum += run<Kokkos::Serial>(fmt, pol, b, rb, second);
        ra.insert(ra.end(), rb.begin(), rb.end());
        EXPECT_EQ(sum, cs);
        EXPECT_TRUE(bitwise_equal(serial, ra));
        // Counts against a plain host loop.
        std::int64_t nonzero = 0, erased = 0, applied = 0;
        for (std::size_t i = 0; i < d.w.size(); ++i) {
          nonzero += d.u[i] != 0;
          erased += d.u[i] != 0 && serial[i] == d.w[i];
          applied += serial[i] != d.w[i];
        }
        EXPECT_EQ(cs.nonzero, nonzero);
        EXPECT_EQ(cs.erased, erased);
        EXPECT_EQ(cs.applied, applied);
        EXPECT_EQ(cs.nonfinite, 0);
        if (pol.policy == Policy::nearest) {
          // nearest: every result is the reference rounding of the exact sum
          const auto table = wbaudit::test::ref_table(ref);
          for (std::size_t i = 0; i < d.w.size(); ++i) {
            ASSERT_EQ(serial[i], wbaudit::test::ref_nearest_search(table, static_cast<double>(d.w[i]) + d.u[i]));
          }
        }
      }
    }
  }
  detail::force_block_isa(detail::best_block_isa());
}

TEST(Writeback, DifferentKeysGiveDifferentStreams) {
  const FormatSpec fmt = format_from_name("bf16");
  const auto ref = wbaudit::test::ref_float_formats()[1];
  const Data d = make_data(fmt, ref, 20000, 3);
  std::vector<float> a, b;
  run<Kokkos::OpenMP>(fmt, {Policy::stochastic, 0}, d, a);
  WritebackOptions opt;
  opt.first_coordinate = 1;
  run<Kokkos::OpenMP>(fmt, {Policy::stochastic, 0}, d, b, opt);
  EXPECT_FALSE(bitwise_equal(a, b));
}

TEST(Writeback, NonFiniteInputIsAnErrorNamingTensorStepAndCoordinate) {
  const FormatSpec fmt = format_from_name("e4m3");
  Kokkos::View<float*> w("w", 10), u("u", 10);
  Kokkos::deep_copy(w, 1.0f);
  Kokkos::deep_copy(u, 0.5f);
  auto hu = Kokkos::create_mirror_view(u);
  Kokkos::deep_copy(hu, u);
  hu(6) = NAN;
  Kokkos::deep_copy(u, hu);
  try {
    writeback(fmt, WritebackPolicy{}, RngKey{1, 9, 5}, w, u);
    FAIL() << "no throw";
  } catch (const NonFiniteError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("tensor 5"), std::string::npos) << m;
    EXPECT_NE(m.find("step 9"), std::string::npos) << m;
    EXPECT_NE(m.find("coordinate 6"), std::string::npos) << m;
  }
  // The coordinate with the non-finite proposal is left unchanged; the others are written back (1 + 0.5 is an e4m3
  // value). The same under the SR policies (1.5 is on the grid, so no draw decides).
  auto hw = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, w);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(hw(i), i == 6 ? 1.0f : 1.5f) << i;
  }
  for (const auto& pol : kPolicies) {
    Kokkos::deep_copy(w, 1.0f);
    EXPECT_THROW(writeback(fmt, pol, RngKey{1, 9, 5}, w, u), NonFiniteError);
    Kokkos::deep_copy(hw, w);
    for (int i = 0; i < 10; ++i) {
      EXPECT_EQ(hw(i), i == 6 ? 1.0f : 1.5f) << policy_name(pol.policy) << " " << i;
    }
  }
  // A non-finite weight is reported too (and left as it is).
  hw(3) = -INFINITY;
  Kokkos::deep_copy(w, hw);
  hu(6) = 0.5f;
  Kokkos::deep_copy(u, hu);
  try {
    writeback(fmt, WritebackPolicy{}, RngKey{1, 9, 5}, w, u);
    FAIL() << "no throw";
  } catch (const NonFiniteError& e) {
    EXPECT_NE(std::string(e.what()).find("coordinate 3"), std::string::npos) << e.what();
  }
  Kokkos::deep_copy(hw, w);
  EXPECT_EQ(hw(3), -INFINITY);
  Kokkos::deep_copy(w, 1.0f);
  hu(6) = INFINITY;
  Kokkos::deep_copy(u, hu);
  EXPECT_THROW(writeback(fmt, WritebackPolicy{}, RngKey{}, w, u), NonFiniteError);
  EXPECT_THROW(project_erasure(fmt, w, u), NonFiniteError);
  Kokkos::View<float*> x("x", 3);
  auto hx = Kokkos::create_mirror_view(x);
  hx(0) = 1;
  hx(1) = -INFINITY;
  hx(2) = 0;
  Kokkos::deep_copy(x, hx);
  EXPECT_THROW(quantize(fmt, x), NonFiniteError);
}

TEST(Writeback, BadPolicyInputNamesTheValue) {
  try {
    policy_from_name("stochastik");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("\"stochastik\""), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("deadzone-sr"), std::string::npos);
  }
  for (int bad : {-1, 33, 1000}) {
    try {
      make_policy("stochastic", bad);
      FAIL() << bad;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(bad)), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(make_policy("nearest", 4), std::invalid_argument);
  EXPECT_EQ(make_policy("deadzone-sr", 8).sr_bits, 8);
  EXPECT_EQ(make_policy("deadzone-sr").policy, Policy::deadzone_sr);
  for (auto p : {Policy::nearest, Policy::stochastic, Policy::deadzone_sr, Policy::master}) {
    EXPECT_EQ(policy_from_name(policy_name(p)), p);
  }
  Kokkos::View<float*> w("w", 4), u("u", 4), u3("u3", 3);
  EXPECT_THROW(writeback(format_from_name("bf16"), WritebackPolicy{Policy::master, 0}, RngKey{}, w, u),
               std::invalid_argument);
  EXPECT_THROW(writeback(format_from_name("bf16"), WritebackPolicy{Policy::stochastic, 40}, RngKey{}, w, u),
               std::invalid_argument);
  EXPECT_THROW(writeback(format_from_name("bf16"), WritebackPolicy{}, RngKey{0, 1ull << 33, 0}, w, u),
               std::invalid_argument);
  EXPECT_THROW(writeback(format_from_name("bf16"), WritebackPolicy{}, RngKey{}, w, u3), std::invalid_argument);
}

TEST(Writeback, MasterProjectionAndQuantize) {
  const FormatSpec fmt = format_from_name("bf16");
  const auto table = wbaudit::test::ref_table(wbaudit::test::ref_float_formats()[1]);
  // A tiny constant proposal: nearest write-back erases it forever, the master copy accumulates it.
  const int n = 8;
  Kokkos::View<float*> master("m", n), w("w", n), u("u", n);
  Kokkos::deep_copy(master, 1.0f);
  Kokkos::deep_copy(w, 1.0f);
  Kokkos::deep_copy(u, 0x1p-10f);
  std::int64_t applied = 0, erased = 0;
  for (int step = 0; step < 16; ++step) {
    const WritebackCounts c = writeback_master(fmt, master, w, u);
    applied += c.applied;
    erased += c.erased;
  }
  auto hw = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, w);
  auto hm = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, master);
  EXPECT_EQ(hm(0), 1.0f + 16 * 0x1p-10f);
  EXPECT_EQ(hw(0), 1.0f + 0x1p-6f);  // 1 + 2^-6 is a bf16 value
  EXPECT_EQ(applied, 2 * n);         // w moves at step 5 (to 1 + 2^-7) and step 12 (tie 1 + 12/1024: even 1 + 2^-6)
  EXPECT_EQ(applied + erased, 16 * n);
  Kokkos::View<float*> w2("w2", n);
  Kokkos::deep_copy(w2, 1.0f);
  EXPECT_EQ(writeback(fmt, WritebackPolicy{}, RngKey{}, w2, u).erased, n);

  // project_erasure and quantize against the reference table.
  const int m = 50000;
  Kokkos::View<float*> ref_w("rw", m), ref_u("ru", m), x("x", m);
  auto hrw = Kokkos::create_mirror_view(ref_w);
  auto hru = Kokkos::create_mirror_view(ref_u);
  SplitMix rng{4};
  std::int64_t expected_erased = 0, expected_nonzero = 0;
  for (int i = 0; i < m; ++i) {
    hrw(i) = static_cast<float>((rng.uniform() - 0.5) * 8);
    hru(i) = rng.below(8) == 0
                 ? 0.0f
                 : static_cast<float>((rng.uniform() - 0.5) * std::ldexp(1.0, -static_cast<int>(rng.below(12))));
    const double wq = wbaudit::test::ref_nearest_search(table, hrw(i));
    expected_nonzero += hru(i) != 0;
    expected_erased += hru(i) != 0 && wbaudit::test::ref_nearest_search(table, wq + hru(i)) == wq;
  }
  Kokkos::deep_copy(ref_w, hrw);
  Kokkos::deep_copy(ref_u, hru);
  const WritebackCounts pc = project_erasure(fmt, ref_w, ref_u);
  EXPECT_EQ(pc.nonzero, expected_nonzero);
  EXPECT_EQ(pc.erased, expected_erased);
  Kokkos::deep_copy(x, hrw);
  quantize(fmt, x);
  auto hx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, x);
  for (int i = 0; i < m; ++i) {
    ASSERT_EQ(hx(i), wbaudit::test::ref_nearest_search(table, hrw(i)));
  }
}

TEST(Audit, ConsistentTrajectoriesPassAndTamperedCoordinatesAreListed) {
  for (const auto& [fmt, ref] : test_formats()) {
    const Data d = make_data(fmt, ref, 20000, 21);
    for (const auto& pol : kPolicies) {
      SCOPED_TRACE(std::string(fmt.name) + " " + policy_name(pol.policy) + " r=" + std::to_string(pol.sr_bits));
      std::vector<float> next;
      const WritebackCounts c = run<Kokkos::OpenMP>(fmt, pol, d, next);
      AuditReport rep = audit_writeback(fmt, pol, d.w, d.u, next, 4, 12);
      EXPECT_TRUE(rep.consistent()) << rep.inconsistencies.size() << " e.g. "
                                    << (rep.inconsistencies.empty() ? "" : rep.inconsistencies[0].reason);
      EXPECT_EQ(rep.counts.nonzero, c.nonzero);
      EXPECT_EQ(rep.counts.erased, c.erased);
      EXPECT_EQ(rep.counts.saturated, c.saturated);
      EXPECT_EQ(rep.counts.sr_applied, c.sr_applied);
      EXPECT_EQ(rep.counts.sr_truncated, c.sr_truncated);
      // Replaying the draws with the run's key reproduces every coordinate.
      EXPECT_TRUE(audit_writeback(fmt, pol, d.w, d.u, next, 4, 12, RngKey{77, 12, 4}).consistent());
      if (pol.policy != Policy::nearest) {
        EXPECT_FALSE(audit_writeback(fmt, pol, d.w, d.u, next, 4, 12, RngKey{78, 12, 4}).consistent());
      }
      // Tamper: move coordinate 17 two grid steps away; the audit lists exactly it.
      std::vector<float> bad = next;
      const FormatParams p = format_params(fmt);
      const double moved = succ(p, succ(p, next[17]));
      bad[17] = static_cast<float>(std::isfinite(moved) ? moved : pred(p, pred(p, next[17])));
      rep = audit_writeback(fmt, pol, d.w, d.u, bad, 4, 12);
      ASSERT_EQ(rep.inconsistencies.size(), 1u);
      EXPECT_EQ(rep.inconsistencies[0].coordinate, 17u);
      // A value off the format's grid is listed as not representable.
      bad = next;
      bad[5] = static_cast<float>(next[5] + gap_up(p, next[5]) / 3);
      if (std::isfinite(bad[5]) && bad[5] != next[5]) {
        rep = audit_writeback(fmt, pol, d.w, d.u, bad, 4, 12);
        ASSERT_EQ(rep.inconsistencies.size(), 1u);
        EXPECT_NE(rep.inconsistencies[0].reason.find("not representable"), std::string::npos);
      }
    }
    // A stochastic trajectory is not a nearest one (in general); a nearest one is a valid SR outcome.
    std::vector<float> sr_next, near_next;
    run<Kokkos::OpenMP>(fmt, {Policy::stochastic, 0}, d, sr_next);
    run<Kokkos::OpenMP>(fmt, {Policy::nearest, 0}, d, near_next);
    std::int64_t differ = 0;
    for (std::size_t i = 0; i < sr_next.size(); ++i) {
      differ += sr_next[i] != near_next[i];
    }
    EXPECT_EQ(
        static_cast<std::int64_t>(audit_writeback(fmt, {Policy::nearest, 0}, d.w, d.u, sr_next).inconsistencies.size()),
        differ);
    EXPECT_GT(differ, 0);
    EXPECT_TRUE(audit_writeback(fmt, {Policy::stochastic, 0}, d.w, d.u, near_next).consistent());
  }
  const FormatSpec fmt = format_from_name("e4m3");
  std::vector<float> w{1.0f, 2.0f}, u{0.5f, NAN}, n{1.5f, 2.0f};
  try {
    audit_writeback(fmt, {}, w, u, n, 3, 8);
    FAIL();
  } catch (const NonFiniteError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 3, step 8"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("coordinate 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(audit_writeback(fmt, {Policy::master, 0}, w, w, w), std::invalid_argument);
}

// The vectorized replay (the trajectory audit's fast path) against the coordinate-by-coordinate audit, an
// independent implementation (the exact scalar bracket): same counts where everything is consistent, and every
// tampered, off-grid or non-finite coordinate counted as a mismatch; results do not depend on where the range starts
// within the blocks.
TEST(Audit, ReplayAgreesWithTheCoordinateByCoordinateAudit) {
  using Space = Kokkos::DefaultHostExecutionSpace;
  using Const = Kokkos::View<const float*, Space::memory_space, Kokkos::MemoryUnmanaged>;
  const RngKey key{77, 12, 4};  // run<> keys its write-backs so
  for (const auto& [fmt, ref] : test_formats()) {
    const Data d = make_data(fmt, ref, 20000, 23);
    const std::size_t n = d.w.size();
    for (const auto& pol : kPolicies) {
      SCOPED_TRACE(std::string(fmt.name) + " " + policy_name(pol.policy) + " r=" + std::to_string(pol.sr_bits));
      std::vector<float> next;
      run<Kokkos::OpenMP>(fmt, pol, d, next);
      const AuditReport rep = audit_writeback(fmt, pol, d.w, d.u, next, 4, 12, key);
      ASSERT_TRUE(rep.consistent());
      auto replay = [&](const std::vector<float>& w, const std::vector<float>& u, const std::vector<float>& nx,
                        bool w_stored, RngKey k = RngKey{77, 12, 4}) {
        return replay_writeback(Space(), fmt, pol, k, Const(w.data(), n), Const(u.data(), n), Const(nx.data(), n), 0,
                                w_stored);
      };
      for (const bool w_stored : {false, true}) {
        const ReplayReport r = replay(d.w, d.u, next, w_stored);
        EXPECT_EQ(r.mismatched, 0);
        EXPECT_EQ(r.counts.nonzero, rep.counts.nonzero);
        EXPECT_EQ(r.counts.erased, rep.counts.erased);
        EXPECT_EQ(r.counts.applied, rep.counts.applied);
        EXPECT_EQ(r.counts.saturated, rep.counts.saturated);
        EXPECT_EQ(r.counts.sr_applied, rep.counts.sr_applied);
        EXPECT_EQ(r.counts.sr_truncated, rep.counts.sr_truncated);
        EXPECT_EQ(r.nearest_erased, rep.nearest_erased);
      }
      // A sub-range that starts inside a block: its RNG counters are first_coordinate + i.
      const std::size_t off = 1000, len = 5000;
      const ReplayReport part =
          replay_writeback(Space(), fmt, pol, key, Const(d.w.data() + off, len), Const(d.u.data() + off, len),
                           Const(next.data() + off, len), off, false);
      const AuditReport part_ref =
          audit_writeback(fmt, pol, std::span(d.w).subspan(off, len), std::span(d.u).subspan(off, len),
                          std::span(next).subspan(off, len), 4, 12);
      EXPECT_EQ(part.mismatched, 0);
      EXPECT_EQ(part.counts.erased, part_ref.counts.erased);
      EXPECT_EQ(part.nearest_erased, part_ref.nearest_erased);
      // Tampered w_next (two grid steps away), an off-grid w (unless already verified), a NaN proposal.
      const FormatParams p = format_params(fmt);
      std::vector<float> bad = next;
      const double moved = succ(p, succ(p, next[17]));
      bad[17] = static_cast<float>(std::isfinite(moved) ? moved : pred(p, pred(p, next[17])));
      EXPECT_EQ(replay(d.w, d.u, bad, true).mismatched, 1);
      std::vector<float> w_off = d.w;
      w_off[3000] = static_cast<float>(d.w[3000] + gap_up(p, d.w[3000]) / 3);
      if (w_off[3000] != d.w[3000] && std::isfinite(w_off[3000])) {
        EXPECT_GE(replay(w_off, d.u, next, false).mismatched, 1);
      }
      std::vector<float> u_nan = d.u;
      u_nan[19999] = NAN;
      EXPECT_GE(replay(d.w, u_nan, next, true).mismatched, 1);
      if (pol.policy != Policy::nearest) {  // another seed's draws are not this run's
        EXPECT_GT(replay(d.w, d.u, next, true, RngKey{78, 12, 4}).mismatched, 0);
      }
    }
  }
}
