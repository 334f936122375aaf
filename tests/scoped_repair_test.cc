// `tally diff` and `tally repair` limited to a token range (--range) or a
// list of keys (--keys-from), with real tallyd processes, on both paths
// (node A runs it, or the tool from here): exactly the scope's differing
// keys are found and moved, the rest is left as it was, and the proof after
// the repair is the scope's root.
#include <algorithm>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "node/client/client.h"
#include "support/process.h"
#include "support/temp_dir.h"
#include "tests/diff_paths.h"
#include "tests/node_connect.h"
#include "tree/token.h"
#include "tree/token_range.h"

namespace tally {
namespace {

using ::tally::testing::CommandResult;
using ::tally::testing::Connect;
using ::tally::testing::DiffPath;
using ::tally::testing::NodeProcess;
using ::tally::testing::RunDiffCommand;
using ::tally::testing::RunTally;
using ::tally::testing::TempDir;
using ::testing::HasSubstr;

constexpr char kKeyspace[] = "default";
constexpr int kRows = 3000;

// The keys a `tally --json diff` printed.
std::set<std::string> DiffKeys(const std::string& out) {
  std::set<std::string> keys;
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("key")) keys.insert(j["key"]);
  }
  return keys;
}

// node-a and node-b on their directories, unpeered.
void StartPair(const TempDir& dir_a, const TempDir& dir_b,
               std::unique_ptr<NodeProcess>* a,
               std::unique_ptr<NodeProcess>* b) {
  for (auto [name, dir, node] :
       {std::tuple{"node-a", &dir_a, a}, std::tuple{"node-b", &dir_b, b}}) {
    auto started =
        NodeProcess::Start(name, dir->path(), {"--sync-writes", "false"});
    ASSERT_TRUE(started.ok()) << started.status();
    *node = std::move(*started);
  }
}

class ScopedRepair : public ::testing::TestWithParam<DiffPath> {
 protected:
  void SetUp() override {
    StartPair(dir_a_, dir_b_, &a_, &b_);
    if (HasFatalFailure()) return;
    auto ca = Connect(a_->address());
    int i = 0;
    auto loaded = ca->Load(kKeyspace, [&](std::string* k, std::string* v) {
      if (i >= kRows) return false;
      *k = absl::StrCat("key-", i++);
      *v = "v";
      return true;
    });
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    // B becomes A's copy, then they drift apart: updates on A, deletes on
    // B, keys only on B.
    CommandResult copy =
        RunTally({"repair", a_->address(), b_->address(), "--source", "A"});
    ASSERT_EQ(copy.exit_code, 0) << copy.out << copy.err;
    auto cb = Connect(b_->address());
    for (int k = 0; k < kRows; ++k) {
      const std::string key = absl::StrCat("key-", k);
      if (k % 10 == 0) {
        ASSERT_TRUE(ca->Put(kKeyspace, key, "changed").ok());
        differing_.insert(key);
      } else if (k % 37 == 1) {
        ASSERT_TRUE(cb->Delete(kKeyspace, key).ok());
        differing_.insert(key);
      }
    }
    for (int k = 0; k < 100; ++k) {
      const std::string key = absl::StrCat("only-b-", k);
      ASSERT_TRUE(cb->Put(kKeyspace, key, "b").ok());
      differing_.insert(key);
    }
  }

  std::set<std::string> DiffNow(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--json", "diff", a_->address(),
                                     b_->address()};
    args.insert(args.end(), extra.begin(), extra.end());
    CommandResult r = RunDiffCommand(GetParam(), args);
    EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1) << r.out << r.err;
    return DiffKeys(r.out);
  }

  TempDir dir_a_, dir_b_, files_;
  std::unique_ptr<NodeProcess> a_, b_;
  std::set<std::string> differing_;
};

