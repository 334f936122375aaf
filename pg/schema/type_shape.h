// TypeShape: where a column type's binary send() form embeds type OIDs,
// and the one function that rewrites them.
//
// array_send writes its element type's OID, and record_send each field's
// type OID, into the value's bytes. The OID of a type created by CREATE
// TYPE (or CREATE DOMAIN, CREATE TABLE's row type) is assigned per
// database, so the same `mood[]` or `pair` value sends different bytes in
// two databases. A shape is the structure of such a type read from the
// catalog: an array (element OID and shape), a composite (each field's OID
// and shape), a range or multirange (its subtype's or range's shape), or an
// opaque scalar; a domain has its base type's shape (domain_send is the
// base type's send). Nesting goes to any depth (an array of composites
// whose field is a domain over an array of an enum).
//
// Canonical bytes write 0 for every embedded OID of a non-builtin type
// (OID >= kFirstNormalObjectId) and keep builtin OIDs, which are the same in
// every database: two databases whose user types got different OIDs encode
// a row alike, and the bytes of `int[]`, `text[]` or of a composite of
// builtin fields do not change. Before canonical bytes reach a database,
// OidMode::kLocal writes that database's OIDs back in the same places:
// PostgreSQL 15.18's array_recv and record_recv compare builtin OIDs only
// and take any other (pg/table_diff/table_diff_test.cc), but tally
// sends what the database itself would send rather than rely on that.
//
// The rewrite is in place: an OID is 4 bytes either way, so a value keeps
// its length and the framing around it (pg/schema/row_codec.h) does not move. A
// value the shape does not describe (truncated, a length past its end, an
// array of more than 6 dimensions, a composite of another field count,
// bytes after its end) is an error naming the byte, never a read out of
// bounds.
//
//   // From the catalog, once per table (pg/schema/table_schema.h does it):
//   TALLY_ASSIGN_OR_RETURN(TypeShapes shapes, ReadTypeShapes(conn, {oid}));
//   const TypeShape* shape = shapes.at(oid).get();  // null: nothing to do
//   std::string bytes = ...;                       // a send() value
//   TALLY_RETURN_IF_ERROR(RewriteOids(*shape, OidMode::kCanonical, &bytes[0],
//                                     bytes.size()));
//
// Thread-safety: shapes are immutable once read; the functions are pure.
#ifndef TALLY_PG_SCHEMA_TYPE_SHAPE_H_
#define TALLY_PG_SCHEMA_TYPE_SHAPE_H_

#include <libpq-fe.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "pg/wire/connection.h"

namespace tally {
namespace pg {

// PostgreSQL's FirstNormalObjectId: OIDs below it are assigned by initdb
// and equal in every database of every cluster of one major version.
inline constexpr Oid kFirstNormalObjectId = 16384;

struct TypeShape {
  enum class Kind {
    kOpaque,      // no OID inside: a scalar, an enum, or not worth walking
    kArray,       // array_send: ndim, hasnull, element OID, dims, elements
    kComposite,   // record_send: count, then per field OID, length, bytes
    kRange,       // range_send: flags, then the bounds' lengths and bytes
    kMultirange,  // multirange_send: count, then per range length, bytes
  };
  // What a value of this type embeds or contains: one per array element
  // type, composite field, range subtype, multirange range type.
  struct Child {
    // The OID the bytes carry for it (array_send's element type, a
    // field's atttypid; a domain's own OID when it is one).
    Oid oid = 0;
    // The field's name, for a composite (descriptions only).
    std::string name;
    // format_type of the child, with its typmod where the catalog has
    // one ("character varying(20)", "public.mood").
    std::string type;
    // The child's shape; null for a builtin type (whose bytes never need
    // walking: no builtin type contains a non-builtin one).
    std::shared_ptr<const TypeShape> shape;
  };

  Kind kind = Kind::kOpaque;
  // format_type of the type itself (of the domain's base for a domain).
  std::string type;
  std::vector<Child> children;
  // Some OID of a non-builtin type is embedded at some depth: values of
  // this type must be rewritten. False for int[] or for a composite of
  // builtin fields, whose bytes are already the same everywhere.
  bool rewrites = false;
  // A composite occurs at some depth (its fields' types are not named by
  // the column's format_type, so descriptions spell them out).
  bool has_composite = false;
};

// Type OID -> shape, for the OIDs asked and every type below them.
using TypeShapes = absl::flat_hash_map<Oid, std::shared_ptr<const TypeShape>>;

// Reads the shapes of `oids` and of every type they contain from the
// catalog of `conn`'s database. A builtin OID (< kFirstNormalObjectId) maps
// to null: no builtin type embeds the OID of a non-builtin one. Returns a
// connection's error, or kFailedPrecondition for an OID the catalog does
// not know (a type dropped meanwhile).
// REQUIRES: search_path is pg_catalog (types print schema-qualified), as
// in TableSchema::Read.
absl::StatusOr<TypeShapes> ReadTypeShapes(Connection& conn,
                                          absl::Span<const Oid> oids);

// Which OIDs RewriteOids writes.
enum class OidMode {
  // 0 for an OID >= kFirstNormalObjectId, any other kept: the bytes
  // tally keeps, digests and sends to peers. Bad bytes are kDataLoss
  // (they came from the database).
  kCanonical,
  // The shape's (this database's) OID where the bytes carry 0, any other
  // kept (PostgreSQL checks it): the bytes to send to this database. Bad
  // bytes are kInvalidArgument (they came from a peer or a user).
  kLocal,
};

// Rewrites in place the OIDs embedded in the send() bytes `data[0, size)`
// of a value of `shape`'s type. Returns OK, or the error `mode` names
// ("... at byte 12 of 40: ..."), with `data` then partly rewritten.
absl::Status RewriteOids(const TypeShape& shape, OidMode mode, char* data,
                         size_t size);

// A one-line description of what the binary form of a type of `shape`
// depends on beyond its name: composites spelled out with their fields,
// domains as their base type. "public.pair(x integer, y public.mood[])[]".
std::string DescribeShape(const TypeShape& shape);

}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_SCHEMA_TYPE_SHAPE_H_
