#include "node/config/postgres_settings.h"

#include <libpq-fe.h>

#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "mariadb/url.h"

namespace tally {
namespace node {
namespace {

constexpr size_t kMaxIdentifierBytes = 63;

struct ConninfoFree {
  void operator()(PQconninfoOption* options) const { PQconninfoFree(options); }
};
using ParsedConninfo = std::unique_ptr<PQconninfoOption, ConninfoFree>;

// Parses with libpq, the one authority on the syntax; `error` gets libpq's
// message (which quotes the syntax problem, not parameter values).
ParsedConninfo Parse(absl::string_view conninfo, std::string* error) {
  const std::string text(conninfo);
  char* message = nullptr;
  ParsedConninfo parsed(PQconninfoParse(text.c_str(), &message));
  if (message != nullptr) {
    *error = std::string(absl::StripAsciiWhitespace(message));
    PQfreemem(message);
  }
  return parsed;
}

// A URL with the user info's password and every `password=` query
// parameter masked.
std::string MaskUrl(absl::string_view url) {
  const size_t scheme_end = url.find("://") + 3;
  std::string out(url.substr(0, scheme_end));
  absl::string_view rest = url.substr(scheme_end);
  // The authority ends at the first '/' or '?'; its user info at the last
  // '@' inside it (a password may hold an encoded '@' only as %40).
  const size_t authority_end = rest.find_first_of("/?");
  absl::string_view authority = rest.substr(0, authority_end);
  absl::string_view tail = authority_end == absl::string_view::npos
                               ? absl::string_view()
                               : rest.substr(authority_end);
  const size_t at = authority.rfind('@');
  if (at != absl::string_view::npos) {
    absl::string_view userinfo = authority.substr(0, at);
    const size_t colon = userinfo.find(':');
    if (colon != absl::string_view::npos) {
      absl::StrAppend(&out, userinfo.substr(0, colon + 1), kMaskedPassword,
                      authority.substr(at));
    } else {
      absl::StrAppend(&out, authority);
    }
  } else {
    absl::StrAppend(&out, authority);
  }
  const size_t query = tail.find('?');
  absl::StrAppend(&out, tail.substr(0, query));
  if (query == absl::string_view::npos) return out;
  out.push_back('?');
  absl::string_view params = tail.substr(query + 1);
  bool first = true;
  while (true) {
    const size_t amp = params.find('&');
    absl::string_view param = params.substr(0, amp);
    if (!first) out.push_back('&');
    first = false;
    if (absl::StartsWith(param, "password=")) {
      absl::StrAppend(&out, "password=", kMaskedPassword);
    } else {
      absl::StrAppend(&out, param);
    }
    if (amp == absl::string_view::npos) break;
    params = params.substr(amp + 1);
  }
  return out;
}

// A keyword string rebuilt from libpq's parse (its quoting rules are not
// worth re-implementing to mask in place): the parameters given, in libpq's
// order, values quoted, the password masked.
std::string MaskKeywords(const PQconninfoOption* options) {
  std::string out;
  for (const PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
    if (o->val == nullptr) continue;
    if (!out.empty()) out.push_back(' ');
    const bool secret = absl::string_view(o->keyword) == "password";
    std::string value = secret ? std::string(kMaskedPassword) : o->val;
    std::string quoted;
    for (char c : value) {
      if (c == '\'' || c == '\\') quoted.push_back('\\');
      quoted.push_back(c);
    }
    const bool plain = !quoted.empty() && quoted == value &&
                       value.find_first_of(" \t\n") == std::string::npos;
    absl::StrAppend(&out, o->keyword, "=",
                    plain ? value : absl::StrCat("'", quoted, "'"));
  }
  return out;
}

// Whether `conninfo` may hold a password: a `password` parameter, or a URL
// with `user:password@`. Decided without parsing (this is for strings libpq
// could not parse).
bool MayHoldPassword(absl::string_view conninfo) {
  if (absl::StrContains(conninfo, "password")) return true;
  if (!IsPostgresUrl(conninfo)) return false;
  absl::string_view rest = conninfo.substr(conninfo.find("://") + 3);
  rest = rest.substr(0, rest.find_first_of("/?"));
  const size_t at = rest.rfind('@');
  return at != absl::string_view::npos &&
         rest.substr(0, at).find(':') != absl::string_view::npos;
}

// libpq's parse errors quote the text they stumbled on ("missing \"=\" after
// \"...\"", "unexpected spaces found in \"<the whole URL>\""), which may be
// the password: with a password about, every quoted part is withheld.
std::string SafeParseError(absl::string_view conninfo,
                           const std::string& error) {
  if (!MayHoldPassword(conninfo)) return error;
  std::string out;
  bool quoted = false;
  for (char c : error) {
    if (c == '"') {
      if (!quoted)
        absl::StrAppend(&out, "\"<withheld: it may hold the password>\"");
      quoted = !quoted;
      continue;
    }
    if (!quoted) out.push_back(c);
  }
  return out;
}

bool IsIdentifierStart(char c) { return absl::ascii_isalpha(c) || c == '_'; }
bool IsIdentifierChar(char c) { return absl::ascii_isalnum(c) || c == '_'; }

absl::Status CheckIdentifier(absl::string_view whole, absl::string_view part,
                             absl::string_view what) {
  if (part.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "table '%s' has an empty %s name; write SCHEMA.TABLE, e.g. "
        "public.users",
        whole, what));
  }
  if (part.size() > kMaxIdentifierBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "table '%s': the %s name is %d bytes; PostgreSQL names are at most "
        "%d",
        whole, what, part.size(), kMaxIdentifierBytes));
  }
  if (!IsIdentifierStart(part[0])) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "table '%s': the %s name must start with a letter or '_'", whole,
        what));
  }
  for (char c : part) {
    if (!IsIdentifierChar(c)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "table '%s': the %s name holds '%c'; only letters, digits and '_' "
          "are supported (the qualified name is also the keyspace's name)",
          whole, what, c));
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool IsPostgresUrl(absl::string_view conninfo) {
  return absl::StartsWith(conninfo, "postgresql://") ||
         absl::StartsWith(conninfo, "postgres://");
}

