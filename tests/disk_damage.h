// What a bad disk does to a data directory, for the tests that check tally
// survives it: a flipped byte inside a table file, a file system that fills
// up. Shared by the store's unit tests and the multi-process tests.
//
//   std::string value = IncompressibleValue(/*seed=*/7, /*size=*/48);
//   ... write it, close the store ...
//   ASSERT_TRUE(FlipByteInTable(dir, value));
//
//   absl::StatusOr<std::unique_ptr<ScopedTmpfs>> fs =
//       ScopedTmpfs::Mount(dir + "/fs", 3 << 20);
//   if (!fs.ok()) GTEST_SKIP() << fs.status();
#ifndef TALLY_TESTS_DISK_DAMAGE_H_
#define TALLY_TESTS_DISK_DAMAGE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace tally {
namespace testing {

// A value of `size` bytes (at least 24) whose last 24 are random letters
// drawn from `seed`, so that snappy stores them as a literal and a byte
// flipped in the table file stays a flipped byte after decompression (as on
// a real disk). `prefix` starts the value (it may repeat between values).
std::string IncompressibleValue(uint64_t seed, size_t size,
                                const std::string& prefix = "");

// Flips one bit of the byte `offset` bytes into the random tail of `value`
// (its last 24 bytes) in every `.ldb` file of `dir` that holds it, as a bad
// disk would: a table a compaction has made obsolete, not yet deleted, may
// hold a copy beside the live one (a store's background reads, such as its
// row filter's build, can start a compaction before it closes). Returns
// false if no table file holds it. The store must be closed.
bool FlipByteInTable(const std::string& dir, const std::string& value,
                     size_t offset = 21);

// Inverts one byte every `stride` bytes from `offset` on, in every `.ldb`
// file of `dir`: the damage a bad disk or a bad copy leaves spread over the
// tables. Returns how many bytes it inverted. The store must be closed.
int FlipBytesEvery(const std::string& dir, size_t offset, size_t stride);

// Inverts the `count` bytes from `offset` on in every `.ldb` file of `dir`
// that is longer than `offset + count` (only in the oldest one, the first
// flush, when `oldest_only`): a run a bad sector leaves, which inside a
// snappy-compressed block makes the whole block undecodable. Returns how
// many files it damaged. The store must be closed.
int InvertByteRun(const std::string& dir, size_t offset, size_t count,
                  bool oldest_only = false);

// A tmpfs of `bytes` mounted at `path` (created if missing) while the object
// lives; lazily unmounted when it goes. Mount() fails with
// kFailedPrecondition when not root and kUnavailable when the kernel
// refuses: tests then skip (a real full disk needs a mount).
class ScopedTmpfs {
 public:
  static absl::StatusOr<std::unique_ptr<ScopedTmpfs>> Mount(
      const std::string& path, size_t bytes);
  ~ScopedTmpfs();
  ScopedTmpfs(const ScopedTmpfs&) = delete;
  ScopedTmpfs& operator=(const ScopedTmpfs&) = delete;

  const std::string& path() const { return path_; }

 private:
  explicit ScopedTmpfs(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace testing
}  // namespace tally

#endif  // TALLY_TESTS_DISK_DAMAGE_H_