TEST_P(ScopedRepair, ARangeRepairMovesTheRangesKeysOnly) {
  ASSERT_EQ(DiffNow(), differing_);
  const tree::TokenRange range{0x4000000000000000u, 0x7fffffffffffffffu};
  std::set<std::string> inside, outside;
  for (const std::string& key : differing_) {
    (range.Contains(tree::TokenOf(key)) ? inside : outside).insert(key);
  }
  ASSERT_GT(inside.size(), 20u);
  ASSERT_GT(outside.size(), 20u);

  // The diff of the range lists its keys only.
  EXPECT_EQ(DiffNow({"--range", range.ToString()}), inside);

  // A dry run says what it would do there, and does nothing.
  CommandResult dry =
      RunDiffCommand(GetParam(), {"repair", a_->address(), b_->address(),
                                  "--range", range.ToString(), "--dry-run"});
  EXPECT_EQ(dry.exit_code, 1) << dry.err;
  EXPECT_THAT(dry.out, HasSubstr("(tokens " + range.ToString() + ")"));
  EXPECT_EQ(DiffNow(), differing_);

  // The repair makes the range equal and says so by the range's roots.
  CommandResult repair = RunDiffCommand(
      GetParam(),
      {"repair", a_->address(), b_->address(), "--range", range.ToString()});
  EXPECT_EQ(repair.exit_code, 0) << repair.out << repair.err;
  EXPECT_THAT(repair.out, HasSubstr("A and B are equal"));
  EXPECT_THAT(repair.out, HasSubstr("(tokens " + range.ToString() + ")"));
  EXPECT_TRUE(DiffNow({"--range", range.ToString()}).empty());
  // Outside the range nothing moved.
  EXPECT_EQ(DiffNow(), outside);
}

// `tally token` prints the token --range takes: a range of one token finds
// the one key there.
TEST_P(ScopedRepair, TallyTokenGivesTheRangeOfAKey) {
  const std::string key = *differing_.begin();
  CommandResult token = RunTally({"token", key, "--json"});
  ASSERT_EQ(token.exit_code, 0) << token.err;
  const nlohmann::json line = nlohmann::json::parse(token.out, nullptr, false);
  ASSERT_TRUE(line.is_object()) << token.out;
  const std::string hex = line["token"];
  EXPECT_EQ(hex, absl::StrFormat("%016x", tree::TokenOf(key)));
  EXPECT_EQ(line["segment"], tree::TokenOf(key) >> 58);
  EXPECT_EQ(DiffNow({"--range", absl::StrCat(hex, ":", hex)}),
            std::set<std::string>{key});
}

TEST_P(ScopedRepair, AKeyListRepairMovesTheListedKeysOnly) {
  // Half the differing keys, some equal keys, keys neither node has; and
  // a list longer than one request (the node path sends it in parts), its
  // differing keys last.
  std::vector<std::string> listed;
  std::set<std::string> repaired;
  for (int k = 0; k < 12000; ++k) listed.push_back(absl::StrCat("nokey-", k));
  listed.push_back("key-5");  // equal on both
  int n = 0;
  for (const std::string& key : differing_) {
    if (n++ % 2 == 0) {
      listed.push_back(key);
      repaired.insert(key);
    }
  }
  const std::string file = files_.path() + "/keys.txt";
  {
    std::ofstream out(file);
    for (const std::string& key : listed) out << key << "\n";
  }
  std::set<std::string> rest;
  for (const std::string& key : differing_) {
    if (repaired.count(key) == 0) rest.insert(key);
  }

  EXPECT_EQ(DiffNow({"--keys-from", file}), repaired);
  CommandResult repair = RunDiffCommand(
      GetParam(),
      {"--json", "repair", a_->address(), b_->address(), "--keys-from", file});
  EXPECT_EQ(repair.exit_code, 0) << repair.out << repair.err;
  std::vector<std::string> lines =
      absl::StrSplit(repair.out, '\n', absl::SkipEmpty());
  ASSERT_FALSE(lines.empty());
  const nlohmann::json summary =
      nlohmann::json::parse(lines.back(), nullptr, false);
  ASSERT_TRUE(summary.is_object()) << repair.out;
  EXPECT_EQ(summary["summary"]["keys"], listed.size());
  EXPECT_EQ(summary["summary"]["differences"], repaired.size());
  EXPECT_TRUE(summary["after"]["equal"].get<bool>()) << repair.out;
  EXPECT_EQ(DiffNow(), rest);
}

