// The PostgreSQL settings of a node (`postgres`, `table`): checking a
// connection string and a table name before anything connects, and the
// connection string as it may be shown (logs, status, errors) — with the
// password masked, because a log line or a `tally status` output is read by
// people who must not learn it.
//
//   TALLY_RETURN_IF_ERROR(ValidateConninfo(config.postgres));
//   LogInfo("PostgreSQL at " + MaskConninfo(config.postgres));
//   TALLY_ASSIGN_OR_RETURN(QualifiedTable t,
//   ParseQualifiedTable("public.users"));
//
// Thread-safe: pure functions.
#ifndef TALLY_NODE_CONFIG_POSTGRES_SETTINGS_H_
#define TALLY_NODE_CONFIG_POSTGRES_SETTINGS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tally {
namespace node {

// What a password is replaced with wherever a connection string is shown.
inline constexpr absl::string_view kMaskedPassword = "********";

// Checks that `conninfo` is a libpq connection string
// ("host=... dbname=...") or URL ("postgresql://user@host:5432/db") that
// libpq can parse. Returns kInvalidArgument with libpq's reason otherwise
// (the reason never repeats the password). Connects to nothing.
absl::Status ValidateConninfo(absl::string_view conninfo);

// `conninfo` with its password masked: the password of a URL's user info
// ("user:secret@") and every `password` parameter (URL query or keyword)
// read kMaskedPassword; everything else is kept as written. A string libpq
// cannot parse is not shown at all ("<unparsable connection string>"), since
// where a password would be in it cannot be known.
std::string MaskConninfo(absl::string_view conninfo);

// True for a libpq URL ("postgresql://..." or "postgres://..."), false
// for a keyword string ("host=... dbname=...").
bool IsPostgresUrl(absl::string_view conninfo);

// True for a database URL a peer may be: PostgreSQL's, or MariaDB's
// ("mariadb://...", "mysql://...": mariadb/url.h). MaskConninfo,
// ConninfoOrigin and ValidateDatabaseUrl take both.
bool IsDatabaseUrl(absl::string_view url);

// Checks a database peer's URL: libpq's check for a PostgreSQL one
// (ValidateConninfo), mariadb/url.h's for a MariaDB one, which must also
// name its database (its tables are read as DATABASE.TABLE). Never repeats
// the password.
absl::Status ValidateDatabaseUrl(absl::string_view url);

// The database `conninfo` names, as libpq parses it, without user,
// password or any other parameter: "postgresql://HOST[:PORT]/DBNAME" (the
// origin name of the rows a sidecar copies from that database; no secret
// reaches a version). "postgresql://unparsable" when libpq cannot parse it.
// A MariaDB URL gives "mariadb://HOST:PORT/DB".
std::string ConninfoOrigin(absl::string_view conninfo);

// A table named "SCHEMA.TABLE".
struct QualifiedTable {
  std::string schema;
  std::string table;
};

// Parses "SCHEMA.TABLE": exactly one dot, each part a PostgreSQL identifier
// as written unquoted (a letter or `_`, then letters, digits, `_`; at most 63
// bytes, PostgreSQL's NAMEDATALEN - 1). Letters are kept as given: the name
// is matched exactly against the catalog, so a table created unquoted is
// named in lower case. The qualified name is also the table's keyspace, so
// it satisfies storage's keyspace name rule. Returns kInvalidArgument naming
// the rule broken.
absl::StatusOr<QualifiedTable> ParseQualifiedTable(absl::string_view name);

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_CONFIG_POSTGRES_SETTINGS_H_
