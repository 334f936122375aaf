#include "pg/sidecar/apply/pg_backend.h"

#include <algorithm>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "pg/schema/row_codec.h"
#include "pg/sidecar/apply/apply_message.h"
#include "pg/sidecar/apply/apply_sql.h"
#include "pg/sidecar/apply/row_isolation.h"
#include "pg/wire/binary_copy.h"
#include "pg/wire/internal/big_endian.h"
#include "pg/wire/lsn.h"
#include "tree/status_macros.h"

namespace tally {
namespace pg {
namespace {

using storage::RowChange;
using storage::RowLocation;
using storage::RowOutcome;

// PostgreSQL's epoch, 2000-01-01 00:00:00 UTC, in Unix microseconds.
constexpr int64_t kPostgresEpochUnixMicros = int64_t{946684800} * 1000000;

constexpr Oid kByteaOid = 17;

// From this many rows of a table in one statement on, the staging table is
// analyzed before the merge (a few ms; see ApplyPart).
constexpr size_t kAnalyzeStageRows = 500;
constexpr Oid kTimestamptzOid = 1184;

// Big-endian into a buffer the caller holds (the staging writes millions).
void StoreBigEndian32(char* at, uint32_t v) {
  for (int i = 0; i < 4; ++i) at[i] = static_cast<char>(v >> (24 - 8 * i));
}
void StoreBigEndian64(char* at, uint64_t v) {
  for (int i = 0; i < 8; ++i) at[i] = static_cast<char>(v >> (56 - 8 * i));
}

std::string Int8Bytes(int64_t v) {
  std::string s;
  internal::PutBigEndian64(&s, static_cast<uint64_t>(v));
  return s;
}

std::string Quote(absl::string_view name) {
  std::string out = "\"";
  for (char c : name) {
    if (c == '"') out.push_back('"');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

// One element of a canonical key in the apply's staging order (KeyLess):
// a NULL (tag 0), a field's bytes (1), or the raw rest of bytes that are
// not the framing (2; such a row is refused later, but must still sort).
struct KeyPart {
  int tag = 0;
  absl::string_view bytes;
};

// Takes the next element off `rest`; false when it is empty.
bool NextKeyPart(absl::string_view* rest, KeyPart* part) {
  if (rest->empty()) return false;
  if (rest->size() >= 4) {
    const uint32_t length = internal::LoadBigEndian32(rest->data());
    if (length == kNullFieldLength) {
      *part = KeyPart{0, {}};
      rest->remove_prefix(4);
      return true;
    }
    if (rest->size() - 4 >= length) {
      *part = KeyPart{1, rest->substr(4, length)};
      rest->remove_prefix(4 + length);
      return true;
    }
  }
  *part = KeyPart{2, *rest};
  *rest = absl::string_view();
  return true;
}

// Orders canonical keys field by field, each field's send() bytes
// compared bytewise: the primary key's order for non-negative integers and
// C-collated text, and close to it for other types. A strict weak order on
// any bytes (each key maps to its own sequence of parts).
bool KeyLess(absl::string_view a, absl::string_view b) {
  KeyPart pa, pb;
  while (true) {
    const bool has_a = NextKeyPart(&a, &pa);
    const bool has_b = NextKeyPart(&b, &pb);
    if (!has_a || !has_b) return !has_a && has_b;
    if (pa.tag != pb.tag) return pa.tag < pb.tag;
    const int c = pa.bytes.compare(pb.bytes);
    if (c != 0) return c < 0;
  }
}

// Rows by key: the key columns arrive as one array parameter each.
std::string ReadSql(const TableSchema& t) {
  std::vector<std::string> cols, keys, arrays;
  for (size_t c = 0; c < t.columns().size(); ++c) {
    cols.push_back(absl::StrCat("t.", Quote(t.columns()[c].name)));
  }
  for (size_t k = 0; k < t.key_columns(); ++k) {
    keys.push_back(cols[k]);
    // ROWS FROM zips the arrays (the multi-argument unnest sugar exists
    // only unqualified).
    arrays.push_back(absl::StrCat("pg_catalog.unnest($", k + 1,
                                  "::", t.columns()[k].type, "[])"));
  }
  return absl::StrCat(
      "SELECT ", absl::StrJoin(cols, ", "), ", x.timestamp, x.roident FROM ",
      t.quoted_name(),
      " AS t CROSS JOIN LATERAL "
      "pg_catalog.pg_xact_commit_timestamp_origin(t.xmin) AS x WHERE (",
      absl::StrJoin(keys, ", "), ") IN (SELECT * FROM ROWS FROM (",
      absl::StrJoin(arrays, ", "), "))");
}

// The binary form of a one-dimensional array without NULLs.
std::string BinaryArray(Oid element_type,
                        const std::vector<absl::string_view>& elements) {
  std::string out;
  internal::PutBigEndian32(&out, 1);  // dimensions
  internal::PutBigEndian32(&out, 0);  // no NULLs
  internal::PutBigEndian32(&out, element_type);
  internal::PutBigEndian32(&out, static_cast<uint32_t>(elements.size()));
  internal::PutBigEndian32(&out, 1);  // lower bound
  for (absl::string_view e : elements) {
    internal::PutBigEndian32(&out, static_cast<uint32_t>(e.size()));
    out.append(e.data(), e.size());
  }
  return out;
}

// The answer for a row whose table version is not the one the index
// describes (`want`): `found` is the token of the row the read saw, null
// when it saw none. A row the read sees at an OLDER commit than the
// index's is the index's own transaction not visible yet (the capture
// indexes a transaction when the server decodes it, just before other
// sessions see it): kUnavailable, read again shortly. A row at a newer
// commit was changed since, and the capture indexes that change:
// kAborted, superseded. A row the read does not see is either (deleted
// since, or inserted by a transaction not visible yet): kUnavailable, as
// the store's index soon holds the delete if it was one. Commit times of
// successive versions of one row increase (the later writer waited for
// the earlier commit); only a database clock behind tallyd's, for rows
// tallyd applied, can make a newer version look older, which costs a
// reader its bounded wait and nothing else.
absl::Status NotTheIndexedRow(absl::string_view table, const RowToken& want,
                              const RowToken* found) {
  if (found == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "row of keyspace ", table,
        " is not in the table as this read sees it: deleted since it was "
        "indexed (the capture indexes the delete), or its commit is not "
        "visible yet"));
  }
  const bool older = found->commit_time_us.has_value() &&
                     want.commit_time_us.has_value() &&
                     *found->commit_time_us < *want.commit_time_us;
  if (older) {
    return absl::UnavailableError(absl::StrCat(
        "row of keyspace ", table,
        " is still an older version than the index's in this read (its "
        "commit is not visible yet); read it again"));
  }
  return absl::AbortedError(absl::StrCat(
      "row of keyspace ", table,
      " changed in the table since it was indexed; the capture indexes the "
      "change"));
}

int64_t NowStamp() {
  return absl::ToUnixMicros(absl::Now()) - kPostgresEpochUnixMicros;
}

// A key for messages: its canonical bytes, escaped, cut at 64.
std::string DescribeKey(absl::string_view key) {
  constexpr size_t kShown = 64;
  std::string out = absl::CHexEscape(key.substr(0, kShown));
  if (key.size() > kShown) absl::StrAppend(&out, "...");
  return absl::StrCat("\"", out, "\"");
}

absl::Status WithContext(const absl::Status& s, absl::string_view what) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
}

// A row of a table missing from the database since Open (dropped while
// tallyd was stopped), which ReloadSchema has not found again.
absl::Status MissingTableError(absl::string_view keyspace) {
  return absl::NotFoundError(absl::StrCat(
      "table ", keyspace, " is missing from the database (dropped)"));
}

}  // namespace

PgBackend::PgBackend(PgBackendOptions options, OriginId origin_id,
                     std::vector<TablePtr> tables,
                     std::unique_ptr<Connection> apply,
                     std::unique_ptr<Connection> reader, int64_t last_stamp)
    : options_(options),
      origin_id_(origin_id),
      table_index_([&options] {
        absl::flat_hash_map<std::string, size_t> index;
        for (size_t i = 0; i < options.tables.size(); ++i) {
          index[options.tables[i]] = i;
        }
        return index;
      }()),
      tables_(std::move(tables)),
      apply_(std::move(apply)),
      last_stamp_(last_stamp),
      reader_(std::move(reader)) {}

PgBackend::~PgBackend() = default;

absl::StatusOr<std::unique_ptr<Connection>> PgBackend::OpenApply(
    const PgBackendOptions& options) {
  ConnectOptions connect = options.connect;
  connect.application_name = "tally apply";
  TALLY_ASSIGN_OR_RETURN(std::unique_ptr<Connection> c,
                         Connection::Open(options.conninfo, connect));
  // One origin per node: another session may still hold it for a moment
  // after the previous process's connection closed (PostgreSQL answers
  // "already active for PID ..." until it lets go).
  const absl::Time deadline = absl::Now() + options.origin_busy_wait;
  while (true) {
    absl::Status s =
        c->ExecParams(
             "SELECT pg_catalog.pg_replication_origin_session_setup($1)",
             {Param::Text(options.origin_name)})
            .status();
    if (s.ok()) break;
    if (!absl::IsFailedPrecondition(s) || absl::Now() >= deadline) {
      return WithContext(s, absl::StrCat("setting up replication origin ",
                                         options.origin_name));
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  // As PostgreSQL's own logical replication apply: triggers and the
  // foreign keys' checks and cascades do not fire on applied rows (what
  // they did at the source arrives as rows), and the apply waits for no
  // lock for long.
  for (const std::string& sql : ApplySessionSettings(options.lock_timeout)) {
    absl::Status s = c->Exec(sql).status();
    if (absl::IsPermissionDenied(s)) {
      return absl::PermissionDeniedError(absl::StrCat(
          "the apply runs with session_replication_role = replica (triggers "
          "and foreign keys do not fire on applied rows) and this role may "
          "not set it: GRANT SET ON PARAMETER session_replication_role TO "
          "<role> (PostgreSQL 15), or a superuser role: ",
          s.message()));
    }
    TALLY_RETURN_IF_ERROR(WithContext(s, "setting up the apply session"));
  }
  // Superusers only; others keep the server's (the lock timeout still ends
  // the apply's waits first unless deadlock_timeout is below it).
  (void)c->Exec(ApplyDeadlockTimeoutSql(options.deadlock_timeout));
  return c;
}

absl::StatusOr<PgBackend::TablePtr> PgBackend::ReadTableSchema(
    Connection& conn, absl::string_view name, size_t index) {
  TALLY_ASSIGN_OR_RETURN(TableSchema schema, TableSchema::Read(conn, name));
  auto t = std::make_shared<Table>(
      Table{std::move(schema), absl::StrCat("tally_apply_", index), "", ""});
  t->merge_sql = MergeSql(t->schema, t->temp_name);
  t->read_sql = ReadSql(t->schema);
  return TablePtr(std::move(t));
}

absl::StatusOr<std::unique_ptr<PgBackend>> PgBackend::Open(
    const PgBackendOptions& options) {
  if (options.origin_name.empty()) {
    return absl::InvalidArgumentError("the apply origin needs a name");
  }
  ConnectOptions connect = options.connect;
  connect.application_name = "tally reader";
  TALLY_ASSIGN_OR_RETURN(std::unique_ptr<Connection> reader,
                         Connection::Open(options.conninfo, connect));
  // Create the origin if missing (a concurrent creator is fine: the name is
  // unique, and either one wins).
  absl::Status created =
      reader
          ->ExecParams(
              "SELECT pg_catalog.pg_replication_origin_create($1) WHERE NOT "
              "EXISTS (SELECT 1 FROM pg_catalog.pg_replication_origin WHERE "
              "roname = $1)",
              {Param::Text(options.origin_name)})
          .status();
  if (!created.ok() && !absl::IsAlreadyExists(created)) {
    return WithContext(created, absl::StrCat("creating replication origin ",
                                             options.origin_name));
  }
  TALLY_ASSIGN_OR_RETURN(
      Result origin,
      reader->ExecParams(
          "SELECT roident, pg_catalog.pg_replication_origin_progress($1, "
          "true) FROM pg_catalog.pg_replication_origin WHERE roname = $1",
          {Param::Text(options.origin_name)}));
  uint32_t roident = 0;
  if (origin.rows() != 1 || !absl::SimpleAtoi(origin.Value(0, 0), &roident) ||
      roident > 0xffff) {
    return absl::InternalError(absl::StrCat(
        "replication origin ", options.origin_name, " has no usable id"));
  }
  int64_t last_stamp = 0;
  if (!origin.IsNull(0, 1)) {
    TALLY_ASSIGN_OR_RETURN(Lsn progress, ParseLsn(origin.Value(0, 1)));
    last_stamp = static_cast<int64_t>(progress);
  }

  std::vector<TablePtr> tables;
  for (size_t i = 0; i < options.tables.size(); ++i) {
    if (options.missing.contains(options.tables[i])) {
      tables.push_back(nullptr);  // until ReloadSchema finds it
      continue;
    }
    TALLY_ASSIGN_OR_RETURN(TablePtr t,
                           ReadTableSchema(*reader, options.tables[i], i));
    tables.push_back(std::move(t));
  }
  TALLY_ASSIGN_OR_RETURN(std::unique_ptr<Connection> apply, OpenApply(options));
  return std::unique_ptr<PgBackend>(new PgBackend(
      options, OriginId{static_cast<uint16_t>(roident)}, std::move(tables),
      std::move(apply), std::move(reader), last_stamp));
}

std::vector<PgBackend::TablePtr> PgBackend::Tables() const {
  absl::MutexLock lock(&tables_mu_);
  return tables_;
}

std::shared_ptr<const TableSchema> PgBackend::schema(
    absl::string_view keyspace) const {
  auto it = table_index_.find(keyspace);
  if (it == table_index_.end()) return nullptr;
  absl::MutexLock lock(&tables_mu_);
  const TablePtr& t = tables_[it->second];
  if (t == nullptr) return nullptr;  // missing at Open, not found since
  return std::shared_ptr<const TableSchema>(t, &t->schema);
}

absl::Status PgBackend::ReloadSchema(absl::string_view keyspace) {
  auto it = table_index_.find(keyspace);
  if (it == table_index_.end()) {
    return absl::NotFoundError(
        absl::StrCat("keyspace ", keyspace, " is not a table this node keeps"));
  }
  absl::StatusOr<TablePtr> t;
  {
    absl::MutexLock lock(&read_mu_);
    if (reader_ == nullptr || !reader_->healthy()) {
      ConnectOptions connect = options_.connect;
      connect.application_name = "tally reader";
      TALLY_ASSIGN_OR_RETURN(reader_,
                             Connection::Open(options_.conninfo, connect));
    }
    t = ReadTableSchema(*reader_, keyspace, it->second);
  }
  if (!t.ok()) return t.status();
  absl::MutexLock lock(&tables_mu_);
  tables_[it->second] = *std::move(t);
  return absl::OkStatus();
}

absl::Status PgBackend::EnsureStage(const Table& table) {
  auto it = staged_.find(table.temp_name);
  if (it != staged_.end()) {
    if (it->second == table.schema.fingerprint()) return absl::OkStatus();
    // Made on this connection for the table's previous schema.
    TALLY_RETURN_IF_ERROR(
        apply_->Exec(absl::StrCat("DROP TABLE pg_temp.", table.temp_name))
            .status());
  }
  TALLY_RETURN_IF_ERROR(
      apply_->Exec(CreateStageSql(table.schema, table.temp_name)).status());
  staged_[table.temp_name] = table.schema.fingerprint();
  return absl::OkStatus();
}

int64_t PgBackend::last_stamp() const {
  absl::MutexLock lock(&apply_mu_);
  return last_stamp_;
}

absl::StatusOr<std::string> PgBackend::SchemaFingerprint(
    absl::string_view keyspace) const {
  std::shared_ptr<const TableSchema> t = schema(keyspace);
  if (t == nullptr) return absl::StrCat(kFingerprintPrefix, "not-kept");
  return t->fingerprint();
}

std::string PgBackend::SchemaDescription(absl::string_view keyspace) const {
  std::shared_ptr<const TableSchema> t = schema(keyspace);
  return t == nullptr ? "" : t->description();
}

// The rows of one ApplyRows call, staged per table before anything is sent.
struct PgBackend::StagedCall {
  std::vector<TablePtr> tables;
  // The binary COPY header every table's stream starts with.
  std::string header;
  // Per table: the binary COPY tuples of its rows, one after another.
  std::vector<std::string> tuples;
  // Per row: its table (tables.size() for a row not staged), and where its
  // tuple is in that table's `tuples`.
  std::vector<uint32_t> table_of;
  std::vector<std::pair<size_t, size_t>> tuple_at;
  // The staged rows in the apply's lock order: tables by name, each
  // table's rows by key.
  std::vector<uint32_t> order;
};

absl::Status PgBackend::ApplyRows(absl::Span<const RowChange> rows,
                                  std::vector<RowOutcome>* outcomes) {
  absl::MutexLock lock(&apply_mu_);
  outcomes->assign(rows.size(), RowOutcome{});
  if (rows.empty()) return absl::OkStatus();
  absl::Status s = ApplyLocked(rows, outcomes);
  if (!s.ok()) {
    outcomes->assign(rows.size(), RowOutcome{});
    if (apply_ != nullptr && apply_->healthy()) {
      (void)apply_->Exec("ROLLBACK");
    }
  }
  return s;
}

absl::Status PgBackend::StageRows(absl::Span<const RowChange> rows,
                                  std::vector<RowOutcome>* outcomes,
                                  StagedCall* call) {
  const std::vector<TablePtr>& tables = call->tables;
  call->table_of.assign(rows.size(), static_cast<uint32_t>(tables.size()));
  call->tuple_at.assign(rows.size(), {0, 0});
  call->tuples.assign(tables.size(), std::string());
  std::vector<std::vector<uint32_t>> by_table(tables.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    auto it = table_index_.find(rows[i].row.keyspace);
    if (it == table_index_.end()) {
      (*outcomes)[i].rejected = absl::FailedPreconditionError(
          absl::StrCat("keyspace ", rows[i].row.keyspace,
                       " is not a table this node keeps (--table)"));
      continue;
    }
    if (tables[it->second] == nullptr) {
      (*outcomes)[i].rejected = MissingTableError(rows[i].row.keyspace);
      continue;
    }
    by_table[it->second].push_back(static_cast<uint32_t>(i));
  }
  // Tables in the order of their names: every apply takes its locks in the
  // same order, whatever the order of --table.
  std::vector<size_t> table_order(tables.size());
  for (size_t t = 0; t < tables.size(); ++t) table_order[t] = t;
  std::sort(table_order.begin(), table_order.end(), [&](size_t a, size_t b) {
    return options_.tables[a] < options_.tables[b];
  });
  {
    CopyBinaryWriter header;
    call->header = header.TakeBuffered();
  }
  std::vector<Field> fields;
  std::string local_bytes;
  std::vector<Field> staged;
  for (size_t t : table_order) {
    // In key order: the statement probes the primary key and the heap in
    // the staging table's order, and sorted probes find the pages the
    // previous one read still in the CPU's cache (in the store's order,
    // by token, every probe missed it). It is also the order rows are
    // locked in.
    std::vector<uint32_t>& order = by_table[t];
    if (order.empty()) continue;  // (a table missing at Open has no schema)
    std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
      return KeyLess(rows[a].row.key, rows[b].row.key);
    });
    const Table& table = *tables[t];
    const RowCodec codec = table.schema.codec();
    CopyBinaryWriter writer;
    const size_t header_bytes = writer.buffered_bytes();
    for (uint32_t i : order) {
      const RowChange& row = rows[i];
      const bool present = row.expected.exists && !row.expected.deleted;
      char op;
      if (row.kind == RowChange::Kind::kPut) {
        op = present ? 'u' : 'i';
      } else {
        op = present ? 'd' : 'n';
      }
      std::optional<RowToken> expected;
      if (op == 'u' || op == 'd') {
        absl::StatusOr<RowToken> token = RowToken::Decode(row.expected.payload);
        // No token (an unreadable record): the row cannot be compared, so
        // it is refused rather than written blind.
        if (!token.ok()) continue;
        expected = *token;
      }
      absl::Status decoded =
          op == 'u' || op == 'i'
              ? codec.Decode(row.row.key, row.value, &local_bytes, &fields)
              : codec.DecodeKey(row.row.key, &local_bytes, &fields);
      if (!decoded.ok()) {
        // A peer's row of another shape (a column added there first):
        // this row alone is refused.
        (*outcomes)[i].rejected = absl::InvalidArgumentError(
            absl::StrCat("a row of ", table.schema.name(), " (key ",
                         DescribeKey(row.row.key),
                         ") is not the table's encoding: ", decoded.message()));
        continue;
      }
      fields.resize(codec.columns(), Field::Null());
      // The fixed columns' bytes live on the stack until AddRow copies
      // them: no allocation per row.
      char index[4], ets[8], eor[4];
      StoreBigEndian32(index, i);
      staged.assign({Field::Of(absl::string_view(index, 4)),
                     Field::Of(absl::string_view(&op, 1)), Field::Null(),
                     Field::Null()});
      if (expected && expected->commit_time_us) {
        StoreBigEndian64(ets, static_cast<uint64_t>(*expected->commit_time_us));
        StoreBigEndian32(eor, expected->origin.value);
        staged[2] = Field::Of(absl::string_view(ets, 8));
        staged[3] = Field::Of(absl::string_view(eor, 4));
      }
      staged.insert(staged.end(), fields.begin(), fields.end());
      const size_t before = writer.buffered_bytes();
      absl::Status added = writer.AddRow(staged);
      if (!added.ok()) {
        (*outcomes)[i].rejected = absl::InvalidArgumentError(absl::StrCat(
            "a row of ", table.schema.name(), " (key ",
            DescribeKey(row.row.key), ") cannot be sent: ", added.message()));
        continue;
      }
      call->table_of[i] = static_cast<uint32_t>(t);
      call->tuple_at[i] = {before - header_bytes,
                           writer.buffered_bytes() - before};
      call->order.push_back(i);
    }
    call->tuples[t] = writer.TakeBuffered().substr(header_bytes);
  }
  return absl::OkStatus();
}

absl::Status PgBackend::ApplyLocked(absl::Span<const RowChange> rows,
                                    std::vector<RowOutcome>* outcomes) {
  // Stage every row before touching the database: a row that is not the
  // table's encoding is refused alone, with nothing sent.
  StagedCall call;
  call.tables = Tables();
  TALLY_RETURN_IF_ERROR(StageRows(rows, outcomes, &call));
  if (call.order.empty()) return absl::OkStatus();

  if (apply_ == nullptr || !apply_->healthy()) {
    apply_.reset();
    staged_.clear();
    TALLY_ASSIGN_OR_RETURN(apply_, OpenApply(options_));
  }
  {
    // A staging table that cannot be made (a type dropped since the schema
    // was read) refuses that table's rows.
    std::vector<bool> ready(call.tables.size(), false);
    std::vector<absl::Status> refused(call.tables.size());
    std::vector<uint32_t> kept;
    for (uint32_t i : call.order) {
      const uint32_t t = call.table_of[i];
      if (!ready[t] && refused[t].ok()) {
        absl::Status s = EnsureStage(*call.tables[t]);
        if (!s.ok() && !apply_->healthy()) return s;
        if (s.ok()) {
          ready[t] = true;
        } else {
          refused[t] = WithContext(
              s,
              absl::StrCat("staging rows of ", call.tables[t]->schema.name()));
        }
      }
      if (ready[t]) {
        kept.push_back(i);
      } else {
        (*outcomes)[i].rejected = refused[t];
      }
    }
    call.order = std::move(kept);
  }

  // Rows an application holds locked are tried again in later
  // transactions, for a while; then they are left as not applied (the
  // application's write is captured, and sessions cover the rest).
  std::vector<uint32_t> rank(rows.size(), 0);
  for (size_t r = 0; r < call.order.size(); ++r) {
    rank[call.order[r]] = static_cast<uint32_t>(r);
  }
  const absl::Time deadline = absl::Now() + options_.busy_retry_for;
  absl::Duration pause = absl::Milliseconds(10);
  size_t per_transaction =
      std::max<size_t>(1, options_.max_rows_per_transaction);
  std::vector<uint32_t> pending = std::move(call.order);
  while (!pending.empty()) {
    std::vector<uint32_t> busy;
    for (size_t at = 0; at < pending.size(); at += per_transaction) {
      const absl::Span<const uint32_t> group =
          absl::MakeConstSpan(pending).subspan(at, per_transaction);
      TALLY_RETURN_IF_ERROR(
          ApplyTransaction(call, rows, group, outcomes, &busy));
    }
    if (busy.empty() || absl::Now() + pause > deadline) break;
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Milliseconds(100));
    // A lock timeout marks a whole statement's rows busy: smaller
    // transactions the next time hold fewer locks and meet fewer waits.
    per_transaction =
        std::max<size_t>(1, std::min(per_transaction, busy.size()) / 2);
    std::sort(busy.begin(), busy.end(),
              [&](uint32_t a, uint32_t b) { return rank[a] < rank[b]; });
    pending = std::move(busy);
  }
  return absl::OkStatus();
}

