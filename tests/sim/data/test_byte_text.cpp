// Byte-level text: every window equals the file's bytes at its offset (the file read independently here), training
// windows stay inside the training part and validation windows inside the held-out part, batches are bitwise the
// same on every execution space, the SHA-256 is the file's (checked against a known digest), and every bad input is
// refused with the file or value named.
#include <gtest/gtest.h>
#include <unistd.h>

#include <Kokkos_Core.hpp>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "sim/data/byte_text.hpp"

namespace {

using namespace wbaudit::sim;
using Space = Kokkos::DefaultExecutionSpace;
namespace fs = std::filesystem;

class ByteTextTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("wbaudit_byte_text_" + std::to_string(::getpid()));
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  fs::path write(const std::string& name, const std::string& bytes) {
    const fs::path p = dir / name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  fs::path dir;
};

std::string random_bytes(std::size_t n) {
  std::mt19937 gen(3);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(gen() & 0xff);
  return s;
}

template <class S>
std::vector<std::int32_t> batch(const ByteText<S>& t, std::int64_t index, int rows, int seq_len, bool validation) {
  Kokkos::View<std::int32_t*, typename S::memory_space> out("out", static_cast<std::size_t>(rows) * (seq_len + 1));
  if (validation) {
    t.validation_batch(S(), static_cast<int>(index), rows, seq_len, out);
  } else {
    t.training_batch(S(), index, rows, seq_len, out);
  }
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), out);
  return std::vector<std::int32_t>(h.data(), h.data() + h.extent(0));
}

TEST_F(ByteTextTest, WindowsAreTheFileBytesAtTheirOffsetsOnTheRightSideOfTheSplit) {
  const std::string content = random_bytes(5000);
  const fs::path file = write("text.bin", content);
  const ByteText<Space> text(file, 0.2, 9);
  EXPECT_EQ(text.vocab(), 256);
  EXPECT_EQ(text.size(), 5000);
  EXPECT_EQ(text.split(), 4000);
  std::ifstream in(file, std::ios::binary);
  const std::vector<unsigned char> independent((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const int rows = 16;
  const int seq_len = 31;
  std::int64_t lowest = text.split();
  std::int64_t highest = 0;
  for (std::int64_t step : {0, 1, 2, 77}) {
    const auto tokens = batch(text, step, rows, seq_len, false);
    const auto offsets = text.training_offsets(step, rows, seq_len);
    for (int r = 0; r < rows; ++r) {
      const std::int64_t o = offsets[static_cast<std::size_t>(r)];
      ASSERT_GE(o, 0);
      ASSERT_LE(o + seq_len + 1, text.split()) << "a training window overlaps the held-out part";
      lowest = std::min(lowest, o);
      highest = std::max(highest, o);
      for (int p = 0; p <= seq_len; ++p) {
        ASSERT_EQ(tokens[static_cast<std::size_t>(r * (seq_len + 1) + p)],
                  static_cast<std::int32_t>(independent[static_cast<std::size_t>(o + p)]));
      }
    }
  }
  EXPECT_LT(lowest, 1000);  // offsets spread over the training part (64 draws from 3969 starts)
  EXPECT_GT(highest, 3000);
  for (int k : {0, 1, 5}) {
    const auto tokens = batch(text, k, rows, seq_len, true);
    const auto offsets = text.validation_offsets(k, rows, seq_len);
    for (int r = 0; r < rows; ++r) {
      const std::int64_t o = offsets[static_cast<std::size_t>(r)];
      ASSERT_GE(o, text.split()) << "a validation window starts in the training part";
      ASSERT_LE(o + seq_len + 1, text.size());
      for (int p = 0; p <= seq_len; ++p) {
        ASSERT_EQ(tokens[static_cast<std::size_t>(r * (seq_len + 1) + p)],
                  static_cast<std::int32_t>(independent[static_cast<std::size_t>(o + p)]));
      }
    }
  }
  // Validation windows are fixed: independent of the data seed; training windows are not.
  const ByteText<Space> reseeded(file, 0.2, 10);
  EXPECT_EQ(batch(text, 2, rows, seq_len, true), batch(reseeded, 2, rows, seq_len, true));
  EXPECT_NE(batch(text, 2, rows, seq_len, false), batch(reseeded, 2, rows, seq_len, false));
  EXPECT_NE(batch(text, 2, rows, seq_len, false), batch(text, 3, rows, seq_len, false));
}

TEST_F(ByteTextTest, BatchesAreBitwiseTheSameOnEverySpace) {
  const fs::path file = write("text.bin", random_bytes(3000));
  const ByteText<Space> a(file, 0.1, 4);
  const ByteText<Kokkos::Serial> b(file, 0.1, 4);
  for (std::int64_t step : {0, 9}) {
    EXPECT_EQ(batch(a, step, 5, 20, false), batch(b, step, 5, 20, false));
    EXPECT_EQ(batch(a, step, 5, 20, true), batch(b, step, 5, 20, true));
  }
}

TEST_F(ByteTextTest, Sha256IsTheDigestOfTheContent) {
  // The two-block message of FIPS 180-2 appendix B.2 and its digest.
  const std::string message = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(ByteText<Space>(write("fips.txt", message), 0.1, 1).sha256(),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST_F(ByteTextTest, BadInputIsRefusedNamingTheFileOrValue) {
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string("no DataError");
  };
  const fs::path missing = dir / "missing.txt";
  EXPECT_NE(message([&] { ByteText<Space>(missing, 0.1, 1); }).find(missing.string() + ": no such file"),
            std::string::npos);
  EXPECT_NE(message([&] { ByteText<Space>(dir, 0.1, 1); }).find("is a directory"), std::string::npos);
  EXPECT_NE(message([&] { ByteText<Space>(write("empty.txt", ""), 0.1, 1); }).find("empty"), std::string::npos);
  const fs::path ok = write("ok.txt", random_bytes(100));
  for (double f : {0.0, 1.0, -0.5, 1.5}) {
    EXPECT_NE(message([&] { ByteText<Space>(ok, f, 1); }).find("validation_fraction"), std::string::npos) << f;
  }
  EXPECT_NE(message([&] { ByteText<Space>(write("tiny.txt", "abc"), 0.1, 1); }).find("at least 2"), std::string::npos);
  const ByteText<Space> text(ok, 0.1, 1);  // 90 training, 10 held-out bytes
  Kokkos::View<std::int32_t*, Space::memory_space> out("out", 2 * 21);
  EXPECT_NE(message([&] { text.validation_batch(Space(), 0, 2, 20, out); }).find("held-out part has 10 bytes"),
            std::string::npos);
  Kokkos::View<std::int32_t*, Space::memory_space> long_out("out", 2 * 101);
  EXPECT_NE(message([&] { text.training_batch(Space(), 0, 2, 100, long_out); }).find("training part has 90 bytes"),
            std::string::npos);
  EXPECT_NE(message([&] { text.training_batch(Space(), 0, 2, 20, long_out); }).find("rows * (seq_len + 1)"),
            std::string::npos);
}

}  // namespace
