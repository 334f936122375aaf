#include "pg/table_diff/table_diff.h"

#include <optional>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "pg/schema/row_codec.h"
#include "pg/schema/schema_difference.h"
#include "pg/table_diff/block_hashes.h"
#include "pg/wire/binary_copy.h"
#include "tree/status_macros.h"

namespace tally {
namespace pg {
namespace {

absl::Status Prefixed(const absl::Status& s, absl::string_view side) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(side, ": ", s.message()));
}

// Rolls back the transaction a failed step left open, when it can.
void Abandon(Connection& conn) {
  if (conn.healthy()) conn.Exec("ROLLBACK").IgnoreError();
}

// One side of a diff: its snapshot's schema, then its scan.
struct Side {
  Side(Connection* conn, std::string table, std::string name)
      : conn(conn), table(std::move(table)), name(std::move(name)) {}

  Connection* conn;
  std::string table;
  std::string name;  // "a" or "b", for messages
  std::optional<TableSchema> schema;
  std::optional<BlockHashes> hashes;
  std::optional<TableScan> scan;
  absl::Status status;
  uint64_t estimated_rows = 0;
  ScanCounters counters;

  void Hash(absl::string_view where, int bits) {
    absl::StatusOr<BlockHashes> h =
        ReadBlockHashes(*conn, *schema, where, bits);
    if (!h.ok()) {
      status = h.status();
      return;
    }
    hashes.emplace(*std::move(h));
  }

  // `estimate`: also read the table's row estimate (for progress).
  void ReadSchema(const RowScope& scope, bool estimate) {
    status = conn->Exec("BEGIN ISOLATION LEVEL REPEATABLE READ").status();
    if (!status.ok()) return;
    absl::StatusOr<TableSchema> s = TableSchema::Read(*conn, table);
    if (s.ok() && (!scope.columns.empty() || !scope.exclude_columns.empty())) {
      s = s->WithColumns(scope.columns, scope.exclude_columns);
    }
    if (!s.ok()) {
      status = s.status();
      return;
    }
    schema.emplace(*std::move(s));
    if (estimate) estimated_rows = EstimatedRows(*conn, *schema);
  }

  void Scan(absl::string_view keyspace, absl::string_view where) {
    counters.rows.store(0);
    counters.bytes.store(0);
    absl::StatusOr<TableScan> s =
        TableScan::Run(*conn, *schema, keyspace, where, &counters);
    if (!s.ok()) {
      status = s.status();
      return;
    }
    scan.emplace(*std::move(s));
    status = conn->Exec("COMMIT").status();
  }
};

// Runs `step` on both sides at once, one thread each; the first error,
// prefixed with its side. Either side's transaction is rolled back then.
// `tick`, when set, is called about once a second from this thread until
// both sides are done.
template <typename Step>
absl::Status OnBoth(Side& a, Side& b, Step step,
                    const std::function<void()>& tick = nullptr) {
  absl::Mutex mu;
  int running = 2;
  auto run = [&](Side& side) {
    step(side);
    absl::MutexLock lock(&mu);
    --running;
  };
  std::thread side_a([&] { run(a); });
  std::thread side_b([&] { run(b); });
  auto done = [&running]() { return running == 0; };
  while (true) {
    {
      absl::MutexLock lock(&mu);
      if (mu.AwaitWithTimeout(
              absl::Condition(&done),
              tick == nullptr ? absl::InfiniteDuration() : absl::Seconds(1))) {
        break;
      }
    }
    tick();
  }
  side_a.join();
  side_b.join();
  if (!a.status.ok() || !b.status.ok()) {
    Abandon(*a.conn);
    Abandon(*b.conn);
  }
  TALLY_RETURN_IF_ERROR(Prefixed(a.status, a.name));
  return Prefixed(b.status, b.name);
}

}  // namespace

std::vector<RowDifference> CompareScans(const TableScan& a,
                                        const TableScan& b) {
  std::vector<bool> differs(TableScan::kLeaves, false);
  for (size_t i = 0; i < TableScan::kLeaves; ++i) {
    differs[i] = a.leaf_digests()[i] != b.leaf_digests()[i] ||
                 a.leaf_counts()[i] != b.leaf_counts()[i];
  }
  const std::vector<ScannedRow> rows_a = a.RowsIn(differs);
  const std::vector<ScannedRow> rows_b = b.RowsIn(differs);
  std::vector<RowDifference> out;
  size_t i = 0;
  size_t j = 0;
  auto before = [](const ScannedRow& x, const ScannedRow& y) {
    return x.token != y.token ? x.token < y.token : x.key < y.key;
  };
  while (i < rows_a.size() || j < rows_b.size()) {
    if (j == rows_b.size() ||
        (i < rows_a.size() && before(rows_a[i], rows_b[j]))) {
      out.push_back({std::string(rows_a[i++].key), true, false});
    } else if (i == rows_a.size() || before(rows_b[j], rows_a[i])) {
      out.push_back({std::string(rows_b[j++].key), false, true});
    } else {
      if (rows_a[i].digest != rows_b[j].digest) {
        out.push_back({std::string(rows_a[i].key), true, true});
      }
      ++i;
      ++j;
    }
  }
  return out;
}

