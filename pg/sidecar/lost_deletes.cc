#include "pg/sidecar/lost_deletes.h"

#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pg/schema/row_codec.h"
#include "pg/wire/field.h"
#include "tree/status_macros.h"

namespace tally {
namespace pg {

LocalDeleteCollector::LocalDeleteCollector(absl::Span<const TableSchema> tables,
                                           std::string own_origin)
    : tables_(tables.begin(), tables.end()),
      own_origin_(std::move(own_origin)) {}

absl::StatusOr<std::string> LocalDeleteCollector::KeyOf(
    const Relation& relation, const TupleData& tuple) const {
  const TableSchema& table = *relation.table;
  if (tuple.size() != relation.canonical.size()) {
    return absl::DataLossError(absl::StrFormat(
        "old slot: a tuple of %s has %d columns, its Relation %d", table.name(),
        tuple.size(), relation.canonical.size()));
  }
  std::vector<Field> key(table.key_columns(), Field::Null());
  for (size_t i = 0; i < tuple.size(); ++i) {
    const size_t column = relation.canonical[i];
    if (column >= table.key_columns()) continue;
    if (tuple[i].kind != TupleColumnKind::kBinary) {
      return absl::DataLossError(absl::StrCat("old slot: a key column of ",
                                              table.name(),
                                              " is not sent in binary"));
    }
    key[column] = Field::Of(tuple[i].value);
  }
  std::string out;
  TALLY_RETURN_IF_ERROR(table.codec().EncodeKey(key, &out));
  return out;
}

void LocalDeleteCollector::Deleted(const TableSchema& table, std::string key) {
  // tally's own apply deleted a row a peer deleted first: the peers hold
  // that tombstone already.
  if (own_) return;
  result_.keys[table.name()][std::move(key)] = commit_time_us_;
}

void LocalDeleteCollector::Written(const TableSchema& table,
                                   const std::string& key) {
  // Written again after its delete: the row is in the snapshot, and the
  // build versions it as the write it is.
  auto it = result_.keys.find(table.name());
  if (it != result_.keys.end()) it->second.erase(key);
}

absl::Status LocalDeleteCollector::Add(const PgOutputMessage& message) {
  if (const auto* begin = std::get_if<BeginMessage>(&message)) {
    in_transaction_ = true;
    own_ = false;
    commit_time_us_ = begin->commit_time_us;
    ++result_.transactions;
    return absl::OkStatus();
  }
  if (std::holds_alternative<CommitMessage>(message)) {
    in_transaction_ = false;
    return absl::OkStatus();
  }
  if (const auto* origin = std::get_if<OriginMessage>(&message)) {
    own_ = origin->name == own_origin_;
    if (own_) ++result_.own_transactions;
    return absl::OkStatus();
  }
  if (const auto* relation = std::get_if<RelationMessage>(&message)) {
    Relation r;
    const std::string name =
        absl::StrCat(relation->schema, ".", relation->table);
    for (const TableSchema& t : tables_) {
      if (t.name() == name) r.table = &t;
    }
    if (r.table != nullptr) {
      for (const RelationColumn& c : relation->columns) {
        // A column the table no longer has (dropped since) maps past the
        // end: never a key column of the current schema, only a slot.
        r.canonical.push_back(r.table->ColumnIndex(c.name));
      }
      for (size_t k = 0; k < r.table->key_columns(); ++k) {
        bool sent = false;
        for (size_t column : r.canonical) sent = sent || column == k;
        // A key column the old rows did not have: their keys cannot be
        // compared with today's; such a table's deletes are not kept.
        if (!sent) r.table = nullptr;
      }
    }
    relations_[relation->relid] = std::move(r);
    return absl::OkStatus();
  }
  if (!in_transaction_) return absl::OkStatus();  // a logical message
  auto relation_of = [&](uint32_t relid) -> const Relation* {
    auto it = relations_.find(relid);
    if (it == relations_.end() || it->second.table == nullptr) return nullptr;
    return &it->second;
  };
  if (const auto* insert = std::get_if<InsertMessage>(&message)) {
    if (const Relation* r = relation_of(insert->relid)) {
      TALLY_ASSIGN_OR_RETURN(std::string key, KeyOf(*r, insert->new_tuple));
      Written(*r->table, key);
    }
  } else if (const auto* update = std::get_if<UpdateMessage>(&message)) {
    if (const Relation* r = relation_of(update->relid)) {
      TALLY_ASSIGN_OR_RETURN(std::string key, KeyOf(*r, update->new_tuple));
      if (update->old_kind != OldTuple::kNone) {
        TALLY_ASSIGN_OR_RETURN(std::string old_key,
                               KeyOf(*r, update->old_tuple));
        if (old_key != key) Deleted(*r->table, std::move(old_key));
      }
      Written(*r->table, key);
    }
  } else if (const auto* del = std::get_if<DeleteMessage>(&message)) {
    if (const Relation* r = relation_of(del->relid)) {
      TALLY_ASSIGN_OR_RETURN(std::string key, KeyOf(*r, del->old_tuple));
      Deleted(*r->table, std::move(key));
    }
  } else if (const auto* truncate = std::get_if<TruncateMessage>(&message)) {
    if (own_) return absl::OkStatus();
    for (uint32_t relid : truncate->relids) {
      if (const Relation* r = relation_of(relid)) {
        result_.truncated.insert(r->table->name());
      }
    }
  }
  return absl::OkStatus();
}

LocalDeletes LocalDeleteCollector::Take() && { return std::move(result_); }

absl::StatusOr<LocalDeletes> ReadLocalDeletes(
    Connection& conn, const ReplicationNames& names,
    absl::Span<const TableSchema> tables) {
  TALLY_ASSIGN_OR_RETURN(
      Result slot,
      conn.ExecParams("SELECT coalesce(wal_status, '') FROM "
                      "pg_catalog.pg_replication_slots WHERE slot_name = $1 "
                      "AND plugin = 'pgoutput' AND database = "
                      "pg_catalog.current_database()",
                      {Param::Text(names.slot)}));
  if (slot.rows() != 1 || slot.Value(0, 0) == "lost") return LocalDeletes{};
  // Binary results: `data` is the message's bytes as pgoutput wrote them.
  TALLY_ASSIGN_OR_RETURN(
      Result peeked,
      conn.ExecParams(
          "SELECT data FROM pg_catalog.pg_logical_slot_peek_binary_changes("
          "$1, NULL, NULL, 'proto_version', '1', 'publication_names', "
          "pg_catalog.quote_ident($2), 'binary', 'true')",
          {Param::Text(names.slot), Param::Text(names.publication)},
          /*binary_results=*/true));
  LocalDeleteCollector collector(tables, names.origin);
  for (int row = 0; row < peeked.rows(); ++row) {
    absl::StatusOr<PgOutputMessage> m =
        ParsePgOutputMessage(peeked.Value(row, 0));
    if (!m.ok()) {
      return absl::DataLossError(absl::StrCat("old slot ", names.slot,
                                              ", change ", row, ": ",
                                              m.status().message()));
    }
    TALLY_RETURN_IF_ERROR(collector.Add(*m));
  }
  LocalDeletes result = std::move(collector).Take();
  result.slot_found = true;
  return result;
}

}  // namespace pg
}  // namespace tally