TEST_P(ScopedRepair, BadScopesAreRefusedAndChangeNothing) {
  const std::string a = a_->address();
  const std::string b = b_->address();
  const std::string empty = files_.path() + "/empty.txt";
  std::ofstream(empty) << "\n";
  // Saved on Windows: CRLF line ends, a byte order mark. Read as they are,
  // every key would be absent on both nodes and the diff would say equal.
  const std::string crlf = files_.path() + "/crlf.txt";
  std::ofstream(crlf) << "key-0\r\nkey-10\r\n";
  const std::string bom = files_.path() + "/bom.txt";
  std::ofstream(bom) << "\xEF\xBB\xBFkey-0\nkey-10\n";
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"repair", a, b, "--range", "zz:ff"}, "not hexadecimal"},
      {{"repair", a, b, "--range", "ff:10"}, "after the last"},
      {{"repair", a, b, "--range", "12345"}, "no ':'"},
      {{"diff", a, b, "--range", "1:2", "--keys-from", empty},
       "exclude each other"},
      {{"repair", a, b, "--keys-from", files_.path() + "/missing"},
       "cannot open"},
      {{"repair", a, b, "--keys-from", empty}, "holds no keys"},
      // An unset shell variable: not the whole keyspace.
      {{"repair", a, b, "--source", "A", "--range", ""}, "--range is empty"},
      {{"repair", a, b, "--source", "A", "--range="}, "--range is empty"},
      {{"repair", a, b, "--source", "A", "--keys-from", ""},
       "--keys-from is empty"},
      {{"diff", a, b, "--keys-from", crlf}, "carriage return"},
      {{"repair", a, b, "--source", "A", "--keys-from", bom},
       "byte order mark"},
      {{"diff", "postgresql://x/db", "postgresql://y/db", "--range", "1:2"},
       "for two nodes"},
  };
  for (const Case& c : cases) {
    CommandResult r = RunDiffCommand(GetParam(), c.args);
    EXPECT_EQ(r.exit_code, 2) << absl::StrJoin(c.args, " ") << r.out;
    EXPECT_THAT(r.err, HasSubstr(c.says)) << absl::StrJoin(c.args, " ");
  }
  EXPECT_EQ(DiffNow(), differing_);
}

INSTANTIATE_TEST_SUITE_P(BothPaths, ScopedRepair,
                         ::tally::testing::kBothDiffPaths,
                         ::tally::testing::DiffPathName);

// Repair modes, as pt-table-sync and ACE have them: --insert-only copies
// only rows a side lacks, --upsert-only deletes nothing, --max-rows stops
// before changing more; a dry run names a delete a delete. Before, a
// repair always did everything it found.
class RepairModes : public ::testing::TestWithParam<DiffPath> {
 protected:
  void SetUp() override {
    StartPair(dir_a_, dir_b_, &a_, &b_);
    if (HasFatalFailure()) return;
    auto ca = Connect(a_->address());
    auto cb = Connect(b_->address());
    // Older first: A's later writes win.
    ASSERT_TRUE(cb->Put(kKeyspace, "overwrite", "old on b").ok());
    ASSERT_TRUE(cb->Put(kKeyspace, "delete", "live on b").ok());
    ASSERT_TRUE(cb->Put(kKeyspace, "only-b", "b").ok());
    ASSERT_TRUE(ca->Put(kKeyspace, "only-a", "a").ok());
    ASSERT_TRUE(ca->Put(kKeyspace, "overwrite", "new on a").ok());
    ASSERT_TRUE(ca->Put(kKeyspace, "delete", "x").ok());
    ASSERT_TRUE(ca->Delete(kKeyspace, "delete").ok());
  }

  // The value on `node`, "(missing)" or "(deleted)".
  std::string ValueOn(NodeProcess& node, const std::string& key) {
    auto r = Connect(node.address())->Get(kKeyspace, key);
    if (absl::IsNotFound(r.status())) return "(missing)";
    if (!r.ok()) return r.status().ToString();
    return r->row().deleted() ? "(deleted)" : r->row().value();
  }

  CommandResult Repair(std::vector<std::string> extra) {
    std::vector<std::string> args = {"repair", a_->address(), b_->address()};
    args.insert(args.end(), extra.begin(), extra.end());
    return RunDiffCommand(GetParam(), args);
  }

