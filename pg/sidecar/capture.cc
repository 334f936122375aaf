#include "pg/sidecar/capture.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "pg/schema/row_codec.h"
#include "pg/sidecar/apply/apply_message.h"
#include "pg/sidecar/bootstrap.h"
#include "pg/wire/field.h"
#include "pg/wire/replication_messages.h"
#include "tree/status_macros.h"
#include "tree/token.h"

namespace tally {
namespace pg {

struct Capture::Keyspace {
  explicit Keyspace(TableSchema s)
      : schema(std::move(s)), codec(schema.codec()) {}
  TableSchema schema;
  RowCodec codec;
  // SELECT of one row by key with its token, binary key parameters.
  std::string read_sql;
};

struct Capture::Relation {
  Keyspace* keyspace = nullptr;  // null: a table this node does not keep
  // Relation column i -> canonical column index.
  std::vector<size_t> canonical;
};

struct Capture::Transaction {
  BeginMessage begin;
  bool own = false;   // applied by this node (its origin)
  bool skip = false;  // ended before the resume point: already stored
  OriginId origin_id = kLocalOrigin;
  uint64_t changes = 0;       // row changes counted so far
  uint64_t changes_done = 0;  // of which a previous run stored this many
  // The version of this transaction's rows in the current batch (local).
  std::optional<tree::Version> version;
  // Own transaction: the rows it wrote, by keyspace and key (nullopt: an
  // unchanged TOAST column, read back), and its message.
  absl::flat_hash_map<std::pair<Keyspace*, std::string>,
                      std::optional<std::string>>
      own_rows;
  std::optional<ApplyMessage> apply;
  // Local transaction: keys whose new row had an unchanged TOAST column.
  std::vector<std::pair<Keyspace*, std::string>> read_back;
};

// The mutations of one store write, a key at most once per version.
class Capture::Batch {
 public:
  // `admit`: whether a mutation may go in (false: left out).
  explicit Batch(std::function<bool(const storage::Mutation&)> admit)
      : admit_(std::move(admit)) {}

  void Add(storage::Mutation m) {
    if (!admit_(m)) return;
    auto key = std::make_pair(m.keyspace, m.key);
    auto it = where_.find(key);
    if (it != where_.end() &&
        request_.mutations[it->second].version == m.version) {
      // The same transaction changed the key again: its last change is
      // the row (two rows of one version would meet the tie rule).
      request_.mutations[it->second] = std::move(m);
      return;
    }
    where_[std::move(key)] = request_.mutations.size();
    request_.mutations.push_back(std::move(m));
  }
  size_t size() const { return request_.mutations.size(); }
  bool empty() const { return request_.mutations.empty() && !complete_; }

  // A transaction ending at `end_lsn` is wholly in the batch.
  // `local`: an application's (not this node's own apply), counted as
  // captured.
  void Complete(Lsn end_lsn, int64_t commit_time_us, bool local) {
    complete_ = true;
    end_lsn_ = std::max(end_lsn_, end_lsn);
    if (local) {
      commit_time_us_ = commit_time_us;
      ++transactions_;
    }
  }
  bool complete() const { return complete_; }
  Lsn end_lsn() const { return end_lsn_; }
  int64_t commit_time_us() const { return commit_time_us_; }
  uint64_t transactions() const { return transactions_; }
  // The request, its mutations in the index's (token, key) order: LevelDB
  // then finds each key near the previous one in its memtable, for the
  // read before the write and for the insert, instead of missing the CPU
  // cache at every level of its skip list (the WAL's order is a hash order
  // in the index). Stable: the changes of one key keep their order, so the
  // commit decides and logs them as it would have.
  storage::WriteRequest Take() {
    std::vector<std::pair<tree::Token, uint32_t>> order;
    order.reserve(request_.mutations.size());
    for (size_t i = 0; i < request_.mutations.size(); ++i) {
      order.emplace_back(tree::TokenOf(request_.mutations[i].key),
                         static_cast<uint32_t>(i));
    }
    std::stable_sort(
        order.begin(), order.end(), [&](const auto& a, const auto& b) {
          if (a.first != b.first) return a.first < b.first;
          const storage::Mutation& ma = request_.mutations[a.second];
          const storage::Mutation& mb = request_.mutations[b.second];
          if (ma.keyspace != mb.keyspace) return ma.keyspace < mb.keyspace;
          return ma.key < mb.key;
        });
    std::vector<storage::Mutation> sorted;
    sorted.reserve(order.size());
    for (const auto& [token, i] : order) {
      sorted.push_back(std::move(request_.mutations[i]));
    }
    request_.mutations = std::move(sorted);
    return std::move(request_);
  }

