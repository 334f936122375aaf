// TempDir: a fresh directory for one test (or benchmark run), removed with
// everything in it when the object goes out of scope.
//
//   TempDir dir;
//   auto store = Store::Open(dir.path(), options);
//
// Thread-compatible.
#ifndef TALLY_SUPPORT_TEMP_DIR_H_
#define TALLY_SUPPORT_TEMP_DIR_H_

#include <string>

namespace tally {
namespace testing {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace testing
}  // namespace tally

#endif  // TALLY_SUPPORT_TEMP_DIR_H_
