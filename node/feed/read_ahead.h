// ReadAhead: how many keys a stream reads with one Store::MultiGet while it
// fills messages of about kStreamChunkBytes of rows.
//
// One MultiGet for many keys costs one snapshot and one backend batch
// instead of one read per row; but rows read beyond the message being
// filled wait in memory for the next one, and values reach 1 MB. So the
// window follows the rows' sizes seen so far: about the number of rows
// that fill the bytes left in the message, at least 1, at most kMaxRows
// (a small first window while nothing is known).
//
//   ReadAhead ahead;
//   size_t n = ahead.Keys(kStreamChunkBytes - bytes);
//   ... MultiGet n keys; ahead.Saw(rows_read, bytes_of_those_rows);
//
// Not thread-safe: one per stream.
#ifndef TALLY_NODE_FEED_READ_AHEAD_H_
#define TALLY_NODE_FEED_READ_AHEAD_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace tally {
namespace node {
namespace internal {

class ReadAhead {
 public:
  // At most this many keys per read.
  static constexpr size_t kMaxRows = 256;
  // Keys of the first read, before any row size is known.
  static constexpr size_t kFirstRows = 16;

  // The keys to read next when `budget` bytes of rows are left to fill.
  size_t Keys(size_t budget) const {
    if (rows_ == 0) return kFirstRows;
    const uint64_t average = std::max<uint64_t>(1, bytes_ / rows_);
    return static_cast<size_t>(
        std::clamp<uint64_t>(budget / average + 1, 1, kMaxRows));
  }

  // Records `rows` rows read, of `bytes` bytes together.
  void Saw(size_t rows, size_t bytes) {
    rows_ += rows;
    bytes_ += bytes;
  }

 private:
  uint64_t rows_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace internal
}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_FEED_READ_AHEAD_H_
