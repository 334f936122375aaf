#include "pg/table_diff/transfer_choice.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tally {
namespace pg {
namespace {

using ::testing::HasSubstr;

LinkProbe Link(uint64_t table_bytes, absl::Duration rtt,
               double bytes_per_second, int version = 150004) {
  LinkProbe p;
  p.server_version = version;
  p.table_bytes = table_bytes;
  p.round_trip = rtt;
  p.bytes_per_second = bytes_per_second;
  return p;
}

TEST(ChooseTransfer, NearDatabasesReadEveryRow) {
  // Loopback: the link is faster than the server's COPY.
  const LinkProbe near = Link(86e6, absl::Microseconds(60), 900e6);
  TransferChoice c = ChooseTransfer(near, near);
  EXPECT_EQ(c.transfer, Transfer::kRows);
  EXPECT_THAT(c.reason, HasSubstr("86 MB"));
  // A gigabit LAN: 125 MB/s, still no faster than hashing by 1.5x.
  const LinkProbe lan = Link(86e6, absl::Microseconds(300), 110e6);
  EXPECT_EQ(ChooseTransfer(near, lan).transfer, Transfer::kRows);
}

TEST(ChooseTransfer, AFarOrNarrowLinkOnEitherSideHashes) {
  const LinkProbe near = Link(86e6, absl::Microseconds(60), 900e6);
  const LinkProbe wan = Link(86e6, absl::Milliseconds(20), 12.5e6);
  TransferChoice c = ChooseTransfer(near, wan);
  EXPECT_EQ(c.transfer, Transfer::kBlockHashes);
  EXPECT_THAT(c.reason, HasSubstr("b 20.0 ms away at 12.5 MB/s"));
  EXPECT_EQ(ChooseTransfer(wan, near).transfer, Transfer::kBlockHashes);
  EXPECT_THAT(ChooseTransfer(wan, near).reason, HasSubstr("a 20.0 ms away"));
}

TEST(ChooseTransfer, ANearLinkCountsAsAtLeastAGigabit) {
  // A 1 MiB answer understates loopback (measured: 45 MB/s).
  const LinkProbe loopback = Link(8e6, absl::Microseconds(100), 45e6);
  TransferChoice c = ChooseTransfer(loopback, loopback);
  EXPECT_EQ(c.transfer, Transfer::kRows);
  EXPECT_THAT(c.reason, HasSubstr("at 125.0 MB/s"));
}

TEST(ChooseTransfer, AServerBefore14ReadsEveryRowAndSaysWhy) {
  const LinkProbe wan = Link(86e6, absl::Milliseconds(20), 12.5e6);
  const LinkProbe old = Link(86e6, absl::Milliseconds(20), 12.5e6, 130011);
  TransferChoice c = ChooseTransfer(wan, old);
  EXPECT_EQ(c.transfer, Transfer::kRows);
  EXPECT_THAT(c.reason, HasSubstr("b runs PostgreSQL 13"));
}

TEST(ChooseTransfer, ASmallTableIsReadWhole) {
  // 100 kB over a slow link: reading takes ~0.01 s, as does hashing.
  const LinkProbe wan = Link(100e3, absl::Milliseconds(20), 12.5e6);
  EXPECT_EQ(ChooseTransfer(wan, wan).transfer, Transfer::kRows);
}

}  // namespace
}  // namespace pg
}  // namespace tally
