#include "pg/table_diff/table_scan.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pg/schema/row_codec.h"
#include "pg/wire/binary_copy.h"
#include "tree/hlc.h"
#include "tree/status_macros.h"

namespace tally {
namespace pg {
namespace {

// A record's key length: LEB128, as LevelDB's varint32. Read back only
// from records this file wrote.
size_t PutVarint32(char* out, uint32_t v) {
  size_t n = 0;
  while (v >= 0x80) {
    out[n++] = static_cast<char>(v | 0x80);
    v >>= 7;
  }
  out[n++] = static_cast<char>(v);
  return n;
}

const char* GetVarint32(const char* p, uint32_t* v) {
  uint32_t result = 0;
  for (int shift = 0;; shift += 7) {
    const uint8_t byte = static_cast<uint8_t>(*p++);
    result |= static_cast<uint32_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) break;
  }
  *v = result;
  return p;
}

}  // namespace

void TableScan::Add(absl::string_view key, const tree::Digest128& digest,
                    tree::Token token) {
  char length[5];
  const size_t length_bytes = PutVarint32(length, key.size());
  const size_t at = records_.size();
  records_.resize(at + length_bytes + key.size() + sizeof(digest));
  char* out = records_.data() + at;
  std::memcpy(out, length, length_bytes);
  std::memcpy(out + length_bytes, key.data(), key.size());
  std::memcpy(out + length_bytes + key.size(), &digest, sizeof(digest));
  ++rows_;
  const size_t leaf = LeafOf(token);
  leaves_[leaf] ^= digest;
  ++leaf_counts_[leaf];
  root_ ^= digest;
}

namespace {

void PutFixed64(char* at, uint64_t v) {
  for (int i = 0; i < 8; ++i) at[i] = static_cast<char>(v >> (56 - 8 * i));
}

// tree/digest.cc's field encoding: a 64-bit big-endian length, the bytes.
void AppendDigestField(std::string* out, absl::string_view field) {
  char length[8];
  PutFixed64(length, field.size());
  out->append(length, 8);
  out->append(field.data(), field.size());
}

}  // namespace

BootstrapRowDigester::BootstrapRowDigester(absl::string_view keyspace,
                                           RowCodec codec)
    : codec_(codec) {
  AppendDigestField(&prefix_, keyspace);
  const tree::Version version = BootstrapVersion();
  char timestamp[8];
  PutFixed64(timestamp, version.timestamp.raw());
  middle_.append(timestamp, 8);
  AppendDigestField(&middle_, version.origin);
  middle_.push_back(0);  // not deleted
}

absl::Status BootstrapRowDigester::Digest(absl::Span<const Field> fields) {
  if (fields.size() != codec_.columns()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a row of ", fields.size(), " fields; the table has ",
                     codec_.columns(), " columns"));
  }
  buffer_.assign(prefix_);
  buffer_.append(8, '\0');  // the key's length, set below
  key_begin_ = buffer_.size();
  TALLY_RETURN_IF_ERROR(
      codec_.AppendCanonical(fields.first(codec_.key_columns()), 0, &buffer_));
  key_size_ = buffer_.size() - key_begin_;
  PutFixed64(&buffer_[key_begin_ - 8], key_size_);
  buffer_.append(middle_);
  const size_t length_at = buffer_.size();
  buffer_.append(8, '\0');  // the value's length
  TALLY_RETURN_IF_ERROR(codec_.AppendCanonical(
      fields.subspan(codec_.key_columns()), codec_.key_columns(), &buffer_));
  PutFixed64(&buffer_[length_at], buffer_.size() - length_at - 8);
  const XXH128_hash_t h = XXH3_128bits(buffer_.data(), buffer_.size());
  digest_ = tree::Digest128{h.high64, h.low64};
  token_ = tree::TokenOf(key());
  return absl::OkStatus();
}

TableScan::Builder::Builder(absl::string_view keyspace, RowCodec codec,
                            uint64_t estimated_rows)
    : digester_(keyspace, codec), estimated_rows_(estimated_rows) {
  scan_.keyspace_ = std::string(keyspace);
}

