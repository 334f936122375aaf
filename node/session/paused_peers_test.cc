#include "node/session/paused_peers.h"

#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/temp_dir.h"

namespace tally {
namespace node {
namespace {

using ::tally::testing::TempDir;
using ::testing::ElementsAre;

TEST(PausedPeers, AMissingFileMeansNonePaused) {
  TempDir dir;
  absl::StatusOr<std::set<std::string>> paused = ReadPausedPeers(dir.path());
  ASSERT_TRUE(paused.ok()) << paused.status();
  EXPECT_TRUE(paused->empty());
}

TEST(PausedPeers, WrittenAddressesAreReadBackAndAnEmptySetRemovesTheFile) {
  TempDir dir;
  ASSERT_TRUE(
      WritePausedPeers(dir.path(), {"10.0.0.2:7400", "127.0.0.1:7401"}).ok());
  absl::StatusOr<std::set<std::string>> paused = ReadPausedPeers(dir.path());
  ASSERT_TRUE(paused.ok()) << paused.status();
  EXPECT_THAT(*paused, ElementsAre("10.0.0.2:7400", "127.0.0.1:7401"));
  ASSERT_TRUE(WritePausedPeers(dir.path(), {}).ok());
  EXPECT_FALSE(std::ifstream(dir.path() + "/paused-peers").good());
  paused = ReadPausedPeers(dir.path());
  ASSERT_TRUE(paused.ok());
  EXPECT_TRUE(paused->empty());
}

TEST(PausedPeers, BlankLinesAndSpacesAreIgnored) {
  TempDir dir;
  std::ofstream(dir.path() + "/paused-peers") << "\n  a:1  \n\nb:2";
  absl::StatusOr<std::set<std::string>> paused = ReadPausedPeers(dir.path());
  ASSERT_TRUE(paused.ok());
  EXPECT_THAT(*paused, ElementsAre("a:1", "b:2"));
}

TEST(PausedPeers, AnUnwritableDirectoryIsAnErrorNamingTheFile) {
  absl::Status s = WritePausedPeers("/nonexistent-dir-for-test", {"a:1"});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()),
              ::testing::HasSubstr("/nonexistent-dir-for-test/paused-peers"));
}

}  // namespace
}  // namespace node
}  // namespace tally
