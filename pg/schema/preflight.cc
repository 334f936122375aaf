#include "pg/schema/preflight.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tally {
namespace pg {
namespace {

// The replication-origin functions the apply calls; PostgreSQL revokes
// them from PUBLIC.
constexpr const char* kOriginFunctions[] = {
    "pg_replication_origin_create(text)",
    "pg_replication_origin_session_setup(text)",
    "pg_replication_origin_xact_setup(pg_lsn, timestamp with time zone)",
    "pg_replication_origin_progress(text, boolean)",
};

constexpr absl::string_view kSettingsQuery = R"sql(
SELECT pg_catalog.current_setting('wal_level'),
       pg_catalog.current_setting('track_commit_timestamp'),
       pg_catalog.current_setting('max_replication_slots')::int,
       pg_catalog.current_setting('max_wal_senders')::int,
       r.rolreplication OR r.rolsuper, r.rolsuper, current_user,
       (SELECT count(*) FROM pg_catalog.pg_replication_slots),
       (SELECT count(*) FROM pg_catalog.pg_stat_replication),
       EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots
               WHERE slot_name = $1),
       (SELECT count(*) FROM pg_catalog.pg_replication_origin),
       EXISTS (SELECT 1 FROM pg_catalog.pg_replication_origin
               WHERE roname = $2)
FROM pg_catalog.pg_roles r WHERE r.rolname = current_user
)sql";

class Problems {
 public:
  void Add(absl::StatusCode code, std::string message) {
    if (messages_.empty()) code_ = code;
    messages_.push_back(std::move(message));
  }
  void Add(const absl::Status& s) { Add(s.code(), std::string(s.message())); }
  bool empty() const { return messages_.empty(); }
  absl::Status ToStatus() const {
    return absl::Status(code_,
                        absl::StrCat("the database is not ready for tally: ",
                                     absl::StrJoin(messages_, "; ")));
  }

 private:
  absl::StatusCode code_ = absl::StatusCode::kOk;
  std::vector<std::string> messages_;
};

}  // namespace