absl::Status TableScan::Builder::Add(absl::Span<const Field> fields) {
  TALLY_RETURN_IF_ERROR(digester_.Digest(fields));
  if (!reserved_) {
    scan_.Reserve(estimated_rows_, digester_.key().size());
    reserved_ = true;
  }
  scan_.Add(digester_.key(), digester_.digest(), digester_.token());
  return absl::OkStatus();
}

void TableScan::Reserve(uint64_t rows, size_t key_bytes) {
  records_.reserve(rows * (1 + key_bytes + sizeof(tree::Digest128)));
}

namespace {

// What the scan asks the catalog before it reads the table.
struct TableFacts {
  // The planner's row estimate (pg_class.reltuples, as of the last VACUUM
  // or ANALYZE), 0 when it has none. Only for reserving memory.
  uint64_t estimated_rows = 0;
  // The table has inheritance children, whose rows a SELECT of the table
  // includes and a COPY of the table itself does not.
  bool has_children = true;
};

TableFacts ReadTableFacts(Connection& conn, const TableSchema& schema) {
  TableFacts facts;
  if (schema.relid() == 0) return facts;
  // A partitioned table has no rows of its own (reltuples -1): its
  // leaves' count. (pg_partition_tree of a plain table is empty.)
  absl::StatusOr<Result> r = conn.Exec(absl::StrCat(
      "SELECT CASE WHEN c.relkind = 'p' THEN (SELECT "
      "coalesce(sum(greatest(l.reltuples, 0)), 0) FROM "
      "pg_catalog.pg_partition_tree(c.oid) p JOIN pg_catalog.pg_class l ON "
      "l.oid = p.relid WHERE p.isleaf) ELSE greatest(c.reltuples, 0) "
      "END::bigint, EXISTS (SELECT 1 FROM pg_catalog.pg_inherits WHERE "
      "inhparent = c.oid) FROM pg_catalog.pg_class c WHERE c.oid = ",
      schema.relid()));
  uint64_t rows = 0;
  if (!r.ok() || r->rows() != 1 || !absl::SimpleAtoi(r->Value(0, 0), &rows)) {
    return facts;
  }
  // 5% for rows written since; no more than 200M up front.
  facts.estimated_rows = std::min<uint64_t>(rows + rows / 20, 200'000'000);
  facts.has_children = r->Value(0, 1) != "f";
  return facts;
}

}  // namespace

uint64_t EstimatedRows(Connection& conn, const TableSchema& schema) {
  return ReadTableFacts(conn, schema).estimated_rows;
}

absl::StatusOr<TableScan> TableScan::Run(Connection& conn,
                                         const TableSchema& schema,
                                         absl::string_view keyspace,
                                         absl::string_view where,
                                         ScanCounters* counters) {
  TableScan scan;
  scan.keyspace_ = std::string(keyspace);
  const RowCodec codec = schema.codec();
  BootstrapRowDigester digester(keyspace, codec);
  const TableFacts facts = ReadTableFacts(conn, schema);
  const uint64_t estimate = facts.estimated_rows;
  bool reserved = false;
  CopyBinaryReader reader(
      [&](absl::Span<const Field> fields) -> absl::Status {
        TALLY_RETURN_IF_ERROR(digester.Digest(fields));
        if (!reserved) {
          scan.Reserve(estimate, digester.key().size());
          reserved = true;
        }
        scan.Add(digester.key(), digester.digest(), digester.token());
        return absl::OkStatus();
      },
      static_cast<int>(codec.columns()));
  // A COPY of the table itself (its columns listed in canonical order)
  // skips the executor's projection of a COPY of a query: ~7% of the
  // server's time per row. It reads no inheritance children, so a table
  // with children is read through a SELECT, which includes their rows; and
  // PostgreSQL refuses it for a partitioned table, even one without
  // partitions.
  const std::string sql =
      facts.has_children || schema.partitioned() || !where.empty()
          ? absl::StrCat(
                "COPY (SELECT ", schema.select_list(), " FROM ",
                schema.quoted_name(),
                where.empty() ? "" : absl::StrCat(" WHERE (", where, ")"),
                ") TO STDOUT (FORMAT binary)")
          : absl::StrCat("COPY ", schema.quoted_name(), " (",
                         schema.select_list(), ") TO STDOUT (FORMAT binary)");
  TALLY_RETURN_IF_ERROR(conn.CopyOut(sql, [&](absl::string_view chunk) {
    scan.bytes_ += chunk.size();
    absl::Status fed = reader.Feed(chunk);
    if (counters != nullptr) {
      counters->rows.store(scan.rows(), std::memory_order_relaxed);
      counters->bytes.store(scan.bytes_, std::memory_order_relaxed);
    }
    return fed;
  }));
  absl::Status finished = reader.Finish();
  if (!finished.ok()) {
    return absl::Status(finished.code(),
                        absl::StrCat("reading table ", schema.name(), ": ",
                                     finished.message()));
  }
  return scan;
}