absl::StatusOr<TableDiff> DiffTables(Connection& a, Connection& b,
                                     absl::string_view table_a,
                                     absl::string_view table_b,
                                     const RowScope& scope, Transfer transfer,
                                     const DiffProgressFn& progress) {
  const absl::Time start = absl::Now();
  if (absl::StrContains(scope.where, ';')) {
    return absl::InvalidArgumentError(
        "--where is one SQL condition (what follows WHERE); it may not hold "
        "';'");
  }
  Side side_a{&a, std::string(table_a), "a"};
  Side side_b{&b, std::string(table_b), "b"};
  TALLY_RETURN_IF_ERROR(OnBoth(side_a, side_b, [&](Side& s) {
    s.ReadSchema(scope, progress != nullptr);
  }));
  if (side_a.schema->fingerprint() != side_b.schema->fingerprint()) {
    Abandon(a);
    Abandon(b);
    std::string why = DescribeSchemaDifference(side_a.schema->description(),
                                               side_b.schema->description());
    absl::StrReplaceAll({{" here", " in a"}, {" there", " in b"}}, &why);
    const std::string names = table_a == table_b
                                  ? std::string(table_a)
                                  : absl::StrCat(table_a, " and ", table_b);
    return absl::FailedPreconditionError(
        absl::StrCat("schemas of ", names, " differ: ", why,
                     "; their rows cannot be compared"));
  }
  const std::string keyspace = side_a.schema->name();
  TableDiff diff{keyspace, *side_a.schema, *side_b.schema, 0, 0, {}, {}, {}};
  diff.transfer = transfer;
  // The progress of a step, from the sides' counters.
  auto tick_for = [&](DiffProgress::Step step,
                      uint64_t buckets) -> std::function<void()> {
    if (progress == nullptr) return nullptr;
    return [&, step, buckets] {
      DiffProgress p;
      p.step = step;
      p.rows_read_a = side_a.counters.rows.load(std::memory_order_relaxed);
      p.rows_read_b = side_b.counters.rows.load(std::memory_order_relaxed);
      p.bytes_read_a = side_a.counters.bytes.load(std::memory_order_relaxed);
      p.bytes_read_b = side_b.counters.bytes.load(std::memory_order_relaxed);
      p.rows_estimated_a = side_a.estimated_rows;
      p.rows_estimated_b = side_b.estimated_rows;
      p.buckets_differing = buckets;
      p.elapsed = absl::Now() - start;
      progress(p);
    };
  };
  if (transfer == Transfer::kRows) {
    TALLY_RETURN_IF_ERROR(OnBoth(
        side_a, side_b, [&](Side& s) { s.Scan(keyspace, scope.where); },
        tick_for(DiffProgress::Step::kReading, 0)));
    diff.rows_a = diff.rows_read_a = side_a.scan->rows();
    diff.rows_b = diff.rows_read_b = side_b.scan->rows();
    diff.bytes_read_a = side_a.scan->bytes();
    diff.bytes_read_b = side_b.scan->bytes();
    diff.root_a = side_a.scan->root();
    diff.root_b = side_b.scan->root();
    diff.differences = CompareScans(*side_a.scan, *side_b.scan);
    return diff;
  }
  // Block hashes, then the rows of the differing buckets, in the same
  // snapshot on each side.
  const int bits = kDefaultBucketBits;
  TALLY_RETURN_IF_ERROR(OnBoth(
      side_a, side_b, [&](Side& s) { s.Hash(scope.where, bits); },
      tick_for(DiffProgress::Step::kHashing, 0)));
  diff.rows_a = side_a.hashes->rows;
  diff.rows_b = side_b.hashes->rows;
  diff.bytes_read_a = side_a.hashes->bytes_received;
  diff.bytes_read_b = side_b.hashes->bytes_received;
  diff.buckets = side_a.hashes->counts.size();
  const std::vector<uint32_t> differing =
      DifferingBuckets(*side_a.hashes, *side_b.hashes);
  diff.buckets_differing = differing.size();
  if (differing.empty()) {
    TALLY_RETURN_IF_ERROR(OnBoth(side_a, side_b, [](Side& s) {
      s.status = s.conn->Exec("COMMIT").status();
    }));
    return diff;
  }
  std::string where = BucketCondition(*side_a.schema, bits, differing);
  if (!scope.where.empty()) {
    where = absl::StrCat("(", scope.where, ") AND ", where);
  }
  TALLY_RETURN_IF_ERROR(OnBoth(
      side_a, side_b, [&](Side& s) { s.Scan(keyspace, where); },
      tick_for(DiffProgress::Step::kReading, differing.size())));
  diff.rows_read_a = side_a.scan->rows();
  diff.rows_read_b = side_b.scan->rows();
  diff.bytes_read_a += side_a.scan->bytes();
  diff.bytes_read_b += side_b.scan->bytes();
  diff.differences = CompareScans(*side_a.scan, *side_b.scan);
  return diff;
}