absl::Status PgBackend::ApplyTransaction(const StagedCall& call,
                                         absl::Span<const RowChange> rows,
                                         absl::Span<const uint32_t> group,
                                         std::vector<RowOutcome>* outcomes,
                                         std::vector<uint32_t>* busy) {
  // Every constraint checked at its statement, so that a deferred one
  // refuses rows there (where they can be isolated), not at COMMIT.
  TALLY_RETURN_IF_ERROR(
      apply_->Exec("BEGIN; SET CONSTRAINTS ALL IMMEDIATE").status());

  std::vector<uint32_t> applied;
  std::vector<uint32_t> attempt_applied, attempt_busy;
  size_t part_begin = 0;
  while (part_begin < group.size()) {
    const uint32_t t = call.table_of[group[part_begin]];
    size_t part_end = part_begin;
    while (part_end < group.size() && call.table_of[group[part_end]] == t) {
      ++part_end;
    }
    const absl::Span<const uint32_t> part =
        group.subspan(part_begin, part_end - part_begin);
    part_begin = part_end;
    const Table& table = *call.tables[t];
    bool stage_used = false;
    auto attempt = [&](absl::Span<const uint32_t> rows_tried) -> absl::Status {
      // Called by IsolateRows below, on this thread, with the lock held
      // (Clang's analysis does not follow a lambda).
      apply_mu_.AssertHeld();
      attempt_applied.clear();
      attempt_busy.clear();
      TALLY_RETURN_IF_ERROR(apply_->Exec("SAVEPOINT tally_rows").status());
      absl::Status s = ApplyPart(call, table, t, rows_tried, stage_used,
                                 &attempt_applied, &attempt_busy);
      stage_used = true;
      if (!s.ok()) {
        if (apply_->healthy() &&
            !apply_->Exec("ROLLBACK TO SAVEPOINT tally_rows").ok() &&
            apply_->healthy()) {
          return absl::UnavailableError(
              absl::StrCat("rolling back a failed apply of ",
                           table.schema.name(), ": ", s.message()));
        }
        return s;
      }
      // Not released: a savepoint lives until the transaction ends anyway,
      // and the next part's SAVEPOINT of the same name nests inside it
      // (a ROLLBACK TO finds the newest). One round trip less per table.
      applied.insert(applied.end(), attempt_applied.begin(),
                     attempt_applied.end());
      busy->insert(busy->end(), attempt_busy.begin(), attempt_busy.end());
      return absl::OkStatus();
    };
    IsolationOutcome isolated =
        IsolateRows(part, options_.max_isolation_attempts, attempt,
                    [&](const absl::Status& s) {
                      apply_mu_.AssertHeld();
                      return ClassifyApplyError(s, apply_->healthy());
                    });
    if (!isolated.fatal.ok()) return isolated.fatal;
    for (auto& [i, why] : isolated.rejected) {
      (*outcomes)[i].rejected = absl::Status(
          why.code(),
          absl::StrCat(table.schema.name(), " refused the row of key ",
                       DescribeKey(rows[i].row.key), ": ", why.message()));
    }
    busy->insert(busy->end(), isolated.busy.begin(), isolated.busy.end());
  }

  if (applied.empty()) {
    // Nothing to commit (every row refused or busy).
    return apply_->Exec("ROLLBACK").status();
  }
  const int64_t stamp = std::max(NowStamp(), last_stamp_ + 1);
  ApplyMessage message;
  message.apply_sequence = static_cast<uint64_t>(stamp);
  message.token = RowToken{stamp, origin_id_};
  std::sort(applied.begin(), applied.end());
  for (uint32_t i : applied) {
    const RowChange& row = rows[i];
    AppliedRow a;
    a.keyspace = std::string(row.row.keyspace);
    a.key = std::string(row.row.key);
    a.version = *row.version;
    a.deleted = row.kind != RowChange::Kind::kPut;
    a.erased = row.kind == RowChange::Kind::kErase;
    message.rows.push_back(std::move(a));
  }
  // The origin's timestamp and LSN for this transaction (used at COMMIT,
  // so set last), and the message, in one round trip.
  TALLY_RETURN_IF_ERROR(
      apply_
          ->ExecPrepared(
              "SELECT pg_catalog.pg_replication_origin_xact_setup($1::pg_lsn, "
              "$2::timestamptz), "
              "pg_catalog.pg_logical_emit_message(true, $3, $4)",
              {Param::Text(FormatLsn(static_cast<Lsn>(stamp))),
               Param::Binary(Int8Bytes(stamp), kTimestamptzOid),
               Param::Text(std::string(kApplyMessagePrefix)),
               Param::Binary(EncodeApplyMessage(message), kByteaOid)})
          .status());
  ReachFaultPoint(options_.fault_points, FaultPoint::kApplyBeforeDbCommit);
  TALLY_RETURN_IF_ERROR(
      WithContext(apply_->Exec("COMMIT").status(), "committing an apply"));
  ReachFaultPoint(options_.fault_points, FaultPoint::kApplyAfterDbCommit);
  last_stamp_ = stamp;
  const std::string token = message.token.Encode();
  for (uint32_t i : applied) {
    RowOutcome& o = (*outcomes)[i];
    o.applied = true;
    // A tombstone keeps no token: no PostgreSQL row describes it.
    if (rows[i].kind == RowChange::Kind::kPut) o.payload = token;
  }
  return absl::OkStatus();
}

