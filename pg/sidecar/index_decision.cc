#include "pg/sidecar/index_decision.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pg/sidecar/bootstrap.h"

namespace tally {
namespace pg {
namespace {

struct Found {
  IndexReason reason = IndexReason::kResume;
  std::string message;
};

// Why the stored position cannot be resumed, by the database's identity
// and its slot.
Found SystemOrSlotChange(const CapturePosition& position,
                         const IndexFacts& facts) {
  if (position.system_id != facts.system_id) {
    return {IndexReason::kOtherSystem,
            absl::StrFormat("the database has system identifier %d, the "
                            "index was built from %d (a promoted standby or "
                            "a restored backup)",
                            facts.system_id, position.system_id)};
  }
  if (!facts.slot.exists) {
    return {IndexReason::kSlotMissing, "the replication slot is missing"};
  }
  if (facts.slot.lost) {
    return {IndexReason::kSlotLost,
            "the replication slot is lost (wal_status lost)"};
  }
  if (facts.slot.confirmed_flush.has_value() &&
      position.resume_lsn < *facts.slot.confirmed_flush) {
    return {IndexReason::kPositionBehindSlot,
            absl::StrFormat("the stored position %s is below the slot's "
                            "confirmed %s (the index is older than what the "
                            "slot has passed on)",
                            FormatLsn(position.resume_lsn),
                            FormatLsn(*facts.slot.confirmed_flush))};
  }
  return {};
}

// Why the index, built with the schemas `position` recorded, does not
// describe the tables. A position that recorded none (written before they
// were) is taken as describing them.
Found StoredSchemaChange(const CapturePosition& position,
                         const std::vector<TableSchema>& tables) {
  if (position.fingerprints.empty()) return {};
  for (const TableSchema& t : tables) {
    auto it = position.fingerprints.find(t.name());
    if (it == position.fingerprints.end()) {
      return {IndexReason::kTableNewlyKept,
              absl::StrCat("table ", t.name(),
                           " is kept now but was not when the index was "
                           "built")};
    }
    if (it->second == kRefusedTable) {
      return {IndexReason::kTableChanged,
              absl::StrCat("table ", t.name(),
                           " had rows over the value limit when the index "
                           "was last written: it is built again to look at "
                           "them")};
    }
    if (it->second == kMissingTable) {
      return {IndexReason::kTableBack,
              absl::StrCat("table ", t.name(),
                           " was missing (dropped) when the index was last "
                           "built and exists now: it is built afresh")};
    }
    if (t.MatchesStored(it->second)) continue;
    const Oid recorded = TableSchema::RelidOfStored(it->second);
    if (recorded != 0 && recorded != t.relid()) {
      return {IndexReason::kTableRecreated,
              absl::StrFormat("table %s was dropped and created again while "
                              "tallyd was stopped (OID %d, the index's %d): "
                              "it is built afresh",
                              t.name(), t.relid(), recorded)};
    }
    if (TableSchema::FingerprintOfStored(it->second) == t.fingerprint()) {
      return {IndexReason::kPartitionsChanged,
              absl::StrCat("the partitions of ", t.name(),
                           " changed while tallyd was stopped (a partition "
                           "attached, detached, created, dropped, truncated "
                           "or rewritten: changes logical decoding does not "
                           "send as rows)")};
    }
    return {IndexReason::kTableChanged,
            absl::StrCat(
                "schema change: ", t.name(), " has fingerprint ",
                t.fingerprint(), " in the catalog, the index was built with ",
                it->second, " (the table changed while tallyd was stopped)")};
  }
  return {};
}

// Why the index, which records a missing table otherwise than as missing,
// must be rebuilt: that table's rows are to be forgotten. In name order, so
// that the message does not depend on the set's iteration order.
Found StoredMissingChange(const CapturePosition& position,
                          const absl::flat_hash_set<std::string>& missing) {
  std::vector<std::string> names(missing.begin(), missing.end());
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    auto it = position.fingerprints.find(name);
    if (it != position.fingerprints.end() && it->second != kMissingTable) {
      return {IndexReason::kTableMissing,
              absl::StrCat("table ", name,
                           " is missing from the database (dropped)")};
    }
  }
  return {};
}

}  // namespace

absl::string_view IndexReasonName(IndexReason reason) {
  switch (reason) {
    case IndexReason::kResume:
      return "resume";
    case IndexReason::kFirstStart:
      return "first-start";
    case IndexReason::kIndexLost:
      return "index-lost";
    case IndexReason::kSchemaChanged:
      return "schema-changed";
    case IndexReason::kOtherSystem:
      return "other-system";
    case IndexReason::kSlotMissing:
      return "slot-missing";
    case IndexReason::kSlotLost:
      return "slot-lost";
    case IndexReason::kPositionBehindSlot:
      return "position-behind-slot";
    case IndexReason::kTableNewlyKept:
      return "table-newly-kept";
    case IndexReason::kTableBack:
      return "table-back";
    case IndexReason::kTableRecreated:
      return "table-recreated";
    case IndexReason::kPartitionsChanged:
      return "partitions-changed";
    case IndexReason::kTableChanged:
      return "table-changed";
    case IndexReason::kTableMissing:
      return "table-missing";
    case IndexReason::kPublicationNotViaRoot:
      return "publication-not-via-root";
  }
  return "unknown";
}

IndexDecision DecideIndex(const IndexFacts& facts) {
  IndexDecision d;
  if (!facts.position.has_value()) {
    // No index: a first start, or an index lost (the database says one
    // was built; pg/sidecar/build_marker.h says why the slot cannot tell).
    d.build = true;
    d.index_lost = facts.database_says_built;
    if (d.index_lost) {
      d.reason = IndexReason::kIndexLost;
      d.message =
          "index lost: the store holds no index, but the database says this "
          "node's index was built (publication comment); rows last written "
          "here get fresh versions";
    } else {
      d.reason = IndexReason::kFirstStart;
      d.message = "first start: no index yet";
    }
    return d;
  }
  const CapturePosition& position = *facts.position;
  Found found;
  if (facts.schema_change.has_value()) {
    found = {IndexReason::kSchemaChanged,
             absl::StrCat("schema change: ", *facts.schema_change)};
  }
  if (found.reason == IndexReason::kResume) {
    found = SystemOrSlotChange(position, facts);
  }
  if (found.reason == IndexReason::kResume) {
    found = StoredSchemaChange(position, facts.tables);
  }
  if (found.reason == IndexReason::kResume) {
    found = StoredMissingChange(position, facts.missing);
  }
  if (found.reason == IndexReason::kResume &&
      facts.publication_via_root.has_value() && !*facts.publication_via_root) {
    // A partitioned table's changes come under its leaves, which are no
    // keyspace, unless the publication publishes via the root. A build
    // sets that; a publication altered since needs a rebuild, as changes
    // already in WAL decode with the setting of their time.
    found = {IndexReason::kPublicationNotViaRoot,
             absl::StrCat("publication ", facts.publication,
                          " does not publish via the partition root (or is "
                          "missing): a partitioned table's changes would "
                          "come under its partitions")};
  }
  if (found.reason == IndexReason::kResume) return d;
  d.reason = found.reason;
  d.message = std::move(found.message);
  d.build = true;
  d.rebuild = true;
  for (const TableSchema& t : facts.tables) {
    auto it = position.fingerprints.find(t.name());
    if (it == position.fingerprints.end()) continue;
    const Oid recorded = TableSchema::RelidOfStored(it->second);
    if (it->second == kMissingTable ||
        (recorded != 0 && recorded != t.relid())) {
      d.afresh.push_back(t.name());
    }
  }
  return d;
}

}  // namespace pg
}  // namespace tally
