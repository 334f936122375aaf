#include "pg/sidecar/bootstrap.h"

#include <algorithm>
#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "pg/sidecar/build_marker.h"
#include "pg/sidecar/commit_stamp.h"
#include "pg/sidecar/lost_deletes.h"
#include "pg/wire/binary_copy.h"
#include "pg/wire/field.h"
#include "pg/wire/replication_messages.h"
#include "storage/bulk/gathered_rows.h"
#include "tree/status_macros.h"
#include "tree/token.h"

namespace tally {
namespace pg {
namespace {

// The rows of one build on their way to the store: a batch fills on the
// scan's thread while the previous one is written on a thread of its own,
// so reading PostgreSQL and writing LevelDB overlap. Writes stay one at a
// time and in order: the position, with the last batch, is written only
// after every batch before it (a crash mid-build still leaves none).
class BatchWriter {
 public:
  BatchWriter(storage::Store* store, size_t batch_rows)
      : store_(store), batch_rows_(std::max<size_t>(1, batch_rows)) {}
  ~BatchWriter() { (void)Wait(); }
  BatchWriter(const BatchWriter&) = delete;
  BatchWriter& operator=(const BatchWriter&) = delete;

  // Returns an error of an earlier batch's write.
  absl::Status Add(storage::Mutation m) {
    request_.mutations.push_back(std::move(m));
    if (request_.mutations.size() < batch_rows_) return absl::OkStatus();
    return Dispatch(/*absent=*/false);
  }

  // Adds a row the keyspace does not hold, for Store::LoadAbsent: the rows
  // added this way must come in (token, key) order, after every row the
  // keyspace holds. Writes what Add gathered first.
  absl::Status AddAbsent(storage::Mutation m) {
    if (!request_.mutations.empty()) {
      TALLY_RETURN_IF_ERROR(Dispatch(/*absent=*/false));
    }
    absent_.mutations.push_back(std::move(m));
    if (absent_.mutations.size() < batch_rows_) return absl::OkStatus();
    return Dispatch(/*absent=*/true);
  }

  // Hands the absent rows gathered so far to the writing thread (before
  // the rows of another keyspace: a LoadAbsent request holds one).
  absl::Status FinishAbsent() {
    if (absent_.mutations.empty()) return absl::OkStatus();
    return Dispatch(/*absent=*/true);
  }

  // Waits for the batch being written, then writes what is pending (with
  // `position` when set, even if nothing is).
  absl::Status Flush(std::optional<storage::BackendPosition> position) {
    if (!absent_.mutations.empty()) {
      TALLY_RETURN_IF_ERROR(Dispatch(/*absent=*/true));
    }
    TALLY_RETURN_IF_ERROR(Wait());
    if (request_.mutations.empty() && !position.has_value()) {
      return absl::OkStatus();
    }
    request_.backend_position = std::move(position);
    absl::Status s = WriteSorted(std::move(request_));
    request_ = storage::WriteRequest();
    return s;
  }

  // Rows whose index record changed, of the batches written so far.
  uint64_t written() const { return written_.load(); }

 private:
  // Hands the gathered batch (the absent rows' when `absent`) to the
  // writing thread, once the write before it is done.
  absl::Status Dispatch(bool absent) {
    TALLY_RETURN_IF_ERROR(Wait());
    storage::WriteRequest& gathered = absent ? absent_ : request_;
    writing_ =
        std::thread([this, absent, request = std::move(gathered)]() mutable {
          write_status_ = absent ? WriteAbsent(std::move(request))
                                 : WriteSorted(std::move(request));
        });
    gathered = storage::WriteRequest();
    return absl::OkStatus();
  }

  // Writes rows the keyspace does not hold, in order, without the store's
  // read of each row before its write (Store::LoadAbsent).
  absl::Status WriteAbsent(storage::WriteRequest request) {
    request.mode = storage::ApplyMode::kCaptured;
    absl::StatusOr<storage::WriteResult> r =
        store_->LoadAbsent(std::move(request));
    if (absl::IsFailedPrecondition(r.status())) {
      // Something else wrote the keyspace during the build (its sessions
      // are refused meanwhile, so it should not happen): nothing of this
      // batch was written, and the build starts again, from what the
      // index then holds.
      return absl::UnavailableError(
          absl::StrCat("the index changed during its build; building again (",
                       r.status().message(), ")"));
    }
    if (!r.ok()) return r.status();
    written_ += r->applied.size();
    return absl::OkStatus();
  }