absl::Status PgBackend::ApplyPart(const StagedCall& call, const Table& table,
                                  uint32_t t, absl::Span<const uint32_t> part,
                                  bool stage_used,
                                  std::vector<uint32_t>* applied,
                                  std::vector<uint32_t>* busy) {
  if (stage_used) {
    // Rows of an earlier attempt of this transaction (ON COMMIT DELETE
    // ROWS empties it at COMMIT only).
    TALLY_RETURN_IF_ERROR(
        apply_->Exec(absl::StrCat("TRUNCATE pg_temp.", table.temp_name))
            .status());
  }
  const std::string& tuples = call.tuples[t];
  std::string data = call.header;
  size_t bytes = data.size() + 2;
  for (uint32_t i : part) bytes += call.tuple_at[i].second;
  data.reserve(bytes);
  for (uint32_t i : part) {
    data.append(tuples, call.tuple_at[i].first, call.tuple_at[i].second);
  }
  data.append("\xff\xff", 2);  // the trailer: a tuple of -1 fields
  TALLY_RETURN_IF_ERROR(WithContext(
      apply_->CopyIn(CopyStageSql(table.schema, table.temp_name), data)
          .status(),
      absl::StrCat("staging rows of ", table.schema.name())));
  if (part.size() >= kAnalyzeStageRows) {
    // The staging table's statistics: without them the planner takes it
    // for a few rows and joins the inserted rows back to it by a nested
    // loop, quadratic in the rows.
    TALLY_RETURN_IF_ERROR(
        apply_->Exec(absl::StrCat("ANALYZE pg_temp.", table.temp_name))
            .status());
  }
  absl::StatusOr<Result> merged = apply_->ExecPrepared(table.merge_sql, {});
  if (!merged.ok()) {
    return WithContext(merged.status(),
                       absl::StrCat("applying rows to ", table.schema.name()));
  }
  for (int r = 0; r < merged->rows(); ++r) {
    uint32_t i = 0;
    if (!absl::SimpleAtoi(merged->Value(r, 1), &i) ||
        i >= call.table_of.size() || call.table_of[i] != t) {
      return absl::InternalError("the apply returned a row it was not given");
    }
    (merged->Value(r, 0) == "b" ? busy : applied)->push_back(i);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> PgBackend::ReadValue(
    const RowLocation& row, absl::string_view stored_payload) const {
  TALLY_ASSIGN_OR_RETURN(auto values, ReadValues({row}, {stored_payload}));
  return std::move(values[0]);
}

absl::StatusOr<std::vector<absl::StatusOr<std::string>>> PgBackend::ReadValues(
    absl::Span<const RowLocation> rows,
    absl::Span<const absl::string_view> stored_payloads) const {
  if (rows.size() != stored_payloads.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ReadValues given ", rows.size(), " rows and ",
                     stored_payloads.size(), " payloads"));
  }
  std::vector<absl::StatusOr<std::string>> values(
      rows.size(), absl::InternalError("not read"));
  const std::vector<TablePtr> tables = Tables();
  std::vector<std::vector<size_t>> by_table(tables.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    // A tombstone: no row, the empty value.
    if (stored_payloads[i].empty()) {
      values[i] = std::string();
      continue;
    }
    auto it = table_index_.find(rows[i].keyspace);
    if (it == table_index_.end()) {
      values[i] = absl::FailedPreconditionError(absl::StrCat(
          "keyspace ", rows[i].keyspace, " is not a table this node keeps"));
      continue;
    }
    by_table[it->second].push_back(i);
  }
  absl::MutexLock lock(&read_mu_);
  for (size_t t = 0; t < tables.size(); ++t) {
    if (by_table[t].empty()) continue;
    if (tables[t] == nullptr) {
      for (size_t i : by_table[t]) {
        values[i] = MissingTableError(rows[i].keyspace);
      }
      continue;
    }
    if (reader_ == nullptr || !reader_->healthy()) {
      ConnectOptions connect = options_.connect;
      connect.application_name = "tally reader";
      absl::StatusOr<std::unique_ptr<Connection>> c =
          Connection::Open(options_.conninfo, connect);
      if (!c.ok()) return c.status();
      reader_ = std::move(*c);
    }
    TALLY_RETURN_IF_ERROR(
        ReadTable(*tables[t], rows, stored_payloads, by_table[t], &values));
  }
  return values;
}

