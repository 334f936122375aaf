#include "mariadb/sidecar/local_writes.h"

#include <memory>
#include <optional>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "mariadb/binlog/binlog_stream.h"
#include "mariadb/connection.h"
#include "mariadb/sidecar/transaction_reader.h"
#include "tree/status_macros.h"

namespace tally {
namespace mariadb {
namespace {

// True when `state` holds every domain's transactions up to `target`'s.
bool Covers(const std::map<uint32_t, binlog::Gtid>& state,
            const std::map<uint32_t, binlog::Gtid>& target) {
  for (const auto& [domain, gtid] : target) {
    auto it = state.find(domain);
    if (it == state.end() || it->second.sequence < gtid.sequence) return false;
  }
  return true;
}

// The GTID state at the start of the oldest binary log the server holds.
absl::StatusOr<std::string> OldestLogStart(const MariaDbTarget& target) {
  TALLY_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn,
                         Connection::Open(target, absl::Seconds(30)));
  TALLY_ASSIGN_OR_RETURN(TextRows logs, conn->Query("SHOW BINARY LOGS"));
  if (logs.empty() || !logs[0][0].has_value()) {
    return absl::FailedPreconditionError("the server holds no binary log");
  }
  TALLY_ASSIGN_OR_RETURN(
      TextRows at, conn->Query(absl::StrCat("SELECT BINLOG_GTID_POS(",
                                            conn->Quote(*logs[0][0]), ", 4)")));
  if (at.empty() || !at[0][0].has_value() || at[0][0]->empty()) {
    // The oldest log starts the server's history (RESET MASTER): a stream
    // from the empty state would start at the server's end.
    return absl::FailedPreconditionError(absl::StrCat(
        "the oldest binary log ", *logs[0][0], " starts with no GTID state"));
  }
  return *at[0][0];
}

absl::StatusOr<std::unique_ptr<binlog::BinlogStream>> OpenAt(
    const MariaDbTarget& target, const LocalWritesOptions& options,
    const std::string& from) {
  binlog::BinlogStreamOptions so;
  so.replica_server_id = options.apply_server_id + 1;
  so.start_gtid = from;
  so.heartbeat_period = absl::Milliseconds(100);
  so.read_timeout = absl::Seconds(5);
  return binlog::BinlogStream::Open(target, so);
}

}  // namespace

bool LocalWrites::Written(absl::string_view keyspace,
                          absl::string_view key) const {
  auto t = keys.find(std::string(keyspace));
  if (t == keys.end()) return false;
  auto k = t->second.find(key);
  return k != t->second.end() && k->second;
}

bool LocalWrites::Deleted(absl::string_view keyspace,
                          absl::string_view key) const {
  auto t = keys.find(std::string(keyspace));
  if (t == keys.end()) return false;
  auto k = t->second.find(key);
  return k != t->second.end() && !k->second;
}

absl::StatusOr<LocalWrites> ReadLocalWrites(const MariaDbTarget& target,
                                            const LocalWritesOptions& options) {
  LocalWrites out;
  out.read_from = options.from_gtid;
  TALLY_ASSIGN_OR_RETURN(auto to, binlog::ParseGtidPosition(options.to_gtid));
  TALLY_ASSIGN_OR_RETURN(auto from,
                         binlog::ParseGtidPosition(options.from_gtid));
  if (Covers(from, to)) return out;

  // Error 1236 (the log from `from_gtid` is purged) may come at the open
  // or with the first read.
  std::unique_ptr<binlog::BinlogStream> stream;
  std::optional<binlog::BinlogEvent> first;
  {
    absl::StatusOr<std::unique_ptr<binlog::BinlogStream>> opened =
        OpenAt(target, options, options.from_gtid);
    absl::StatusOr<binlog::BinlogEvent> event =
        opened.ok() ? (*opened)->Next(absl::Milliseconds(100))
                    : absl::StatusOr<binlog::BinlogEvent>(opened.status());
    if (absl::IsOutOfRange(event.status())) {
      TALLY_ASSIGN_OR_RETURN(out.read_from, OldestLogStart(target));
      out.complete = false;
      TALLY_ASSIGN_OR_RETURN(stream, OpenAt(target, options, out.read_from));
    } else {
      TALLY_RETURN_IF_ERROR(event.status());
      stream = *std::move(opened);
      first = *std::move(event);
    }
  }

  TransactionReader reader(options.tables, options.node);
  absl::Time last_event = absl::Now();
  for (;;) {
    binlog::BinlogEvent event;
    if (first.has_value()) {
      event = *std::move(first);
      first.reset();
    } else {
      TALLY_ASSIGN_OR_RETURN(event, stream->Next(absl::Milliseconds(100)));
    }
    if (event.idle()) {
      TALLY_ASSIGN_OR_RETURN(auto state,
                             binlog::ParseGtidPosition(stream->gtid_state()));
      if (!reader.in_transaction() && Covers(state, to)) return out;
      if (absl::Now() - last_event > options.stall_timeout) {
        return absl::DeadlineExceededError(absl::StrCat(
            "the binary log did not reach GTID ", options.to_gtid, " within ",
            absl::FormatDuration(options.stall_timeout), " (at ",
            stream->gtid_state(), ")"));
      }
      continue;
    }
    last_event = absl::Now();
    TALLY_ASSIGN_OR_RETURN(std::optional<CapturedTransaction> txn,
                           reader.Add(event));
    if (!txn.has_value()) continue;
    ++out.transactions;
    if (!txn->rebuild.empty()) ++out.unreadable_transactions;
    std::set<std::pair<std::string, std::string>> listed;
    const bool own = txn->server_id == options.apply_server_id;
    if (own && txn->apply_log.has_value()) {
      for (const AppliedRow& row : txn->apply_log->rows) {
        listed.emplace(row.keyspace, row.key);
      }
    }
    for (CapturedRow& row : txn->rows) {
      if (own && listed.count({row.keyspace, row.key}) > 0) {
        // Came from a peer: the peers hold it. A later local change of the
        // key decides again; an earlier one is superseded.
        out.keys[row.keyspace].erase(row.key);
        continue;
      }
      out.keys[row.keyspace][std::move(row.key)] = row.value.has_value();
    }
    TALLY_ASSIGN_OR_RETURN(auto state,
                           binlog::ParseGtidPosition(stream->gtid_state()));
    if (Covers(state, to)) return out;
  }
}

}  // namespace mariadb
}  // namespace tally
