#pragma once
// Text helpers shared by every module: joining lists and the one rule for writing numbers.
#include <string>
#include <string_view>
#include <vector>

namespace wbaudit::util {

// items joined with sep ("a, b, c").
std::string join(const std::vector<std::string>& items, std::string_view sep = ", ");

// A number as text, the one rule every table and message follows: `precision` significant digits (17, the default,
// round-trips a double); NaN (a missing value) is the empty string; infinities are "inf" and "-inf" (read back as such
// by pandas and by std::strtod).
std::string number_text(double x, int precision = 17);

// A float in a message about it (an audit's inconsistent coordinate): 9 significant digits, which read back as the
// same float; NaN and infinities as printf writes them ("nan", "-inf"), since the value is the point of the message.
std::string float_text(float x);

// The shortest text that reads back as the same double ("0.3", "0.95", "1e-30"; number_text(0.3) is
// "0.29999999999999999"): for values a person typed and reads back (learning-rate scales, confidences), as
// number_text for NaN and infinities.
std::string shortest_number(double x);

// For prose and tables meant to be read: as number_text, but NaN is an em dash.
std::string shown_number(double x, int precision = 4);

// A number with a fixed count of decimals, for tables meant to be read ("2.1250"); NaN and infinities are an em
// dash (a loss or a share that is not finite has no value to show).
std::string fixed_number(double x, int decimals = 4);

// A duration for progress lines: "42s" under 90 s, "3.5min" under 90 min, else "2.1h".
std::string format_duration(double seconds);

// " (did you mean \"x\"?)" for the candidate closest to word in edit distance (Levenshtein, case-insensitive)
// when it is close enough to be a typo (distance <= max(1, |word| / 3)); empty otherwise.
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

// text without leading and trailing blanks (spaces, tabs, carriage returns).
std::string trim(std::string_view text);

}  // namespace wbaudit::util
