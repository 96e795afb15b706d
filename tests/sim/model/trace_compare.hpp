#pragma once
// Field-by-field trace comparison for tests; doubles compared bitwise (NaN == NaN).
#include <gtest/gtest.h>

#include <cstring>

#include "sim/trace/trace.hpp"

namespace wbaudit::test {

inline void expect_same_doubles(const std::vector<double>& a, const std::vector<double>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(0, a.empty() ? 0 : std::memcmp(a.data(), b.data(), a.size() * sizeof(double))) << what;
}

inline void expect_same_trace(const sim::Trace& a, const sim::Trace& b) {
  EXPECT_EQ(a.schema, b.schema);
  EXPECT_EQ(a.complete, b.complete);
  EXPECT_EQ(a.mode, b.mode);
  EXPECT_EQ(a.format, b.format);
  EXPECT_EQ(a.policy, b.policy);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.steps, b.steps);
  EXPECT_EQ(a.config_json, b.config_json);
  EXPECT_EQ(a.numeric_contract, b.numeric_contract);
  EXPECT_EQ(a.recorded_steps, b.recorded_steps);
  expect_same_doubles(a.loss, b.loss, "loss");
  expect_same_doubles(a.learning_rate, b.learning_rate, "learning_rate");
  EXPECT_EQ(a.validation_steps, b.validation_steps);
  expect_same_doubles(a.validation_loss, b.validation_loss, "validation_loss");
  expect_same_doubles({a.optimal_validation_loss}, {b.optimal_validation_loss}, "optimal_validation_loss");
  EXPECT_EQ(a.replay_steps, b.replay_steps);
  EXPECT_EQ(a.replay_checkpoints, b.replay_checkpoints);
  expect_same_doubles(a.replay_start_loss, b.replay_start_loss, "replay_start_loss");
  EXPECT_EQ(a.replays.size(), b.replays.size());
  for (std::size_t r = 0; r < a.replays.size() && r < b.replays.size(); ++r) {
    EXPECT_EQ(a.replays[r].policy, b.replays[r].policy);
    EXPECT_EQ(a.replays[r].format, b.replays[r].format);
    expect_same_doubles(a.replays[r].validation_loss, b.replays[r].validation_loss, "replay validation_loss");
  }
  EXPECT_EQ(a.histogram.bins, b.histogram.bins);
  EXPECT_EQ(a.histogram.d_min, b.histogram.d_min);
  EXPECT_EQ(a.histogram.bin_width, b.histogram.bin_width);
  ASSERT_EQ(a.groups.size(), b.groups.size());
  for (std::size_t i = 0; i < a.groups.size(); ++i) {
    const sim::GroupTrace &x = a.groups[i], &y = b.groups[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.tensor_id, y.tensor_id);
    EXPECT_EQ(x.size, y.size);
    EXPECT_EQ(x.nonzero, y.nonzero) << x.name;
    EXPECT_EQ(x.erased, y.erased) << x.name;
    EXPECT_EQ(x.saturated, y.saturated) << x.name;
    EXPECT_EQ(x.applied, y.applied) << x.name;
    expect_same_doubles(x.erased_fraction, y.erased_fraction, x.name + " erased_fraction");
    EXPECT_EQ(x.zero_weight, y.zero_weight) << x.name;
    EXPECT_EQ(x.ratio_histogram, y.ratio_histogram) << x.name;
    EXPECT_EQ(x.margin, y.margin) << x.name;
    ASSERT_EQ(x.projected.size(), y.projected.size());
    for (const auto& [name, series] : x.projected) {
      ASSERT_TRUE(y.projected.count(name)) << name;
      EXPECT_EQ(series.erased, y.projected.at(name).erased) << x.name << " " << name;
      expect_same_doubles(series.fraction, y.projected.at(name).fraction, x.name + " projected " + name);
      const auto& ye = y.projected.at(name).expected;
      ASSERT_EQ(series.expected.size(), ye.size()) << x.name << " " << name;
      for (const auto& [policy, e] : series.expected) {
        ASSERT_TRUE(ye.count(policy)) << x.name << " " << name << " " << policy;
        expect_same_doubles(e.erased, ye.at(policy).erased, x.name + " expected " + name + " " + policy);
        expect_same_doubles(e.fraction, ye.at(policy).fraction, x.name + " expected " + name + " " + policy);
      }
    }
  }
}

}  // namespace wbaudit::test
