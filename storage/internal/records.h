// The LevelDB record layout of a tally store (format version 1): how every
// record key and value is encoded, and parsed back.
//
// Each kind has an encoder (`RowKey`, `EncodeRowHeader`, ...) and a parser
// (`ParseRowKey`, `DecodeRowRecord`, ...) in the style of LevelDB's
// dbformat.h: a parser returns false when its input is malformed and leaves
// building the error to the caller (`Corrupt(...)` in store_impl.h), which
// knows what it was reading. Parsed string_views point into the input.
// Sizes are named here; no other file decodes a record by offset.
//
//   internal::ParsedRowKey row;
//   if (!internal::ParseRowKey(it->key(), &row)) return Corrupt("row key",
//   ...);
//   ... row.keyspace_id, row.token, row.key ...
//
// Every record key starts with a one-byte tag; integers are fixed-width
// big-endian (internal/coding.h), so that rows of one token range, leaves of
// one keyspace and change-log entries in sequence order are contiguous.
//
//   'M' name                       -> metadata value (format, node, epoch ...)
//   'K' keyspace-name              -> keyspace id (4) | depth (1)
//   'R' ks-id (4) token (8) key    -> row: HLC (8) | origin id (4) | flags (1)
//                                     | row digest (16) | backend payload
//   'L' ks-id (4) leaf (4)         -> leaf digest (16) | row count (8)
//   'C' sequence (8)               -> change: ks-id (4) | HLC (8)
//                                     | origin id (4) | flags (1)
//                                     | leaf digest delta (16)
//                                     | row count delta (1, signed) | key
//   'O' origin-id (4)              -> origin long name
//   'N' origin long name           -> origin id (4)
//   'P' upstream name              -> epoch (8) | sequence (8)
//   'Q' origin-id (4)              -> rows whose version it wrote (8)
//   'T' arrival HLC (8) row key    -> tombstone HLC (8): an index of
//                                     tombstones by when they arrived at this
//                                     node (its physical clock at commit),
//                                     for the purge
//   'D' row key                    -> (empty): a row whose stored bytes do
//                                     not match its digest (damaged)
//   'B'                            -> backend position (opaque, non-empty):
//                                     where the backend's captured changes
//                                     stand, committed with their rows
//   'X' keyspace-name              -> dropped keyspace: its former id (4)
//                                     | when dropped, Unix ms (8)
//   'Y' ks-id (4)                  -> the name a dropped keyspace's id had
//
// A tombstone's purge age is judged by its arrival, not by its own
// timestamp: a tombstone written by a node whose clock runs behind looks old
// the moment it is written, and purging it by that age would let a peer that
// missed the delete bring the row back. 'T' records are not removed when the
// tombstone is overwritten (the arrival of the old one is not in the row);
// the purge finds them stale (the row is no longer a tombstone of the
// recorded timestamp) and removes them then. 'M' tombstone_arrival marks a
// store whose index is keyed by arrival; an older store's index (keyed by
// the tombstone's timestamp, empty values) is rewritten once at open, every
// tombstone counted as arriving then, so none is purged earlier than before.
//
// A damaged row is left out of its leaf (the leaf is recomputed from the
// sound rows), of listings and of reads, so that the tree differs from a
// peer's and anti-entropy brings the peer's copy; the first write to the
// row, whatever its version, replaces it and clears the mark.
//
// A change-log entry does not copy the value: the row holds it, and an entry
// whose version is no longer the row's has been superseded.
//
// The 'Q' records count rows (tombstones included, all keyspaces) per
// origin of their current version. Unlike the leaves they are written by
// every commit that changes them — one small record per origin touched, not
// per row — so they never need a replay. 'M' origin_rows marks a store
// whose counts are kept; a store written before them is counted once, from
// its rows, when it is opened.
//
// Leaves are not written by every commit. Each change-log entry carries the
// change it made to its leaf (old digest ^ new digest, row count delta), and
// the leaf records are checkpointed every so many changes and at a clean
// close, together with 'M' leaves_sequence: the last change they include.
// Opening replays the entries after it, so leaves and rows always agree
// after a crash while a commit writes two records per row, not three.
#ifndef TALLY_STORAGE_INTERNAL_RECORDS_H_
#define TALLY_STORAGE_INTERNAL_RECORDS_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "storage/internal/coding.h"
#include "tree/digest.h"
#include "tree/hlc.h"
#include "tree/merkle_tree.h"
#include "tree/token.h"

