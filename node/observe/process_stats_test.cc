#include "node/observe/process_stats.h"

#include <fcntl.h>
#include <unistd.h>

#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/observe/duration_histogram.h"

namespace tally {
namespace node {
namespace {

TEST(ProcessStats, ReadsThisProcess) {
  v1::ProcessStatus before;
  ASSERT_TRUE(ReadProcessStats("/proc/self", &before).ok());
  // 64 MiB touched on the heap shows as anonymous memory.
  std::vector<char> heap(64 << 20, 1);
  // The buffer escapes to the compiler: Clang at -O2 would otherwise elide
  // an allocation whose bytes are only read back as constants.
  asm volatile("" : : "r"(heap.data()) : "memory");
  const int fd = open("/proc/self/stat", O_RDONLY);
  ASSERT_GE(fd, 0);
  v1::ProcessStatus after;
  ASSERT_TRUE(ReadProcessStats("/proc/self", &after).ok());
  close(fd);
  EXPECT_GE(after.resident_anon_bytes(),
            before.resident_anon_bytes() + (60u << 20));
  EXPECT_GT(after.resident_file_bytes(), 0u);  // the binary itself
  EXPECT_EQ(after.open_fds(), before.open_fds() + 1);
  EXPECT_GE(after.threads(), 1u);
  EXPECT_GT(after.max_fds(), 0u);
  EXPECT_GE(after.cpu_seconds(), before.cpu_seconds());
  EXPECT_GT(after.virtual_bytes(), after.resident_anon_bytes());
  // Started in the last hour, not in the future.
  const int64_t now = absl::ToUnixMillis(absl::Now());
  EXPECT_LE(after.start_unix_ms(), now + 1000);
  EXPECT_GT(after.start_unix_ms(), now - 3600 * 1000);
  EXPECT_EQ(heap[12345], 1);
}

TEST(ProcessStats, AProcessThatIsGoneIsUnavailable) {
  v1::ProcessStatus out;
  const absl::Status s = ReadProcessStats("/proc/999999999", &out);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(s.message(), ::testing::HasSubstr("/proc/999999999/stat"));
}

TEST(DurationHistogram, CountsEachDurationInTheFirstBucketThatHoldsIt) {
  DurationHistogram h({1, 10});
  h.Add(absl::Seconds(1));  // on the bound: in it (le)
  h.Add(absl::Seconds(2));
  h.Add(absl::Seconds(60));
  h.Add(-absl::Seconds(1));  // a clock step: counted as zero
  v1::DurationHistogram proto;
  h.ToProto(&proto);
  EXPECT_THAT(proto.upper_bounds(), ::testing::ElementsAre(1, 10));
  EXPECT_THAT(proto.counts(), ::testing::ElementsAre(2, 1, 1));
  EXPECT_EQ(proto.count(), 4u);
  EXPECT_DOUBLE_EQ(proto.sum_seconds(), 63);
}

}  // namespace
}  // namespace node
}  // namespace tally