 private:
  const std::function<bool(const storage::Mutation&)> admit_;
  storage::WriteRequest request_;
  absl::flat_hash_map<std::pair<std::string, std::string>, size_t> where_;
  bool complete_ = false;
  Lsn end_lsn_ = kInvalidLsn;
  int64_t commit_time_us_ = 0;
  uint64_t transactions_ = 0;
};

namespace {

absl::Status Malformed(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("capture: ", what));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Capture>> Capture::Create(
    const CaptureOptions& options, storage::Store* store,
    CapturePosition start) {
  TALLY_ASSIGN_OR_RETURN(std::unique_ptr<Connection> reader,
                         Connection::Open(options.conninfo, options.connect));
  return std::unique_ptr<Capture>(
      new Capture(options, store, std::move(start), std::move(reader)));
}

Capture::Capture(const CaptureOptions& options, storage::Store* store,
                 CapturePosition start, std::unique_ptr<Connection> reader)
    : options_(options),
      store_(store),
      reader_(std::move(reader)),
      batch_(std::make_unique<Batch>(
          [this](const storage::Mutation& m) { return Admit(m); })),
      oversize_(options.oversize),
      position_(std::move(start)) {
  for (const TableSchema& t : options_.tables) {
    auto ks = std::make_unique<Keyspace>(t);
    std::vector<std::string> columns, keys;
    for (const TableColumn& c : t.columns()) {
      columns.push_back(
          absl::StrCat("tally_t.", reader_->QuoteIdentifier(c.name)));
    }
    for (size_t i = 0; i < t.key_columns(); ++i) {
      const TableColumn& c = t.columns()[i];
      keys.push_back(absl::StrFormat("tally_t.%s = $%d",
                                     reader_->QuoteIdentifier(c.name), i + 1));
    }
    // The row (if any) and, from the same statement and so the same
    // snapshot, whether the transaction being indexed is visible in it
    // (see ReadBack). $k+1 is that transaction's 32-bit xid: the snapshot's
    // xmax gives the epoch, the xid taken as the one nearest to xmax
    // (before or after it: the signed 32-bit distance), so that a
    // wraparound between the two picks the right epoch.
    const std::string xid = absl::StrCat("$", t.key_columns() + 1, "::int8");
    const std::string xmax =
        "pg_catalog.pg_snapshot_xmax(tally_s.snap)::text::int8";
    ks->read_sql = absl::StrCat(
        "SELECT tally_r.*, pg_catalog.pg_visible_in_snapshot((", xmax, " + (((",
        xid, " - (", xmax,
        " & 4294967295) + 2147483648) % 4294967296 + 4294967296) % "
        "4294967296 - 2147483648))::text::xid8, tally_s.snap) "
        "FROM (SELECT pg_catalog.pg_current_snapshot() AS snap) AS tally_s "
        "LEFT JOIN LATERAL (SELECT ",
        absl::StrJoin(columns, ", "),
        ", tally_o.timestamp AS tally_ts, tally_o.roident AS tally_roident "
        "FROM ",
        t.quoted_name(),
        " AS tally_t LEFT JOIN LATERAL "
        "pg_catalog.pg_xact_commit_timestamp_origin(tally_t.xmin) AS tally_o "
        "ON true WHERE ",
        absl::StrJoin(keys, " AND "), ") AS tally_r ON true");
    keyspaces_.push_back(std::move(ks));
  }
  counters_.confirmed_lsn = position_.resume_lsn;
}

Capture::~Capture() = default;

CapturePosition Capture::position() const {
  absl::MutexLock lock(&mu_);
  return position_;
}

CaptureCounters Capture::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

absl::Status Capture::Follow(ReplicationStream& stream,
                             const std::function<bool()>& stopping) {
  {
    absl::MutexLock lock(&mu_);
    counters_.idle = false;
  }
  absl::Time last_idle_store = absl::InfinitePast();
  while (!stopping()) {
    // With a batch of whole transactions pending, look only at what is
    // already there: group it, or store the batch when nothing is.
    const bool grouping = txn_ == nullptr && !batch_->empty();
    TALLY_ASSIGN_OR_RETURN(
        std::optional<ReplicationMessage> message,
        stream.Next(grouping ? absl::ZeroDuration() : absl::Milliseconds(200)));
    if (!message.has_value()) {
      if (grouping) {
        TALLY_RETURN_IF_ERROR(Flush(/*partial=*/false));
        TALLY_RETURN_IF_ERROR(Confirm(stream, false));
      } else if (keepalive_wanted_.exchange(false) ||
                 absl::Now() - last_status_time_ >= options_.status_interval) {
        // Asking for a reply brings a keepalive with the server's WAL end,
        // which the idle branch below stores and confirms.
        TALLY_RETURN_IF_ERROR(
            Confirm(stream, /*reply_requested=*/txn_ == nullptr));
      }
      if (txn_ == nullptr && batch_->empty()) {
        absl::MutexLock lock(&mu_);
        counters_.idle = true;
      }
      continue;
    }
    if (const auto* data = std::get_if<XLogData>(&*message)) {
      {
        absl::MutexLock lock(&mu_);
        counters_.received_lsn =
            std::max(counters_.received_lsn, data->wal_end);
        counters_.idle = false;
      }
      TALLY_ASSIGN_OR_RETURN(PgOutputMessage m,
                             ParsePgOutputMessage(data->payload));
      TALLY_RETURN_IF_ERROR(Handle(stream, m));
      continue;
    }
    const auto& keepalive = std::get<PrimaryKeepalive>(*message);
    Lsn resume;
    {
      absl::MutexLock lock(&mu_);
      counters_.received_lsn =
          std::max(counters_.received_lsn, keepalive.wal_end);
      resume = position_.resume_lsn;
    }
    const bool idle = txn_ == nullptr && batch_->empty();
    if (idle && keepalive.wal_end > resume &&
        (keepalive.reply_requested ||
         absl::Now() - last_idle_store >= absl::Seconds(1))) {
      // Nothing open and everything received stored: the WAL up to the
      // server's end holds nothing for us. Store that before confirming it,
      // so that the stored position never falls below the slot's.
      CapturePosition next;
      {
        absl::MutexLock lock(&mu_);
        next = position_;
      }
      next.resume_lsn = keepalive.wal_end;
      next.partial.reset();
      storage::WriteRequest request;
      request.mode = storage::ApplyMode::kCaptured;
      request.backend_position = storage::BackendPosition{next.Encode()};
      TALLY_ASSIGN_OR_RETURN(storage::WriteResult r,
                             store_->Write(std::move(request)));
      (void)r;
      {
        absl::MutexLock lock(&mu_);
        position_ = std::move(next);
        counters_.idle = true;
      }
      last_idle_store = absl::Now();
      TALLY_RETURN_IF_ERROR(Confirm(stream, false));
    } else if (keepalive.reply_requested) {
      TALLY_RETURN_IF_ERROR(Confirm(stream, false));
    }
    if (idle) {
      absl::MutexLock lock(&mu_);
      counters_.idle = true;
    }
  }
  return absl::OkStatus();
}

absl::Status Capture::Handle(ReplicationStream& stream,
                             const PgOutputMessage& m) {
  if (const auto* begin = std::get_if<BeginMessage>(&m)) {
    if (txn_ != nullptr) return Malformed("Begin inside a transaction");
    txn_ = std::make_unique<Transaction>();
    txn_->begin = *begin;
    CapturePosition pos = position();
    // The server never sends a transaction whose commit record starts
    // before the start point; this guards against one all the same.
    txn_->skip = begin->final_lsn < pos.resume_lsn;
    if (pos.partial.has_value() && pos.partial->end_lsn == begin->final_lsn) {
      txn_->changes_done = pos.partial->changes_done;
      stamps_.After(pos.partial->version.timestamp);
      (void)store_->clock().Observe(pos.partial->version.timestamp);
    }
    return absl::OkStatus();
  }
  if (txn_ == nullptr && !std::holds_alternative<RelationMessage>(m) &&
      !std::holds_alternative<TypeMessage>(m) &&
      !std::holds_alternative<LogicalMessage>(m)) {
    return Malformed(
        absl::StrCat(PgOutputMessageName(m), " outside a transaction"));
  }
  if (const auto* origin = std::get_if<OriginMessage>(&m)) {
    if (origin->name == options_.names.origin) {
      txn_->own = true;
    } else {
      TALLY_ASSIGN_OR_RETURN(txn_->origin_id, OriginIdOf(origin->name));
    }
    return absl::OkStatus();
  }
  if (const auto* relation = std::get_if<RelationMessage>(&m)) {
    absl::Status s = OnRelation(*relation);
    if (absl::IsAborted(s)) {
      // Store what is complete; the rebuild takes it from there.
      TALLY_RETURN_IF_ERROR(Flush(/*partial=*/txn_ != nullptr));
      TALLY_RETURN_IF_ERROR(Confirm(stream, false));
    }
    return s;
  }
  if (std::holds_alternative<TypeMessage>(m)) return absl::OkStatus();
  if (const auto* message = std::get_if<LogicalMessage>(&m)) {
    if (txn_ != nullptr && txn_->own && message->transactional &&
        message->prefix == kApplyMessagePrefix) {
      TALLY_ASSIGN_OR_RETURN(ApplyMessage decoded,
                             DecodeApplyMessage(message->content));
      txn_->apply = std::move(decoded);
    }
    return absl::OkStatus();
  }
  if (const auto* commit = std::get_if<CommitMessage>(&m)) {
    absl::Status s = OnCommit(*commit);
    txn_.reset();
    TALLY_RETURN_IF_ERROR(s);
    if (batch_->size() >= options_.max_batch_changes) {
      TALLY_RETURN_IF_ERROR(Flush(/*partial=*/false));
      TALLY_RETURN_IF_ERROR(Confirm(stream, false));
    }
    return absl::OkStatus();
  }
  if (txn_->skip) return absl::OkStatus();
  if (const auto* truncate = std::get_if<TruncateMessage>(&m)) {
    TALLY_RETURN_IF_ERROR(OnTruncate(*truncate));
    return Confirm(stream, false);
  }
  TALLY_RETURN_IF_ERROR(OnChange(m));
  // A change adds at most two mutations (a key update).
  if (!txn_->own && batch_->size() + txn_->read_back.size() + 2 >
                        options_.max_batch_changes) {
    TALLY_RETURN_IF_ERROR(Flush(/*partial=*/true));
    TALLY_RETURN_IF_ERROR(Confirm(stream, false));
  }
  return absl::OkStatus();
}

absl::Status Capture::OnRelation(const RelationMessage& m) {
  auto relation = std::make_unique<Relation>();
  const std::string name = absl::StrCat(m.schema, ".", m.table);
  for (const auto& ks : keyspaces_) {
    if (ks->schema.name() == name) relation->keyspace = ks.get();
  }
  if (relation->keyspace != nullptr) {
    const TableSchema& schema = relation->keyspace->schema;
    std::vector<std::string> problems;
    std::vector<bool> seen(schema.columns().size(), false);
    for (const RelationColumn& c : m.columns) {
      const size_t found = schema.ColumnIndex(c.name);
      if (found == schema.columns().size()) {
        problems.push_back(absl::StrCat("column ", c.name, " is new"));
        continue;
      }
      seen[found] = true;
      if (schema.columns()[found].type_oid != c.type_oid) {
        problems.push_back(
            absl::StrFormat("column %s changed type (oid %d, was %d)", c.name,
                            c.type_oid, schema.columns()[found].type_oid));
      }
      relation->canonical.push_back(found);
    }
    for (size_t i = 0; i < seen.size(); ++i) {
      if (!seen[i]) {
        problems.push_back(
            absl::StrCat("column ", schema.columns()[i].name, " is gone"));
      }
    }
    if (!problems.empty()) {
      schema_changed_ = absl::StrCat(name, ": ", absl::StrJoin(problems, "; "));
      return absl::AbortedError(absl::StrCat("the schema of ", schema_changed_,
                                             "; the keyspace is rebuilt"));
    }
  }
  relations_[m.relid] = std::move(relation);
  return absl::OkStatus();
}

// The tuples of one row change.
struct Capture::RowChange {
  uint32_t relid = 0;
  const TupleData* new_tuple = nullptr;  // insert, update
  // Update: the old key columns (or the whole row under REPLICA IDENTITY
  // FULL) when the key changed; delete: always.
  const TupleData* old_tuple = nullptr;
  OldTuple old_kind = OldTuple::kNone;
};

// A row change in the index's encoding.
struct Capture::EncodedChange {
  // The old row's key, when the change carried one.
  std::optional<std::string> old_key;
  // The new row (when there is one): its key, and its value unless `toast`,
  // an unchanged TOAST column that did not come with the change (the row is
  // read back at commit).
  bool has_new = false;
  std::string key;
  std::string value;
  bool toast = false;

