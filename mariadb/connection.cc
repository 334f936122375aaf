#include "mariadb/connection.h"

#include <mysql.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace tally {
namespace mariadb {

absl::Status StatusOfError(unsigned number, absl::string_view message,
                           absl::string_view what) {
  const std::string text = absl::StrCat(what, what.empty() ? "" : ": ", message,
                                        " (error ", number, ")");
  switch (number) {
    case 1044:  // ER_DBACCESS_DENIED_ERROR
    case 1045:  // ER_ACCESS_DENIED_ERROR
    case 1142:  // ER_TABLEACCESS_DENIED_ERROR
    case 1143:  // ER_COLUMNACCESS_DENIED_ERROR
    case 1227:  // ER_SPECIFIC_ACCESS_DENIED_ERROR
      return absl::PermissionDeniedError(text);
    case 1049:  // ER_BAD_DB_ERROR
    case 1146:  // ER_NO_SUCH_TABLE
      return absl::NotFoundError(text);
    case 2002:  // CR_CONNECTION_ERROR
    case 2003:  // CR_CONN_HOST_ERROR
    case 2006:  // CR_SERVER_GONE_ERROR
    case 2013:  // CR_SERVER_LOST
      return absl::UnavailableError(text);
    case 1062:  // ER_DUP_ENTRY
      return absl::AlreadyExistsError(text);
    default:
      return absl::FailedPreconditionError(text);
  }
}

std::string QuoteIdentifier(absl::string_view name) {
  return absl::StrCat("`", absl::StrReplaceAll(name, {{"`", "``"}}), "`");
}

absl::StatusOr<std::unique_ptr<Connection>> Connection::Open(
    const MariaDbTarget& target, absl::Duration timeout) {
  std::unique_ptr<Connection> c(new Connection());
  c->display_ = target.display;
  c->mysql_ = mysql_init(nullptr);
  if (c->mysql_ == nullptr) {
    return absl::ResourceExhaustedError("mysql_init failed");
  }
  const unsigned seconds = static_cast<unsigned>(
      std::max<int64_t>(1, absl::ToInt64Seconds(timeout)));
  mysql_optionsv(c->mysql_, MYSQL_OPT_CONNECT_TIMEOUT, &seconds);
  mysql_optionsv(c->mysql_, MYSQL_OPT_READ_TIMEOUT, &seconds);
  mysql_optionsv(c->mysql_, MYSQL_OPT_WRITE_TIMEOUT, &seconds);
  mysql_optionsv(c->mysql_, MYSQL_SET_CHARSET_NAME, "utf8mb4");
  // No option file: what the URL says is what is used.
  mysql_optionsv(c->mysql_, MYSQL_INIT_COMMAND, "SET time_zone = '+00:00'");
  if (mysql_real_connect(
          c->mysql_, target.socket.empty() ? target.host.c_str() : nullptr,
          target.user.c_str(), target.password.c_str(),
          target.database.empty() ? nullptr : target.database.c_str(),
          target.socket.empty() ? static_cast<unsigned>(target.port) : 0,
          target.socket.empty() ? nullptr : target.socket.c_str(),
          CLIENT_FOUND_ROWS) == nullptr) {
    return c->Error(absl::StrCat("cannot connect to ", target.display));
  }
  return c;
}

Connection::~Connection() {
  if (mysql_ != nullptr) mysql_close(mysql_);
}

absl::Status Connection::Error(absl::string_view what) const {
  return StatusOfError(mysql_errno(mysql_), mysql_error(mysql_), what);
}

std::string Connection::Quote(absl::string_view text) const {
  std::string out(text.size() * 2 + 3, '\0');
  out[0] = '\'';
  const unsigned long n = mysql_real_escape_string(
      mysql_, &out[1], text.data(), static_cast<unsigned long>(text.size()));
  out.resize(n + 1);
  out.push_back('\'');
  return out;
}

std::string Connection::server_version() const {
  return mysql_get_server_info(mysql_);
}

absl::Status Connection::Exec(absl::string_view sql) {
  return Query(sql).status();
}

absl::StatusOr<TextRows> Connection::Query(absl::string_view sql) {
  if (mysql_real_query(mysql_, sql.data(),
                       static_cast<unsigned long>(sql.size())) != 0) {
    return Error("");
  }
  TextRows rows;
  MYSQL_RES* result = mysql_store_result(mysql_);
  if (result == nullptr) {
    if (mysql_field_count(mysql_) != 0) return Error("");
    return rows;
  }
  const unsigned columns = mysql_num_fields(result);
  while (MYSQL_ROW row = mysql_fetch_row(result)) {
    const unsigned long* lengths = mysql_fetch_lengths(result);
    TextRow& out = rows.emplace_back(columns);
    for (unsigned i = 0; i < columns; ++i) {
      if (row[i] != nullptr) out[i] = std::string(row[i], lengths[i]);
    }
  }
  mysql_free_result(result);
  return rows;
}

namespace {

// One result column's binding, with the buffer it fills.
struct Bound {
  Value::Kind kind = Value::Kind::kBytes;
  std::string buffer;
  unsigned long length = 0;
  my_bool is_null = 0;
  my_bool error = 0;
  MYSQL_TIME time{};
  long long integer = 0;
  double real = 0;
  float real4 = 0;
};

Value::Kind KindOf(const MYSQL_FIELD& f) {
  switch (f.type) {
    case MYSQL_TYPE_TINY:
    case MYSQL_TYPE_SHORT:
    case MYSQL_TYPE_INT24:
    case MYSQL_TYPE_LONG:
    case MYSQL_TYPE_LONGLONG:
    case MYSQL_TYPE_YEAR:
      return (f.flags & UNSIGNED_FLAG) != 0 ? Value::Kind::kUint
                                            : Value::Kind::kInt;
    case MYSQL_TYPE_FLOAT:
      return Value::Kind::kFloat;
    case MYSQL_TYPE_DOUBLE:
      return Value::Kind::kDouble;
    case MYSQL_TYPE_DATE:
    case MYSQL_TYPE_DATETIME:
    case MYSQL_TYPE_TIMESTAMP:
    case MYSQL_TYPE_TIME:
      return Value::Kind::kTime;
    default:
      return Value::Kind::kBytes;
  }
}

void Bind(const MYSQL_FIELD& field, Bound& b, MYSQL_BIND& bind) {
  std::memset(&bind, 0, sizeof(bind));
  bind.is_null = &b.is_null;
  bind.length = &b.length;
  bind.error = &b.error;
  switch (b.kind) {
    case Value::Kind::kInt:
    case Value::Kind::kUint:
      bind.buffer_type = MYSQL_TYPE_LONGLONG;
      bind.buffer = &b.integer;
      bind.is_unsigned = b.kind == Value::Kind::kUint;
      break;
    case Value::Kind::kFloat:
      bind.buffer_type = MYSQL_TYPE_FLOAT;
      bind.buffer = &b.real4;
      break;
    case Value::Kind::kDouble:
      bind.buffer_type = MYSQL_TYPE_DOUBLE;
      bind.buffer = &b.real;
      break;
    case Value::Kind::kTime:
      bind.buffer_type = field.type;
      bind.buffer = &b.time;
      break;
    default:
      bind.buffer_type = MYSQL_TYPE_BLOB;
      bind.buffer = b.buffer.data();
      bind.buffer_length = static_cast<unsigned long>(b.buffer.size());
      break;
  }
}

Value ValueOf(const Bound& b) {
  Value v;
  if (b.is_null) return v;
  v.kind = b.kind;
  switch (b.kind) {
    case Value::Kind::kInt:
      v.i = b.integer;
      break;
    case Value::Kind::kUint:
      v.u = static_cast<uint64_t>(b.integer);
      break;
    case Value::Kind::kFloat:
      v.f = b.real4;
      break;
    case Value::Kind::kDouble:
      v.d = b.real;
      break;
    case Value::Kind::kTime:
      v.time =
          TimeValue{b.time.neg != 0, b.time.year,
                    b.time.month,    b.time.day,
                    b.time.hour,     b.time.minute,
                    b.time.second,   static_cast<uint32_t>(b.time.second_part)};
      break;
    default:
      v.bytes = absl::string_view(b.buffer.data(), b.length);
      break;
  }
  return v;
}

}  // namespace

absl::Status Connection::Stream(
    absl::string_view sql,
    const std::function<absl::Status(absl::Span<const Value>)>& fn) {
  MYSQL_STMT* stmt = mysql_stmt_init(mysql_);
  if (stmt == nullptr) return Error("");
  struct Closer {
    MYSQL_STMT* stmt;
    ~Closer() { mysql_stmt_close(stmt); }
  } closer{stmt};
  // A fetch cut short by a lost connection leaves the statement's error
  // unset (Connector/C 3.3) and the connection's set, or neither.
  auto stmt_error = [&]() {
    if (mysql_stmt_errno(stmt) != 0) {
      return StatusOfError(mysql_stmt_errno(stmt), mysql_stmt_error(stmt), "");
    }
    if (mysql_errno(mysql_) != 0) return Error("");
    return absl::UnavailableError(
        "the server ended the result before its last row (connection lost)");
  };
  if (mysql_stmt_prepare(stmt, sql.data(),
                         static_cast<unsigned long>(sql.size())) != 0) {
    return stmt_error();
  }
  MYSQL_RES* meta = mysql_stmt_result_metadata(stmt);
  if (meta == nullptr) {
    return absl::InvalidArgumentError("Stream: the statement returns no rows");
  }
  const unsigned columns = mysql_num_fields(meta);
  const MYSQL_FIELD* fields = mysql_fetch_fields(meta);
  std::vector<Bound> bound(columns);
  std::vector<MYSQL_BIND> binds(columns);
  for (unsigned i = 0; i < columns; ++i) {
    bound[i].kind = KindOf(fields[i]);
    bound[i].buffer.resize(256);
  }
  auto bind_all = [&]() -> absl::Status {
    for (unsigned i = 0; i < columns; ++i) Bind(fields[i], bound[i], binds[i]);
    if (mysql_stmt_bind_result(stmt, binds.data()) != 0) return stmt_error();
    return absl::OkStatus();
  };
  absl::Status status = bind_all();
  if (status.ok() && mysql_stmt_execute(stmt) != 0) status = stmt_error();
  std::vector<Value> values(columns);
  while (status.ok()) {
    const int r = mysql_stmt_fetch(stmt);
    if (r == MYSQL_NO_DATA) break;
    if (r == 1) {
      status = stmt_error();
      break;
    }
    if (r == MYSQL_DATA_TRUNCATED) {
      // A value longer than its buffer: fetch it again into one that
      // fits, and keep the bigger buffer for the rows to come.
      bool rebind = false;
      for (unsigned i = 0; i < columns && status.ok(); ++i) {
        Bound& b = bound[i];
        if (!b.error || b.kind != Value::Kind::kBytes) continue;
        b.buffer.resize(b.length);
        MYSQL_BIND one;
        Bind(fields[i], b, one);
        if (mysql_stmt_fetch_column(stmt, &one, i, 0) != 0) {
          status = stmt_error();
        }
        rebind = true;
      }
      if (status.ok() && rebind) status = bind_all();
      if (!status.ok()) break;
    }
    for (unsigned i = 0; i < columns; ++i) {
      values[i] = ValueOf(bound[i]);
      streamed_bytes_ += values[i].kind == Value::Kind::kBytes
                             ? values[i].bytes.size()
                             : (values[i].kind == Value::Kind::kNull ? 0 : 8);
    }
    status = fn(values);
  }
  mysql_free_result(meta);
  if (!status.ok()) return status;
  return absl::OkStatus();
}

}  // namespace mariadb
}  // namespace tally