std::vector<ScannedRow> TableScan::RowsIn(
    const std::vector<bool>& in_leaf) const {
  std::vector<ScannedRow> rows;
  const char* p = records_.data();
  const char* const end = p + records_.size();
  while (p < end) {
    uint32_t key_size = 0;
    p = GetVarint32(p, &key_size);
    const absl::string_view key(p, key_size);
    p += key_size;
    const tree::Token token = tree::TokenOf(key);
    if (in_leaf[LeafOf(token)]) {
      ScannedRow& row = rows.emplace_back();
      row.token = token;
      row.key = key;
      std::memcpy(&row.digest, p, sizeof(row.digest));
    }
    p += sizeof(tree::Digest128);
  }
  std::sort(rows.begin(), rows.end(),
            [](const ScannedRow& a, const ScannedRow& b) {
              return a.token != b.token ? a.token < b.token : a.key < b.key;
            });
  return rows;
}

absl::Status WithKeysTable(Connection& conn, const TableSchema& schema,
                           absl::Span<const std::string> keys,
                           const std::function<absl::Status()>& fn) {
  const RowCodec codec = schema.codec();
  CopyBinaryWriter writer;
  std::vector<Field> fields;
  std::string storage;
  for (const std::string& key : keys) {
    TALLY_RETURN_IF_ERROR(codec.DecodeKey(key, &storage, &fields));
    TALLY_RETURN_IF_ERROR(writer.AddRow(fields));
  }
  writer.Finish();
  TALLY_RETURN_IF_ERROR(conn.Exec("BEGIN").status());
  absl::Status s = [&]() -> absl::Status {
    TALLY_RETURN_IF_ERROR(
        conn.Exec(absl::StrCat("CREATE TEMPORARY TABLE tally_keys ON COMMIT "
                               "DROP AS SELECT ",
                               schema.key_list(), " FROM ",
                               schema.quoted_name(), " WITH NO DATA"))
            .status());
    TALLY_RETURN_IF_ERROR(
        conn.CopyIn("COPY tally_keys FROM STDIN (FORMAT binary)",
                    writer.TakeBuffered())
            .status());
    TALLY_RETURN_IF_ERROR(fn());
    return conn.Exec("COMMIT").status();
  }();
  if (!s.ok() && conn.healthy()) conn.Exec("ROLLBACK").IgnoreError();
  return s;
}

absl::StatusOr<std::vector<CanonicalRow>> ReadRowsByKey(
    Connection& conn, const TableSchema& schema,
    absl::Span<const std::string> keys) {
  std::vector<CanonicalRow> rows;
  if (keys.empty()) return rows;
  const RowCodec codec = schema.codec();
  TALLY_RETURN_IF_ERROR(WithKeysTable(conn, schema, keys, [&] {
    CanonicalRow row;
    CopyBinaryReader reader(
        [&](absl::Span<const Field> fields) -> absl::Status {
          TALLY_RETURN_IF_ERROR(codec.Encode(fields, &row.key, &row.value));
          rows.push_back(row);
          return absl::OkStatus();
        },
        static_cast<int>(codec.columns()));
    TALLY_RETURN_IF_ERROR(conn.CopyOut(
        absl::StrCat("COPY (SELECT ", schema.select_list(), " FROM ",
                     schema.quoted_name(), " JOIN tally_keys USING (",
                     schema.key_list(), ")) TO STDOUT (FORMAT binary)"),
        [&](absl::string_view chunk) { return reader.Feed(chunk); }));
    return reader.Finish();
  }));
  return rows;
}

