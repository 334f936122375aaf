// TableSchema: what tally knows of one PostgreSQL table — its columns in the
// canonical order, its primary key, the SELECT list that reads its rows as
// canonical fields, and the schema fingerprint peers compare.
//
// A keyspace is a table named by its qualified name ("public.users", the
// catalog's spelling: no case folding, no quotes). Read() takes the
// description from the catalog (pg_attribute, pg_index, pg_collation) and
// never from a `SELECT *`. Generated columns are left out: pgoutput does
// not send them and COPY FROM cannot write them, so they are not part of
// the row tally keeps (each database computes its own), nor in the
// fingerprint, and the apply never writes them.
//
// The fingerprint hashes, in canonical order, each
// column's name, `format_type(atttypid, atttypmod)`, collation and whether
// and where it is in the primary key; not the table's physical column
// order, not its OID, not the database. Two tables with the same
// fingerprint encode the same row to the same bytes; an `int4` column on
// one side and `int8` on the other give different fingerprints, so peers
// refuse to exchange that keyspace's rows instead of disagreeing on every
// digest. The fingerprint is "postgresql/1:" and 32 hex digits, the hash of
// description(), a canonical text with one line per column that
// DescribeSchemaDifference() (pg/schema/schema_difference.h) compares to name
// the mismatch ("column b: integer here, bigint there").
//
// Columns of user-defined types: their canonical bytes carry 0 where the
// send() form embeds a user type's OID (pg/schema/type_shape.h), so the bytes
// no longer say which type stood there, and format_type names a composite but
// not its fields. A column whose type embeds such OIDs or contains a
// composite at any depth therefore adds " as " and its binary shape to its
// line, composites spelled out with their fields and domains as their base
// ("public.pairs as public.pair(x integer, y public.mood[])[]"): two
// databases whose `pair` differ in a field refuse each other by name
// instead of differing on every row, and a node that still sent such
// columns with raw OIDs (before canonical OIDs) has another fingerprint
// and is refused rather than diffing forever. Every other column's line,
// and so the fingerprint of a table of builtin types, enums and domains
// over builtin types, is what it always was.
//
//   TALLY_ASSIGN_OR_RETURN(TableSchema t, TableSchema::Read(conn, "public.t"));
//   conn.CopyOut(absl::StrCat("COPY (SELECT ", t.select_list(), " FROM ",
//                             t.quoted_name(), ") TO STDOUT (FORMAT binary)"),
//                ...);  // rows of t.codec().columns() canonical fields
//
// Thread-safety: an immutable value once read.
#ifndef TALLY_PG_SCHEMA_TABLE_SCHEMA_H_
#define TALLY_PG_SCHEMA_TABLE_SCHEMA_H_

#include <libpq-fe.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "pg/schema/row_codec.h"
#include "pg/schema/schema_difference.h"
#include "pg/schema/type_shape.h"
#include "pg/wire/connection.h"

namespace tally {
namespace pg {

// kFingerprintPrefix (the format version of every PostgreSQL schema
// fingerprint) is in pg/schema/schema_difference.h, which the `tally` CLI
// links without libpq.
// The prefix of a partitioned table's partition layout.
inline constexpr absl::string_view kPartitionsPrefix = "partitions/1:";

struct TableColumn {
  std::string name;
  Oid type_oid = 0;
  // format_type(atttypid, atttypmod), with user types schema-qualified
  // ("bigint", "character varying(20)", "public.mood").
  std::string type;
  // The collation's name ("default", "C", ...); empty for a type without
  // one.
  std::string collation;
  // Position in the physical table (attnum), for messages only.
  int attnum = 0;
  // The type of an array of this type (pg_type.typarray), 0 if none: the
  // apply and reads by key send keys as arrays.
  Oid array_type_oid = 0;
  // An identity column GENERATED ALWAYS (pg_attribute.attidentity 'a'):
  // the apply inserts it with OVERRIDING SYSTEM VALUE and cannot update
  // it (PostgreSQL allows only DEFAULT there). Not in the fingerprint.
  bool identity_always = false;
  // Where the type's binary form embeds type OIDs (pg/schema/type_shape.h);
  // null for a builtin type.
  std::shared_ptr<const TypeShape> shape = nullptr;
};

class TableSchema {
 public:
  // Reads table `qualified_name` ("schema.table") from the catalog of the
  // database `conn` is connected to. Returns kInvalidArgument for a name
  // without a schema; kNotFound when there is no such table;
  // kFailedPrecondition when the relation is neither a plain nor a
  // partitioned table, or has no primary key (naming the table and the
  // fix); a connection's error otherwise. A leaf partition reads as a plain
  // table (pg/schema/preflight.h says when one may be kept).
  // REQUIRES: `conn` is an ordinary connection with no transaction open,
  // or in a transaction whose snapshot the caller means to describe.
  static absl::StatusOr<TableSchema> Read(Connection& conn,
                                          absl::string_view qualified_name);

