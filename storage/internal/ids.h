// Strong types for the short ids the store gives keyspaces and origins,
// and the name of one leaf of a keyspace's tree.
//
// Both are 32-bit numbers stored in record keys (internal/records.h), and
// before these types a keyspace id could be passed where an origin id was
// meant without a word from the compiler. Construction is explicit, and the
// raw number comes out only through value(), at the records.h boundary:
//
//   const KeyspaceId id(DecodeFixed32(key.data() + 1));
//   batch.Put(RowKey(id.value(), token, key), record);
//
// Thread-compatible values; hashable with absl::Hash.
#ifndef TALLY_STORAGE_INTERNAL_IDS_H_
#define TALLY_STORAGE_INTERNAL_IDS_H_

#include <cstdint>
#include <utility>

namespace tally {
namespace storage {
namespace internal {

// A 32-bit id of one kind, told apart from ids of other kinds by `Tag`.
template <typename Tag>
class StrongId {
 public:
  constexpr StrongId() = default;
  constexpr explicit StrongId(uint32_t value) : value_(value) {}

  constexpr uint32_t value() const { return value_; }

  friend constexpr bool operator==(StrongId a, StrongId b) {
    return a.value_ == b.value_;
  }
  friend constexpr bool operator!=(StrongId a, StrongId b) {
    return a.value_ != b.value_;
  }
  friend constexpr bool operator<(StrongId a, StrongId b) {
    return a.value_ < b.value_;
  }
  template <typename H>
  friend H AbslHashValue(H h, StrongId id) {
    return H::combine(std::move(h), id.value_);
  }

 private:
  uint32_t value_ = 0;
};

// The id of a keyspace, in its row, leaf and change records. Ids start at
// 1 and are never reused.
using KeyspaceId = StrongId<struct KeyspaceIdTag>;
// The id of an origin (the node that wrote a row version), in row and
// change records. Id 1 is this node's own (kLocalOriginId).
using OriginId = StrongId<struct OriginIdTag>;

// One leaf of one keyspace's tree.
struct LeafRef {
  KeyspaceId keyspace;
  uint32_t leaf = 0;

  friend bool operator==(const LeafRef& a, const LeafRef& b) {
    return a.keyspace == b.keyspace && a.leaf == b.leaf;
  }
  template <typename H>
  friend H AbslHashValue(H h, const LeafRef& r) {
    return H::combine(std::move(h), r.keyspace, r.leaf);
  }
};

}  // namespace internal
}  // namespace storage
}  // namespace tally

#endif  // TALLY_STORAGE_INTERNAL_IDS_H_
