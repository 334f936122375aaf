#include "mariadb/url.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tally {
namespace mariadb {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

absl::StatusOr<std::string> Unescape(absl::string_view in,
                                     absl::string_view what) {
  std::string out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out.push_back(in[i]);
      continue;
    }
    const int hi = i + 1 < in.size() ? HexValue(in[i + 1]) : -1;
    const int lo = i + 2 < in.size() ? HexValue(in[i + 2]) : -1;
    if (hi < 0 || lo < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad %-escape in the ", what, " of a MariaDB URL"));
    }
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return out;
}

}  // namespace

bool IsMariaDbUrl(absl::string_view arg) {
  return absl::StartsWith(arg, "mariadb://") ||
         absl::StartsWith(arg, "mysql://");
}

absl::StatusOr<MariaDbTarget> ParseMariaDbUrl(absl::string_view url) {
  absl::string_view rest = url;
  if (!absl::ConsumePrefix(&rest, "mariadb://") &&
      !absl::ConsumePrefix(&rest, "mysql://")) {
    return absl::InvalidArgumentError(
        "a MariaDB URL begins with mariadb:// or mysql://");
  }
  MariaDbTarget t;
  absl::string_view query;
  if (const size_t q = rest.find('?'); q != absl::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  absl::string_view authority = rest;
  if (const size_t slash = rest.find('/'); slash != absl::string_view::npos) {
    authority = rest.substr(0, slash);
    absl::StatusOr<std::string> db =
        Unescape(rest.substr(slash + 1), "database");
    if (!db.ok()) return db.status();
    t.database = *db;
  }
  // The user part ends at the last '@': an unescaped '@' in a password
  // still parses.
  if (const size_t at = authority.rfind('@'); at != absl::string_view::npos) {
    absl::string_view userinfo = authority.substr(0, at);
    authority = authority.substr(at + 1);
    absl::string_view password;
    const size_t colon = userinfo.find(':');
    if (colon != absl::string_view::npos) {
      password = userinfo.substr(colon + 1);
      userinfo = userinfo.substr(0, colon);
    }
    absl::StatusOr<std::string> user = Unescape(userinfo, "user");
    if (!user.ok()) return user.status();
    absl::StatusOr<std::string> pass = Unescape(password, "password");
    if (!pass.ok()) return pass.status();
    t.user = *user;
    t.password = *pass;
  }
  absl::string_view host = authority;
  if (absl::StartsWith(authority, "[")) {  // [::1]:3306
    const size_t close = authority.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError("a MariaDB URL's [host] is not closed");
    }
    host = authority.substr(1, close - 1);
    authority = authority.substr(close + 1);
    if (!authority.empty() && authority[0] != ':') {
      return absl::InvalidArgumentError("a MariaDB URL's port follows ':'");
    }
    authority = authority.empty() ? authority : authority.substr(1);
    if (!authority.empty() && !absl::SimpleAtoi(authority, &t.port)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad port in a MariaDB URL: ", authority));
    }
  } else if (const size_t colon = authority.rfind(':');
             colon != absl::string_view::npos) {
    host = authority.substr(0, colon);
    if (!absl::SimpleAtoi(authority.substr(colon + 1), &t.port)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad port in a MariaDB URL: ", authority.substr(colon + 1)));
    }
  }
  if (t.port <= 0 || t.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad port in a MariaDB URL: ", t.port));
  }
  t.host = std::string(host);
  for (absl::string_view param :
       absl::StrSplit(query, '&', absl::SkipEmpty())) {
    const size_t eq = param.find('=');
    const absl::string_view name = param.substr(0, eq);
    absl::StatusOr<std::string> value =
        Unescape(eq == absl::string_view::npos ? "" : param.substr(eq + 1),
                 absl::StrCat(name, " parameter"));
    if (!value.ok()) return value.status();
    if (name == "table") {
      if (value->empty() || value->find('.') == std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("table= in a MariaDB URL names database.table, not '",
                         *value, "'"));
      }
      t.tables.push_back(*value);
    } else if (name == "socket") {
      t.socket = *value;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown parameter '", name,
                       "' in a MariaDB URL (it takes table= and socket=)"));
    }
  }
  if (t.host.empty() && t.socket.empty()) {
    return absl::InvalidArgumentError(
        "a MariaDB URL names a host (mariadb://USER@HOST:PORT/DB)");
  }
  t.display = absl::StrCat("mariadb://", t.user, t.user.empty() ? "" : "@",
                           t.host, t.socket.empty() ? ":" : "",
                           t.socket.empty() ? absl::StrCat(t.port) : "", "/",
                           t.database);
  return t;
}

}  // namespace mariadb
}  // namespace tally
