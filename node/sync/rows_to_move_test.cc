#include "node/sync/rows_to_move.h"

#include <optional>

#include "gtest/gtest.h"

namespace tally {
namespace node {
namespace {

TEST(RowsToMove, AnEmptyCopyOfASourceReceivesEveryRow) {
  const RowsToMove r = RowsToMove::Between(50000, 0, /*a_is_source=*/true);
  EXPECT_EQ(r.at_least, 50000u);
  EXPECT_EQ(r.at_most, 50000u);
  EXPECT_EQ(r.Total(), std::optional<uint64_t>(50000));
}

TEST(RowsToMove, AnEmptyPeerInATwoWaySyncMovesTheOtherSidesRows) {
  EXPECT_EQ(RowsToMove::Between(0, 50000, false).Total(),
            std::optional<uint64_t>(50000));
  EXPECT_EQ(RowsToMove::Between(50000, 0, false).Total(),
            std::optional<uint64_t>(50000));
}

TEST(RowsToMove, AFarBehindSideHasATotalThatIsAnUpperBound) {
  // 1,000 rows here of the source's 50,000: between 49,000 and 50,000 move.
  const RowsToMove r = RowsToMove::Between(50000, 1000, true);
  EXPECT_EQ(r.at_least, 49000u);
  EXPECT_EQ(r.Total(), std::optional<uint64_t>(50000));
}

TEST(RowsToMove, SidesOfSimilarSizeHaveNoTotal) {
  // Anything from 10,000 to 50,000 rows (or, two-way, to 90,000).
  EXPECT_EQ(RowsToMove::Between(50000, 40000, true).Total(), std::nullopt);
  EXPECT_EQ(RowsToMove::Between(50000, 40000, false).Total(), std::nullopt);
  // Equal counts say nothing: the replicas may be equal or share no key.
  EXPECT_EQ(RowsToMove::Between(1000, 1000, false).Total(), std::nullopt);
}

TEST(RowsToMove, NothingOnEitherSideIsATotalOfZero) {
  EXPECT_EQ(RowsToMove::Between(0, 0, false).Total(),
            std::optional<uint64_t>(0));
  // A source with nothing sends nothing (the copy's rows are erased, not
  // moved).
  EXPECT_EQ(RowsToMove::Between(0, 7000, true).Total(),
            std::optional<uint64_t>(0));
}

TEST(RowsToMove, KeyspacesAddUpAndOneUnknownOneSpoilsTheTotal) {
  RowsToMove all;
  all += RowsToMove::Between(30000, 0, true);
  all += RowsToMove::Between(20000, 0, true);
  EXPECT_EQ(all.Total(), std::optional<uint64_t>(50000));
  all += RowsToMove::Between(40000, 40000, true);  // 0..40,000 more
  EXPECT_EQ(all.Total(), std::nullopt);
}

}  // namespace
}  // namespace node
}  // namespace tally
