#include "pg/sidecar/build_marker.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "tree/status_macros.h"

namespace tally {
namespace pg {
namespace {

constexpr absl::string_view kPrefix = "tally: index built on system ";
constexpr absl::string_view kFirstBuild = "; first build at unix us ";

}  // namespace

std::string BuildMarker::Text() const {
  std::string text = absl::StrCat(kPrefix, system_id);
  if (first_build_unix_us.has_value()) {
    absl::StrAppend(&text, kFirstBuild, *first_build_unix_us);
  }
  return text;
}

std::optional<BuildMarker> BuildMarker::Parse(absl::string_view text) {
  if (!absl::ConsumePrefix(&text, kPrefix)) return std::nullopt;
  BuildMarker m;
  absl::string_view system = text;
  absl::string_view time;
  if (const size_t at = text.find(kFirstBuild); at != absl::string_view::npos) {
    system = text.substr(0, at);
    time = text.substr(at + kFirstBuild.size());
    int64_t us = 0;
    if (!absl::SimpleAtoi(time, &us)) return std::nullopt;
    m.first_build_unix_us = us;
  }
  if (!absl::SimpleAtoi(system, &m.system_id)) return std::nullopt;
  return m;
}

absl::StatusOr<std::optional<BuildMarker>> ReadBuildMarker(
    Connection& conn, absl::string_view publication) {
  TALLY_ASSIGN_OR_RETURN(
      Result r,
      conn.ExecParams("SELECT pg_catalog.obj_description(oid, "
                      "'pg_publication') FROM pg_catalog.pg_publication "
                      "WHERE pubname = $1",
                      {Param::Text(std::string(publication))}));
  if (r.rows() != 1 || r.IsNull(0, 0)) return std::nullopt;
  return BuildMarker::Parse(r.Value(0, 0));
}

absl::Status WriteBuildMarker(Connection& conn, absl::string_view publication,
                              const BuildMarker& marker) {
  TALLY_ASSIGN_OR_RETURN(std::optional<BuildMarker> there,
                         ReadBuildMarker(conn, publication));
  if (there == marker) return absl::OkStatus();
  // COMMENT takes no parameters: the name and the text are quoted.
  TALLY_ASSIGN_OR_RETURN(
      Result r,
      conn.Exec(absl::StrCat("COMMENT ON PUBLICATION ",
                             conn.QuoteIdentifier(publication), " IS ",
                             conn.QuoteLiteral(marker.Text()))));
  (void)r;
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ServerUnixMicros(Connection& conn) {
  // extract() answers numeric (exact) since PostgreSQL 14.
  TALLY_ASSIGN_OR_RETURN(
      Result r, conn.Exec("SELECT (extract(epoch FROM clock_timestamp()) * "
                          "1000000)::bigint"));
  int64_t us = 0;
  if (r.rows() != 1 || !absl::SimpleAtoi(r.Value(0, 0), &us)) {
    return absl::DataLossError("the server's clock answered no number");
  }
  return us;
}

}  // namespace pg
}  // namespace tally
