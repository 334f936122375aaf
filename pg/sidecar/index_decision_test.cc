#include "pg/sidecar/index_decision.h"

#include <string>

#include "gtest/gtest.h"
#include "pg/sidecar/bootstrap.h"

namespace tally {
namespace pg {
namespace {

constexpr uint64_t kSystem = 7001;

TableSchema Table(const std::string& name, const std::string& column = "b") {
  auto t = TableSchema::FromColumns(
      name, {{"id", 20, "bigint", "", 1}, {column, 25, "text", "default", 2}},
      {"id"});
  EXPECT_TRUE(t.ok()) << t.status();
  return *t;
}

// Facts for an index built from `tables` as they are, on a healthy slot.
IndexFacts Resumable(std::vector<TableSchema> tables) {
  IndexFacts f;
  f.system_id = kSystem;
  f.database_says_built = true;
  CapturePosition p;
  p.system_id = kSystem;
  p.resume_lsn = 1000;
  for (const TableSchema& t : tables) {
    p.fingerprints[t.name()] = t.stored_fingerprint();
  }
  f.position = p;
  f.slot.exists = true;
  f.slot.confirmed_flush = 900;
  f.tables = std::move(tables);
  f.publication = "tally_pub";
  return f;
}

TEST(IndexDecisionTest, ResumesWhenNothingChanged) {
  const IndexDecision d = DecideIndex(Resumable({Table("public.a")}));
  EXPECT_EQ(d.reason, IndexReason::kResume);
  EXPECT_FALSE(d.build);
  EXPECT_FALSE(d.rebuild);
  EXPECT_EQ(d.message, "");
}

TEST(IndexDecisionTest, FirstStartAndLostIndex) {
  IndexFacts f;
  f.system_id = kSystem;
  IndexDecision d = DecideIndex(f);
  EXPECT_EQ(d.reason, IndexReason::kFirstStart);
  EXPECT_TRUE(d.build);
  EXPECT_FALSE(d.rebuild);
  EXPECT_FALSE(d.index_lost);

  f.database_says_built = true;
  d = DecideIndex(f);
  EXPECT_EQ(d.reason, IndexReason::kIndexLost);
  EXPECT_TRUE(d.index_lost);
  EXPECT_FALSE(d.rebuild);
  EXPECT_NE(d.message.find("index lost"), std::string::npos);
}

TEST(IndexDecisionTest, SchemaChangeSeenWhileFollowingComesFirst) {
  IndexFacts f = Resumable({Table("public.a")});
  f.schema_change = "public.a gained a column";
  f.system_id = kSystem + 1;  // would also rebuild, but is not the reason
  const IndexDecision d = DecideIndex(f);
  EXPECT_EQ(d.reason, IndexReason::kSchemaChanged);
  EXPECT_TRUE(d.rebuild);
  EXPECT_EQ(d.message, "schema change: public.a gained a column");
}

TEST(IndexDecisionTest, AnotherSystemOrAnUnusableSlotRebuilds) {
  IndexFacts f = Resumable({Table("public.a")});
  f.system_id = kSystem + 1;
  EXPECT_EQ(DecideIndex(f).reason, IndexReason::kOtherSystem);

  f = Resumable({Table("public.a")});
  f.slot = SlotFacts{};
  EXPECT_EQ(DecideIndex(f).reason, IndexReason::kSlotMissing);

  f = Resumable({Table("public.a")});
  f.slot.lost = true;
  EXPECT_EQ(DecideIndex(f).reason, IndexReason::kSlotLost);

  f = Resumable({Table("public.a")});
  f.slot.confirmed_flush = 1001;  // the slot passed the stored position
  const IndexDecision d = DecideIndex(f);
  EXPECT_EQ(d.reason, IndexReason::kPositionBehindSlot);
  EXPECT_NE(d.message.find("below the slot's confirmed"), std::string::npos);

  f = Resumable({Table("public.a")});
  f.slot.confirmed_flush = 1000;  // equal is fine
  EXPECT_EQ(DecideIndex(f).reason, IndexReason::kResume);
  f.slot.confirmed_flush.reset();  // NULL is fine
  EXPECT_EQ(DecideIndex(f).reason, IndexReason::kResume);
}

TEST(IndexDecisionTest, TablesUnlikeTheStoredSchemasRebuild) {
  // A table kept now that the index was not built with.
  IndexFacts f = Resumable({Table("public.a")});
  f.tables.push_back(Table("public.b"));
  EXPECT_EQ(DecideIndex(f).reason, IndexReason::kTableNewlyKept);

  // A table that changed its columns while tallyd was stopped.
  f = Resumable({Table("public.a")});
  f.tables = {Table("public.a", "c")};
  IndexDecision d = DecideIndex(f);
  EXPECT_EQ(d.reason, IndexReason::kTableChanged);
  EXPECT_TRUE(d.afresh.empty());

  // The same columns, another partition layout.
  f = Resumable({Table("public.a")});
  f.position->fingerprints["public.a"] += " layout-before";
  EXPECT_EQ(DecideIndex(f).reason, IndexReason::kPartitionsChanged);

  // A position written before fingerprints were recorded describes them.
  f = Resumable({Table("public.a")});
  f.tables = {Table("public.a", "c")};
  f.position->fingerprints.clear();
  EXPECT_EQ(DecideIndex(f).reason, IndexReason::kResume);
}

TEST(IndexDecisionTest, ADroppedTableAndOneBackAgain) {
  // Dropped: the index still describes its rows, which are forgotten.
  IndexFacts f = Resumable({Table("public.a"), Table("public.b")});
  f.tables = {Table("public.a")};
  f.missing = {"public.b"};
  IndexDecision d = DecideIndex(f);
  EXPECT_EQ(d.reason, IndexReason::kTableMissing);
  EXPECT_EQ(d.message, "table public.b is missing from the database (dropped)");

  // Recorded as missing at the last build: resume, nothing to forget.
  f.position->fingerprints["public.b"] = std::string(kMissingTable);
  EXPECT_EQ(DecideIndex(f).reason, IndexReason::kResume);

  // And back again: built afresh, as at a first start.
  f.tables.push_back(Table("public.b"));
  f.missing.clear();
  d = DecideIndex(f);
  EXPECT_EQ(d.reason, IndexReason::kTableBack);
  EXPECT_TRUE(d.rebuild);
  EXPECT_EQ(d.afresh, std::vector<std::string>{"public.b"});
}

TEST(IndexDecisionTest, APublicationNotViaTheRootRebuilds) {
  IndexFacts f = Resumable({Table("public.a")});
  f.publication_via_root = true;
  EXPECT_EQ(DecideIndex(f).reason, IndexReason::kResume);
  f.publication_via_root = false;
  const IndexDecision d = DecideIndex(f);
  EXPECT_EQ(d.reason, IndexReason::kPublicationNotViaRoot);
  EXPECT_NE(d.message.find("publication tally_pub"), std::string::npos);
}

TEST(IndexDecisionTest, EveryReasonHasAName) {
  for (int r = static_cast<int>(IndexReason::kResume);
       r <= static_cast<int>(IndexReason::kPublicationNotViaRoot); ++r) {
    EXPECT_NE(IndexReasonName(static_cast<IndexReason>(r)), "unknown") << r;
  }
}

}  // namespace
}  // namespace pg
}  // namespace tally