namespace tally {
namespace storage {
namespace internal {

inline constexpr char kMetaTag = 'M';
inline constexpr char kKeyspaceTag = 'K';
inline constexpr char kRowTag = 'R';
inline constexpr char kLeafTag = 'L';
inline constexpr char kChangeTag = 'C';
inline constexpr char kOriginByIdTag = 'O';
inline constexpr char kOriginByNameTag = 'N';
inline constexpr char kProgressTag = 'P';
inline constexpr char kOriginRowsTag = 'Q';
inline constexpr char kTombstoneTag = 'T';
inline constexpr char kDamagedTag = 'D';
// A row set aside by a recover (RepairStore) because its keyspace's record
// was lost: the tag, then the row's own key; the value is the row record.
// No scan of the store reads them; the next recover tries to name them.
inline constexpr char kSetAsideRowTag = 'S';
// A dropped keyspace (Store::DropKeyspace): its name, the id it had and
// when it was dropped. Its rows, leaves and 'K' record are gone; the name
// is refused to writers until the drop is undone.
inline constexpr char kDroppedKeyspaceTag = 'X';
// The id a dropped keyspace had, with its name: the change log's entries
// of the keyspace (until retention trims them) name it by that id. Kept
// when the drop is undone, as the name then gets a new id.
inline constexpr char kRetiredKeyspaceIdTag = 'Y';

// Metadata names.
inline constexpr absl::string_view kMetaFormat = "format";
inline constexpr absl::string_view kMetaNodeName = "node";
inline constexpr absl::string_view kMetaEpoch = "epoch";
inline constexpr absl::string_view kMetaLastSequence = "last_sequence";
inline constexpr absl::string_view kMetaNextKeyspaceId = "next_keyspace";
inline constexpr absl::string_view kMetaNextOriginId = "next_origin";
inline constexpr absl::string_view kMetaLeavesSequence = "leaves_sequence";
inline constexpr absl::string_view kMetaOriginRows = "origin_rows";
// The last change-log entry removed by retention (0: none).
inline constexpr absl::string_view kMetaTrimmedThrough = "trimmed_through";
// Present once every tombstone has its 'T' record.
inline constexpr absl::string_view kMetaTombstoneIndex = "tombstone_index";
// Present once the 'T' records are keyed by arrival time.
inline constexpr absl::string_view kMetaTombstoneArrival = "tombstone_arrival";

inline constexpr uint32_t kFormatVersion = 1;

// Row flags.
inline constexpr uint8_t kRowDeleted = 1;
// Change flags: the change removed the row (a source override's erase).
inline constexpr uint8_t kChangeErased = 2;

// Field sizes.
inline constexpr size_t kTagSize = 1;
inline constexpr size_t kKeyspaceIdSize = 4;
inline constexpr size_t kOriginIdSize = 4;
inline constexpr size_t kTokenSize = 8;
inline constexpr size_t kLeafIndexSize = 4;
inline constexpr size_t kSequenceSize = 8;
inline constexpr size_t kHlcSize = 8;
inline constexpr size_t kFlagsSize = 1;
inline constexpr size_t kDigestSize = 16;
inline constexpr size_t kCountSize = 8;
inline constexpr size_t kEpochSize = 8;

namespace records_internal {

// Removes `tag` from the front of `in`; false if `in` does not start with it.
inline bool ConsumeTag(char tag, absl::string_view* in) {
  if (in->empty() || in->front() != tag) return false;
  in->remove_prefix(kTagSize);
  return true;
}

inline tree::Digest128 GetDigest(absl::string_view* in) {
  const tree::Digest128 d = tree::Digest128::Load(in->data());
  in->remove_prefix(kDigestSize);
  return d;
}

inline uint8_t GetByte(absl::string_view* in) {
  const uint8_t b = static_cast<uint8_t>(in->front());
  in->remove_prefix(1);
  return b;
}

}  // namespace records_internal

// The prefix of every record of one kind.
inline std::string TagPrefix(char tag) { return std::string(1, tag); }

// A tag followed by a name: 'M', 'K', 'N', 'P' and 'D' keys.
inline std::string TaggedKey(char tag, absl::string_view name) {
  std::string k(1, tag);
  k.append(name.data(), name.size());
  return k;
}

// Parses a key `tag name`; the name may be empty.
inline bool ParseTaggedKey(char tag, absl::string_view k,
                           absl::string_view* name) {
  if (!records_internal::ConsumeTag(tag, &k)) return false;
  *name = k;
  return true;
}

// A value that is exactly one fixed-width integer (counters, ids, counts).
inline bool ParseFixed32Value(absl::string_view v, uint32_t* out) {
  return v.size() == 4 && GetFixed32(&v, out);
}
inline bool ParseFixed64Value(absl::string_view v, uint64_t* out) {
  return v.size() == 8 && GetFixed64(&v, out);
}

// ---------------------------------------------------------- 'X' dropped

inline std::string DroppedKeyspaceKey(absl::string_view name) {
  return TaggedKey(kDroppedKeyspaceTag, name);
}

struct DroppedKeyspaceRecord {
  uint32_t id = 0;  // the id the keyspace had; never given out again
  uint64_t dropped_unix_ms = 0;
};

inline constexpr size_t kDroppedKeyspaceValueSize = kKeyspaceIdSize + 8;

inline std::string EncodeDroppedKeyspaceRecord(const DroppedKeyspaceRecord& r) {
  std::string v;
  PutFixed32(&v, r.id);
  PutFixed64(&v, r.dropped_unix_ms);
  return v;
}

inline bool ParseDroppedKeyspaceRecord(absl::string_view v,
                                       DroppedKeyspaceRecord* r) {
  return v.size() == kDroppedKeyspaceValueSize && GetFixed32(&v, &r->id) &&
         GetFixed64(&v, &r->dropped_unix_ms);
}

inline std::string RetiredKeyspaceIdKey(uint32_t id) {
  std::string k(1, kRetiredKeyspaceIdTag);
  PutFixed32(&k, id);
  return k;
}

inline bool ParseRetiredKeyspaceIdKey(absl::string_view k, uint32_t* id) {
  return records_internal::ConsumeTag(kRetiredKeyspaceIdTag, &k) &&
         k.size() == kKeyspaceIdSize && GetFixed32(&k, id);
}

// ---------------------------------------------------------- 'M' metadata

inline std::string MetaKey(absl::string_view name) {
  return TaggedKey(kMetaTag, name);
}

inline bool ParseMetaKey(absl::string_view k, absl::string_view* name) {
  return ParseTaggedKey(kMetaTag, k, name);
}

// ---------------------------------------------------------- 'K' keyspace

inline std::string KeyspaceKey(absl::string_view name) {
  return TaggedKey(kKeyspaceTag, name);
}

inline bool ParseKeyspaceKey(absl::string_view k, absl::string_view* name) {
  return ParseTaggedKey(kKeyspaceTag, k, name);
}

struct KeyspaceRecord {
  uint32_t id = 0;
  int depth = 0;
};
inline constexpr size_t kKeyspaceValueSize = kKeyspaceIdSize + 1;

inline std::string EncodeKeyspaceRecord(const KeyspaceRecord& r) {
  std::string v = Fixed32String(r.id);
  v.push_back(static_cast<char>(r.depth));
  return v;
}

// The depth is not range-checked: the caller knows the valid range.
inline bool ParseKeyspaceRecord(absl::string_view v, KeyspaceRecord* r) {
  if (v.size() != kKeyspaceValueSize) return false;
  GetFixed32(&v, &r->id);
  r->depth = records_internal::GetByte(&v);
  return true;
}

// --------------------------------------------------------------- 'R' row

inline std::string RowKeyPrefix(uint32_t keyspace_id) {
  std::string k(1, kRowTag);
  PutFixed32(&k, keyspace_id);
  return k;
}

inline std::string RowKey(uint32_t keyspace_id, tree::Token token,
                          absl::string_view key) {
  std::string k = RowKeyPrefix(keyspace_id);
  PutFixed64(&k, token);
  k.append(key.data(), key.size());
  return k;
}

// Bytes before the user key in a row key.
inline constexpr size_t kRowKeyHeader = kTagSize + kKeyspaceIdSize + kTokenSize;

struct ParsedRowKey {
  uint32_t keyspace_id = 0;
  tree::Token token = 0;
  absl::string_view key;  // may be empty: the caller checks the key rules
};

inline bool ParseRowKey(absl::string_view k, ParsedRowKey* row) {
  if (k.size() < kRowKeyHeader) return false;
  if (!records_internal::ConsumeTag(kRowTag, &k)) return false;
  GetFixed32(&k, &row->keyspace_id);
  GetFixed64(&k, &row->token);
  row->key = k;
  return true;
}

// The fixed part of a row record, before the backend payload.
struct RowHeader {
  tree::HlcTimestamp timestamp;
  uint32_t origin_id = 0;
  bool deleted = false;
  tree::Digest128 digest;
};
inline constexpr size_t kRowHeaderSize =
    kHlcSize + kOriginIdSize + kFlagsSize + kDigestSize;

inline void EncodeRowHeader(const RowHeader& h, std::string* dst) {
  PutFixed64(dst, h.timestamp.raw());
  PutFixed32(dst, h.origin_id);
  dst->push_back(static_cast<char>(h.deleted ? kRowDeleted : 0));
  h.digest.AppendTo(dst);
}

// A row record: the header, then the backend payload.
inline std::string EncodeRowRecord(const RowHeader& h,
                                   absl::string_view payload) {
  std::string record;
  record.reserve(kRowHeaderSize + payload.size());
  EncodeRowHeader(h, &record);
  record.append(payload.data(), payload.size());
  return record;
}

// Splits a row record into header and payload. Returns false when the
// record is malformed.
inline bool DecodeRowRecord(absl::string_view record, RowHeader* h,
                            absl::string_view* payload) {
  if (record.size() < kRowHeaderSize) return false;
  uint64_t timestamp;
  GetFixed64(&record, &timestamp);
  GetFixed32(&record, &h->origin_id);
  const uint8_t flags = records_internal::GetByte(&record);
  if ((flags & ~kRowDeleted) != 0) return false;
  h->timestamp = tree::HlcTimestamp::FromRaw(timestamp);
  h->deleted = (flags & kRowDeleted) != 0;
  h->digest = records_internal::GetDigest(&record);
  *payload = record;
  return true;
}

// -------------------------------------------------------------- 'L' leaf

inline std::string LeafKeyPrefix(uint32_t keyspace_id) {
  std::string k(1, kLeafTag);
  PutFixed32(&k, keyspace_id);
  return k;
}

inline std::string LeafKey(uint32_t keyspace_id, uint32_t leaf) {
  std::string k = LeafKeyPrefix(keyspace_id);
  PutFixed32(&k, leaf);
  return k;
}

struct ParsedLeafKey {
  uint32_t keyspace_id = 0;
  uint32_t leaf = 0;
};
inline constexpr size_t kLeafKeySize =
    kTagSize + kKeyspaceIdSize + kLeafIndexSize;

inline bool ParseLeafKey(absl::string_view k, ParsedLeafKey* leaf) {
  if (k.size() != kLeafKeySize) return false;
  if (!records_internal::ConsumeTag(kLeafTag, &k)) return false;
  GetFixed32(&k, &leaf->keyspace_id);
  GetFixed32(&k, &leaf->leaf);
  return true;
}

inline constexpr size_t kLeafValueSize = kDigestSize + kCountSize;

inline std::string EncodeLeaf(const tree::Digest128& digest, uint64_t count) {
  std::string v;
  digest.AppendTo(&v);
  PutFixed64(&v, count);
  return v;
}

inline bool DecodeLeaf(absl::string_view v, tree::NodeState* leaf) {
  if (v.size() != kLeafValueSize) return false;
  leaf->digest = records_internal::GetDigest(&v);
  GetFixed64(&v, &leaf->count);
  return true;
}

// -------------------------------------------------------- 'C' change log

inline std::string ChangeKey(uint64_t sequence) {
  std::string k(1, kChangeTag);
  PutFixed64(&k, sequence);
  return k;
}

inline constexpr size_t kChangeKeySize = kTagSize + kSequenceSize;

inline bool ParseChangeKey(absl::string_view k, uint64_t* sequence) {
  if (k.size() != kChangeKeySize) return false;
  if (!records_internal::ConsumeTag(kChangeTag, &k)) return false;
  GetFixed64(&k, sequence);
  return true;
}

// One change-log record. `key` points into the decoded buffer.
struct ChangeRecord {
  uint32_t keyspace_id = 0;
  tree::HlcTimestamp timestamp;
  uint32_t origin_id = 0;
  bool deleted = false;
  bool erased = false;
  tree::Digest128 digest_delta;
  int8_t count_delta = 0;
  absl::string_view key;
};
inline constexpr size_t kChangeHeaderSize = kKeyspaceIdSize + kHlcSize +
                                            kOriginIdSize + kFlagsSize +
                                            kDigestSize + /*count delta*/ 1;

inline void EncodeChangeRecord(const ChangeRecord& c, std::string* dst) {
  dst->reserve(dst->size() + kChangeHeaderSize + c.key.size());
  PutFixed32(dst, c.keyspace_id);
  PutFixed64(dst, c.timestamp.raw());
  PutFixed32(dst, c.origin_id);
  dst->push_back(static_cast<char>((c.deleted ? kRowDeleted : 0) |
                                   (c.erased ? kChangeErased : 0)));
  c.digest_delta.AppendTo(dst);
  dst->push_back(static_cast<char>(c.count_delta));
  dst->append(c.key.data(), c.key.size());
}

// Returns false when the record is malformed (the key must not be empty).
inline bool DecodeChangeRecord(absl::string_view record, ChangeRecord* c) {
  if (record.size() <= kChangeHeaderSize) return false;
  uint64_t timestamp;
  GetFixed32(&record, &c->keyspace_id);
  GetFixed64(&record, &timestamp);
  GetFixed32(&record, &c->origin_id);
  const uint8_t flags = records_internal::GetByte(&record);
  if ((flags & ~(kRowDeleted | kChangeErased)) != 0) return false;
  c->timestamp = tree::HlcTimestamp::FromRaw(timestamp);
  c->deleted = (flags & kRowDeleted) != 0;
  c->erased = (flags & kChangeErased) != 0;
  c->digest_delta = records_internal::GetDigest(&record);
  c->count_delta = static_cast<int8_t>(records_internal::GetByte(&record));
  c->key = record;
  return true;
}

// --------------------------------------------------- 'O' / 'N' origins

inline std::string OriginByIdKey(uint32_t id) {
  std::string k(1, kOriginByIdTag);
  PutFixed32(&k, id);
  return k;
}

inline constexpr size_t kOriginByIdKeySize = kTagSize + kOriginIdSize;

inline bool ParseOriginByIdKey(absl::string_view k, uint32_t* id) {
  if (k.size() != kOriginByIdKeySize) return false;
  if (!records_internal::ConsumeTag(kOriginByIdTag, &k)) return false;
  GetFixed32(&k, id);
  return true;
}

// The value of an 'N' record is the origin id (ParseFixed32Value).
inline std::string OriginByNameKey(absl::string_view name) {
  return TaggedKey(kOriginByNameTag, name);
}

// ------------------------------------------------------ 'P' progress

inline std::string ProgressKey(absl::string_view upstream) {
  return TaggedKey(kProgressTag, upstream);
}

struct ProgressRecord {
  uint64_t epoch = 0;
  uint64_t sequence = 0;
};
inline constexpr size_t kProgressValueSize = kEpochSize + kSequenceSize;

inline std::string EncodeProgress(const ProgressRecord& p) {
  std::string v = Fixed64String(p.epoch);
  PutFixed64(&v, p.sequence);
  return v;
}

inline bool DecodeProgress(absl::string_view v, ProgressRecord* p) {
  if (v.size() != kProgressValueSize) return false;
  GetFixed64(&v, &p->epoch);
  GetFixed64(&v, &p->sequence);
  return true;
}

// ------------------------------------------------ 'Q' rows per origin

// The value is the row count (ParseFixed64Value).
inline std::string OriginRowsKey(uint32_t origin_id) {
  std::string k(1, kOriginRowsTag);
  PutFixed32(&k, origin_id);
  return k;
}

inline constexpr size_t kOriginRowsKeySize = kTagSize + kOriginIdSize;

inline bool ParseOriginRowsKey(absl::string_view k, uint32_t* origin_id) {
  if (k.size() != kOriginRowsKeySize) return false;
  if (!records_internal::ConsumeTag(kOriginRowsTag, &k)) return false;
  GetFixed32(&k, origin_id);
  return true;
}

// ------------------------------------------------ 'T' tombstone index

// `arrival`: this node's physical clock when the tombstone was committed.
inline std::string TombstoneKey(tree::HlcTimestamp arrival,
                                absl::string_view row_key) {
  std::string k(1, kTombstoneTag);
  PutFixed64(&k, arrival.raw());
  k.append(row_key.data(), row_key.size());
  return k;
}

inline constexpr size_t kTombstoneKeyHeader = kTagSize + kHlcSize;

// In an index written before arrivals were kept, `arrival` holds the
// tombstone's own timestamp (and the value is empty).
struct ParsedTombstoneKey {
  tree::HlcTimestamp arrival;
  absl::string_view row_key;  // not empty; not parsed
};

inline bool ParseTombstoneKey(absl::string_view k, ParsedTombstoneKey* t) {
  if (k.size() <= kTombstoneKeyHeader) return false;
  if (!records_internal::ConsumeTag(kTombstoneTag, &k)) return false;
  uint64_t arrival;
  GetFixed64(&k, &arrival);
  t->arrival = tree::HlcTimestamp::FromRaw(arrival);
  t->row_key = k;
  return true;
}

// The value: the tombstone's own timestamp.
inline std::string EncodeTombstoneValue(tree::HlcTimestamp tombstone) {
  return Fixed64String(tombstone.raw());
}

inline bool DecodeTombstoneValue(absl::string_view v,
                                 tree::HlcTimestamp* tombstone) {
  uint64_t raw;
  if (!ParseFixed64Value(v, &raw)) return false;
  *tombstone = tree::HlcTimestamp::FromRaw(raw);
  return true;
}

// ---------------------------------------------------- 'D' damage marks

inline std::string DamagedKey(absl::string_view row_key) {
  return TaggedKey(kDamagedTag, row_key);
}

// `row_key` is not parsed: a mark names whatever row record was damaged.
inline bool ParseDamagedKey(absl::string_view k, absl::string_view* row_key) {
  return ParseTaggedKey(kDamagedTag, k, row_key);
}

// The backend's position (storage/write_request.h BackendPosition): one
// record, rewritten by every commit whose request carries one, in the same
// WriteBatch as the request's rows.
inline constexpr char kBackendPositionTag = 'B';

inline std::string BackendPositionKey() {
  return std::string(1, kBackendPositionTag);
}

inline std::string EncodeBackendPosition(absl::string_view position) {
  return std::string(position);
}

// Returns false when the record is malformed (a position is never empty).
inline bool DecodeBackendPosition(absl::string_view record,
                                  std::string* position) {
  if (record.empty()) return false;
  position->assign(record.data(), record.size());
  return true;
}

}  // namespace internal
}  // namespace storage
}  // namespace tally

#endif  // TALLY_STORAGE_INTERNAL_RECORDS_H_
