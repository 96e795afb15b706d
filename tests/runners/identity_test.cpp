// Canonical identity: digests are checked against values computed outside this code base, by `sha256sum` on
// canonical strings written by hand (the command is quoted next to each digest).
#include "runners/store/identity.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>
#include <set>

namespace wr = wbaudit::runners;

namespace {

// printf '%s' '{"data":{"batch":64,"noise":0},"optimizer":{"kind":"sgd","lr":0.001},"schema":"wbaudit.cell/1",
// "seed":1,"steps":2000,"target":{"format":"e4m3","policy":"nearest","sr_bits":0}}' | sha256sum   (one line)
constexpr const char* kHandCanonical =
    R"({"data":{"batch":64,"noise":0},"optimizer":{"kind":"sgd","lr":0.001},"schema":"wbaudit.cell/1",)"
    R"("seed":1,"steps":2000,"target":{"format":"e4m3","policy":"nearest","sr_bits":0}})";
constexpr const char* kHandDigest = "7b26c74782eb7fd206da41b823983f57194f5343ad4c5c0bdd785f5602263b13";

}  // namespace

TEST(Identity, Sha256OfKnownStrings) {
  // FIPS 180-2 example "abc".
  EXPECT_EQ(wr::sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(wr::sha256_hex(kHandCanonical), kHandDigest);
}

TEST(Identity, CellIdMatchesHandWrittenCanonicalText) {
  // Same configuration, keys in a scrambled order, whitespace, and floats written differently.
  const auto config = nlohmann::json::parse(R"({
      "target": {"sr_bits": 0, "policy": "nearest", "format": "e4m3"},
      "steps": 2000.0, "seed": 1, "schema": "wbaudit.cell/1",
      "optimizer": {"lr": 1e-3, "kind": "sgd"},
      "data": {"noise": 0.0, "batch": 64}})");
  EXPECT_EQ(wr::canonical_json(config), kHandCanonical);
  EXPECT_EQ(wr::cell_id(config), kHandDigest);
  const auto again = nlohmann::json::parse(R"({"schema":"wbaudit.cell/1","seed":1,"steps":2000,
      "data":{"batch":64,"noise":-0.0},"optimizer":{"kind":"sgd","lr":0.0010000},
      "target":{"policy":"nearest","format":"e4m3","sr_bits":0}})");
  EXPECT_EQ(wr::cell_id(again), kHandDigest);
}

TEST(Identity, FloatTextAndUnicode) {
  // printf '{"a":[1,2.5,"x\xc3\xa9"],"b":1e-08,"schema":"wbaudit.cell/1"}' | sha256sum
  const auto config = nlohmann::json::parse(R"({"schema":"wbaudit.cell/1","b":0.00000001,"a":[1.0,2.50,"x\u00e9"]})");
  EXPECT_EQ(wr::canonical_json(config), "{\"a\":[1,2.5,\"x\xc3\xa9\"],\"b\":1e-08,\"schema\":\"wbaudit.cell/1\"}");
  EXPECT_EQ(wr::cell_id(config), "6093ed5d60990a9b3f05a066768b564a40e1681f7e133871209ef30c02128c40");
}

TEST(Identity, DistinctValuesGiveDistinctIds) {
  auto base = nlohmann::json::parse(kHandCanonical);
  std::set<std::string> ids{wr::cell_id(base)};
  auto a = base;
  a["optimizer"]["lr"] = 0.0010000000000000002;  // next double above 0.001
  ids.insert(wr::cell_id(a));
  auto b = base;
  b["seed"] = 2;
  ids.insert(wr::cell_id(b));
  auto c = base;
  c["schema"] = "wbaudit.cell/2";
  ids.insert(wr::cell_id(c));
  auto d = base;
  d["optimizer"]["kind"] = "SGD";
  ids.insert(wr::cell_id(d));
  EXPECT_EQ(ids.size(), 5u);
  // Integers beyond 2^53 stored as doubles keep their float text rather than being truncated.
  EXPECT_EQ(wr::canonical_json(nlohmann::json(1e300)), "1e+300");
  EXPECT_EQ(wr::canonical_json(nlohmann::json(0.1)), "0.1");
}

TEST(Identity, RejectsWhatHasNoCanonicalForm) {
  auto config = nlohmann::json::parse(kHandCanonical);
  config["optimizer"]["lr"] = std::numeric_limits<double>::quiet_NaN();
  try {
    (void)wr::cell_id(config);
    FAIL() << "NaN accepted";
  } catch (const wr::IdentityError& e) {
    EXPECT_NE(std::string(e.what()).find("optimizer.lr"), std::string::npos) << e.what();
  }
  auto unversioned = nlohmann::json::parse(kHandCanonical);
  unversioned.erase("schema");
  EXPECT_THROW((void)wr::cell_id(unversioned), wr::IdentityError);
  EXPECT_THROW((void)wr::cell_id(nlohmann::json::array()), wr::IdentityError);
}

TEST(Identity, FileHashIsStreamedOverBlocks) {
  const auto path = std::filesystem::temp_directory_path() / ("wbaudit_identity_" + wr::random_uuid());
  {
    std::ofstream out(path, std::ios::binary);
    const std::string zeros(3000000, '\0');  // crosses the 1 MiB read blocks
    out.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
  }
  // head -c 3000000 /dev/zero | sha256sum
  EXPECT_EQ(wr::sha256_file(path), "35bce4eae54ec8e6cc2868baa8d157914d6ae2858811b4cc0c078c94460fa26f");
  std::filesystem::remove(path);
  EXPECT_THROW((void)wr::sha256_file(path), wbaudit::util::HashError);
}

TEST(Identity, UuidsAreVersion4AndDistinct) {
  const std::regex form("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}");
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    const auto uuid = wr::random_uuid();
    EXPECT_TRUE(std::regex_match(uuid, form)) << uuid;
    seen.insert(uuid);
  }
  EXPECT_EQ(seen.size(), 100u);
}

TEST(Identity, BuildIdentityNamesItsParts) {
  const auto build = wr::build_identity();
  for (const char* key : {"version", "git_commit", "git_dirty", "kokkos_version", "mpi_version", "mpi_library"})
    EXPECT_TRUE(build.contains(key)) << key;
  EXPECT_EQ(wr::self_executable_sha256().size(), 64u);
  EXPECT_EQ(wr::self_executable_sha256(), wr::sha256_file(wr::self_executable()));
}