  // Joins the write in flight; its status.
  absl::Status Wait() {
    if (writing_.joinable()) writing_.join();
    return write_status_;
  }

  // Writes `request` in the index's key order (token, then key): LevelDB
  // finds each key near the previous one in its memtable instead of
  // missing the CPU cache at every level of the skip list, for both the
  // read before the write and the insert (the keys of a snapshot are
  // distinct, so their order in a batch changes nothing else).
  absl::Status WriteSorted(storage::WriteRequest request) {
    std::vector<std::pair<tree::Token, uint32_t>> order;
    order.reserve(request.mutations.size());
    for (size_t i = 0; i < request.mutations.size(); ++i) {
      order.emplace_back(tree::TokenOf(request.mutations[i].key),
                         static_cast<uint32_t>(i));
    }
    std::sort(order.begin(), order.end(), [&](const auto& a, const auto& b) {
      if (a.first != b.first) return a.first < b.first;
      return request.mutations[a.second].key < request.mutations[b.second].key;
    });
    std::vector<storage::Mutation> sorted;
    sorted.reserve(order.size());
    for (const auto& [token, i] : order) {
      sorted.push_back(std::move(request.mutations[i]));
    }
    request.mutations = std::move(sorted);
    request.mode = storage::ApplyMode::kCaptured;
    absl::StatusOr<storage::WriteResult> r = store_->Write(std::move(request));
    if (!r.ok()) return r.status();
    for (bool applied : r->applied) written_ += applied ? 1 : 0;
    return absl::OkStatus();
  }

