// Optimizers, schedules and recording schedules against hand-computed values.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <cmath>
#include <set>
#include <vector>

#include "sim/optim/optimizer.hpp"
#include "sim/optim/schedule.hpp"
#include "sim/trace/record_schedule.hpp"

namespace {

using namespace wbaudit::sim;
using Space = Kokkos::DefaultExecutionSpace;
using Vec = Kokkos::View<float*, Space::memory_space>;

Vec make(const std::vector<float>& v) {
  Vec out("v", v.size());
  auto h = Kokkos::create_mirror_view(out);
  for (std::size_t i = 0; i < v.size(); ++i) {
    h(i) = v[i];
  }
  Kokkos::deep_copy(out, h);
  return out;
}
std::vector<float> host(const Vec& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::vector<float>(h.data(), h.data() + h.extent(0));
}

TEST(Optimizer, AdamMatchesPlainRecurrence) {
  OptimizerConfig c;
  c.kind = OptimizerKind::adam;
  c.weight_decay = 0.01;
  Optimizer<Space> opt(c, {3});
  const std::vector<float> w = {0.5f, -1.0f, 2.0f};
  Vec wv = make(w), u("u", 3);
  std::vector<double> m(3, 0), v(3, 0);
  const std::vector<std::vector<float>> grads = {{0.1f, -0.2f, 0.0f}, {0.3f, 0.1f, -1e-3f}, {-0.2f, 0.0f, 4.0f}};
  for (int t = 0; t < 3; ++t) {
    opt.propose(Space(), 0, t, 0.01f, make(grads[t]), wv, u);
    const std::vector<float> got = host(u);
    for (int i = 0; i < 3; ++i) {
      const double g = grads[t][i] + 0.01 * w[i];
      m[i] = 0.9 * m[i] + 0.1 * g;
      v[i] = 0.999 * v[i] + 0.001 * g * g;
      const double mhat = m[i] / (1 - std::pow(0.9, t + 1)), vhat = v[i] / (1 - std::pow(0.999, t + 1));
      const double expect = -0.01 * mhat / (std::sqrt(vhat) + 1e-8);
      EXPECT_NEAR(got[i], expect, 1e-6 * std::fabs(expect) + 1e-12) << "step " << t << " coordinate " << i;
    }
  }
}

TEST(Optimizer, AdamWDecouplesDecayAndSgdMomentum) {
  OptimizerConfig c;
  c.kind = OptimizerKind::adamw;
  c.weight_decay = 0.5;
  Optimizer<Space> adamw(c, {1});
  Vec w = make({2.0f}), u("u", 1);
  adamw.propose(Space(), 0, 0, 0.1f, make({3.0f}), w, u);
  // First Adam step is g / (|g| + eps) = 1 (to fp32 accuracy), plus lambda w = 1: u = -0.1 * 2.
  EXPECT_NEAR(host(u)[0], -0.2f, 1e-7);

  c.kind = OptimizerKind::momentum;
  c.momentum = 0.5;
  c.weight_decay = 0.0;
  Optimizer<Space> mom(c, {1});
  mom.propose(Space(), 0, 0, 0.1f, make({1.0f}), w, u);
  EXPECT_FLOAT_EQ(host(u)[0], -0.1f);
  mom.propose(Space(), 0, 1, 0.1f, make({1.0f}), w, u);
  EXPECT_FLOAT_EQ(host(u)[0], -0.15f);  // b = 0.5 * 1 + 1

  c.kind = OptimizerKind::sgd;
  c.weight_decay = 0.25;
  Optimizer<Space> sgd(c, {1});
  sgd.propose(Space(), 0, 0, 0.1f, make({1.0f}), w, u);
  EXPECT_FLOAT_EQ(host(u)[0], -0.15f);  // -0.1 * (1 + 0.25 * 2)
}

TEST(Schedule, HandComputedValues) {
  ScheduleConfig s;
  EXPECT_FLOAT_EQ(scheduled_learning_rate(s, 0.1, 57, 100), 0.1f);
  s.kind = ScheduleKind::warmup;
  s.warmup_steps = 4;
  EXPECT_FLOAT_EQ(scheduled_learning_rate(s, 0.1, 0, 100), 0.025f);
  EXPECT_FLOAT_EQ(scheduled_learning_rate(s, 0.1, 3, 100), 0.1f);
  EXPECT_FLOAT_EQ(scheduled_learning_rate(s, 0.1, 50, 100), 0.1f);
  s.kind = ScheduleKind::cosine;
  s.warmup_steps = 0;
  s.min_lr_ratio = 0.1;
  EXPECT_FLOAT_EQ(scheduled_learning_rate(s, 1.0, 0, 100), 1.0f);
  EXPECT_FLOAT_EQ(scheduled_learning_rate(s, 1.0, 50, 100), 0.55f);  // 0.1 + 0.9 * (1 + cos(pi/2)) / 2
  s.kind = ScheduleKind::cosine_restarts;
  s.period = 10;
  EXPECT_FLOAT_EQ(scheduled_learning_rate(s, 1.0, 25, 100), 0.55f);
  EXPECT_FLOAT_EQ(scheduled_learning_rate(s, 1.0, 30, 100), 1.0f);
  s.kind = ScheduleKind::step;
  s.step_size = 10;
  s.gamma = 0.5;
  EXPECT_FLOAT_EQ(scheduled_learning_rate(s, 1.0, 9, 100), 1.0f);
  EXPECT_FLOAT_EQ(scheduled_learning_rate(s, 1.0, 25, 100), 0.25f);
  EXPECT_THROW(schedule_kind_from_name("linear"), std::invalid_argument);
}

TEST(RecordSchedule, EveryEveryKAndLog) {
  EXPECT_EQ(recorded_steps(RecordConfig{RecordKind::every, 1, 2}, 4), (std::vector<std::int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(recorded_steps(RecordConfig{RecordKind::every_k, 4, 2}, 10), (std::vector<std::int64_t>{0, 4, 8, 9}));
  EXPECT_EQ(recorded_steps(RecordConfig{RecordKind::every_k, 3, 2}, 7), (std::vector<std::int64_t>{0, 3, 6}));
  for (std::int64_t steps : {2, 3, 10, 100, 2000, 100000}) {
    for (std::int64_t points : {2, 3, 10, 60, 100}) {
      const auto r = recorded_steps(RecordConfig{RecordKind::log, 1, points}, steps);
      ASSERT_EQ(static_cast<std::int64_t>(r.size()), std::min(points, steps)) << steps << " " << points;
      EXPECT_EQ(r.front(), 0);
      EXPECT_EQ(r.back(), steps - 1);
      for (std::size_t i = 1; i < r.size(); ++i) {
        EXPECT_LT(r[i - 1], r[i]);
      }
    }
  }
  // Log spacing: between 100 and 1000 there are about as many points as between 1000 and 10000.
  const auto r = recorded_steps(RecordConfig{RecordKind::log, 1, 100}, 10001);
  const auto count = [&](std::int64_t lo, std::int64_t hi) {
    return std::count_if(r.begin(), r.end(), [&](std::int64_t t) { return t >= lo && t < hi; });
  };
  EXPECT_NEAR(count(100, 1000), count(1000, 10000), 2);
  EXPECT_THROW(recorded_steps(RecordConfig{RecordKind::log, 1, 1}, 10), std::invalid_argument);
  EXPECT_THROW(recorded_steps(RecordConfig{RecordKind::every_k, 0, 2}, 10), std::invalid_argument);
  EXPECT_THROW(recorded_steps(RecordConfig{}, 0), std::invalid_argument);
}

}  // namespace
