#include "node/sync/sync.h"

#include <iterator>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "tree/diff/absent_as_empty_view.h"
#include "tree/status_macros.h"

namespace tally {
namespace node {
namespace {

// The repair half of a sync: collects keys to move as the diff finds them
// and moves them in batches.
class Repairer {
 public:
  Repairer(Replica& a, Replica& b, const SyncOptions& options, SyncStats* stats)
      : a_(a), b_(b), options_(options), stats_(*stats) {}

  absl::Status Add(const tree::RowEntry* in_a, const tree::RowEntry* in_b) {
    KeyDifference d;
    d.key = in_a != nullptr ? in_a->key : in_b->key;
    d.in_a = in_a;
    d.in_b = in_b;
    if (options_.a_is_source) {
      d.action = in_a != nullptr ? KeyDifference::Action::kCopyToB
                                 : KeyDifference::Action::kEraseFromB;
    } else if (in_b == nullptr) {
      d.action = KeyDifference::Action::kCopyToB;
    } else if (in_a == nullptr) {
      d.action = KeyDifference::Action::kCopyToA;
    } else {
      // Equal versions with different content (a tie) are still counted
      // as conflicts, and the tie rule moves the row with the higher digest,
      // which the other store's commit rules then take: both converge.
      if (tree::CompareVersions(in_a->version, in_b->version) == 0) {
        ++stats_.conflicts;
      }
      const int c = storage::CompareRows(in_a->version, in_a->digest,
                                         in_b->version, in_b->digest);
      d.action = c > 0   ? KeyDifference::Action::kCopyToB
                 : c < 0 ? KeyDifference::Action::kCopyToA
                         : KeyDifference::Action::kConflict;
    }
    if (Skipped(d)) {
      d.action = KeyDifference::Action::kSkip;
      ++stats_.skipped;
    }
    const bool changes = d.action != KeyDifference::Action::kConflict &&
                         d.action != KeyDifference::Action::kSkip;
    if (changes && options_.max_rows > 0 && changing_ >= options_.max_rows) {
      // What came before is written; this row and the rest are not.
      TALLY_RETURN_IF_ERROR(Flush());
      return absl::ResourceExhaustedError(absl::StrFormat(
          "the repair stopped before changing more than %d rows "
          "(--max-rows): the %d before the limit %s; more differ",
          options_.max_rows, changing_,
          options_.dry_run ? "were listed" : "were changed"));
    }
    if (changes) ++changing_;
    ++progress_.differences;
    if (options_.on_difference) options_.on_difference(d);
    TALLY_RETURN_IF_ERROR(CheckStop());
    switch (d.action) {
      case KeyDifference::Action::kCopyToB:
        if (in_a->value.has_value()) {
          Ready(*in_a, &ready_to_b_);
        } else {
          to_b_.push_back(std::move(d.key));
        }
        break;
      case KeyDifference::Action::kCopyToA:
        if (in_b->value.has_value()) {
          Ready(*in_b, &ready_to_a_);
        } else {
          to_a_.push_back(std::move(d.key));
        }
        break;
      case KeyDifference::Action::kEraseFromB:
        erase_from_b_.push_back(std::move(d.key));
        break;
      case KeyDifference::Action::kConflict:
        // Same version and digest: counted above (the diff never lists
        // such a key; nothing to move).
      case KeyDifference::Action::kSkip:
        break;
    }
    if (to_a_.size() + to_b_.size() + erase_from_b_.size() +
                ready_to_a_.size() + ready_to_b_.size() >=
            options_.batch_rows ||
        ready_bytes_ >= kMaxReadyBytes) {
      TALLY_RETURN_IF_ERROR(Flush());
      Step(SyncStep::kDiff);  // the diff resumes
    }
    return absl::OkStatus();
  }

  // Whether the sync's mode leaves `d` alone.
  bool Skipped(const KeyDifference& d) const {
    using Action = KeyDifference::Action;
    if (options_.changes == RepairChanges::kAll) return false;
    if (d.action == Action::kEraseFromB) return true;
    if (d.action != Action::kCopyToA && d.action != Action::kCopyToB) {
      return false;
    }
    const bool to_b = d.action == Action::kCopyToB;
    const tree::RowEntry* moved = to_b ? d.in_a : d.in_b;
    const tree::RowEntry* replaced = to_b ? d.in_b : d.in_a;
    if (moved->deleted) return true;  // a delete, in either mode
    return options_.changes == RepairChanges::kInsertOnly &&
           replaced != nullptr && !replaced->deleted;
  }

