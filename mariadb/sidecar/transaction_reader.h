// TransactionReader: turns a MariaDB binary log, event by event, into the
// transactions a sidecar indexes — each kept table's row changes as
// canonical keys and values (the bytes a scan of the table gives), the
// apply log record of this node's own apply, and the statements that
// changed a kept table's definition or emptied it.
//
// A transaction begins with its GTID event and ends with its XID (InnoDB),
// a COMMIT query (a non-transactional engine), or, for a standalone GTID
// (DDL), the one statement after it. Row events of tables that are not
// kept are skipped without decoding. A row event of a kept table is
// decoded (mariadb/binlog/row_events.h) with the TABLE_MAP before it and
// converted by column name (MariaDbTable::ConverterFor): an image without
// column names (binlog_row_metadata is not FULL for that session), an image
// that is not FULL, or columns that are not the table's as read make the
// transaction ask for a rebuild of that table, never a silent gap. An
// UPDATE that changes the key is a delete of the old key and a write of
// the new one.
//
// A statement (QUERY event) other than BEGIN/COMMIT/ROLLBACK/SAVEPOINT
// that may change a kept table — ALTER, DROP, TRUNCATE, RENAME, CREATE, an
// OPTIMIZE that rebuilds it, DML in statement format — asks for a rebuild
// of that table at its position: DDL is not decoded, and a TRUNCATE logs
// no rows. Which tables a statement may change is read from its words
// (statement_tables.h: the target of an INSERT, REPLACE, single-table
// DELETE; the tables of an UPDATE; every name of anything else), each
// matched by name with its database the statement's or the default one.
// So a statement that only reads a kept table (pt-table-checksum's REPLACE
// INTO percona.checksums ... SELECT ... FROM it) changes nothing, and one
// merely mentioning a kept table's name elsewhere may rebuild it
// needlessly, which is safe (a rebuild keeps the versions of rows it
// finds unchanged).
//
//   TransactionReader reader(tables, "db-3");
//   for (;;) {
//     TALLY_ASSIGN_OR_RETURN(binlog::BinlogEvent e, stream->Next(timeout));
//     TALLY_ASSIGN_OR_RETURN(std::optional<CapturedTransaction> t,
//                            reader.Add(e));
//     if (t.has_value()) ...;  // index it; stream->gtid_state() is after it
//   }
//
// Thread-compatible.
#ifndef TALLY_MARIADB_SIDECAR_TRANSACTION_READER_H_
#define TALLY_MARIADB_SIDECAR_TRANSACTION_READER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "mariadb/binlog/binlog_stream.h"
#include "mariadb/row_converter.h"
#include "mariadb/sidecar/apply_log.h"
#include "mariadb/table.h"

namespace tally {
namespace mariadb {

// One row change of a kept table, in canonical bytes.
struct CapturedRow {
  std::string keyspace;  // "db.t"
  std::string key;
  std::optional<std::string> value;  // nullopt: the row was deleted
};

struct CapturedTransaction {
  binlog::Gtid gtid;
  // The server_id its events carry: the server's, or the session's (this
  // node's apply marks its transactions with its own).
  uint32_t server_id = 0;
  uint32_t commit_second = 0;     // the GTID event's time
  std::vector<CapturedRow> rows;  // in log order
  // The apply log record this node's apply wrote in the transaction, if any
  // (apply_log.h).
  std::optional<ApplyLog> apply_log;
  // Kept tables to rebuild at this transaction, and why (a statement
  // changed them, or their images could not be read).
  std::set<std::string> rebuild;
  std::string rebuild_reason;
};

class TransactionReader {
 public:
  // `tables`: the kept tables by keyspace ("db.t"), null for one the
  // server does not hold (a statement creating it asks for a rebuild);
  // each must outlive the reader. `node`: this node's name, whose apply log
  // record is read.
  TransactionReader(std::map<std::string, const MariaDbTable*> tables,
                    std::string node);

  // Takes the next event of the stream. Returns the transaction `event`
  // ends, or nullopt. Returns kDataLoss for an apply log record that does
  // not decode, and kInternal for events out of order (a row event
  // outside a transaction).
  absl::StatusOr<std::optional<CapturedTransaction>> Add(
      const binlog::BinlogEvent& event);

  // True between a transaction's GTID event and its end.
  bool in_transaction() const { return open_.has_value(); }

 private:
  // Decodes one rows event of a kept table into open_'s rows; a problem
  // with the images marks the table for a rebuild instead.
  void AddRows(const binlog::BinlogEvent& event, absl::string_view keyspace,
               const MariaDbTable& table);
  absl::Status AddApplyLog(const binlog::BinlogEvent& event);
  void NoteStatement(const binlog::BinlogEvent& event);
  void Rebuild(absl::string_view keyspace, absl::string_view why);
  // The converter for `map`'s column names, cached per TABLE_MAP.
  absl::StatusOr<RowConverter*> ConverterFor(
      const MariaDbTable& table,
      const std::shared_ptr<const binlog::TableMap>& map);

  const std::map<std::string, const MariaDbTable*> tables_;
  const std::string node_;
  std::optional<CapturedTransaction> open_;
  bool standalone_ = false;
  // The converters of the TABLE_MAPs seen in this transaction (the key
  // keeps its map alive, so that no other map takes its address).
  std::map<std::shared_ptr<const binlog::TableMap>,
           std::unique_ptr<RowConverter>>
      converters_;
};

}  // namespace mariadb
}  // namespace tally

#endif  // TALLY_MARIADB_SIDECAR_TRANSACTION_READER_H_
