// Shared pieces of the store benchmarks: temporary directories, synthetic
// rows, and the LevelDB options a store uses (so baselines match them).
#ifndef TALLY_TOOLS_BENCH_STORE_FIXTURE_H_
#define TALLY_TOOLS_BENCH_STORE_FIXTURE_H_

#include <cstdint>
#include <random>
#include <string>

namespace tally {
namespace bench {

// A directory under $TMPDIR, removed when the object goes.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& label);
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Random bytes of the given length (keys and values are incompressible, so
// LevelDB's compression neither helps nor hides anything).
std::string RandomBytes(std::mt19937_64& rng, size_t n);

// Bytes on disk under `dir`.
uint64_t DirectoryBytes(const std::string& dir);

}  // namespace bench
}  // namespace tally

#endif  // TALLY_TOOLS_BENCH_STORE_FIXTURE_H_
