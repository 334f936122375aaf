// Preflight: the checks tallyd makes of a database before it keeps its
// tables, each refusal naming the fix.
//
// The first start needs: wal_level = logical (logical decoding) and
// track_commit_timestamp = on (the apply's compare-and-swap token, and the
// version of captured changes); a role with REPLICATION (or a superuser)
// that may call the replication-origin functions (PostgreSQL grants them to
// superusers only), may set session_replication_role (the apply runs as
// replica: GRANT SET ON PARAMETER session_replication_role, PostgreSQL 15)
// and read and write every kept table; every table present
// with a primary key (plain or declaratively partitioned: see below); a
// free replication slot unless the node's slot
// exists already; a free replication-origin state unless the node's origin
// exists already; a free WAL sender for the capture connection.
//
//   PreflightOptions o;
//   o.tables = {"public.users", "public.orders"};
//   o.slot_name = "tally_db_3";
//   o.origin_name = "tally_db_3";
//   absl::StatusOr<std::vector<TableSchema>> tables = Preflight(conn, o);
//
// Partitioned tables. A partitioned table (relkind 'p') is kept as one
// keyspace holding the rows of all its partitions; its primary key is the
// parent's (PostgreSQL puts the partition key's columns in it). A leaf
// partition named alone is kept as a plain table of its own: its keyspace
// is its name, its rows those inside its bounds (a row moved out of it by
// an UPDATE of the partition key is a delete there), and a peer's row
// outside them cannot be applied to it. A partition whose ancestor is kept
// too is refused: its changes come under the ancestor (the publication
// publishes via the partition root), so the rows would be in two
// keyspaces and one of them would never change.
//
// All problems are reported at once, one per "; "-separated clause, so an
// operator fixes them in one round. The code is the first problem's:
// kFailedPrecondition for settings and tables (a restart or a DDL change is
// needed), kPermissionDenied for the role, kNotFound for a missing table,
// kResourceExhausted for slots, origins and WAL senders.
//
// Thread-compatible: uses the caller's connection.
#ifndef TALLY_PG_SCHEMA_PREFLIGHT_H_
#define TALLY_PG_SCHEMA_PREFLIGHT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pg/schema/table_schema.h"
#include "pg/wire/connection.h"

namespace tally {
namespace pg {

struct PreflightOptions {
  // Qualified table names ("public.users").
  std::vector<std::string> tables;
  // The node's replication slot and apply origin. When one exists already
  // (a later start) it needs no free slot (origin state); empty: a free
  // one is required.
  std::string slot_name;
  std::string origin_name;
};

// Runs every check on the database `conn` is connected to (an ordinary
// connection). Returns the tables' schemas, in the order of
// `options.tables`, when all pass; otherwise an error naming every problem
// and its fix.
//
// With `missing` given, a kept table that does not exist is no problem on
// a later start (the node's replication slot exists): it was kept before
// and has been dropped since, so its name is appended to `missing` (and
// its schema left out) and the node starts with the other tables. On the
// first start a missing table is refused (a misspelt --table, most likely).
absl::StatusOr<std::vector<TableSchema>> Preflight(
    Connection& conn, const PreflightOptions& options,
    std::vector<std::string>* missing = nullptr);

}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_SCHEMA_PREFLIGHT_H_
