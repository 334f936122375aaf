#include "pg/sidecar/apply/fault_points.h"

#include <signal.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tally {
namespace pg {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(FaultPoints, EveryPointParsesByItsName) {
  for (FaultPoint p :
       {FaultPoint::kCaptureAfterIndexCommit, FaultPoint::kApplyBeforeDbCommit,
        FaultPoint::kApplyAfterDbCommit, FaultPoint::kApplyAfterStoreCommit}) {
    absl::StatusOr<std::shared_ptr<FaultPoints>> f =
        FaultPoints::Parse(FaultPointName(p));
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ((*f)->armed(), p);
    EXPECT_EQ((*f)->count(), 1u);
  }
  absl::StatusOr<std::shared_ptr<FaultPoints>> f =
      FaultPoints::Parse("apply-after-db-commit:3");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->armed(), FaultPoint::kApplyAfterDbCommit);
  EXPECT_EQ((*f)->count(), 3u);
}

TEST(FaultPoints, AnEmptySpecArmsNothing) {
  absl::StatusOr<std::shared_ptr<FaultPoints>> f = FaultPoints::Parse("");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_FALSE((*f)->armed().has_value());
  (*f)->Reach(FaultPoint::kApplyAfterDbCommit);  // returns
}

TEST(FaultPoints, AnUnknownNameOrCountIsRefusedNamingThePoints) {
  absl::StatusOr<std::shared_ptr<FaultPoints>> f =
      FaultPoints::Parse("apply-after-commit");
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(f.status().message(),
              AllOf(HasSubstr("apply-after-commit"),
                    HasSubstr("capture-after-index-commit"),
                    HasSubstr("apply-after-store-commit")));
  for (const char* bad :
       {"apply-after-db-commit:0", "apply-after-db-commit:x",
        "apply-after-db-commit:", "apply-after-db-commit:-1"}) {
    EXPECT_EQ(FaultPoints::Parse(bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(FaultPointsDeathTest, TheArmedPointKillsAtItsCountAndNoOther) {
  EXPECT_EXIT(
      {
        std::shared_ptr<FaultPoints> f =
            *FaultPoints::Parse("apply-after-db-commit:2");
        f->Reach(FaultPoint::kApplyBeforeDbCommit);  // another point
        f->Reach(FaultPoint::kApplyAfterDbCommit);   // the first time
        f->Reach(FaultPoint::kApplyBeforeDbCommit);
        f->Reach(FaultPoint::kApplyAfterDbCommit);  // the second: killed
        _exit(0);
      },
      ::testing::KilledBySignal(SIGKILL),
      "fault point apply-after-db-commit reached \\(time 2\\): killed");
  // Not reached often enough: the process lives on.
  EXPECT_EXIT(
      {
        std::shared_ptr<FaultPoints> f =
            *FaultPoints::Parse("apply-after-db-commit:2");
        f->Reach(FaultPoint::kApplyAfterDbCommit);
        _exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace pg
}  // namespace tally