  // Whether the old row is gone: deleted, or moved to another key.
  bool OldRowGone() const {
    return old_key.has_value() && (!has_new || *old_key != key);
  }
};

absl::StatusOr<Capture::RowChange> Capture::RowChangeOf(
    const PgOutputMessage& m) {
  RowChange change;
  if (const auto* insert = std::get_if<InsertMessage>(&m)) {
    change.relid = insert->relid;
    change.new_tuple = &insert->new_tuple;
  } else if (const auto* update = std::get_if<UpdateMessage>(&m)) {
    change.relid = update->relid;
    change.new_tuple = &update->new_tuple;
    change.old_kind = update->old_kind;
    if (change.old_kind != OldTuple::kNone) {
      change.old_tuple = &update->old_tuple;
    }
  } else if (const auto* del = std::get_if<DeleteMessage>(&m)) {
    change.relid = del->relid;
    change.old_kind = del->old_kind;
    change.old_tuple = &del->old_tuple;
  } else {
    return Malformed(absl::StrCat("unexpected ", PgOutputMessageName(m)));
  }
  return change;
}

absl::Status Capture::TupleFields(const Relation& relation,
                                  const TupleData& tuple,
                                  const TupleData* fallback,
                                  std::vector<Field>* fields, bool* toast) {
  const Keyspace& ks = *relation.keyspace;
  fields->assign(ks.codec.columns(), Field::Null());
  *toast = false;
  if (tuple.size() != relation.canonical.size()) {
    return Malformed(absl::StrFormat(
        "a tuple of %s has %d columns, its Relation %d", ks.schema.name(),
        tuple.size(), relation.canonical.size()));
  }
  for (size_t i = 0; i < tuple.size(); ++i) {
    const TupleColumn* c = &tuple[i];
    if (c->kind == TupleColumnKind::kUnchangedToast && fallback != nullptr &&
        i < fallback->size() &&
        (*fallback)[i].kind == TupleColumnKind::kBinary) {
      c = &(*fallback)[i];  // REPLICA IDENTITY FULL carries the value
    }
    switch (c->kind) {
      case TupleColumnKind::kNull:
        break;
      case TupleColumnKind::kBinary:
        (*fields)[relation.canonical[i]] = Field::Of(c->value);
        break;
      case TupleColumnKind::kUnchangedToast:
        *toast = true;
        break;
      case TupleColumnKind::kText:
        return Malformed(absl::StrCat("a text column in ", ks.schema.name(),
                                      " (the stream is binary)"));
    }
  }
  return absl::OkStatus();
}

absl::Status Capture::EncodeChange(const Relation& relation,
                                   const RowChange& change,
                                   EncodedChange* encoded) {
  const RowCodec& codec = relation.keyspace->codec;
  std::vector<Field> fields;
  bool toast = false;
  if (change.old_tuple != nullptr) {
    TALLY_RETURN_IF_ERROR(
        TupleFields(relation, *change.old_tuple, nullptr, &fields, &toast));
    std::string old_key;
    TALLY_RETURN_IF_ERROR(codec.EncodeKey(
        absl::MakeConstSpan(fields).subspan(0, codec.key_columns()), &old_key));
    encoded->old_key = std::move(old_key);
  }
  if (change.new_tuple == nullptr) return absl::OkStatus();
  const bool full_old = change.old_kind == OldTuple::kFull;
  TALLY_RETURN_IF_ERROR(TupleFields(relation, *change.new_tuple,
                                    full_old ? change.old_tuple : nullptr,
                                    &fields, &toast));
  encoded->has_new = true;
  encoded->toast = toast;
  if (toast) {
    return codec.EncodeKey(
        absl::MakeConstSpan(fields).subspan(0, codec.key_columns()),
        &encoded->key);
  }
  return codec.Encode(fields, &encoded->key, &encoded->value);
}

absl::Status Capture::OnChange(const PgOutputMessage& m) {
  TALLY_ASSIGN_OR_RETURN(const RowChange change, RowChangeOf(m));
  Transaction& txn = *txn_;
  const uint64_t number = ++txn.changes;
  if (number <= txn.changes_done) return absl::OkStatus();  // stored before
  auto rel = relations_.find(change.relid);
  if (rel == relations_.end()) {
    return Malformed(
        absl::StrFormat("a change of relation %d before its "
                        "Relation message",
                        change.relid));
  }
  const Relation& relation = *rel->second;
  if (relation.keyspace == nullptr) return absl::OkStatus();
  Keyspace& ks = *relation.keyspace;
  EncodedChange encoded;
  TALLY_RETURN_IF_ERROR(EncodeChange(relation, change, &encoded));
  if (txn.own) {
    KeepOwnChange(txn, ks, std::move(encoded));
  } else {
    AddLocalChange(txn, ks, std::move(encoded));
  }
  return absl::OkStatus();
}

void Capture::KeepOwnChange(Transaction& txn, Keyspace& ks,
                            EncodedChange change) {
  // Indexed at commit from the apply message; keep the rows' values.
  if (change.OldRowGone()) txn.own_rows[{&ks, *change.old_key}] = std::nullopt;
  if (change.has_new) {
    txn.own_rows[{&ks, change.key}] =
        change.toast ? std::nullopt
                     : std::optional<std::string>(std::move(change.value));
  }
}

void Capture::AddLocalChange(Transaction& txn, Keyspace& ks,
                             EncodedChange change) {
  StampVersion(txn);
  if (change.OldRowGone()) {
    storage::Mutation d =
        storage::Mutation::Delete(ks.schema.name(), *change.old_key);
    d.version = txn.version;
    d.supersedes_stored = true;
    batch_->Add(std::move(d));
  }
  if (!change.has_new) return;
  if (change.toast) {
    txn.read_back.emplace_back(&ks, change.key);
    return;
  }
  storage::Mutation p = storage::Mutation::Put(ks.schema.name(), change.key,
                                               std::move(change.value));
  p.version = txn.version;
  p.supersedes_stored = true;
  p.captured_payload =
      RowToken{txn.begin.commit_time_us, txn.origin_id}.Encode();
  batch_->Add(std::move(p));
}

absl::Status Capture::OnTruncate(const TruncateMessage& m) {
  Transaction& txn = *txn_;
  const uint64_t change = ++txn.changes;
  if (change <= txn.changes_done || txn.own) return absl::OkStatus();
  StampVersion(txn);
  // The batch so far first: its rows are in the index the tombstones are
  // taken from.
  txn.changes -= 1;  // this truncate is not stored until it is done
  TALLY_RETURN_IF_ERROR(Flush(/*partial=*/true));
  txn.changes += 1;
  for (uint32_t relid : m.relids) {
    auto rel = relations_.find(relid);
    if (rel == relations_.end() || rel->second->keyspace == nullptr) continue;
    const std::string& name = rel->second->keyspace->schema.name();
    TALLY_ASSIGN_OR_RETURN(auto index, ReadIndex(store_, name));
    for (const auto& [key, entry] : index) {
      if (entry.deleted) continue;
      // The row version the index describes, by its token: written after
      // the TRUNCATE committed (an apply the index took before this
      // capture reached the TRUNCATE), it is in the table, and stays; from
      // before, the TRUNCATE removed it, whatever its version says (a
      // peer's clock ahead of this database's).
      absl::StatusOr<RowToken> token = RowToken::Decode(entry.payload);
      if (token.ok() && token->commit_time_us.has_value() &&
          *token->commit_time_us > txn.begin.commit_time_us) {
        continue;
      }
      storage::Mutation d = storage::Mutation::Delete(name, key);
      d.version = txn.version;
      d.supersedes_stored = true;
      batch_->Add(std::move(d));
      if (batch_->size() >= options_.max_batch_changes) {
        txn.changes -= 1;
        TALLY_RETURN_IF_ERROR(Flush(/*partial=*/true));
        txn.changes += 1;
      }
    }
  }
  return absl::OkStatus();
}

tree::HlcTimestamp Capture::Accepted(tree::HlcTimestamp stamp) {
  if (store_->clock().Observe(stamp).ok()) return stamp;
  // The database's clock runs further ahead of this host's than versions
  // may (the store's max clock skew; peers would refuse them too): this
  // node's clock stamps it instead, as it stamps a local write.
  stamp = store_->clock().Now();
  stamps_.After(stamp);
  return stamp;
}

void Capture::StampVersion(Transaction& txn) {
  if (txn.version.has_value()) return;
  // When it committed, not when this capture read it
  // (pg/sidecar/commit_stamp.h); a row the index holds at a later version gets
  // one just after it (Mutation::supersedes_stored).
  const tree::HlcTimestamp stamp =
      Accepted(stamps_.Next(txn.begin.commit_time_us));
  txn.version = tree::Version{stamp, options_.node_name};
}

absl::Status Capture::OnCommit(const CommitMessage& m) {
  Transaction& txn = *txn_;
  if (txn.skip) return absl::OkStatus();
  if (txn.own) {
    if (txn.apply.has_value()) {
      const std::string token = txn.apply->token.Encode();
      if (batch_->size() + txn.apply->rows.size() >
          options_.max_batch_changes) {
        TALLY_RETURN_IF_ERROR(Flush(/*partial=*/false));
      }
      for (const AppliedRow& row : txn.apply->rows) {
        if (batch_->size() >= options_.max_batch_changes) {
          // Replayed whole after a crash: its versions make that a no-op.
          TALLY_RETURN_IF_ERROR(Flush(/*partial=*/true));
        }
        if (row.erased) continue;  // a source override's: see capture.h
        Keyspace* ks = nullptr;
        for (const auto& k : keyspaces_) {
          if (k->schema.name() == row.keyspace) ks = k.get();
        }
        if (ks == nullptr) continue;
        if (row.deleted) {
          storage::Mutation d =
              storage::Mutation::Delete(row.keyspace, row.key);
          d.version = row.version;
          batch_->Add(std::move(d));
          continue;
        }
        auto it = txn.own_rows.find({ks, row.key});
        if (it == txn.own_rows.end()) continue;
        std::optional<std::string> value = it->second;
        std::string payload = token;
        if (!value.has_value()) {
          RowToken current;
          TALLY_RETURN_IF_ERROR(
              ReadBack(*ks, row.key, txn.begin.xid, &value, &current));
          // Changed since by an application: its capture follows.
          if (!value.has_value() || current != txn.apply->token) continue;
        }
        storage::Mutation p =
            storage::Mutation::Put(row.keyspace, row.key, std::move(*value));
        p.version = row.version;
        p.captured_payload = std::move(payload);
        batch_->Add(std::move(p));
      }
    }
    {
      absl::MutexLock lock(&mu_);
      ++counters_.own_transactions_replayed;
    }
  } else {
    for (const auto& [ks, key] : txn.read_back) {
      std::optional<std::string> value;
      RowToken token;
      TALLY_RETURN_IF_ERROR(ReadBack(*ks, key, txn.begin.xid, &value, &token));
      if (!IsVersionOf(txn, value, token)) continue;
      storage::Mutation p =
          storage::Mutation::Put(ks->schema.name(), key, std::move(*value));
      p.version = txn.version;
      p.supersedes_stored = true;
      p.captured_payload = token.Encode();
      batch_->Add(std::move(p));
    }
    txn.read_back.clear();
  }
  batch_->Complete(m.end_lsn, m.commit_time_us, !txn.own);
  return absl::OkStatus();
}

absl::Status Capture::Flush(bool partial) {
  Transaction* txn = partial ? txn_.get() : nullptr;
  if (txn != nullptr && !txn->own) {
    // Rows to read back are counted as changes: they must be in this
    // write, or a replay would skip them.
    for (const auto& [ks, key] : txn->read_back) {
      std::optional<std::string> value;
      RowToken token;
      TALLY_RETURN_IF_ERROR(ReadBack(*ks, key, txn->begin.xid, &value, &token));
      if (!IsVersionOf(*txn, value, token)) continue;
      storage::Mutation p =
          storage::Mutation::Put(ks->schema.name(), key, std::move(*value));
      p.version = txn->version;
      p.supersedes_stored = true;
      p.captured_payload = token.Encode();
      batch_->Add(std::move(p));
    }
    txn->read_back.clear();
  }
  if (batch_->empty() && txn == nullptr) return absl::OkStatus();
  CapturePosition next = position();
  if (batch_->complete()) next.resume_lsn = batch_->end_lsn();
  next.partial.reset();
  if (txn != nullptr && !txn->own && txn->version.has_value()) {
    next.partial = CapturePosition::Partial{txn->begin.final_lsn, txn->changes,
                                            *txn->version};
  }
  storage::WriteRequest request = batch_->Take();
  request.mode = storage::ApplyMode::kCaptured;
  request.backend_position = storage::BackendPosition{next.Encode()};
  TALLY_ASSIGN_OR_RETURN(storage::WriteResult r,
                         store_->Write(std::move(request)));
  ReachFaultPoint(options_.fault_points, FaultPoint::kCaptureAfterIndexCommit);
  uint64_t applied = 0;
  for (bool a : r.applied) applied += a ? 1 : 0;
  {
    absl::MutexLock lock(&mu_);
    position_ = std::move(next);
    counters_.rows_captured += applied;
    counters_.transactions_captured += batch_->transactions();
    if (batch_->commit_time_us() != 0) {
      counters_.last_commit_time_us = batch_->commit_time_us();
    }
  }
  batch_ = std::make_unique<Batch>(
      [this](const storage::Mutation& m) { return Admit(m); });
  if (txn != nullptr && txn->version.has_value()) {
    // The rest of the transaction orders after what was just stored.
    txn->version = tree::Version{Accepted(stamps_.Bump()), options_.node_name};
  }
  return absl::OkStatus();
}

bool Capture::Admit(const storage::Mutation& m) {
  const bool over = !m.deleted && m.value.size() > options_.max_value_bytes;
  std::set<std::string>& keys = oversize_[m.keyspace];
  bool changed;
  if (over) {
    changed = keys.insert(m.key).second && keys.size() == 1;
  } else {
    changed = keys.erase(m.key) > 0;
    if (!changed) return true;  // the common case: nothing to note
    changed = keys.empty();
  }
  if (changed) {
    // The position's record of the keyspace, stored with the next write.
    std::string fingerprint(kRefusedTable);
    if (keys.empty()) {
      for (const TableSchema& t : options_.tables) {
        if (t.name() == m.keyspace) fingerprint = t.stored_fingerprint();
      }
    }
    absl::MutexLock lock(&mu_);
    position_.fingerprints[m.keyspace] = std::move(fingerprint);
  }
  if (options_.on_oversize) {
    options_.on_oversize(m.keyspace, m.key, over ? m.value.size() : 0,
                         keys.size());
  }
  return !over;
}

absl::Status Capture::Confirm(ReplicationStream& stream, bool reply_requested) {
  Lsn confirmed;
  {
    absl::MutexLock lock(&mu_);
    confirmed = position_.resume_lsn;
    counters_.confirmed_lsn = confirmed;
  }
  TALLY_RETURN_IF_ERROR(stream.SendStatus(confirmed, reply_requested));
  last_sent_status_ = confirmed;
  last_status_time_ = absl::Now();
  return absl::OkStatus();
}

absl::StatusOr<OriginId> Capture::OriginIdOf(absl::string_view name) {
  auto it = origin_ids_.find(name);
  if (it != origin_ids_.end()) return it->second;
  TALLY_ASSIGN_OR_RETURN(
      Result r,
      reader_->ExecParams(
          "SELECT roident FROM pg_replication_origin WHERE roname = $1",
          {Param::Text(std::string(name))}));
  OriginId id = kLocalOrigin;
  uint32_t v = 0;
  if (r.rows() == 1 && absl::SimpleAtoi(r.Value(0, 0), &v) && v <= 65535) {
    id = OriginId{static_cast<uint16_t>(v)};
  }
  origin_ids_[std::string(name)] = id;
  return id;
}

bool Capture::IsVersionOf(const Transaction& txn,
                          const std::optional<std::string>& value,
                          const RowToken& token) {
  // A row a later transaction deleted (or moved to another key) is gone; a
  // row it changed carries that transaction's token. Either way the later
  // transaction's own change follows in the stream, and the index keeps
  // describing the version before this one until then. Indexing the later
  // version's value and token under this transaction's version instead
  // would hand the apply a token that already matches the table while the
  // later change is still to be captured: the apply would then change or
  // delete the row, and the later change, captured after that, would be
  // raised past the applied row (Mutation::supersedes_stored) — a live row
  // in the index that no table holds.
  return value.has_value() &&
         token == RowToken{txn.begin.commit_time_us, txn.origin_id};
}

absl::Status Capture::ReadBack(const Keyspace& ks, absl::string_view key,
                               uint32_t xid, std::optional<std::string>* value,
                               RowToken* token) {
  // The server decodes a transaction once its commit record is flushed,
  // which is before the commit is visible to other sessions (under load,
  // milliseconds before). A read in that window sees the database as
  // before the transaction: the row version it replaced, or, for the new
  // key of a key update or an insert, no row at all — which is not "gone
  // since". So each read also says whether the transaction is visible in
  // the read's own snapshot, and only such a read is taken: the row it
  // finds is the transaction's or a later one, and a missing row was
  // deleted (or moved) by a later transaction, whose change follows.
  const absl::Time give_up = absl::Now() + kReadBackPatience;
  absl::Duration pause = absl::Milliseconds(1);
  while (true) {
    bool visible = false;
    TALLY_RETURN_IF_ERROR(ReadBackOnce(ks, key, xid, &visible, value, token));
    if (visible) return absl::OkStatus();
    if (absl::Now() + pause > give_up) {
      // Never index a row as of before the transaction, nor drop it: the
      // error ends Follow, which resumes from the stored position and
      // decodes this transaction again.
      return absl::UnavailableError(absl::StrFormat(
          "capture: transaction %d of %s was decoded but is still not "
          "visible after %s; resuming from the stored position",
          xid, ks.schema.name(), absl::FormatDuration(kReadBackPatience)));
    }
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Milliseconds(20));
  }
}

absl::Status Capture::ReadBackOnce(const Keyspace& ks, absl::string_view key,
                                   uint32_t xid, bool* visible,
                                   std::optional<std::string>* value,
                                   RowToken* token) {
  std::vector<Field> key_fields;
  std::string storage;
  TALLY_RETURN_IF_ERROR(ks.codec.DecodeKey(key, &storage, &key_fields));
  std::vector<Param> params;
  for (size_t i = 0; i < key_fields.size(); ++i) {
    if (key_fields[i].is_null()) {
      params.push_back(Param::Null());
    } else {
      params.push_back(Param::Binary(std::string(key_fields[i].bytes()),
                                     ks.schema.columns()[i].type_oid));
    }
  }
  params.push_back(Param::Text(absl::StrCat(xid)));
  TALLY_ASSIGN_OR_RETURN(Result r,
                         reader_->ExecPrepared(ks.read_sql, params,
                                               /*binary_results=*/true));
  value->reset();
  const size_t n = ks.codec.columns();
  if (r.rows() != 1 || r.IsNull(0, static_cast<int>(n + 2))) {
    return absl::InternalError(
        absl::StrCat("capture: the read-back of a row of ", ks.schema.name(),
                     " answered ", r.rows(), " rows"));
  }
  // A bool in binary: one byte.
  *visible = r.Value(0, static_cast<int>(n + 2)) == absl::string_view("\1", 1);
  // The first key column is NULL only when no row has the key.
  if (r.IsNull(0, 0)) return absl::OkStatus();
  auto field = [&](size_t i) {
    return r.IsNull(0, static_cast<int>(i))
               ? Field::Null()
               : Field::Of(r.Value(0, static_cast<int>(i)));
  };
  std::vector<Field> fields;
  for (size_t i = 0; i < n; ++i) fields.push_back(field(i));
  TALLY_ASSIGN_OR_RETURN(*token, RowToken::FromBinary(field(n), field(n + 1)));
  std::string k, v;
  TALLY_RETURN_IF_ERROR(ks.codec.Encode(fields, &k, &v));
  *value = std::move(v);
  return absl::OkStatus();
}

}  // namespace pg
}  // namespace tally
