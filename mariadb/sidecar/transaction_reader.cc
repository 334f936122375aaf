#include "mariadb/sidecar/transaction_reader.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "mariadb/binlog/row_events.h"
#include "mariadb/sidecar/statement_tables.h"
#include "pg/schema/row_codec.h"
#include "tree/status_macros.h"

namespace tally {
namespace mariadb {
namespace {

// Statements that carry no change of their own.
bool IsTransactionControl(absl::string_view statement) {
  const absl::string_view s = absl::StripLeadingAsciiWhitespace(statement);
  for (absl::string_view word : {"BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT",
                                 "RELEASE SAVEPOINT", "XA "}) {
    if (absl::StartsWithIgnoreCase(s, word)) return true;
  }
  return false;
}

}  // namespace

TransactionReader::TransactionReader(
    std::map<std::string, const MariaDbTable*> tables, std::string node)
    : tables_(std::move(tables)), node_(std::move(node)) {}

void TransactionReader::Rebuild(absl::string_view keyspace,
                                absl::string_view why) {
  open_->rebuild.insert(std::string(keyspace));
  if (open_->rebuild_reason.empty()) open_->rebuild_reason = std::string(why);
}

absl::StatusOr<RowConverter*> TransactionReader::ConverterFor(
    const MariaDbTable& table,
    const std::shared_ptr<const binlog::TableMap>& map) {
  auto it = converters_.find(map);
  if (it != converters_.end()) return it->second.get();
  if (!map->has_names) {
    return absl::FailedPreconditionError(absl::StrCat(
        "its row events carry no column names (binlog_row_metadata is not "
        "FULL for the session that wrote them)"));
  }
  std::vector<std::string> names;
  names.reserve(map->columns.size());
  for (const binlog::TableMapColumn& c : map->columns) names.push_back(c.name);
  TALLY_ASSIGN_OR_RETURN(RowConverter converter, table.ConverterFor(names));
  return converters_
      .emplace(map, std::make_unique<RowConverter>(std::move(converter)))
      .first->second.get();
}

void TransactionReader::AddRows(const binlog::BinlogEvent& event,
                                absl::string_view keyspace,
                                const MariaDbTable& table) {
  if (open_->rebuild.count(std::string(keyspace)) != 0) return;
  absl::StatusOr<RowConverter*> converter =
      ConverterFor(table, event.table_map);
  if (!converter.ok()) {
    Rebuild(keyspace, absl::StrCat("table ", keyspace, ": ",
                                   converter.status().message()));
    return;
  }
  absl::StatusOr<binlog::RowsEvent> rows =
      binlog::DecodeRowsEvent(event.type, event.body, *event.table_map);
  if (!rows.ok()) {
    Rebuild(keyspace, absl::StrCat("table ", keyspace,
                                   ": a row event could not be read: ",
                                   rows.status().message()));
    return;
  }
  const pg::RowCodec codec = table.schema().codec();
  auto canonical = [&](const std::vector<Value>& image, std::string* key,
                       std::string* value) -> absl::Status {
    TALLY_ASSIGN_OR_RETURN(absl::Span<const pg::Field> fields,
                           (*converter)->Convert(image));
    return codec.Encode(fields, key, value);
  };
  for (const binlog::RowChange& change : rows->changes) {
    std::string before_key, before_value, key, value;
    absl::Status s;
    if (change.before.has_value()) {
      s = canonical(*change.before, &before_key, &before_value);
    }
    if (s.ok() && change.after.has_value()) {
      s = canonical(*change.after, &key, &value);
    }
    if (!s.ok()) {
      Rebuild(keyspace, absl::StrCat("table ", keyspace,
                                     ": a row image could not be converted: ",
                                     s.message()));
      return;
    }
    if (change.before.has_value() &&
        (!change.after.has_value() || before_key != key)) {
      open_->rows.push_back(
          CapturedRow{std::string(keyspace), std::move(before_key), {}});
    }
    if (change.after.has_value()) {
      open_->rows.push_back(
          CapturedRow{std::string(keyspace), std::move(key), std::move(value)});
    }
  }
}

absl::Status TransactionReader::AddApplyLog(const binlog::BinlogEvent& event) {
  const binlog::TableMap& map = *event.table_map;
  int node_column = -1;
  int applied_column = -1;
  for (size_t i = 0; i < map.columns.size(); ++i) {
    if (map.columns[i].name == "node") node_column = static_cast<int>(i);
    if (map.columns[i].name == "applied") applied_column = static_cast<int>(i);
  }
  if (node_column < 0 || applied_column < 0) {
    return absl::DataLossError(
        "the apply log's row events carry no column names node and applied "
        "(binlog_row_metadata must be FULL)");
  }
  TALLY_ASSIGN_OR_RETURN(binlog::RowsEvent rows,
                         binlog::DecodeRowsEvent(event.type, event.body, map));
  for (const binlog::RowChange& change : rows.changes) {
    if (!change.after.has_value()) continue;
    const Value& node = (*change.after)[node_column];
    const Value& applied = (*change.after)[applied_column];
    if (node.kind != Value::Kind::kBytes || node.bytes != node_) continue;
    if (applied.kind != Value::Kind::kBytes) {
      return absl::DataLossError("the apply log's record is not bytes");
    }
    TALLY_ASSIGN_OR_RETURN(ApplyLog log, DecodeApplyLog(applied.bytes));
    if (open_->apply_log.has_value()) {
      // One record per transaction is written; keep every row if a
      // transaction ever carries two.
      for (AppliedRow& row : log.rows) {
        open_->apply_log->rows.push_back(std::move(row));
      }
    } else {
      open_->apply_log = std::move(log);
    }
  }
  return absl::OkStatus();
}

void TransactionReader::NoteStatement(const binlog::BinlogEvent& event) {
  if (IsTransactionControl(event.statement)) return;
  // The names of the tables it may change (statement_tables.h).
  const std::vector<std::string> words =
      TablesAStatementMayChange(event.statement);
  for (const auto& [keyspace, table] : tables_) {
    const std::vector<absl::string_view> parts =
        absl::StrSplit(keyspace, absl::MaxSplits('.', 1));
    const absl::string_view database = parts[0];
    const absl::string_view name = parts.size() > 1 ? parts[1] : "";
    for (const std::string& word : words) {
      const bool qualified = absl::EqualsIgnoreCase(word, keyspace);
      const bool bare = absl::EqualsIgnoreCase(word, name) &&
                        absl::EqualsIgnoreCase(event.database, database);
      if (qualified || bare) {
        std::string shown = event.statement.substr(0, 120);
        if (event.statement.size() > 120) shown += "...";
        Rebuild(keyspace, absl::StrCat("table ", keyspace,
                                       " changed by a statement: ", shown));
        break;
      }
    }
  }
}

absl::StatusOr<std::optional<CapturedTransaction>> TransactionReader::Add(
    const binlog::BinlogEvent& event) {
  switch (event.type) {
    case binlog::kGtidEvent: {
      // A transaction left open by a server crash never commits: the
      // server rolled it back, and its rows were never visible.
      open_.emplace();
      open_->gtid = event.gtid.value_or(binlog::Gtid{});
      open_->server_id = event.server_id;
      open_->commit_second = event.timestamp;
      standalone_ = (event.gtid_flags & 1) != 0;
      converters_.clear();
      return std::nullopt;
    }
    case binlog::kQueryEvent: {
      if (!open_.has_value()) {
        // Outside a GTID transaction (a server without GTIDs does not
        // exist since 10.0; be safe): judge the statement alone.
        open_.emplace();
        open_->server_id = event.server_id;
        open_->commit_second = event.timestamp;
        standalone_ = true;
      }
      const absl::string_view s =
          absl::StripLeadingAsciiWhitespace(event.statement);
      const bool commit = absl::StartsWithIgnoreCase(s, "COMMIT");
      NoteStatement(event);
      if (!standalone_ && !commit) return std::nullopt;
      break;
    }
    case binlog::kXidEvent:
      if (!open_.has_value()) return std::nullopt;
      break;
    default:
      if (binlog::IsRowsEvent(event.type)) {
        if (!open_.has_value()) {
          return absl::InternalError(
              "a row event outside a transaction in the binary log");
        }
        if (event.table_map == nullptr) {
          return absl::InternalError("a row event without its TABLE_MAP");
        }
        const std::string qualified = absl::StrCat(event.table_map->database,
                                                   ".", event.table_map->table);
        if (event.table_map->database == kApplyLogSchema &&
            event.table_map->table == kApplyLogTable) {
          TALLY_RETURN_IF_ERROR(AddApplyLog(event));
          return std::nullopt;
        }
        auto it = tables_.find(qualified);
        if (it != tables_.end() && it->second != nullptr) {
          AddRows(event, it->first, *it->second);
        }
      }
      return std::nullopt;
  }
  std::optional<CapturedTransaction> done = std::move(open_);
  open_.reset();
  converters_.clear();
  standalone_ = false;
  return done;
}

}  // namespace mariadb
}  // namespace tally