  storage::Store* const store_;
  const size_t batch_rows_;
  // The batches filling, on the scan's thread: rows for Store::Write, and
  // rows for Store::LoadAbsent.
  storage::WriteRequest request_;
  storage::WriteRequest absent_;
  // The write of the previous batch; write_status_ is set by it and read
  // by the scan's thread only after joining it.
  std::thread writing_;
  absl::Status write_status_;
  // Read by the progress reports while a batch is written.
  std::atomic<uint64_t> written_{0};
};

// The id of replication origin `name`, nullopt when it does not exist.
absl::StatusOr<std::optional<OriginId>> OriginIdOf(Connection& conn,
                                                   absl::string_view name) {
  TALLY_ASSIGN_OR_RETURN(
      Result r, conn.ExecParams("SELECT roident FROM "
                                "pg_catalog.pg_replication_origin WHERE "
                                "roname = $1",
                                {Param::Text(std::string(name))}));
  uint32_t id = 0;
  if (r.rows() != 1) return std::nullopt;
  if (!absl::SimpleAtoi(r.Value(0, 0), &id) || id > 0xffff) {
    return absl::InternalError(
        absl::StrCat("replication origin ", name, " has no usable id"));
  }
  return OriginId{static_cast<uint16_t>(id)};
}

absl::StatusOr<uint64_t> EstimatedRows(Connection& conn,
                                       const TableSchema& table) {
  TALLY_ASSIGN_OR_RETURN(
      Result r,
      // A partitioned table's rows are its leaves' (pg_partition_tree of a
      // plain table is empty).
      conn.ExecParams(
          "SELECT CASE WHEN c.relkind = 'p' THEN (SELECT "
          "coalesce(sum(greatest(l.reltuples, 0)), 0) FROM "
          "pg_partition_tree(c.oid) p JOIN pg_class l ON l.oid = p.relid "
          "WHERE p.isleaf) ELSE greatest(c.reltuples, 0) END::bigint FROM "
          "pg_class c WHERE c.oid = $1::regclass",
          {Param::Text(table.quoted_name())}));
  uint64_t n = 0;
  if (r.rows() == 1) (void)absl::SimpleAtoi(r.Value(0, 0), &n);
  return n;
}

}  // namespace

absl::Status EnsurePublication(Connection& conn, absl::string_view name,
                               const std::vector<TableSchema>& tables) {
  std::vector<std::string> wanted;
  for (const TableSchema& t : tables) wanted.push_back(t.name());
  std::sort(wanted.begin(), wanted.end());
  TALLY_ASSIGN_OR_RETURN(
      Result exists,
      conn.ExecParams("SELECT 1 FROM pg_publication WHERE pubname = $1",
                      {Param::Text(std::string(name))}));
  std::vector<std::string> quoted;
  for (const TableSchema& t : tables) quoted.push_back(t.quoted_name());
  const std::string list = absl::StrJoin(quoted, ", ");
  // publish_via_partition_root: a partitioned table's changes come under
  // its own relid and name (the keyspace), not its leaves'; a cross-
  // partition UPDATE is a Delete and an Insert of the parent. (A TRUNCATE
  // of one leaf is then not sent at all: the sidecar's catalog check sees
  // the leaf's new relfilenode, pg/schema/table_schema.h.)
  if (exists.rows() == 0) {
    TALLY_ASSIGN_OR_RETURN(
        Result created,
        conn.Exec(absl::StrCat(
            "CREATE PUBLICATION ", conn.QuoteIdentifier(name),
            // Every kept table missing (dropped): a publication of none.
            list.empty() ? "" : absl::StrCat(" FOR TABLE ", list),
            " WITH (publish_via_partition_root = true)")));
    (void)created;
    return absl::OkStatus();
  }
  // A publication of an older tally, created without it. Only a build
  // calls this, before it creates the slot: decoding reads the publication
  // as of each change, and the new slot starts after this change.
  TALLY_ASSIGN_OR_RETURN(
      Result via_root,
      conn.ExecParams("SELECT pubviaroot FROM pg_publication WHERE "
                      "pubname = $1",
                      {Param::Text(std::string(name))}));
  if (via_root.rows() == 1 && via_root.Value(0, 0) != "t") {
    TALLY_ASSIGN_OR_RETURN(
        Result altered,
        conn.Exec(absl::StrCat("ALTER PUBLICATION ", conn.QuoteIdentifier(name),
                               " SET (publish_via_partition_root = true)")));
    (void)altered;
  }
  TALLY_ASSIGN_OR_RETURN(
      Result listed,
      conn.ExecParams("SELECT schemaname || '.' || tablename FROM "
                      "pg_publication_tables WHERE pubname = $1 ORDER BY 1",
                      {Param::Text(std::string(name))}));
  std::vector<std::string> have;
  for (int i = 0; i < listed.rows(); ++i) {
    have.emplace_back(listed.Value(i, 0));
  }
  std::sort(have.begin(), have.end());
  if (have == wanted) return absl::OkStatus();
  if (wanted.empty()) {
    // SET TABLE needs one; every kept table is missing (dropped).
    std::vector<std::string> listed_quoted;
    for (const std::string& h : have) {
      std::string schema, table;
      TALLY_RETURN_IF_ERROR(SplitQualifiedName(h, &schema, &table));
      listed_quoted.push_back(absl::StrCat(conn.QuoteIdentifier(schema), ".",
                                           conn.QuoteIdentifier(table)));
    }
    TALLY_ASSIGN_OR_RETURN(
        Result dropped,
        conn.Exec(absl::StrCat("ALTER PUBLICATION ", conn.QuoteIdentifier(name),
                               " DROP TABLE ",
                               absl::StrJoin(listed_quoted, ", "))));
    (void)dropped;
    return absl::OkStatus();
  }
  TALLY_ASSIGN_OR_RETURN(
      Result altered,
      conn.Exec(absl::StrCat("ALTER PUBLICATION ", conn.QuoteIdentifier(name),
                             " SET TABLE ", list)));
  (void)altered;
  return absl::OkStatus();
}

absl::Status ScanTable(
    Connection& conn, const TableSchema& schema, absl::string_view where,
    absl::FunctionRef<absl::Status(const ScannedRow&)> on_row) {
  std::vector<std::string> columns;
  for (const TableColumn& c : schema.columns()) {
    columns.push_back(absl::StrCat("tally_t.", conn.QuoteIdentifier(c.name)));
  }
  // The table is aliased and its columns qualified: a column named
  // "timestamp" or "roident" must not clash with the token's.
  std::string sql = absl::StrCat(
      "COPY (SELECT ", absl::StrJoin(columns, ", "),
      ", tally_o.timestamp, tally_o.roident FROM ", schema.quoted_name(),
      " AS tally_t LEFT JOIN LATERAL "
      "pg_xact_commit_timestamp_origin(tally_t.xmin) AS tally_o ON true");
  if (!where.empty()) absl::StrAppend(&sql, " WHERE ", where);
  absl::StrAppend(&sql, ") TO STDOUT (FORMAT binary)");
  const RowCodec codec = schema.codec();
  const size_t n = codec.columns();
  std::string key, value;
  CopyBinaryReader reader(
      [&](absl::Span<const Field> fields) -> absl::Status {
        TALLY_RETURN_IF_ERROR(codec.Encode(fields.subspan(0, n), &key, &value));
        TALLY_ASSIGN_OR_RETURN(RowToken token,
                               RowToken::FromBinary(fields[n], fields[n + 1]));
        return on_row(ScannedRow{key, value, token});
      },
      static_cast<int>(n + 2));
  TALLY_RETURN_IF_ERROR(conn.CopyOut(
      sql, [&](absl::string_view chunk) { return reader.Feed(chunk); }));
  absl::Status finished = reader.Finish();
  if (!finished.ok()) {
    return absl::Status(finished.code(),
                        absl::StrCat("reading table ", schema.name(), ": ",
                                     finished.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::flat_hash_map<std::string, IndexEntry>> ReadIndex(
    storage::Store* store, absl::string_view keyspace) {
  absl::flat_hash_map<std::string, IndexEntry> out;
  // The index alone: checking values would read every row back from the
  // table, one round trip each.
  const absl::Status s = store->ScanIndex(
      keyspace, [&](const storage::IndexRecord& r) -> absl::Status {
        out[std::string(r.key)] = IndexEntry{r.version, r.deleted, r.digest,
                                             std::string(r.payload), r.damaged};
        return absl::OkStatus();
      });
  if (absl::IsNotFound(s)) return out;
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<BuildResult> BuildIndex(const BuildOptions& options,
                                       storage::Store* store) {
  TALLY_ASSIGN_OR_RETURN(std::unique_ptr<Connection> reader,
                         Connection::Open(options.conninfo, options.connect));
  TALLY_RETURN_IF_ERROR(
      EnsurePublication(*reader, options.names.publication, options.tables));

  BuildResult result;
  TALLY_ASSIGN_OR_RETURN(result.stream, ReplicationStream::Connect(
                                            options.conninfo, options.connect));
  TALLY_ASSIGN_OR_RETURN(SystemIdentity identity,
                         result.stream->IdentifySystem());
  if (!absl::SimpleAtoi(identity.system_id, &result.position.system_id)) {
    return absl::DataLossError(absl::StrCat(
        "IDENTIFY_SYSTEM answered system id '", identity.system_id, "'"));
  }
  // Index lost: the deletes made here since the lost index last confirmed
  // are still in the old slot, which the build is about to replace.
  LocalDeletes lost_deletes;
  if (options.index_lost) {
    absl::StatusOr<LocalDeletes> read =
        ReadLocalDeletes(*reader, options.names, options.tables);
    if (absl::IsUnavailable(read.status())) return read.status();  // retry
    if (read.ok()) {
      lost_deletes = *std::move(read);
    } else {
      // Undecodable, or more WAL than the query timeout decodes: the loss
      // is rebuilt without the deletes rather than never (logged).
      result.old_slot_error = read.status().ToString();
    }
    result.old_slot_read = lost_deletes.slot_found;
    result.truncated_while_lost.assign(lost_deletes.truncated.begin(),
                                       lost_deletes.truncated.end());
    std::sort(result.truncated_while_lost.begin(),
              result.truncated_while_lost.end());
  }
  // A leftover slot is an unfinished build's (a finished one would have
  // stored a position, and the caller builds only without one or after
  // deciding the slot is unusable).
  // Looked up first: dropping a slot that is not there fails on the
  // server, which logs an ERROR at every first start — noise in the
  // DBA's server log that looks like a fault.
  TALLY_ASSIGN_OR_RETURN(
      Result leftover,
      reader->ExecParams("SELECT 1 FROM pg_catalog.pg_replication_slots "
                         "WHERE slot_name = $1",
                         {Param::Text(options.names.slot)}));
  if (leftover.rows() > 0) {
    absl::Status dropped = result.stream->DropSlot(options.names.slot);
    // Gone meanwhile (dropped by hand) is what was wanted.
    if (!dropped.ok() && !absl::IsNotFound(dropped)) return dropped;
  }
  TALLY_ASSIGN_OR_RETURN(result.started_unix_us, ServerUnixMicros(*reader));
  TALLY_ASSIGN_OR_RETURN(CreatedSlot slot,
                         result.stream->CreateLogicalSlot(options.names.slot));
  result.position.resume_lsn = slot.consistent_point;
  // The schemas the index is built with, so that a later start (or the
  // sidecar's catalog check) sees a schema changed meanwhile.
  for (const TableSchema& t : options.tables) {
    result.position.fingerprints[t.name()] = t.stored_fingerprint();
  }
  for (const std::string& name : options.missing) {
    result.position.fingerprints[name] = std::string(kMissingTable);
  }

  TALLY_ASSIGN_OR_RETURN(Result begun,
                         reader->Exec("BEGIN ISOLATION LEVEL REPEATABLE READ"));
  (void)begun;
  TALLY_ASSIGN_OR_RETURN(
      Result imported,
      reader->Exec(absl::StrCat("SET TRANSACTION SNAPSHOT ",
                                reader->QuoteLiteral(slot.snapshot_name))));
  (void)imported;

  // Index lost: rows tally applied here carry the node's origin; any
  // other origin is a local write, as capture counts them.
  std::optional<OriginId> own_origin;
  if (options.index_lost) {
    TALLY_ASSIGN_OR_RETURN(own_origin,
                           OriginIdOf(*reader, options.names.origin));
  }

  BuildProgress& progress = result.progress;
  std::vector<uint64_t> estimated;
  for (const TableSchema& t : options.tables) {
    TALLY_ASSIGN_OR_RETURN(uint64_t n, EstimatedRows(*reader, t));
    progress.rows_estimated += n;
    estimated.push_back(n);
  }

  // One fresh version for the whole build, taken only if needed.
  std::optional<tree::Version> fresh;
  auto fresh_version = [&]() -> const tree::Version& {
    if (!fresh.has_value()) {
      fresh = tree::Version{store->clock().Now(), options.node_name};
    }
    return *fresh;
  };
  const tree::Version bootstrap = BootstrapVersion();
  // A rebuild's version for a row the index does not describe: when the
  // row was last written, as capture would have stamped it — not when the
  // rebuild ran, or the database rebuilt last would win every such row
  // over newer writes elsewhere (after the same ADD COLUMN on two
  // databases, every row's value changes). A fresh stamp when the server
  // has no commit time, or it does not order after the index's version.
  tree::Version written;
  auto rebuild_version = [&](const RowToken& token,
                             const IndexEntry* old) -> const tree::Version* {
    if (!token.commit_time_us.has_value()) return &fresh_version();
    written =
        tree::Version{CommitStampOf(*token.commit_time_us), options.node_name};
    if (old != nullptr && tree::CompareVersions(written, old->version) <= 0) {
      return &fresh_version();
    }
    return &written;
  };
  // Index lost: a version for a local write committed at `commit_us` that
  // orders after whatever the peers may hold for its row (the lost index
  // knew what they had; capture stamps the commit time and raises it past
  // a newer stored row): Now() after observing the commit time. One
  // stamp serves every row committed before it; a commit time after it
  // (the server's clock ahead of this host's) takes a new one.
  std::optional<tree::Version> lost_fresh;
  auto lost_version = [&](int64_t commit_us) -> const tree::Version& {
    const tree::HlcTimestamp commit = tree::HlcTimestamp::FromParts(
        static_cast<uint64_t>(absl::ToUnixMillis(FromPgTimestamp(commit_us))),
        0);
    if (!lost_fresh.has_value() || !(commit < lost_fresh->timestamp)) {
      (void)store->clock().Observe(commit);
      lost_fresh = tree::Version{store->clock().Now(), options.node_name};
    }
    return *lost_fresh;
  };
  auto written_here = [&](const RowToken& token) {
    if (!options.index_lost || !token.commit_time_us.has_value()) return false;
    if (own_origin.has_value() && token.origin == *own_origin) return false;
    return !options.lost_since_unix_us.has_value() ||
           absl::ToUnixMicros(FromPgTimestamp(*token.commit_time_us)) >=
               *options.lost_since_unix_us;
  };
  BatchWriter writer(store, options.batch_rows);
  absl::Time next_report = absl::Now() + options.progress_interval;
  // Erases every row the index holds for `keyspace` (captured erases: the
  // backend is not asked, no tombstone is left, the feed sends nothing).
  auto forget = [&](absl::string_view keyspace,
                    const absl::flat_hash_map<std::string, IndexEntry>& index)
      -> absl::Status {
    for (const auto& [key, e] : index) {
      storage::Mutation m =
          storage::Mutation::Erase(std::string(keyspace), key);
      m.version = fresh_version();
      TALLY_RETURN_IF_ERROR(writer.Add(std::move(m)));
    }
    return absl::OkStatus();
  };
  for (const std::string& name : options.missing) {
    TALLY_ASSIGN_OR_RETURN(auto index, ReadIndex(store, name));
    TALLY_RETURN_IF_ERROR(forget(name, index));
  }

  for (size_t table = 0; table < options.tables.size(); ++table) {
    const TableSchema& t = options.tables[table];
    progress.keyspace = t.name();
    TableBuildCounts& counts = result.tables.emplace_back();
    counts.keyspace = t.name();
    TALLY_ASSIGN_OR_RETURN(auto index, ReadIndex(store, t.name()));
    const bool afresh = std::find(options.afresh.begin(), options.afresh.end(),
                                  t.name()) != options.afresh.end();
    if (afresh) {
      // Written before the table's rows: AddAbsent writes what Add
      // gathered first, and one write at a time.
      TALLY_RETURN_IF_ERROR(forget(t.name(), index));
      index.clear();
    }
    const bool rebuild = options.rebuild && !afresh;
    // The index's last row in its own (token, key) order: the keys the
    // index does not hold that order after it can be loaded without the
    // store's read before each write (all of them at a first build).
    std::optional<std::pair<tree::Token, absl::string_view>> last_indexed;
    for (const auto& [key, e] : index) {
      const std::pair<tree::Token, absl::string_view> at(tree::TokenOf(key),
                                                         key);
      if (!last_indexed.has_value() || *last_indexed < at) last_indexed = at;
    }
    // The rows of keys the index does not hold, gathered over the whole
    // table and then written in (token, key) order: LevelDB then appends
    // to its memtable and flushes tables that do not overlap, where the
    // scan's order (a hash order in the index) would miss the CPU cache at
    // every step of each insert.
    storage::GatheredRows absent(
        index.empty() ? estimated[table] + estimated[table] / 16 : 0);
    absl::flat_hash_set<std::string> seen;
    const bool track_seen = !index.empty();
    // Index lost: keys deleted here; those the scan finds were written
    // again since.
    absl::flat_hash_map<std::string, int64_t>* deleted_here = nullptr;
    if (auto d = lost_deletes.keys.find(t.name());
        d != lost_deletes.keys.end()) {
      deleted_here = &d->second;
    }
    TALLY_RETURN_IF_ERROR(
        ScanTable(*reader, t, "", [&](const ScannedRow& row) -> absl::Status {
          ++progress.rows_done;
          ++counts.rows;
          if (deleted_here != nullptr) deleted_here->erase(row.key);
          const tree::Version* version = nullptr;
          auto it = index.find(row.key);
          if (row.value.size() > options.max_value_bytes) {
            // Not indexed; the keyspace is refused (the caller). An index
            // row of the key stays as it is.
            result.oversize[t.name()].insert(std::string(row.key));
            if (it != index.end()) seen.insert(std::string(row.key));
            return absl::OkStatus();
          }
          if (it == index.end()) {
            if (rebuild) {
              version = rebuild_version(row.token, nullptr);
            } else if (written_here(row.token)) {
              version = &lost_version(*row.token.commit_time_us);
              ++counts.fresh_rows;
            } else {
              version = &bootstrap;
            }
          } else {
            seen.insert(std::string(row.key));
            const IndexEntry& e = it->second;
            // A damaged row is rewritten even when its digest matches: it
            // is out of its leaf until a write replaces it (the store marks
            // a row whose table value no longer matched, as after ADD
            // COLUMN).
            if (!e.deleted && !e.damaged &&
                tree::RowDigest(t.name(), row.key, e.version, false,
                                row.value) == e.digest) {
              return absl::OkStatus();  // the index describes it
            }
            version = rebuild_version(row.token, &e);
          }
          if (it == index.end()) {
            absent.Add(row.key, row.value, row.token.Encode(), *version);
          } else {
            storage::Mutation m = storage::Mutation::Put(
                t.name(), std::string(row.key), std::string(row.value));
            m.version = *version;
            m.captured_payload = row.token.Encode();
            TALLY_RETURN_IF_ERROR(writer.Add(std::move(m)));
          }
          if (options.on_progress && absl::Now() >= next_report) {
            progress.rows_written = writer.written();
            options.on_progress(progress);
            next_report = absl::Now() + options.progress_interval;
          }
          return absl::OkStatus();
        }));
    absent.Sort();
    TALLY_RETURN_IF_ERROR(
        absent.ForEach(t.name(), [&](storage::Mutation m) -> absl::Status {
          const bool after_index =
              !last_indexed.has_value() ||
              *last_indexed < std::pair<tree::Token, absl::string_view>(
                                  tree::TokenOf(m.key), m.key);
          if (!after_index) return writer.Add(std::move(m));
          // A row with the bootstrap version is the same on every replica
          // that built it, and older than any version a peer could have
          // written: no peer needs it from the feed, and sessions settle
          // the rest. Left out of the change log, a first build does not
          // make the feed send the whole table to every peer.
          m.unlogged = *m.version == bootstrap;
          return writer.AddAbsent(std::move(m));
        }));
    TALLY_RETURN_IF_ERROR(writer.FinishAbsent());
    if (deleted_here != nullptr) {
      for (const auto& [key, commit_us] : *deleted_here) {
        storage::Mutation m = storage::Mutation::Delete(t.name(), key);
        m.version = lost_version(commit_us);
        TALLY_RETURN_IF_ERROR(writer.Add(std::move(m)));
        ++counts.deleted_rows;
      }
    }
    if (track_seen) {
      for (const auto& [key, e] : index) {
        if (e.deleted || seen.contains(key)) continue;
        storage::Mutation m = storage::Mutation::Delete(t.name(), key);
        m.version = fresh_version();
        TALLY_RETURN_IF_ERROR(writer.Add(std::move(m)));
      }
    }
  }
  TALLY_ASSIGN_OR_RETURN(Result committed, reader->Exec("COMMIT"));
  (void)committed;
  for (const auto& [name, keys] : result.oversize) {
    result.position.fingerprints[name] = std::string(kRefusedTable);
  }
  TALLY_RETURN_IF_ERROR(
      writer.Flush(storage::BackendPosition{result.position.Encode()}));
  progress.rows_written = writer.written();
  if (options.on_progress) options.on_progress(progress);
  return result;
}

}  // namespace pg
}  // namespace tally