  absl::Status CheckStop() const {
    if (options_.cancelled != nullptr && options_.cancelled->load()) {
      return absl::CancelledError(
          "the sync was cancelled (shutdown, a pause, or the tool went away)");
    }
    if (absl::Now() > options_.deadline) {
      return absl::DeadlineExceededError("the sync ran past its deadline");
    }
    return absl::OkStatus();
  }

  absl::Status Flush() {
    TALLY_RETURN_IF_ERROR(CheckStop());
    if (options_.dry_run) {
      to_a_.clear();
      to_b_.clear();
      erase_from_b_.clear();
      ready_to_a_.clear();
      ready_to_b_.clear();
      ready_bytes_ = 0;
      return absl::OkStatus();
    }
    if (!to_a_.empty() || !to_b_.empty() || !erase_from_b_.empty() ||
        !ready_to_a_.empty() || !ready_to_b_.empty()) {
      Step(SyncStep::kRepair);
    }
    // Rows that came with the scan move under the same limit as fetched
    // ones; they were counted as they arrived.
    const size_t ready_bytes = ready_bytes_;
    ready_bytes_ = 0;
    TALLY_RETURN_IF_ERROR(Throttle(ready_bytes));
    const storage::ApplyMode mode_b = options_.a_is_source
                                          ? storage::ApplyMode::kSourceOverride
                                          : storage::ApplyMode::kLastWriterWins;
    if (!to_b_.empty() || !erase_from_b_.empty() || !ready_to_b_.empty()) {
      TALLY_ASSIGN_OR_RETURN(std::vector<storage::Row> rows, Fetch(a_, to_b_));
      MoveReady(&ready_to_b_, &rows);
      TALLY_ASSIGN_OR_RETURN(
          ApplyResult r,
          b_.ApplyRows(options_.keyspace, rows, erase_from_b_, mode_b));
      stats_.rows_to_b += r.applied;
      stats_.erased_from_b += r.erased;
      stats_.ignored += r.ignored;
      progress_.rows_to_b += r.applied;
      to_b_.clear();
      erase_from_b_.clear();
    }
    if (!to_a_.empty() || !ready_to_a_.empty()) {
      TALLY_ASSIGN_OR_RETURN(std::vector<storage::Row> rows, Fetch(b_, to_a_));
      MoveReady(&ready_to_a_, &rows);
      TALLY_ASSIGN_OR_RETURN(ApplyResult r,
                             a_.ApplyRows(options_.keyspace, rows, {},
                                          storage::ApplyMode::kLastWriterWins));
      stats_.rows_to_a += r.applied;
      stats_.ignored += r.ignored;
      progress_.rows_to_a += r.applied;
      to_a_.clear();
    }
    if (options_.on_progress) options_.on_progress(progress_);
    return absl::OkStatus();
  }

  // Tells on_step when the sync moves to another step.
  void Step(SyncStep step) {
    if (step_ == step) return;
    step_ = step;
    if (options_.on_step) options_.on_step(step);
  }

 private:
  // Rows that came with their values wait at most this many bytes before
  // they are written, whatever batch_rows says: a scan may carry values of
  // up to 256 KiB each.
  static constexpr size_t kMaxReadyBytes = 4 << 20;

  // Keeps a row the scan brought whole: it is written as it is, with no
  // FetchRows (a new replica's bootstrap, a range one side lacks).
  void Ready(const tree::RowEntry& entry, std::vector<storage::Row>* ready) {
    storage::Row row;
    row.key = entry.key;
    row.value = *entry.value;
    row.version = entry.version;
    row.deleted = entry.deleted;
    row.digest = entry.digest;
    const size_t bytes = row.key.size() + row.value.size();
    stats_.repair_bytes += bytes;
    ready_bytes_ += bytes;
    ready->push_back(std::move(row));
  }

  static void MoveReady(std::vector<storage::Row>* ready,
                        std::vector<storage::Row>* rows) {
    if (rows->empty()) {
      rows->swap(*ready);
    } else {
      rows->insert(rows->end(), std::make_move_iterator(ready->begin()),
                   std::make_move_iterator(ready->end()));
    }
    ready->clear();
  }

