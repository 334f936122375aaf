// Synthetic rows for `tally load --count N`: the same (count, seed,
// value size) always gives the same rows, on every platform, so that two
// nodes can be loaded alike (same seed) or unalike (another seed) on purpose.
//
// Keys are "key-0" .. "key-<N-1>" whatever the seed, so two loads with
// different seeds collide on every key and differ in every value. Values
// are `value_size` random letters and digits. Each node stamps the rows it
// loads with its own version, so the same load on two nodes still differs
// in every row; to make equal replicas, load one and repair the other.
//
//   SyntheticRows rows(1000, /*seed=*/42, /*value_size=*/100);
//   std::string key, value;
//   while (rows.Next(&key, &value)) ...
//
// Thread-compatible.
#ifndef TALLY_TOOLS_CLI_SYNTHETIC_H_
#define TALLY_TOOLS_CLI_SYNTHETIC_H_

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>

namespace tally {
namespace cli {

class SyntheticRows {
 public:
  SyntheticRows(uint64_t count, uint64_t seed, size_t value_size)
      : count_(count), value_size_(value_size), random_(seed) {}

  // Produces the next row; false after `count` rows.
  bool Next(std::string* key, std::string* value);

  uint64_t produced() const { return next_; }

 private:
  const uint64_t count_;
  const size_t value_size_;
  // mt19937_64's output is fixed by the standard (unlike the standard
  // distributions), which is what makes a seed mean the same rows
  // everywhere.
  std::mt19937_64 random_;
  uint64_t next_ = 0;
};

}  // namespace cli
}  // namespace tally

#endif  // TALLY_TOOLS_CLI_SYNTHETIC_H_
