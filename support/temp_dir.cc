#include "support/temp_dir.h"

#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace tally {
namespace testing {

TempDir::TempDir() {
  // Under ctest's or gtest's temp dir when set, so parallel runs stay apart.
  const char* base = std::getenv("TEST_TMPDIR");
  std::string tmpl =
      ((base != nullptr ? std::filesystem::path(base)
                        : std::filesystem::temp_directory_path()) /
       "tally-test-XXXXXX")
          .string();
  if (mkdtemp(tmpl.data()) == nullptr) {
    std::perror("mkdtemp");
    std::abort();
  }
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace testing
}  // namespace tally
