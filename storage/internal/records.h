// The LevelDB record layout of a tally store (format version 1).
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

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "storage/internal/coding.h"
#include "tree/digest.h"
#include "tree/hlc.h"
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

inline std::string TaggedKey(char tag, absl::string_view name) {
  std::string k(1, tag);
  k.append(name.data(), name.size());
  return k;
}

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
inline constexpr size_t kRowKeyHeader = 1 + 4 + 8;

inline std::string LeafKey(uint32_t keyspace_id, uint32_t leaf) {
  std::string k(1, kLeafTag);
  PutFixed32(&k, keyspace_id);
  PutFixed32(&k, leaf);
  return k;
}

inline std::string ChangeKey(uint64_t sequence) {
  std::string k(1, kChangeTag);
  PutFixed64(&k, sequence);
  return k;
}

// `arrival`: this node's physical clock when the tombstone was committed.
inline std::string TombstoneKey(tree::HlcTimestamp arrival,
                                absl::string_view row_key) {
  std::string k(1, kTombstoneTag);
  PutFixed64(&k, arrival.raw());
  k.append(row_key.data(), row_key.size());
  return k;
}

inline std::string DamagedKey(absl::string_view row_key) {
  return TaggedKey(kDamagedTag, row_key);
}

inline std::string OriginByIdKey(uint32_t id) {
  std::string k(1, kOriginByIdTag);
  PutFixed32(&k, id);
  return k;
}

inline std::string OriginRowsKey(uint32_t origin_id) {
  std::string k(1, kOriginRowsTag);
  PutFixed32(&k, origin_id);
  return k;
}

// The fixed part of a row record, before the backend payload.
struct RowHeader {
  tree::HlcTimestamp timestamp;
  uint32_t origin_id = 0;
  bool deleted = false;
  tree::Digest128 digest;
};
inline constexpr size_t kRowHeaderSize = 8 + 4 + 1 + 16;

inline void EncodeRowHeader(const RowHeader& h, std::string* dst) {
  PutFixed64(dst, h.timestamp.raw());
  PutFixed32(dst, h.origin_id);
  dst->push_back(static_cast<char>(h.deleted ? kRowDeleted : 0));
  h.digest.AppendTo(dst);
}

// Splits a row record into header and payload. Returns false when the
// record is malformed.
inline bool DecodeRowRecord(absl::string_view record, RowHeader* h,
                            absl::string_view* payload) {
  if (record.size() < kRowHeaderSize) return false;
  const uint8_t flags = static_cast<uint8_t>(record[12]);
  if ((flags & ~kRowDeleted) != 0) return false;
  h->timestamp = tree::HlcTimestamp::FromRaw(DecodeFixed64(record.data()));
  h->origin_id = DecodeFixed32(record.data() + 8);
  h->deleted = (flags & kRowDeleted) != 0;
  h->digest = tree::Digest128::Load(record.data() + 13);
  *payload = record.substr(kRowHeaderSize);
  return true;
}

inline std::string EncodeLeaf(const tree::Digest128& digest, uint64_t count) {
  std::string v;
  digest.AppendTo(&v);
  PutFixed64(&v, count);
  return v;
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
inline constexpr size_t kChangeHeaderSize = 4 + 8 + 4 + 1 + 16 + 1;

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

// Returns false when the record is malformed.
inline bool DecodeChangeRecord(absl::string_view record, ChangeRecord* c) {
  if (record.size() <= kChangeHeaderSize) return false;
  const char* p = record.data();
  const uint8_t flags = static_cast<uint8_t>(p[16]);
  if ((flags & ~(kRowDeleted | kChangeErased)) != 0) return false;
  c->erased = (flags & kChangeErased) != 0;
  c->keyspace_id = DecodeFixed32(p);
  c->timestamp = tree::HlcTimestamp::FromRaw(DecodeFixed64(p + 4));
  c->origin_id = DecodeFixed32(p + 12);
  c->deleted = (flags & kRowDeleted) != 0;
  c->digest_delta = tree::Digest128::Load(p + 17);
  c->count_delta = static_cast<int8_t>(p[33]);
  c->key = record.substr(kChangeHeaderSize);
  return true;
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
