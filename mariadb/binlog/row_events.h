// Row events: tally's decoder of the MariaDB binary log's TABLE_MAP and
// WRITE/UPDATE/DELETE_ROWS events into typed values, the same values a
// scan of the table reads (mariadb/connection.h, Connection::Stream), so
// that a changed row's canonical bytes (mariadb/column_mapping.h) are the
// bytes a scan of the row would give.
//
//   TALLY_ASSIGN_OR_RETURN(TableMap map, DecodeTableMap(table_map_body));
//   TALLY_ASSIGN_OR_RETURN(RowsEvent rows,
//                          DecodeRowsEvent(type, rows_body, map));
//   for (const RowChange& change : rows.changes) {
//     ...;  // change.before / change.after: one Value per column
//   }
//
// An event body is the event's bytes after the 19-byte common header and
// without the trailing checksum. Connector/C's own row decoder is not used:
// it garbles TIMESTAMP, TIME and DECIMAL values, fails on CHAR, ENUM and
// SET columns and on tables without type metadata, and ignores the
// columns-present bitmap.
//
// The server must log full row images (binlog_row_image=FULL): an image
// without every column cannot be turned into a row, and is refused. The
// signedness of integers, the column names and the primary key come from
// the optional metadata binlog_row_metadata=FULL adds; without it integers
// decode as signed.
//
// Every length read from the bytes is checked against the bytes: truncated
// or malformed input returns kDataLoss naming the byte offset; nothing is
// read outside the body.
//
// Thread-safe: pure functions.
#ifndef TALLY_MARIADB_BINLOG_ROW_EVENTS_H_
#define TALLY_MARIADB_BINLOG_ROW_EVENTS_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "mariadb/connection.h"

namespace tally {
namespace mariadb {
namespace binlog {

// Binary log event type codes (the server's numbering).
enum EventType : int {
  kQueryEvent = 2,
  kRotateEvent = 4,
  kFormatDescriptionEvent = 15,
  kXidEvent = 16,
  kTableMapEvent = 19,
  kWriteRowsV1 = 23,
  kUpdateRowsV1 = 24,
  kDeleteRowsV1 = 25,
  kHeartbeatEvent = 27,
  kWriteRowsV2 = 30,
  kUpdateRowsV2 = 31,
  kDeleteRowsV2 = 32,
  kAnnotateRowsEvent = 160,
  kBinlogCheckpointEvent = 161,
  kGtidEvent = 162,
  kGtidListEvent = 163,
};

// True for the row event types DecodeRowsEvent takes.
bool IsRowsEvent(int event_type);

// Column type codes as a TABLE_MAP names them (the server's storage types,
// not always the SQL type: a DATETIME(p) column is kDatetime2, a CHAR, ENUM
// or SET column is kString with its real type in the metadata).
enum ColumnType : uint8_t {
  kDecimal = 0,
  kTiny = 1,
  kShort = 2,
  kLong = 3,
  kFloat = 4,
  kDouble = 5,
  kNullType = 6,
  kTimestamp = 7,
  kLongLong = 8,
  kInt24 = 9,
  kDate = 10,
  kTime = 11,
  kDatetime = 12,
  kYear = 13,
  kNewDate = 14,
  kVarchar = 15,
  kBit = 16,
  kTimestamp2 = 17,
  kDatetime2 = 18,
  kTime2 = 19,
  kNewDecimal = 246,
  kEnum = 247,
  kSet = 248,
  kTinyBlob = 249,
  kMediumBlob = 250,
  kLongBlob = 251,
  kBlob = 252,
  kVarString = 253,
  kString = 254,
  kGeometry = 255,
};

// One column of a TABLE_MAP, with its type's metadata unpacked.
struct TableMapColumn {
  // The type the row bytes are stored in: for kString, the real type
  // (kString, kEnum or kSet) taken from the metadata.
  uint8_t type = 0;
  // The type code as the TABLE_MAP lists it.
  uint8_t logged_type = 0;
  bool nullable = false;
  bool is_unsigned = false;  // known only with the FULL metadata
  // Per type: the maximum byte length (varchar, char), the length prefix
  // size (blob, geometry), the stored byte size (float, double, enum,
  // set), the fractional digits (temporal types), the bytes (bit).
  uint32_t length = 0;
  int precision = 0;  // decimal
  int scale = 0;      // decimal
  int bits = 0;       // bit: the bit count
  // The column's collation id (63 = binary), 0 when not logged.
  uint32_t charset = 0;
  std::string name;  // empty when not logged
  // The labels of an ENUM or SET column, when logged.
  std::vector<std::string> labels;
};

struct TableMap {
  uint64_t table_id = 0;
  std::string database;
  std::string table;
  std::vector<TableMapColumn> columns;
  // Indexes of the primary key columns, in key order (FULL metadata only).
  std::vector<int> primary_key;
  // True when the TABLE_MAP carried column names (FULL metadata).
  bool has_names = false;
};

// Decodes a TABLE_MAP event body. Returns kDataLoss for truncated or
// malformed bytes, kUnimplemented for a column type it does not know (the
// row bytes of such a column could not be skipped).
absl::StatusOr<TableMap> DecodeTableMap(absl::string_view event_body);

// One row image changed: `before` for UPDATE and DELETE, `after` for
// WRITE and UPDATE, one Value per column in the table map's order.
struct RowChange {
  std::optional<std::vector<Value>> before;
  std::optional<std::vector<Value>> after;
};

struct RowsEvent {
  int event_type = 0;
  uint64_t table_id = 0;
  uint16_t flags = 0;  // bit 0: the statement's last row event
  std::vector<RowChange> changes;
  // The text made while decoding (DECIMAL digits, padded BINARY values,
  // ENUM and SET labels) that Values of kind kBytes point into. Other
  // kBytes Values point into the event body given to DecodeRowsEvent:
  // both must outlive the Values. Element addresses stay put when the
  // RowsEvent is moved.
  std::deque<std::string> text;
};

// Decodes the rows of a rows event of `event_type` (WRITE/UPDATE/
// DELETE_ROWS, V1 or V2) whose table is `map`. Values are what
// Connection::Stream hands out for the same column: integers kInt (kUint
// when unsigned), FLOAT kFloat, DOUBLE kDouble, DECIMAL the text with the
// column's scale ("-12.500000"), DATE/DATETIME/TIMESTAMP (in UTC)/TIME
// kTime, strings and blobs their bytes (CHAR without its trailing
// spaces, BINARY padded with zero bytes to its length), JSON its text;
// BIT its big-endian bytes, YEAR kUint, ENUM and SET their labels when
// logged (else kUint: the index or the bit set). NULL is kNull. Text is
// in the column's character set (TableMapColumn::charset), where a scan
// converts it to UTF-8: the same bytes for utf8mb4 columns and ASCII
// text only.
//
// Returns kFailedPrecondition for an image that lacks columns (the server
// logs with binlog_row_image MINIMAL or NOBLOB), kInvalidArgument when the
// event's table id or column count is not the map's or `event_type` is not
// a rows event, kDataLoss for truncated or malformed bytes (naming the
// offset).
absl::StatusOr<RowsEvent> DecodeRowsEvent(int event_type,
                                          absl::string_view event_body,
                                          const TableMap& map);

}  // namespace binlog
}  // namespace mariadb
}  // namespace tally

#endif  // TALLY_MARIADB_BINLOG_ROW_EVENTS_H_
