#include "tests/disk_damage.h"

#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tally {
namespace testing {

namespace {
constexpr size_t kRandomTail = 24;
}  // namespace

std::string IncompressibleValue(uint64_t seed, size_t size,
                                const std::string& prefix) {
  std::mt19937_64 random(seed);
  std::string v = prefix;
  if (v.size() + kRandomTail > size) v.resize(size - kRandomTail);
  while (v.size() < size) v.push_back(static_cast<char>('a' + random() % 26));
  return v;
}

int FlipBytesEvery(const std::string& dir, size_t offset, size_t stride) {
  int flipped = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".ldb") continue;
    std::fstream f(entry.path(),
                   std::ios::in | std::ios::out | std::ios::binary);
    const uintmax_t size = std::filesystem::file_size(entry.path());
    for (uintmax_t at = offset; at < size; at += stride, ++flipped) {
      char byte;
      f.seekg(static_cast<std::streamoff>(at));
      f.read(&byte, 1);
      byte = static_cast<char>(~byte);
      f.seekp(static_cast<std::streamoff>(at));
      f.write(&byte, 1);
    }
  }
  return flipped;
}

int InvertByteRun(const std::string& dir, size_t offset, size_t count,
                  bool oldest_only) {
  std::vector<std::filesystem::path> tables;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".ldb" &&
        std::filesystem::file_size(entry.path()) > offset + count) {
      tables.push_back(entry.path());
    }
  }
  // LevelDB numbers its files in order, zero-padded: the least name is
  // the oldest.
  std::sort(tables.begin(), tables.end());
  if (oldest_only && tables.size() > 1) tables.resize(1);
  int damaged = 0;
  for (const std::filesystem::path& table : tables) {
    std::fstream f(table, std::ios::in | std::ios::out | std::ios::binary);
    std::string run(count, '\0');
    f.seekg(static_cast<std::streamoff>(offset));
    f.read(run.data(), static_cast<std::streamsize>(count));
    for (char& byte : run) byte = static_cast<char>(~byte);
    f.seekp(static_cast<std::streamoff>(offset));
    f.write(run.data(), static_cast<std::streamsize>(count));
    ++damaged;
  }
  return damaged;
}

bool FlipByteInTable(const std::string& dir, const std::string& value,
                     size_t offset) {
  // Only the random tail: snappy may encode a common prefix as a copy.
  const std::string needle = value.substr(value.size() - kRandomTail);
  bool flipped = false;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".ldb") continue;
    std::fstream file(entry.path(),
                      std::ios::in | std::ios::out | std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(file)),
                            std::istreambuf_iterator<char>());
    const size_t at = bytes.find(needle);
    if (at == std::string::npos) continue;
    const size_t where = at + offset % kRandomTail;
    file.seekp(static_cast<std::streamoff>(where));
    file.put(static_cast<char>(bytes[where] ^ 0x01));
    flipped = true;
  }
  return flipped;
}

absl::StatusOr<std::unique_ptr<ScopedTmpfs>> ScopedTmpfs::Mount(
    const std::string& path, size_t bytes) {
  if (geteuid() != 0) {
    return absl::FailedPreconditionError("mounting a tmpfs needs root");
  }
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  const std::string options = absl::StrCat("size=", bytes);
  if (::mount("tmpfs", path.c_str(), "tmpfs", 0, options.c_str()) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot mount a tmpfs here: ", std::strerror(errno)));
  }
  return std::unique_ptr<ScopedTmpfs>(new ScopedTmpfs(path));
}

ScopedTmpfs::~ScopedTmpfs() { ::umount2(path_.c_str(), MNT_DETACH); }

}  // namespace testing
}  // namespace tally