absl::Status PgBackend::ReadTable(
    const Table& table, absl::Span<const RowLocation> rows,
    absl::Span<const absl::string_view> payloads,
    absl::Span<const size_t> indexes,
    std::vector<absl::StatusOr<std::string>>* values) const {
  const TableSchema& schema = table.schema;
  const RowCodec codec = schema.codec();
  const size_t k = schema.key_columns();
  std::vector<std::vector<absl::string_view>> key_arrays(k);
  std::vector<Field> fields;
  std::vector<size_t> asked;
  // The keys' local bytes, when a key column is rewritten: one string per
  // key, sized up front so that the views into them stay put.
  std::vector<std::string> local_bytes(indexes.size());
  size_t next_local = 0;
  for (size_t i : indexes) {
    absl::Status s =
        codec.DecodeKey(rows[i].key, &local_bytes[next_local++], &fields);
    bool has_null = false;
    for (const Field& f : fields) has_null |= f.is_null();
    if (!s.ok() || has_null) {
      (*values)[i] = absl::DataLossError(
          absl::StrCat("a key of keyspace ", schema.name(),
                       " is not the table's key encoding: ",
                       s.ok() ? "a key column is NULL" : s.message()));
      continue;
    }
    for (size_t c = 0; c < k; ++c) key_arrays[c].push_back(fields[c].bytes());
    asked.push_back(i);
  }
  if (asked.empty()) return absl::OkStatus();
  std::vector<Param> params;
  for (size_t c = 0; c < k; ++c) {
    params.push_back(
        Param::Binary(BinaryArray(schema.columns()[c].type_oid, key_arrays[c]),
                      schema.columns()[c].array_type_oid));
  }
  absl::StatusOr<Result> r =
      reader_->ExecPrepared(table.read_sql, params, /*binary_results=*/true);
  if (!r.ok()) {
    return WithContext(r.status(),
                       absl::StrCat("reading rows of ", schema.name()));
  }
  struct Found {
    std::string value;
    RowToken token;
  };
  absl::flat_hash_map<std::string, Found> found;
  const int n = static_cast<int>(codec.columns());
  std::string key, value;
  std::vector<Field> row;
  for (int i = 0; i < r->rows(); ++i) {
    row.clear();
    for (int c = 0; c < n; ++c) {
      row.push_back(r->IsNull(i, c) ? Field::Null()
                                    : Field::Of(r->Value(i, c)));
    }
    TALLY_RETURN_IF_ERROR(codec.Encode(row, &key, &value));
    auto nullable = [&](int c) {
      return r->IsNull(i, c) ? Field::Null() : Field::Of(r->Value(i, c));
    };
    TALLY_ASSIGN_OR_RETURN(RowToken token,
                           RowToken::FromBinary(nullable(n), nullable(n + 1)));
    found[key] = Found{value, token};
  }
  for (size_t i : asked) {
    absl::StatusOr<RowToken> want = RowToken::Decode(payloads[i]);
    if (!want.ok()) {
      (*values)[i] = want.status();
      continue;
    }
    auto it = found.find(rows[i].key);
    if (it == found.end() || it->second.token != *want) {
      (*values)[i] =
          NotTheIndexedRow(schema.name(), *want,
                           it == found.end() ? nullptr : &it->second.token);
      continue;
    }
    (*values)[i] = it->second.value;
  }
  return absl::OkStatus();
}

}  // namespace pg
}  // namespace tally
