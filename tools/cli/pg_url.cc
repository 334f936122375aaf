#include "tools/cli/pg_url.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace tally {
namespace cli {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = absl::ascii_tolower(c);
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// %XX decoding as libpq does it for URI parameters ('+' stays '+').
bool PercentDecode(absl::string_view in, std::string* out) {
  out->clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out->push_back(in[i]);
      continue;
    }
    if (i + 2 >= in.size()) return false;
    const int high = HexValue(in[i + 1]);
    const int low = HexValue(in[i + 2]);
    if (high < 0 || low < 0) return false;
    out->push_back(static_cast<char>(high * 16 + low));
    i += 2;
  }
  return true;
}

// The URL's scheme and authority with the password taken out of the
// user information ("user:pw@host" → "user@host").
std::string WithoutPassword(absl::string_view base) {
  const size_t scheme_end = base.find("://");
  const size_t start = scheme_end + 3;
  const size_t path = base.find('/', start);
  const absl::string_view authority = base.substr(
      start,
      path == absl::string_view::npos ? absl::string_view::npos : path - start);
  const size_t at = authority.rfind('@');
  if (at == absl::string_view::npos) return std::string(base);
  const absl::string_view user_info = authority.substr(0, at);
  const size_t colon = user_info.find(':');
  if (colon == absl::string_view::npos) return std::string(base);
  return absl::StrCat(base.substr(0, start), user_info.substr(0, colon),
                      base.substr(start + at));
}

}  // namespace

bool IsPostgresUrl(absl::string_view arg) {
  return absl::StartsWith(arg, "postgresql://") ||
         absl::StartsWith(arg, "postgres://");
}

absl::StatusOr<PostgresTarget> ParsePostgresUrl(absl::string_view url) {
  if (!IsPostgresUrl(url)) {
    return absl::InvalidArgumentError(
        "a PostgreSQL URL starts with postgresql:// or postgres://");
  }
  PostgresTarget target;
  const size_t question = url.find('?');
  const absl::string_view base = url.substr(0, question);
  std::vector<std::string> kept;
  std::vector<std::string> shown;
  if (question != absl::string_view::npos) {
    for (absl::string_view param :
         absl::StrSplit(url.substr(question + 1), '&', absl::SkipEmpty())) {
      const size_t eq = param.find('=');
      const absl::string_view name = param.substr(0, eq);
      if (name == "table") {
        std::string table;
        if (eq == absl::string_view::npos ||
            !PercentDecode(param.substr(eq + 1), &table)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "bad table= in PostgreSQL URL ", WithoutPassword(base),
              ": expected table=SCHEMA.TABLE, %-escaped"));
        }
        if (table.empty()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "empty table= in PostgreSQL URL ", WithoutPassword(base)));
        }
        target.tables.push_back(std::move(table));
        continue;
      }
      kept.emplace_back(param);
      if (name != "password") shown.emplace_back(param);
    }
  }
  target.conninfo = std::string(base);
  if (!kept.empty())
    absl::StrAppend(&target.conninfo, "?", absl::StrJoin(kept, "&"));
  target.display = WithoutPassword(base);
  if (!shown.empty())
    absl::StrAppend(&target.display, "?", absl::StrJoin(shown, "&"));
  return target;
}

}  // namespace cli
}  // namespace tally