absl::StatusOr<RepairCounts> RepairTable(Connection& source,
                                         const TableSchema& source_schema,
                                         Connection& target,
                                         const TableSchema& target_schema,
                                         absl::Span<const std::string> keys) {
  RepairCounts counts;
  if (keys.empty()) return counts;
  TALLY_ASSIGN_OR_RETURN(std::vector<CanonicalRow> rows,
                         ReadRowsByKey(source, source_schema, keys));
  return WriteRows(target, target_schema, keys, rows);
}

absl::StatusOr<RepairCounts> WriteRows(Connection& target,
                                       const TableSchema& target_schema,
                                       absl::Span<const std::string> keys,
                                       absl::Span<const CanonicalRow> rows) {
  RepairCounts counts;
  if (keys.empty()) return counts;
  // Every statement goes to the target, with its OIDs.
  const TableSchema& schema = target_schema;
  absl::flat_hash_set<absl::string_view> in_source;
  for (const CanonicalRow& row : rows) in_source.insert(row.key);
  std::vector<std::string> gone;
  for (const std::string& key : keys) {
    if (!in_source.contains(key)) gone.push_back(key);
  }

  const RowCodec codec = schema.codec();
  CopyBinaryWriter writer;
  std::vector<Field> fields;
  std::string local_bytes;
  for (const CanonicalRow& row : rows) {
    TALLY_RETURN_IF_ERROR(
        codec.Decode(row.key, row.value, &local_bytes, &fields));
    TALLY_RETURN_IF_ERROR(writer.AddRow(fields));
  }
  writer.Finish();
  std::vector<std::string> sets;
  for (size_t i = schema.key_columns(); i < schema.columns().size(); ++i) {
    const std::string column = target.QuoteIdentifier(schema.columns()[i].name);
    sets.push_back(absl::StrCat(column, " = EXCLUDED.", column));
  }
  const std::string on_conflict =
      sets.empty() ? "DO NOTHING"
                   : absl::StrCat("DO UPDATE SET ", absl::StrJoin(sets, ", "));
  std::vector<std::string> key_match;
  for (size_t i = 0; i < schema.key_columns(); ++i) {
    const std::string column = target.QuoteIdentifier(schema.columns()[i].name);
    key_match.push_back(absl::StrCat("t.", column, " = k.", column));
  }

  // The deletes share WithKeysTable's transaction, so the upserts and the
  // deletes commit together.
  TALLY_RETURN_IF_ERROR(WithKeysTable(target, schema, gone, [&] {
    if (!rows.empty()) {
      TALLY_RETURN_IF_ERROR(
          target
              .Exec(absl::StrCat("CREATE TEMPORARY TABLE tally_rows ON COMMIT "
                                 "DROP AS SELECT ",
                                 schema.select_list(), " FROM ",
                                 schema.quoted_name(), " WITH NO DATA"))
              .status());
      TALLY_RETURN_IF_ERROR(
          target
              .CopyIn("COPY tally_rows FROM STDIN (FORMAT binary)",
                      writer.TakeBuffered())
              .status());
      TALLY_ASSIGN_OR_RETURN(
          Result upserted,
          target.Exec(absl::StrCat(
              "INSERT INTO ", schema.quoted_name(), " (", schema.select_list(),
              ") SELECT ", schema.select_list(), " FROM tally_rows ",
              "ON CONFLICT (", schema.key_list(), ") ", on_conflict)));
      counts.upserted = upserted.AffectedRows();
    }
    if (!gone.empty()) {
      TALLY_ASSIGN_OR_RETURN(
          Result deleted,
          target.Exec(absl::StrCat("DELETE FROM ", schema.quoted_name(),
                                   " AS t USING tally_keys AS k WHERE ",
                                   absl::StrJoin(key_match, " AND "))));
      counts.deleted = deleted.AffectedRows();
    }
    return absl::OkStatus();
  }));
  return counts;
}

absl::StatusOr<std::vector<std::string>> StillDifferent(
    Connection& a, const TableSchema& schema_a, Connection& b,
    const TableSchema& schema_b, absl::Span<const std::string> keys) {
  TALLY_ASSIGN_OR_RETURN(std::vector<CanonicalRow> rows_a,
                         ReadRowsByKey(a, schema_a, keys));
  TALLY_ASSIGN_OR_RETURN(std::vector<CanonicalRow> rows_b,
                         ReadRowsByKey(b, schema_b, keys));
  absl::flat_hash_map<std::string, std::string> values_a;
  for (CanonicalRow& row : rows_a) {
    values_a.emplace(std::move(row.key), std::move(row.value));
  }
  absl::flat_hash_map<std::string, std::string> values_b;
  for (CanonicalRow& row : rows_b) {
    values_b.emplace(std::move(row.key), std::move(row.value));
  }
  std::vector<std::string> left;
  for (const std::string& key : keys) {
    auto in_a = values_a.find(key);
    auto in_b = values_b.find(key);
    const bool equal = (in_a == values_a.end() && in_b == values_b.end()) ||
                       (in_a != values_a.end() && in_b != values_b.end() &&
                        in_a->second == in_b->second);
    if (!equal) left.push_back(key);
  }
  return left;
}

}  // namespace pg
}  // namespace tally
