#include "storage/internal/commit_rules.h"

namespace tally {
namespace storage {
namespace internal {
namespace {

Decision DecideErase(const StoredState& stored, const IncomingRow& row,
                     ApplyMode mode) {
  if (!stored.exists && !stored.damaged) return Decision::kSkipAbsent;
  if (mode == ApplyMode::kPurgeTombstones &&
      (stored.damaged || !stored.deleted ||
       tree::CompareVersions(stored.version, row.version) != 0)) {
    // Written again since the purge chose it, or found damaged: the purge
    // removes only the tombstone it saw.
    return Decision::kSkipRewritten;
  }
  // Source override: the source lacks this row. Purge: the tombstone is
  // old enough and every peer has it.
  return Decision::kErase;
}

}  // namespace

Decision Decide(const StoredState& stored, const IncomingRow& row,
                ApplyMode mode, uint64_t purged_before) {
  if (row.kind == IncomingRow::Kind::kErase) {
    return DecideErase(stored, row, mode);
  }
  if (stored.damaged) return Decision::kReplaceDamaged;
  if (stored.exists && mode == ApplyMode::kSourceOverride) {
    return stored.digest == row.digest ? Decision::kSkipSame
                                       : Decision::kOverride;
  }
  if (!stored.exists) {
    if (row.kind == IncomingRow::Kind::kDelete && row.replicated &&
        row.version.timestamp.raw() < purged_before) {
      return Decision::kSkipPurged;
    }
    return Decision::kWrite;
  }
  // Last writer wins, ties broken by digest.
  const int by_version = tree::CompareVersions(row.version, stored.version);
  if (by_version > 0) return Decision::kWrite;
  if (by_version < 0 || row.digest == stored.digest) {
    return Decision::kSkipNotNewer;
  }
  return CompareRows(row.version, row.digest, stored.version, stored.digest) > 0
             ? Decision::kWriteTie
             : Decision::kSkipTieLost;
}

absl::string_view DecisionName(Decision d) {
  switch (d) {
    case Decision::kWrite:
      return "write";
    case Decision::kReplaceDamaged:
      return "replace-damaged";
    case Decision::kOverride:
      return "override";
    case Decision::kWriteTie:
      return "write-tie";
    case Decision::kErase:
      return "erase";
    case Decision::kSkipNotNewer:
      return "skip-not-newer";
    case Decision::kSkipTieLost:
      return "skip-tie-lost";
    case Decision::kSkipSame:
      return "skip-same";
    case Decision::kSkipAbsent:
      return "skip-absent";
    case Decision::kSkipPurged:
      return "skip-purged";
    case Decision::kSkipRewritten:
      return "skip-rewritten";
  }
  return "unknown";
}

}  // namespace internal
}  // namespace storage
}  // namespace tally