absl::StatusOr<std::vector<TableSchema>> Preflight(
    Connection& conn, const PreflightOptions& options,
    std::vector<std::string>* missing) {
  absl::StatusOr<Result> r = conn.ExecParams(
      kSettingsQuery,
      {Param::Text(options.slot_name), Param::Text(options.origin_name)});
  if (!r.ok()) return r.status();
  if (r->rows() != 1) {
    return absl::InternalError("the current role is not in pg_roles");
  }
  const absl::string_view wal_level = r->Value(0, 0);
  const absl::string_view commit_ts = r->Value(0, 1);
  int max_slots = 0, max_senders = 0;
  int64_t slots = 0, senders = 0, origins = 0;
  if (!absl::SimpleAtoi(r->Value(0, 2), &max_slots) ||
      !absl::SimpleAtoi(r->Value(0, 3), &max_senders) ||
      !absl::SimpleAtoi(r->Value(0, 7), &slots) ||
      !absl::SimpleAtoi(r->Value(0, 8), &senders) ||
      !absl::SimpleAtoi(r->Value(0, 10), &origins)) {
    return absl::InternalError("server settings are not numbers");
  }
  const bool can_replicate = r->Value(0, 4) == "t";
  const bool superuser = r->Value(0, 5) == "t";
  const std::string role(r->Value(0, 6));
  const bool slot_exists = r->Value(0, 9) == "t";
  const bool origin_exists = r->Value(0, 11) == "t";

  Problems problems;
  const absl::StatusCode kSetting = absl::StatusCode::kFailedPrecondition;
  if (wal_level != "logical") {
    problems.Add(kSetting,
                 absl::StrCat("wal_level is '", wal_level,
                              "'; logical decoding needs 'logical': ALTER "
                              "SYSTEM SET wal_level = logical, then restart "
                              "PostgreSQL"));
  }
  if (commit_ts != "on") {
    problems.Add(kSetting,
                 "track_commit_timestamp is off; tally's versions and its "
                 "compare-and-swap on applied rows need it: ALTER SYSTEM SET "
                 "track_commit_timestamp = on, then restart PostgreSQL (rows "
                 "written before have no commit timestamp)");
  }
  const std::string quoted_role = conn.QuoteIdentifier(role);
  if (!can_replicate) {
    problems.Add(absl::StatusCode::kPermissionDenied,
                 absl::StrCat("role ", role,
                              " has neither REPLICATION nor SUPERUSER; "
                              "logical replication needs one: ALTER ROLE ",
                              quoted_role, " REPLICATION"));
  }
  if (!superuser) {
    std::vector<std::string> missing;
    for (const char* f : kOriginFunctions) {
      absl::StatusOr<Result> p = conn.ExecParams(
          "SELECT pg_catalog.has_function_privilege($1, 'EXECUTE')",
          {Param::Text(f)});
      if (!p.ok()) return p.status();
      if (p->Value(0, 0) != "t") missing.push_back(f);
    }
    if (!missing.empty()) {
      problems.Add(
          absl::StatusCode::kPermissionDenied,
          absl::StrCat("role ", role,
                       " may not call the replication-origin functions the "
                       "apply uses: GRANT EXECUTE ON FUNCTION ",
                       absl::StrJoin(missing, ", "), " TO ", quoted_role));
    }
  }
  if (!superuser) {
    // The apply runs with session_replication_role = replica (see
    // pg/sidecar/apply/pg_backend.h); PostgreSQL 15 lets a superuser grant SET
    // on it.
    bool may_set = false;
    if (conn.server_version() >= 150000) {
      absl::StatusOr<Result> p = conn.ExecParams(
          "SELECT pg_catalog.has_parameter_privilege($1, "
          "'session_replication_role', 'SET')",
          {Param::Text(role)});
      if (!p.ok()) return p.status();
      may_set = p->Value(0, 0) == "t";
    }
    if (!may_set) {
      problems.Add(
          absl::StatusCode::kPermissionDenied,
          absl::StrCat(
              "role ", role,
              " may not set session_replication_role, which the apply sets "
              "to replica so that triggers and foreign keys do not fire on "
              "the rows it applies (as under PostgreSQL's logical "
              "replication): GRANT SET ON PARAMETER session_replication_role "
              "TO ",
              quoted_role,
              conn.server_version() >= 150000
                  ? ""
                  : " (PostgreSQL 15 and later; before 15, a superuser role)"));
    }
  }
  if (!slot_exists && slots >= max_slots) {
    problems.Add(
        absl::StatusCode::kResourceExhausted,
        absl::StrCat("all ", max_slots,
                     " replication slots are in use (max_replication_slots); "
                     "drop an unused one (see pg_replication_slots; SELECT "
                     "pg_drop_replication_slot('<name>')) or raise "
                     "max_replication_slots and restart PostgreSQL"));
  }
  if (!origin_exists && origins >= max_slots) {
    problems.Add(
        absl::StatusCode::kResourceExhausted,
        absl::StrCat("all ", max_slots,
                     " replication origin states are in use "
                     "(max_replication_slots bounds them too); drop an unused "
                     "origin (pg_replication_origin_drop) or raise "
                     "max_replication_slots and restart PostgreSQL"));
  }
  if (senders >= max_senders) {
    problems.Add(absl::StatusCode::kResourceExhausted,
                 absl::StrCat("all ", max_senders,
                              " WAL senders are in use (max_wal_senders; see "
                              "pg_stat_replication); stop an unused "
                              "replication client or raise max_wal_senders "
                              "and restart PostgreSQL"));
  }

  std::vector<TableSchema> tables;
  for (const std::string& name : options.tables) {
    absl::StatusOr<TableSchema> t = TableSchema::Read(conn, name);
    if (absl::IsNotFound(t.status()) && missing != nullptr && slot_exists) {
      missing->push_back(name);
      continue;
    }
    if (!t.ok()) {
      problems.Add(t.status());
      continue;
    }
    absl::StatusOr<Result> p = conn.ExecParams(
        "SELECT pg_catalog.has_table_privilege($1::regclass, "
        "'SELECT, INSERT, UPDATE, DELETE')",
        {Param::Text(t->quoted_name())});
    if (!p.ok()) return p.status();
    if (p->Value(0, 0) != "t") {
      problems.Add(
          absl::StatusCode::kPermissionDenied,
          absl::StrCat("role ", role, " may not read and write table ", name,
                       ": GRANT SELECT, INSERT, UPDATE, DELETE ON ",
                       t->quoted_name(), " TO ", quoted_role));
    }
    // With the publication's publish_via_partition_root, a partition's
    // changes come under its topmost ancestor in the publication: a kept
    // partition of a kept table would see none, and its rows would be in
    // two keyspaces.
    absl::StatusOr<Result> ancestors = conn.ExecParams(
        "SELECT n.nspname || '.' || c.relname FROM "
        "pg_catalog.pg_partition_ancestors($1::regclass) a JOIN "
        "pg_catalog.pg_class c ON c.oid = a.relid JOIN pg_catalog.pg_namespace "
        "n ON n.oid = c.relnamespace WHERE a.relid <> $1::regclass",
        {Param::Text(t->quoted_name())});
    if (!ancestors.ok()) return ancestors.status();
    for (int i = 0; i < ancestors->rows(); ++i) {
      const absl::string_view ancestor = ancestors->Value(i, 0);
      if (std::find(options.tables.begin(), options.tables.end(), ancestor) ==
          options.tables.end()) {
        continue;
      }
      problems.Add(
          absl::StatusCode::kFailedPrecondition,
          absl::StrCat(name, " is a partition of ", ancestor,
                       ", which is kept too: its rows are kept as rows of ",
                       ancestor,
                       " (their changes come under it); remove "
                       "--table ",
                       name));
      break;
    }
    tables.push_back(*std::move(t));
  }
  if (!problems.empty()) return problems.ToStatus();
  return tables;
}

}  // namespace pg
}  // namespace tally
