// The attempt journal (runners/store/journal.hpp): concurrent appenders in separate processes give one unbroken chain
// (every seq once, every prev the SHA-256 of the line before, checked here line by line); a torn last line is
// ignored by readers and dropped by the next append; edited, removed and foreign-key entries are named.
#include "runners/store/journal.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runners/store/identity.hpp"

namespace wr = wbaudit::runners;
namespace fs = std::filesystem;

namespace {

struct Scratch {
  fs::path dir;
  explicit Scratch(const std::string& name)
      : dir(fs::temp_directory_path() / ("wbaudit_journal_" + std::to_string(::getpid()) + "_" + name)) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() { fs::remove_all(dir); }
};

wr::SweepKey make_key(const fs::path& dir, const std::string& name) {
  const fs::path file = dir / name;
  ::setenv("WBAUDIT_KEY_FILE", file.c_str(), 1);
  wr::SweepKey key = wr::create_sweep_key(wr::random_uuid());
  ::unsetenv("WBAUDIT_KEY_FILE");
  return key;
}

std::vector<std::string> lines_of(const fs::path& file) {
  std::ifstream in(file);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::string text_of(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void start_journal(const fs::path& journal, const wr::SweepKey& key) {
  std::ofstream(journal, std::ios::binary) << wr::journal_genesis_line(key, std::string(64, 'a'));
}

}  // namespace

TEST(Journal, ConcurrentAppendersInSeparateProcessesKeepOneChain) {
  Scratch s("concurrent");
  const wr::SweepKey key = make_key(s.dir, "key");
  const fs::path journal = s.dir / "journal.jsonl";
  start_journal(journal, key);
  constexpr int kProcesses = 4, kEach = 40;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int code = 0;
      try {
        for (int i = 0; i < kEach; ++i) {
          wr::journal_append(journal, key,
                             {{"event", "begin"}, {"cell", "c" + std::to_string(p)}, {"attempt", std::to_string(i)}});
        }
      } catch (...) {
        code = 1;
      }
      ::_exit(code);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  const auto lines = lines_of(journal);
  ASSERT_EQ(lines.size(), static_cast<std::size_t>(1 + kProcesses * kEach));
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const auto entry = nlohmann::json::parse(lines[i]);
    EXPECT_EQ(entry.at("seq").get<std::size_t>(), i);
    EXPECT_EQ(entry.at("prev").get<std::string>(), wr::sha256_hex(lines[i - 1])) << "line " << i + 1;
  }
  wr::JournalIndex index;
  wr::journal_read_more(journal, key, index);
  EXPECT_TRUE(index.problems.empty()) << index.problems.front();
  EXPECT_EQ(index.entries, lines.size());
  EXPECT_EQ(index.begun.size(), static_cast<std::size_t>(kProcesses * kEach));
  ASSERT_TRUE(index.sweep_json.has_value());
  EXPECT_EQ(*index.sweep_json, std::string(64, 'a'));
}

TEST(Journal, ATornLastLineIsIgnoredAndDroppedByTheNextAppend) {
  Scratch s("torn");
  const wr::SweepKey key = make_key(s.dir, "key");
  const fs::path journal = s.dir / "journal.jsonl";
  start_journal(journal, key);
  wr::journal_append(journal, key, {{"event", "begin"}, {"cell", "c"}, {"attempt", "1"}});
  const std::string intact = text_of(journal);
  std::ofstream(journal, std::ios::binary | std::ios::app) << R"({"attempt":"2","cell":"c","eve)";  // killed here
  wr::JournalIndex index;
  wr::journal_read_more(journal, key, index);
  EXPECT_TRUE(index.torn_tail);
  EXPECT_TRUE(index.problems.empty());
  EXPECT_EQ(index.entries, 2u);
  EXPECT_EQ(wr::journal_append(journal, key, {{"event", "begin"}, {"cell", "c"}, {"attempt", "3"}}), 2u);
  const std::string after = text_of(journal);
  ASSERT_EQ(after.compare(0, intact.size(), intact), 0) << "the intact entries changed";
  EXPECT_EQ(after.find("eve", intact.size()), after.find("event", intact.size())) << "the torn part is still there";
  wr::JournalIndex again;
  wr::journal_read_more(journal, key, again);
  EXPECT_FALSE(again.torn_tail);
  EXPECT_TRUE(again.problems.empty());
  EXPECT_EQ(again.entries, 3u);
  EXPECT_TRUE(again.begun.count({"c", "3"}));
  EXPECT_FALSE(again.begun.count({"c", "2"}));
}

TEST(Journal, EditedRemovedAndForeignEntriesAreNamed) {
  Scratch s("edited");
  const wr::SweepKey key = make_key(s.dir, "key");
  const wr::SweepKey other = make_key(s.dir, "other");
  const fs::path journal = s.dir / "journal.jsonl";
  start_journal(journal, key);
  for (int i = 0; i < 4; ++i)
    wr::journal_append(journal, key, {{"event", "begin"}, {"cell", "c"}, {"attempt", std::to_string(i)}});
  auto lines = lines_of(journal);
  auto write = [&](const std::vector<std::string>& ls) {
    std::ofstream out(journal, std::ios::binary | std::ios::trunc);
    for (auto& l : ls) out << l << "\n";
  };
  auto problems = [&] {
    wr::JournalIndex index;
    wr::journal_read_more(journal, key, index);
    return index.problems;
  };
  // Removed entry #2: entry #3 (now on line 3) carries seq 3 and does not chain; entry #4 (line 4) carries seq 4.
  auto removed = lines;
  removed.erase(removed.begin() + 2);
  write(removed);
  auto p = problems();
  ASSERT_EQ(p.size(), 3u);
  EXPECT_NE(p[0].find("journal entry #2 (line 3) says it is entry #3"), std::string::npos) << p[0];
  EXPECT_NE(p[1].find("journal entry #2 (line 3) does not follow"), std::string::npos) << p[1];
  EXPECT_NE(p[2].find("journal entry #3 (line 4) says it is entry #4"), std::string::npos) << p[2];
  // Edited entry #1 (its attempt changed): not signed.
  auto edited = lines;
  edited[1].replace(edited[1].find("\"attempt\":\"0\""), 13, "\"attempt\":\"9\"");
  write(edited);
  p = problems();
  ASSERT_FALSE(p.empty());
  EXPECT_NE(p[0].find("journal entry #1 (line 2) is not signed by this sweep's key"), std::string::npos) << p[0];
  // An entry signed with another key, chained correctly.
  write(lines);
  wr::journal_append(journal, other, {{"event", "begin"}, {"cell", "c"}, {"attempt", "x"}});
  p = problems();
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("journal entry #5 (line 6) is not signed by this sweep's key"), std::string::npos) << p[0];
}