  TempDir dir_a_, dir_b_, files_;
  std::unique_ptr<NodeProcess> a_, b_;
};

TEST_P(RepairModes, ADryRunNamesADeleteADelete) {
  const CommandResult dry = Repair({"--dry-run"});
  EXPECT_EQ(dry.exit_code, 1) << dry.err;
  EXPECT_THAT(dry.out, HasSubstr("would delete on B      delete "));
  EXPECT_THAT(dry.out, HasSubstr("would copy to B        overwrite "));
  const CommandResult json = Repair({"--dry-run", "--json"});
  EXPECT_THAT(json.out, HasSubstr(R"("action":"delete_on_b")"));
}

TEST_P(RepairModes, InsertOnlyCopiesOnlyWhatASideLacks) {
  const CommandResult r = Repair({"--insert-only"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;  // the skipped still differ
  EXPECT_THAT(r.out, HasSubstr("skipped"));
  EXPECT_THAT(r.out, HasSubstr("2 (--insert-only"));
  EXPECT_EQ(ValueOn(*b_, "only-a"), "a");
  EXPECT_EQ(ValueOn(*a_, "only-b"), "b");
  EXPECT_EQ(ValueOn(*b_, "overwrite"), "old on b");
  EXPECT_EQ(ValueOn(*b_, "delete"), "live on b");
}

TEST_P(RepairModes, UpsertOnlyDeletesAndErasesNothing) {
  CommandResult r = Repair({"--upsert-only"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(ValueOn(*b_, "overwrite"), "new on a");
  EXPECT_EQ(ValueOn(*b_, "only-a"), "a");
  EXPECT_EQ(ValueOn(*b_, "delete"), "live on b");
  // One-way: B's extra row is not erased either (the two-way run copied
  // only-b to A; this one is B's alone).
  ASSERT_TRUE(Connect(b_->address())->Put(kKeyspace, "only-b-2", "b").ok());
  r = Repair({"--source", "A", "--upsert-only", "--json"});
  EXPECT_THAT(r.out, HasSubstr(R"("skipped":2)")) << r.out;
  EXPECT_EQ(ValueOn(*b_, "only-b-2"), "b");
  EXPECT_EQ(ValueOn(*b_, "delete"), "live on b");
}

TEST_P(RepairModes, MaxRowsStopsBeforeChangingMore) {
  const CommandResult r = Repair({"--source", "A", "--max-rows", "2"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("stopped before changing more than 2 rows"));
  int changed = 0;
  changed += ValueOn(*b_, "only-a") == "a";
  changed += ValueOn(*b_, "overwrite") == "new on a";
  changed += ValueOn(*b_, "delete") == "(deleted)";
  changed += ValueOn(*b_, "only-b") == "(missing)";
  EXPECT_EQ(changed, 2);
  // Enough room: all four.
  EXPECT_EQ(Repair({"--source", "A", "--max-rows", "4"}).exit_code, 0);
  EXPECT_EQ(ValueOn(*b_, "only-b"), "(missing)");
}

// A repair's report lists every key and what was done with it, and
// `tally recheck` diffs those keys again: here the two --insert-only
// skipped still differ, the two it copied do not.
TEST_P(RepairModes, AReportListsEveryKeyAndRecheckFindsWhatStillDiffers) {
  const std::string report = files_.path() + "/report.jsonl";
  const CommandResult r = Repair({"--insert-only", "--report", report});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("copy_to_b")));  // keys go to the file
  std::ifstream in(report);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 6u) << r.out;
  EXPECT_THAT(lines[0], HasSubstr(R"("report":"tally repair")"));
  EXPECT_THAT(lines[0], HasSubstr(R"("keyspace":"default")"));
  std::string keys;
  for (size_t i = 1; i < 5; ++i) keys += lines[i] + "\n";
  EXPECT_THAT(keys, HasSubstr(R"("key":"only-a")"));
  EXPECT_THAT(keys, HasSubstr(R"("action":"copy_to_b")"));
  EXPECT_THAT(keys, HasSubstr(R"("action":"copy_to_a")"));
  EXPECT_THAT(keys, HasSubstr(R"("action":"skipped")"));
  EXPECT_THAT(lines[5], HasSubstr(R"("summary":{)"));
  EXPECT_THAT(lines[5], HasSubstr(R"("skipped":2)"));

  // Rendered for review: CSV, a header and a row per key; one HTML page.
  const CommandResult csv = RunTally({"report", report, "--format=csv"});
  EXPECT_EQ(csv.exit_code, 0) << csv.err;
  EXPECT_EQ(std::count(csv.out.begin(), csv.out.end(), '\n'), 5) << csv.out;
  EXPECT_THAT(csv.out, HasSubstr("\"only-a\",\"copy_to_b\",\"yes\""));
  const CommandResult html = RunTally({"report", report});
  EXPECT_EQ(html.exit_code, 0) << html.err;
  EXPECT_THAT(html.out, HasSubstr("<code>only-a</code>"));
  EXPECT_THAT(html.out, HasSubstr("skipped <b>2</b>"));
  EXPECT_EQ(RunTally({"report", report, "--format=pdf"}).exit_code, 2);

  const CommandResult again = RunTally({"recheck", report});
  EXPECT_EQ(again.exit_code, 1) << again.out << again.err;
  EXPECT_THAT(again.out, HasSubstr("4 keys"));
  EXPECT_THAT(again.out, HasSubstr("overwrite"));
  EXPECT_THAT(again.out, HasSubstr("2 keys differ"));
  EXPECT_THAT(again.out, Not(HasSubstr("only-a ")));
  // After a full repair, nothing differs.
  ASSERT_EQ(Repair({}).exit_code, 0);
  EXPECT_EQ(RunTally({"recheck", report}).exit_code, 0);
  EXPECT_EQ(RunTally({"recheck", "/nonexistent/report"}).exit_code, 2);
}

// `repair --report FILE --values`: each key's value on A and on B before
// the repair and after it, so that a reviewer sees what was overwritten.
TEST_P(RepairModes, AReportWithValuesHoldsThemBeforeAndAfter) {
  const std::string report = files_.path() + "/values.jsonl";
  const CommandResult r = Repair({"--report", report, "--values"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  std::ifstream in(report);
  std::string overwrite;
  int keys = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.find(R"("action")") != std::string::npos) ++keys;
    if (line.find(R"("key":"overwrite")") != std::string::npos) {
      overwrite = line;
    }
  }
  EXPECT_EQ(keys, 4);
  EXPECT_THAT(overwrite, HasSubstr(R"("a_before":{"value":"new on a"})"));
  EXPECT_THAT(overwrite, HasSubstr(R"("b_before":{"value":"old on b"})"));
  EXPECT_THAT(overwrite, HasSubstr(R"("a_after":{"value":"new on a"})"));
  EXPECT_THAT(overwrite, HasSubstr(R"("b_after":{"value":"new on a"})"));
  EXPECT_EQ(ValueOn(*b_, "overwrite"), "new on a");
  // Rendered, the values show.
  const CommandResult csv = RunTally({"report", report, "--format=csv"});
  EXPECT_THAT(csv.out, HasSubstr("\"old on b\""));
  // Without a report there is nowhere to put them.
  EXPECT_EQ(Repair({"--values"}).exit_code, 2);
}

// A dry run's report holds the values now (nothing changes).
TEST_P(RepairModes, ADryRunReportWithValuesHoldsTheValuesNow) {
  const std::string report = files_.path() + "/dry.jsonl";
  const CommandResult r = Repair({"--dry-run", "--report", report, "--values"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  std::ifstream in(report);
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr(R"("b_before":{"value":"old on b"})"));
  EXPECT_THAT(text, HasSubstr(R"("b_before":{"none":"missing"})"));
  EXPECT_THAT(text, Not(HasSubstr("_after")));
  EXPECT_EQ(ValueOn(*b_, "overwrite"), "old on b");
}

INSTANTIATE_TEST_SUITE_P(BothPaths, RepairModes,
                         ::tally::testing::kBothDiffPaths,
                         ::tally::testing::DiffPathName);

}  // namespace
}  // namespace tally
