// ColumnMapping: how a MariaDB column's values become the canonical bytes
// tally keeps, digests and compares — PostgreSQL's binary send() form of
// the matching PostgreSQL type — and back.
//
// tally's canonical row encoding is PostgreSQL's (pg/schema/row_codec.h),
// so a MariaDB table and a PostgreSQL table holding the same rows digest
// alike, diff as equal and repair each other. Each MariaDB type maps to
// one PostgreSQL type, named as PostgreSQL's format_type() names it, so
// the schema fingerprint of a MariaDB table equals that of the PostgreSQL
// table declared with the mapped types:
//
//   tinyint, smallint, tinyint unsigned        smallint       (int2)
//   mediumint, int, smallint/mediumint unsigned integer       (int4)
//   bigint, int unsigned                       bigint         (int8)
//   float / double                             real / double precision
//   decimal(p,s)                               numeric(p,s)
//   char(n)                                    character(n)   (padded)
//   varchar(n)                                 character varying(n)
//   tinytext .. longtext                       text
//   json (longtext CHECK json_valid)           json
//   binary, varbinary, tinyblob .. longblob    bytea
//   date                                       date
//   datetime(p)                                timestamp(p) without time zone
//   timestamp(p)                               timestamp(p) with time zone
//   time(p)                                    time(p) without time zone
//
// (p = 6 is written without "(6)", PostgreSQL's default precision.) Text
// columns describe with collation "default". Refused, naming the column
// and the fix: bigint unsigned (no PostgreSQL type holds its range), enum,
// set, bit, year, the spatial types, inet/uuid; and a key column of text
// whose collation is not a binary NO PAD one (*_nopad_bin or binary):
// under utf8mb4_general_ci 'a' and 'A' are one key, under utf8mb4_bin (PAD
// SPACE) 'a' and 'a ' are, where PostgreSQL holds two.
//
// Values a mapped column may still hold that PostgreSQL cannot are refused
// when read, naming the column: a zero date (0000-00-00), a TIME outside
// 00:00:00..23:59:59.999999, a float NaN cannot occur (MariaDB refuses it).
//
// Thread-safe: pure functions.
#ifndef TALLY_MARIADB_COLUMN_MAPPING_H_
#define TALLY_MARIADB_COLUMN_MAPPING_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "mariadb/connection.h"

namespace tally {
namespace mariadb {

// A column as information_schema.COLUMNS describes it.
struct MariaDbColumn {
  std::string name;
  std::string data_type;    // DATA_TYPE: "int", "varchar", "datetime"
  std::string column_type;  // COLUMN_TYPE: "int(10) unsigned", "char(8)"
  int64_t character_maximum_length = 0;  // characters (strings)
  int numeric_precision = 0;
  int numeric_scale = 0;
  int datetime_precision = 0;
  std::string collation;  // COLLATION_NAME, empty for non-text
  bool json = false;      // longtext with CHECK (json_valid(column))
  bool key = false;       // part of the primary key
};

// The PostgreSQL type a MariaDB column's values are canonical in.
enum class CanonicalType {
  kInt2,
  kInt4,
  kInt8,
  kFloat4,
  kFloat8,
  kNumeric,
  kBpchar,
  kText,  // text and character varying(n)
  kJson,
  kBytea,
  kDate,
  kTimestamp,
  kTimestampTz,
  kTime,
};

struct ColumnMapping {
  CanonicalType type = CanonicalType::kText;
  // format_type() of the PostgreSQL type: "numeric(20,6)".
  std::string pg_type;
  // "default" for text types, empty otherwise.
  std::string pg_collation;
  uint32_t pg_oid = 0;        // the type's OID (builtin: same everywhere)
  uint32_t pg_array_oid = 0;  // its array type's OID
  int length = 0;             // character(n): n
  int scale = 0;              // numeric: the column's scale
  int precision = 6;          // timestamp/time: fractional digits
};

// Maps `column`. Returns kFailedPrecondition for a column that has no
// mapping or whose collation cannot hold PostgreSQL's keys:
// "column `k` (enum('a','b')): <why>; <fix>".
absl::StatusOr<ColumnMapping> MapColumn(const MariaDbColumn& column);

// Appends the canonical bytes (PostgreSQL send() form) of `value`, a
// non-NULL value of a column mapped as `m`, to `out`. Returns
// kOutOfRange for a value PostgreSQL cannot hold (a zero date, a TIME
// outside one day, an integer outside the mapped type), kInvalidArgument
// for a value of an unexpected kind or a malformed DECIMAL.
absl::Status AppendCanonical(const ColumnMapping& m, const Value& value,
                             std::string* out);

// The text of canonical bytes `bytes` of a column mapped as `m`, as
// MariaDB takes it in a statement (and prints it): "42", "-12.500000",
// "2024-01-01 12:00:00.000001", the string itself for text types, the raw
// bytes for bytea. Returns kDataLoss for bytes that are not a value of
// the type.
absl::StatusOr<std::string> CanonicalText(const ColumnMapping& m,
                                          absl::string_view bytes);

}  // namespace mariadb
}  // namespace tally

#endif  // TALLY_MARIADB_COLUMN_MAPPING_H_