absl::StatusOr<std::vector<std::string>> KeyTexts(
    Connection& conn, const TableSchema& schema,
    absl::Span<const std::string> keys) {
  std::vector<std::string> texts(keys.size());
  if (keys.empty()) return texts;
  const RowCodec codec = schema.codec();
  const std::string text =
      schema.key_columns() == 1
          ? absl::StrCat(schema.key_list(), "::text")
          : absl::StrCat("ROW(", schema.key_list(), ")::text");
  TALLY_RETURN_IF_ERROR(WithKeysTable(conn, schema, keys, [&] {
    // The keys table has no order of its own: map each answer back by its
    // canonical key.
    absl::flat_hash_map<std::string, size_t> index;
    for (size_t i = 0; i < keys.size(); ++i) index.emplace(keys[i], i);
    std::string key;
    CopyBinaryReader reader(
        [&](absl::Span<const Field> fields) -> absl::Status {
          TALLY_RETURN_IF_ERROR(
              codec.EncodeKey(fields.first(codec.key_columns()), &key));
          auto it = index.find(key);
          if (it != index.end() && !fields.back().is_null()) {
            texts[it->second] = std::string(fields.back().bytes());
          }
          return absl::OkStatus();
        },
        static_cast<int>(codec.key_columns() + 1));
    TALLY_RETURN_IF_ERROR(conn.CopyOut(
        absl::StrCat("COPY (SELECT ", schema.key_list(), ", ", text,
                     " FROM tally_keys) TO STDOUT (FORMAT binary)"),
        [&](absl::string_view chunk) { return reader.Feed(chunk); }));
    return reader.Finish();
  }));
  return texts;
}

absl::StatusOr<absl::flat_hash_map<std::string, RowText>> RowTextsByKey(
    Connection& conn, const TableSchema& schema,
    absl::Span<const std::string> keys) {
  absl::flat_hash_map<std::string, RowText> rows;
  if (keys.empty()) return rows;
  const RowCodec codec = schema.codec();
  std::vector<std::string> texts;
  for (const TableColumn& c : schema.columns()) {
    texts.push_back(
        absl::StrCat(conn.QuoteIdentifier(c.name), "::pg_catalog.text"));
  }
  TALLY_RETURN_IF_ERROR(WithKeysTable(conn, schema, keys, [&] {
    for (const char* setting :
         {"SET LOCAL TimeZone = 'UTC'", "SET LOCAL DateStyle = 'ISO, YMD'",
          "SET LOCAL IntervalStyle = 'iso_8601'",
          "SET LOCAL extra_float_digits = 3",
          "SET LOCAL bytea_output = 'hex'"}) {
      TALLY_RETURN_IF_ERROR(conn.Exec(setting).status());
    }
    std::string key;
    CopyBinaryReader reader(
        [&](absl::Span<const Field> fields) -> absl::Status {
          TALLY_RETURN_IF_ERROR(
              codec.EncodeKey(fields.first(codec.key_columns()), &key));
          RowText& row = rows[key];
          row.clear();
          for (const Field& f : fields.subspan(codec.key_columns())) {
            row.push_back(f.is_null() ? std::nullopt
                                      : std::optional<std::string>(
                                            std::string(f.bytes())));
          }
          return absl::OkStatus();
        },
        static_cast<int>(codec.key_columns() + texts.size()));
    return [&]() -> absl::Status {
      TALLY_RETURN_IF_ERROR(conn.CopyOut(
          absl::StrCat("COPY (SELECT ", schema.key_list(), ", ",
                       absl::StrJoin(texts, ", "), " FROM ",
                       schema.quoted_name(), " JOIN tally_keys USING (",
                       schema.key_list(), ")) TO STDOUT (FORMAT binary)"),
          [&](absl::string_view chunk) { return reader.Feed(chunk); }));
      return reader.Finish();
    }();
  }));
  return rows;
}

}  // namespace pg
}  // namespace tally