  absl::StatusOr<std::vector<storage::Row>> Fetch(
      Replica& from, const std::vector<std::string>& keys) {
    std::vector<storage::Row> rows;
    if (keys.empty()) return rows;
    size_t bytes = 0;
    TALLY_ASSIGN_OR_RETURN(
        FetchResult fetched,
        from.FetchRows(options_.keyspace, keys, [&](const storage::Row& row) {
          bytes += row.key.size() + row.value.size();
          rows.push_back(row);
          return absl::OkStatus();
        }));
    // Changed by an application while this sync ran: the replica's capture
    // indexes the newer write, which its feed or the next sync carries.
    stats_.rows_changed += fetched.changed;
    stats_.repair_bytes += bytes;
    TALLY_RETURN_IF_ERROR(Throttle(bytes));
    return rows;
  }

  // Sleeps as long as the bytes moved so far are ahead of the sync's own
  // limit, then takes them from the node's (kCancelled if the sync is
  // cancelled while it waits there).
  absl::Status Throttle(size_t bytes) {
    if (options_.bandwidth_bytes_per_second > 0) {
      throttled_bytes_ += bytes;
      const absl::Duration due =
          absl::Seconds(static_cast<double>(throttled_bytes_) /
                        options_.bandwidth_bytes_per_second);
      const absl::Duration elapsed = absl::Now() - start_;
      if (due > elapsed) absl::SleepFor(due - elapsed);
    }
    if (options_.node_bandwidth != nullptr && bytes > 0) {
      return options_.node_bandwidth->Take(bytes, options_.cancelled);
    }
    return absl::OkStatus();
  }

  Replica& a_;
  Replica& b_;
  const SyncOptions& options_;
  SyncStats& stats_;
  SyncProgress progress_;
  std::vector<std::string> to_a_;
  std::vector<std::string> to_b_;
  std::vector<std::string> erase_from_b_;
  // Rows the scans brought with their values (Ready), and their bytes.
  std::vector<storage::Row> ready_to_a_;
  std::vector<storage::Row> ready_to_b_;
  size_t ready_bytes_ = 0;
  uint64_t changing_ = 0;  // rows copied or erased so far (max_rows)
  const absl::Time start_ = absl::Now();
  uint64_t throttled_bytes_ = 0;
  std::optional<SyncStep> step_;
};

}  // namespace

absl::StatusOr<SyncStats> SyncKeyspace(Replica& a, Replica& b,
                                       const SyncOptions& options) {
  SyncStats stats;
  TALLY_RETURN_IF_ERROR(SyncKeyspace(a, b, options, &stats));
  return stats;
}

absl::Status SyncKeyspace(Replica& a, Replica& b, const SyncOptions& options,
                          SyncStats* out) {
  SyncStats& stats = *out;
  stats = SyncStats{};
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<tree::TreeView>> raw_a =
      a.NewView(options.keyspace);
  if (!raw_a.ok() && !absl::IsNotFound(raw_a.status())) return raw_a.status();
  absl::StatusOr<std::unique_ptr<tree::TreeView>> raw_b =
      b.NewView(options.keyspace);
  if (!raw_b.ok() && !absl::IsNotFound(raw_b.status())) return raw_b.status();
  // A replica that lacks the keyspace compares as empty: repair creates the
  // keyspace there with its first rows.
  tree::AbsentAsEmptyView view_a(raw_a.ok() ? std::move(*raw_a) : nullptr);
  tree::AbsentAsEmptyView view_b(raw_b.ok() ? std::move(*raw_b) : nullptr);

  // Rows of ranges one side lacks are all copied to the other (unless they
  // are b's and a is the source: those are erased), so their scans carry
  // the values and the repair writes them with no FetchRows.
  tree::DiffOptions diff = options.diff;
  diff.scan_values_a = !options.dry_run;
  diff.scan_values_b = !options.dry_run && !options.a_is_source;
  // A scope narrows both views alike; one-way erases only what lies in it.
  std::unique_ptr<tree::TreeView> part_a =
      tree::NarrowView(view_a, options.scope);
  std::unique_ptr<tree::TreeView> part_b =
      tree::NarrowView(view_b, options.scope);
  Repairer repairer(a, b, options, &stats);
  repairer.Step(SyncStep::kDiff);
  absl::Status status = tree::DiffViews(
      part_a != nullptr ? *part_a : view_a,
      part_b != nullptr ? *part_b : view_b, diff,
      [&](const tree::RowEntry* in_a, const tree::RowEntry* in_b) {
        return repairer.Add(in_a, in_b);
      },
      &stats.diff);
  if (view_a.absent() && view_b.absent()) {
    return tree::KeyspaceAbsentOnBoth(options.keyspace, a.name(), b.name());
  }
  if (status.ok()) status = repairer.Flush();
  stats.duration = absl::Now() - start;
  return status;
}

}  // namespace node
}  // namespace tally