  // Builds a schema from parts (tests, and a peer's description). Columns
  // may come in any order; `primary_key` names key columns in key order.
  // Returns kInvalidArgument when the key is empty or names no column.
  static absl::StatusOr<TableSchema> FromColumns(
      std::string qualified_name, std::vector<TableColumn> columns,
      const std::vector<std::string>& primary_key);

  // The schema of the same table seen through some of its columns: the key
  // columns always, and of the others those named in `only` (all when
  // empty) that `except` does not name. Its select list, row codec and
  // fingerprint cover those columns only, so two tables that differ only
  // in the columns left out have the same fingerprint. Returns
  // kInvalidArgument naming a column the table lacks (listing its
  // columns), or a key column in `except`.
  absl::StatusOr<TableSchema> WithColumns(
      absl::Span<const std::string> only,
      absl::Span<const std::string> except) const;

  // "public.t".
  const std::string& name() const { return name_; }
  // The table's name as SQL: "\"public\".\"t\"".
  const std::string& quoted_name() const { return quoted_name_; }
  // The table's OID, 0 for a schema built from parts.
  Oid relid() const { return relid_; }

  // The columns in canonical order (pg/schema/row_codec.h): key columns first,
  // in key order, then the others by name.
  absl::Span<const TableColumn> columns() const { return columns_; }
  size_t key_columns() const { return key_columns_; }
  // The codec of the table's rows: it writes the columns whose types
  // embed OIDs of user types in canonical form (pg/schema/row_codec.h).
  RowCodec codec() const {
    return RowCodec(key_columns_, columns_.size() - key_columns_,
                    column_shapes_);
  }

  // The quoted column names in canonical order, comma separated:
  // "\"id\", \"a\", \"b\"". A COPY of `SELECT <this> FROM <quoted_name()>`
  // yields rows of canonical fields.
  std::string select_list() const;
  // The key's column names alone, the same way ("\"id\"").
  std::string key_list() const;
  // Column `i`'s name, quoted the same way. REQUIRES: i < columns().size().
  std::string quoted_column(size_t i) const;

  // One line per column in canonical order:
  //   key 1 "id" bigint
  //   column "b" text collate "default"
  const std::string& description() const { return description_; }
  // kFingerprintPrefix + hex XXH3-128 of description().
  const std::string& fingerprint() const { return fingerprint_; }

  // A declaratively partitioned table (pg_class.relkind 'p'). Its rows are
  // those of its leaf partitions; the fingerprint is the parent's columns
  // and key alone, so two databases partitioned differently still exchange
  // rows.
  bool partitioned() const { return partitioned_; }
  // A partitioned table's leaf partitions as read, one line each: "OID
  // relfilenode schema.name" (empty for a plain table). ATTACH, DETACH,
  // CREATE ... PARTITION OF and DROP change the lines, and so do TRUNCATE
  // of a leaf and rewrites (a new relfilenode): the changes logical
  // decoding does not send as rows.
  const std::string& partitions() const { return partitions_; }
  // kPartitionsPrefix + hex XXH3-128 of partitions(); empty for a plain
  // table. Local to this database: never compared with peers.
  const std::string& partition_layout() const { return partition_layout_; }
  // What the index records it was built from (pg/sidecar/capture_position.h):
  // the fingerprint, for a partitioned table " " and its partition layout, and
  // " oid:" and the table's OID when known. The OID tells a table dropped
  // and created again under the same name (its rows are another table's)
  // from the table the index describes; the fingerprint deliberately does
  // not hold it (peers compare fingerprints).
  std::string stored_fingerprint() const;
  // The schema fingerprint part of a stored_fingerprint() (the whole of
  // it for a plain table recorded without its OID).
  static absl::string_view FingerprintOfStored(absl::string_view stored);
  // The OID part of a stored_fingerprint(); 0 when it has none (recorded
  // before OIDs were, or a schema built from parts).
  static Oid RelidOfStored(absl::string_view stored);
  // Whether `stored` describes this very table as it is: the same
  // fingerprint and partition layout, and the same OID when `stored` has
  // one.
  bool MatchesStored(absl::string_view stored) const;

  // The canonical index of the column named `name`, or columns().size()
  // when the table has none of that name.
  size_t ColumnIndex(absl::string_view name) const;

 private:
  TableSchema() = default;
  // Orders the columns, builds the quoted names, description, fingerprint.
  absl::Status Finish(const std::vector<std::string>& primary_key);

  std::string name_;
  std::string quoted_name_;
  Oid relid_ = 0;
  std::vector<TableColumn> columns_;
  size_t key_columns_ = 0;
  // Per canonical column, the shape to rewrite; null when none is.
  std::shared_ptr<const RowCodec::ColumnShapes> column_shapes_;
  std::string description_;
  std::string fingerprint_;
  bool partitioned_ = false;
  std::string partitions_;
  std::string partition_layout_;
};

// Splits "schema.table" at its first dot. kInvalidArgument without one, or
// with an empty part.
absl::Status SplitQualifiedName(absl::string_view qualified_name,
                                std::string* schema, std::string* table);

}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_SCHEMA_TABLE_SCHEMA_H_
