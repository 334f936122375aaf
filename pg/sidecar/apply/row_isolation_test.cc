#include "pg/sidecar/apply/row_isolation.h"

#include <algorithm>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tally {
namespace pg {
namespace {

absl::Status ServerError(const char* state) {
  return absl::InvalidArgumentError(
      absl::StrCat("applying rows to public.u: new row violates a check "
                   "constraint [SQLSTATE ",
                   state, "]"));
}

AttemptFailure Classify(const absl::Status& s) {
  return ClassifyApplyError(s, /*connection_healthy=*/true);
}

std::vector<uint32_t> Rows(uint32_t n) {
  std::vector<uint32_t> rows(n);
  for (uint32_t i = 0; i < n; ++i) rows[i] = i;
  return rows;
}

TEST(SqlStateOf, TakesTheCodeAtTheEndOfTheMessage) {
  EXPECT_EQ(SqlStateOf(ServerError("23514")), "23514");
  EXPECT_EQ(SqlStateOf(absl::UnavailableError("connection lost")), "");
  EXPECT_EQ(SqlStateOf(absl::UnknownError("[SQLSTATE 123")), "");
}

TEST(ClassifyApplyError, RowsTablesLocksAndTheConnection) {
  // A row's value: a CHECK, NOT NULL, a unique index, out of range, a
  // trigger's RAISE.
  for (const char* s : {"23514", "23502", "23505", "22003", "P0001"}) {
    EXPECT_EQ(Classify(ServerError(s)), AttemptFailure::kRows) << s;
  }
  // The table: gone, a column gone, a type mismatch, a privilege, a
  // GENERATED ALWAYS column updated.
  for (const char* s : {"42P01", "42703", "42804", "42501", "428C9"}) {
    EXPECT_EQ(Classify(ServerError(s)), AttemptFailure::kAll) << s;
  }
  // A lock: lock_timeout, a deadlock's victim, a serialization failure.
  for (const char* s : {"55P03", "40P01", "40001"}) {
    EXPECT_EQ(Classify(ServerError(s)), AttemptFailure::kBusy) << s;
  }
  // The server going away; a connection that broke, whatever it said.
  EXPECT_EQ(Classify(ServerError("57P01")), AttemptFailure::kFatal);
  EXPECT_EQ(Classify(ServerError("08006")), AttemptFailure::kFatal);
  EXPECT_EQ(Classify(absl::UnavailableError("server closed the connection")),
            AttemptFailure::kFatal);
  EXPECT_EQ(ClassifyApplyError(ServerError("23514"), false),
            AttemptFailure::kFatal);
}

TEST(IsolateRows, OneAttemptWhenNothingFails) {
  std::vector<uint32_t> applied;
  const std::vector<uint32_t> rows = Rows(100);
  IsolationOutcome o = IsolateRows(
      rows, 64,
      [&](absl::Span<const uint32_t> g) {
        applied.insert(applied.end(), g.begin(), g.end());
        return absl::OkStatus();
      },
      Classify);
  EXPECT_EQ(o.attempts, 1);
  EXPECT_TRUE(o.rejected.empty());
  EXPECT_TRUE(o.busy.empty());
  EXPECT_TRUE(o.fatal.ok());
  EXPECT_EQ(applied, rows);
}

TEST(IsolateRows, BisectsToTheRefusedRowsAndAppliesTheRest) {
  const std::set<uint32_t> bad = {5, 11, 12, 999};
  std::vector<uint32_t> applied;
  const std::vector<uint32_t> rows = Rows(1000);
  IsolationOutcome o = IsolateRows(
      rows, 200,
      [&](absl::Span<const uint32_t> g) {
        for (uint32_t r : g) {
          if (bad.count(r)) return ServerError("23514");
        }
        applied.insert(applied.end(), g.begin(), g.end());
        return absl::OkStatus();
      },
      Classify);
  std::set<uint32_t> rejected;
  for (const auto& [row, why] : o.rejected) {
    rejected.insert(row);
    EXPECT_EQ(SqlStateOf(why), "23514");
  }
  EXPECT_EQ(rejected, bad);
  EXPECT_EQ(applied.size(), rows.size() - bad.size());
  // In order: the first half first.
  EXPECT_TRUE(std::is_sorted(applied.begin(), applied.end()));
  // About 2 log2(1000) attempts per refused row, not one per row.
  EXPECT_LE(o.attempts, 4 * 2 * 10 + 1);
}

TEST(IsolateRows, ABudgetSpentRejectsTheRestOfAGroupWhole) {
  int attempts = 0;
  IsolationOutcome o = IsolateRows(
      Rows(10000), 16,
      [&](absl::Span<const uint32_t>) {
        ++attempts;
        return ServerError("23514");
      },
      Classify);
  EXPECT_LE(attempts, 16);
  EXPECT_EQ(o.attempts, attempts);
  EXPECT_EQ(o.rejected.size(), 10000u);
}

TEST(IsolateRows, ATableErrorRejectsEveryRowAtOnce) {
  IsolationOutcome o = IsolateRows(
      Rows(50), 64,
      [&](absl::Span<const uint32_t>) { return ServerError("42P01"); },
      Classify);
  EXPECT_EQ(o.attempts, 1);
  EXPECT_EQ(o.rejected.size(), 50u);
}

TEST(IsolateRows, ALockTimeoutLeavesTheGroupBusyAndALostConnectionStops) {
  IsolationOutcome busy = IsolateRows(
      Rows(8), 64,
      [&](absl::Span<const uint32_t>) { return ServerError("55P03"); },
      Classify);
  EXPECT_EQ(busy.busy, Rows(8));
  EXPECT_TRUE(busy.rejected.empty());

  int attempts = 0;
  IsolationOutcome fatal = IsolateRows(
      Rows(8), 64,
      [&](absl::Span<const uint32_t> g) {
        ++attempts;
        if (g.size() == 8) return ServerError("23514");
        return absl::UnavailableError("server closed the connection");
      },
      Classify);
  EXPECT_FALSE(fatal.fatal.ok());
  EXPECT_EQ(attempts, 2);
}

}  // namespace
}  // namespace pg
}  // namespace tally
