// The commit rules as a table: every apply mode x stored row state x
// version order (storage/internal/commit_rules.h).
#include "storage/internal/commit_rules.h"

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tree/digest.h"
#include "tree/hlc.h"

namespace tally {
namespace storage {
namespace internal {
namespace {

using Kind = IncomingRow::Kind;

enum class Stored {
  kAbsent,
  kLive,
  kTombstone,
  kDamaged,            // marked damaged, record readable
  kDamagedUnreadable,  // marked damaged, record does not even decode
};

// The incoming version against the stored one (ignored when absent).
enum class Order {
  kOlder,        // lower timestamp
  kOlderOrigin,  // same timestamp, lower origin name
  kEqualSame,    // same version, same content (a replay)
  kTieHigher,    // same version, other content, a higher digest
  kTieLower,     // same version, other content, a lower digest
  kNewerOrigin,  // same timestamp, higher origin name
  kNewer,        // higher timestamp
};

constexpr uint64_t kStoredTs = 1000;
constexpr uint64_t kHorizon = 950;  // purge horizon of the horizon cases

struct Case {
  ApplyMode mode;
  Stored stored;
  Kind kind;
  Order order;
  Decision expected;
  bool replicated = true;
  uint64_t purged_before = 0;
};

tree::Version V(uint64_t ts, std::string origin) {
  return tree::Version{tree::HlcTimestamp::FromRaw(ts), std::move(origin)};
}

tree::Digest128 DigestOf(const tree::Version& v, bool deleted,
                         absl::string_view value) {
  return tree::RowDigest("ks", "key", v, deleted, value);
}

StoredState MakeStored(Stored s) {
  StoredState st;
  const bool deleted = s == Stored::kTombstone;
  st.exists = s != Stored::kAbsent && s != Stored::kDamagedUnreadable;
  st.damaged = s == Stored::kDamaged || s == Stored::kDamagedUnreadable;
  st.deleted = deleted;
  if (st.exists) {
    st.version = V(kStoredTs, "node-b");
    st.digest = DigestOf(st.version, deleted, deleted ? "" : "stored");
  }
  return st;
}

IncomingRow MakeIncoming(const Case& c, const StoredState& stored) {
  IncomingRow row;
  row.kind = c.kind;
  row.replicated = c.replicated;
  switch (c.order) {
    case Order::kOlder:
      row.version = V(kStoredTs - 100, "node-b");
      break;
    case Order::kOlderOrigin:
      row.version = V(kStoredTs, "node-a");
      break;
    case Order::kEqualSame:
    case Order::kTieHigher:
    case Order::kTieLower:
      row.version = V(kStoredTs, "node-b");
      break;
    case Order::kNewerOrigin:
      row.version = V(kStoredTs, "node-c");
      break;
    case Order::kNewer:
      row.version = V(kStoredTs + 100, "node-b");
      break;
  }
  const bool deleted = c.kind == Kind::kDelete;
  if (c.order == Order::kEqualSame) {
    // The stored row again (a replay): the table pairs a put with a live
    // row and a delete with a tombstone.
    row.digest = stored.digest;
  } else if (c.order == Order::kTieHigher || c.order == Order::kTieLower) {
    // Other content under the same version, on the wanted side of the
    // stored digest (compared here as the two 64-bit halves, high first).
    // A tombstone has one digest per version: the table's ties are puts.
    EXPECT_EQ(c.kind, Kind::kPut) << "ties are built from puts";
    const bool higher = c.order == Order::kTieHigher;
    for (int n = 0;; ++n) {
      row.digest = DigestOf(row.version, false, "other-" + std::to_string(n));
      const auto a = std::make_pair(row.digest.high, row.digest.low);
      const auto b = std::make_pair(stored.digest.high, stored.digest.low);
      if (higher ? a > b : a < b) break;
    }
  } else {
    row.digest = DigestOf(row.version, deleted, deleted ? "" : "incoming");
  }
  return row;
}

std::string Describe(const Case& c) {
  static const char* const kModes[] = {"lww", "source-override", "purge"};
  static const char* const kStored[] = {"absent", "live", "tombstone",
                                        "damaged", "damaged-unreadable"};
  static const char* const kKinds[] = {"put", "delete", "erase"};
  static const char* const kOrders[] = {
      "older",     "older-origin", "equal-same", "tie-higher",
      "tie-lower", "newer-origin", "newer"};
  std::string s = std::string(kModes[static_cast<int>(c.mode)]) + " " +
                  kStored[static_cast<int>(c.stored)] + " " +
                  kKinds[static_cast<int>(c.kind)] + " " +
                  kOrders[static_cast<int>(c.order)];
  if (!c.replicated) s += " local";
  if (c.purged_before != 0) s += " horizon";
  return s;
}

constexpr ApplyMode kLww = ApplyMode::kLastWriterWins;
constexpr ApplyMode kSource = ApplyMode::kSourceOverride;
constexpr ApplyMode kPurge = ApplyMode::kPurgeTombstones;

// clang-format off
const Case kCases[] = {
  // ---- last writer wins
  {kLww, Stored::kAbsent, Kind::kPut, Order::kNewer, Decision::kWrite},
  {kLww, Stored::kAbsent, Kind::kDelete, Order::kNewer, Decision::kWrite},
  {kLww, Stored::kAbsent, Kind::kPut, Order::kOlder, Decision::kWrite, true, kHorizon},
  {kLww, Stored::kAbsent, Kind::kDelete, Order::kOlder, Decision::kSkipPurged, true, kHorizon},
  {kLww, Stored::kAbsent, Kind::kDelete, Order::kOlder, Decision::kWrite, false, kHorizon},
  {kLww, Stored::kAbsent, Kind::kDelete, Order::kNewer, Decision::kWrite, true, kHorizon},
  {kLww, Stored::kLive, Kind::kPut, Order::kOlder, Decision::kSkipNotNewer},
  {kLww, Stored::kLive, Kind::kPut, Order::kOlderOrigin, Decision::kSkipNotNewer},
  {kLww, Stored::kLive, Kind::kPut, Order::kEqualSame, Decision::kSkipNotNewer},
  {kLww, Stored::kLive, Kind::kPut, Order::kTieHigher, Decision::kWriteTie},
  {kLww, Stored::kLive, Kind::kPut, Order::kTieLower, Decision::kSkipTieLost},
  {kLww, Stored::kLive, Kind::kPut, Order::kNewerOrigin, Decision::kWrite},
  {kLww, Stored::kLive, Kind::kPut, Order::kNewer, Decision::kWrite},
  {kLww, Stored::kLive, Kind::kDelete, Order::kOlder, Decision::kSkipNotNewer},
  {kLww, Stored::kTombstone, Kind::kPut, Order::kTieHigher, Decision::kWriteTie},
  {kLww, Stored::kLive, Kind::kDelete, Order::kNewer, Decision::kWrite},
  {kLww, Stored::kLive, Kind::kDelete, Order::kOlder, Decision::kSkipNotNewer, true, kHorizon},
  {kLww, Stored::kTombstone, Kind::kPut, Order::kOlder, Decision::kSkipNotNewer},
  {kLww, Stored::kTombstone, Kind::kPut, Order::kTieLower, Decision::kSkipTieLost},
  {kLww, Stored::kTombstone, Kind::kPut, Order::kNewer, Decision::kWrite},
  {kLww, Stored::kTombstone, Kind::kDelete, Order::kEqualSame, Decision::kSkipNotNewer},
  {kLww, Stored::kTombstone, Kind::kDelete, Order::kNewer, Decision::kWrite},
  {kLww, Stored::kDamaged, Kind::kPut, Order::kOlder, Decision::kReplaceDamaged},
  {kLww, Stored::kDamaged, Kind::kPut, Order::kEqualSame, Decision::kReplaceDamaged},
  {kLww, Stored::kDamaged, Kind::kPut, Order::kNewer, Decision::kReplaceDamaged},
  {kLww, Stored::kDamaged, Kind::kDelete, Order::kOlder, Decision::kReplaceDamaged, true, kHorizon},
  {kLww, Stored::kDamagedUnreadable, Kind::kPut, Order::kOlder, Decision::kReplaceDamaged},
  {kLww, Stored::kDamagedUnreadable, Kind::kDelete, Order::kOlder, Decision::kReplaceDamaged, true, kHorizon},

  // ---- source override
  {kSource, Stored::kAbsent, Kind::kPut, Order::kNewer, Decision::kWrite},
  {kSource, Stored::kAbsent, Kind::kDelete, Order::kNewer, Decision::kWrite},
  {kSource, Stored::kAbsent, Kind::kDelete, Order::kOlder, Decision::kSkipPurged, true, kHorizon},
  {kSource, Stored::kAbsent, Kind::kErase, Order::kNewer, Decision::kSkipAbsent},
  {kSource, Stored::kLive, Kind::kPut, Order::kOlder, Decision::kOverride},
  {kSource, Stored::kLive, Kind::kPut, Order::kOlderOrigin, Decision::kOverride},
  {kSource, Stored::kLive, Kind::kPut, Order::kEqualSame, Decision::kSkipSame},
  {kSource, Stored::kLive, Kind::kPut, Order::kTieHigher, Decision::kOverride},
  {kSource, Stored::kLive, Kind::kPut, Order::kTieLower, Decision::kOverride},
  {kSource, Stored::kLive, Kind::kPut, Order::kNewer, Decision::kOverride},
  {kSource, Stored::kLive, Kind::kDelete, Order::kOlder, Decision::kOverride, true, kHorizon},
  {kSource, Stored::kLive, Kind::kErase, Order::kOlder, Decision::kErase},
  {kSource, Stored::kLive, Kind::kErase, Order::kNewer, Decision::kErase},
  {kSource, Stored::kTombstone, Kind::kPut, Order::kOlder, Decision::kOverride},
  {kSource, Stored::kTombstone, Kind::kDelete, Order::kEqualSame, Decision::kSkipSame},
  {kSource, Stored::kTombstone, Kind::kErase, Order::kNewer, Decision::kErase},
  {kSource, Stored::kDamaged, Kind::kPut, Order::kEqualSame, Decision::kReplaceDamaged},
  {kSource, Stored::kDamaged, Kind::kPut, Order::kOlder, Decision::kReplaceDamaged},
  {kSource, Stored::kDamaged, Kind::kErase, Order::kNewer, Decision::kErase},
  {kSource, Stored::kDamagedUnreadable, Kind::kPut, Order::kOlder, Decision::kReplaceDamaged},
  {kSource, Stored::kDamagedUnreadable, Kind::kErase, Order::kNewer, Decision::kErase},

  // ---- tombstone purge (erases only, with the tombstone's version)
  {kPurge, Stored::kAbsent, Kind::kErase, Order::kEqualSame, Decision::kSkipAbsent},
  {kPurge, Stored::kLive, Kind::kErase, Order::kEqualSame, Decision::kSkipRewritten},
  {kPurge, Stored::kLive, Kind::kErase, Order::kOlder, Decision::kSkipRewritten},
  {kPurge, Stored::kTombstone, Kind::kErase, Order::kEqualSame, Decision::kErase},
  {kPurge, Stored::kTombstone, Kind::kErase, Order::kOlder, Decision::kSkipRewritten},
  {kPurge, Stored::kTombstone, Kind::kErase, Order::kOlderOrigin, Decision::kSkipRewritten},
  {kPurge, Stored::kTombstone, Kind::kErase, Order::kNewerOrigin, Decision::kSkipRewritten},
  {kPurge, Stored::kTombstone, Kind::kErase, Order::kNewer, Decision::kSkipRewritten},
  {kPurge, Stored::kDamaged, Kind::kErase, Order::kEqualSame, Decision::kSkipRewritten},
  {kPurge, Stored::kDamagedUnreadable, Kind::kErase, Order::kEqualSame, Decision::kSkipRewritten},
};
// clang-format on

TEST(CommitRules, TableOfCases) {
  for (const Case& c : kCases) {
    StoredState stored = MakeStored(c.stored);
    if (c.mode == kPurge && c.stored == Stored::kDamaged) {
      stored.deleted = true;  // a damaged tombstone
    }
    const IncomingRow row = MakeIncoming(c, stored);
    const Decision got = Decide(stored, row, c.mode, c.purged_before);
    EXPECT_EQ(DecisionName(got), DecisionName(c.expected)) << Describe(c);
  }
}

TEST(CommitRules, RowsOrderByVersionThenByTheHigherDigest) {
  const tree::Version v = V(kStoredTs, "node-b");
  const tree::Digest128 low{1, 9};
  const tree::Digest128 high{2, 0};
  EXPECT_GT(CompareRows(v, high, v, low), 0);
  EXPECT_LT(CompareRows(v, low, v, high), 0);
  EXPECT_GT(CompareRows(v, tree::Digest128{1, 10}, v, low), 0);
  EXPECT_EQ(CompareRows(v, low, v, low), 0);
  // The version comes first, whatever the digests.
  EXPECT_GT(CompareRows(V(kStoredTs + 1, "node-a"), low, v, high), 0);
  EXPECT_LT(CompareRows(V(kStoredTs, "node-a"), high, v, low), 0);
}

TEST(CommitRules, OnlyWritesAndErasesApply) {
  EXPECT_TRUE(Applies(Decision::kWrite));
  EXPECT_TRUE(Applies(Decision::kReplaceDamaged));
  EXPECT_TRUE(Applies(Decision::kOverride));
  EXPECT_TRUE(Applies(Decision::kErase));
  EXPECT_FALSE(Writes(Decision::kErase));
  for (Decision d :
       {Decision::kSkipNotNewer, Decision::kSkipSame, Decision::kSkipAbsent,
        Decision::kSkipPurged, Decision::kSkipRewritten}) {
    EXPECT_FALSE(Applies(d)) << DecisionName(d);
  }
}

}  // namespace
}  // namespace internal
}  // namespace storage
}  // namespace tally