bool IsDatabaseUrl(absl::string_view url) {
  return IsPostgresUrl(url) || mariadb::IsMariaDbUrl(url);
}

absl::Status ValidateDatabaseUrl(absl::string_view url) {
  if (!mariadb::IsMariaDbUrl(url)) return ValidateConninfo(url);
  absl::StatusOr<mariadb::MariaDbTarget> target = mariadb::ParseMariaDbUrl(url);
  if (!target.ok()) return target.status();
  if (target->database.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "peer %s names no database: a MariaDB source's tables are read as "
        "DATABASE.TABLE (e.g. mariadb://reader@master/shop)",
        target->display));
  }
  if (!target->tables.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "peer %s: table= is for tally diff; a source copies the node's "
        "--table tables, each from the URL's database",
        target->display));
  }
  return absl::OkStatus();
}

std::string ConninfoOrigin(absl::string_view conninfo) {
  if (mariadb::IsMariaDbUrl(conninfo)) {
    absl::StatusOr<mariadb::MariaDbTarget> t =
        mariadb::ParseMariaDbUrl(conninfo);
    if (!t.ok()) return "mariadb://unparsable";
    std::string origin =
        absl::StrCat("mariadb://", t->host, ":", t->port, "/", t->database);
    absl::StrReplaceAll({{" ", "%20"}}, &origin);
    return origin;
  }
  std::string error;
  ParsedConninfo parsed = Parse(conninfo, &error);
  if (parsed == nullptr) return "postgresql://unparsable";
  std::string host;
  std::string port;
  std::string dbname;
  for (const PQconninfoOption* o = parsed.get(); o->keyword != nullptr; ++o) {
    if (o->val == nullptr) continue;
    const absl::string_view keyword = o->keyword;
    if (keyword == "host") host = o->val;
    if (keyword == "port") port = o->val;
    if (keyword == "dbname") dbname = o->val;
  }
  std::string origin = absl::StrCat("postgresql://", host,
                                    port.empty() ? "" : ":", port, "/", dbname);
  // An origin name holds no spaces (storage/names.h).
  absl::StrReplaceAll({{" ", "%20"}}, &origin);
  return origin;
}

absl::Status ValidateConninfo(absl::string_view conninfo) {
  if (conninfo.empty()) {
    return absl::InvalidArgumentError(
        "--postgres is empty; give a libpq connection string or URL, e.g. "
        "postgresql://tally@127.0.0.1:5432/app");
  }
  std::string error;
  ParsedConninfo parsed = Parse(conninfo, &error);
  if (parsed == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--postgres is not a libpq connection string or URL: %s",
        error.empty() ? "libpq could not parse it"
                      : SafeParseError(conninfo, error)));
  }
  return absl::OkStatus();
}

std::string MaskConninfo(absl::string_view conninfo) {
  if (mariadb::IsMariaDbUrl(conninfo)) {
    absl::StatusOr<mariadb::MariaDbTarget> t =
        mariadb::ParseMariaDbUrl(conninfo);
    return t.ok() ? t->display : "<unparsable MariaDB URL>";
  }
  std::string error;
  ParsedConninfo parsed = Parse(conninfo, &error);
  if (parsed == nullptr) return "<unparsable connection string>";
  if (IsPostgresUrl(conninfo)) return MaskUrl(conninfo);
  return MaskKeywords(parsed.get());
}

absl::StatusOr<QualifiedTable> ParseQualifiedTable(absl::string_view name) {
  const size_t dot = name.find('.');
  if (dot == absl::string_view::npos ||
      name.find('.', dot + 1) != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "table '%s' is not SCHEMA.TABLE (one dot), e.g. public.users", name));
  }
  QualifiedTable table{std::string(name.substr(0, dot)),
                       std::string(name.substr(dot + 1))};
  absl::Status s = CheckIdentifier(name, table.schema, "schema");
  if (!s.ok()) return s;
  s = CheckIdentifier(name, table.table, "table");
  if (!s.ok()) return s;
  return table;
}

}  // namespace node
}  // namespace tally
