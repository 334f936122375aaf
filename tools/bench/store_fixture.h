// Shared pieces of the store benchmarks: synthetic rows and disk usage.
// Scratch directories are support/temp_dir.h's TempDir.
#ifndef TALLY_TOOLS_BENCH_STORE_FIXTURE_H_
#define TALLY_TOOLS_BENCH_STORE_FIXTURE_H_

#include <cstdint>
#include <random>
#include <string>

#include "support/temp_dir.h"

namespace tally {
namespace bench {

// Random bytes of the given length (keys and values are incompressible, so
// LevelDB's compression neither helps nor hides anything).
std::string RandomBytes(std::mt19937_64& rng, size_t n);

// Bytes on disk under `dir`.
uint64_t DirectoryBytes(const std::string& dir);

}  // namespace bench
}  // namespace tally

#endif  // TALLY_TOOLS_BENCH_STORE_FIXTURE_H_
