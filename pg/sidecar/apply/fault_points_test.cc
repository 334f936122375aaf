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
       {FaultPoint::kCaptureAfterIndexCommit, FaultPoint::kApplyBeforePgCommit,
        FaultPoint::kApplyAfterPgCommit, FaultPoint::kApplyAfterStoreCommit}) {
    absl::StatusOr<std::shared_ptr<FaultPoints>> f =
        FaultPoints::Parse(FaultPointName(p));
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ((*f)->armed(), p);
    EXPECT_EQ((*f)->count(), 1u);
  }
  absl::StatusOr<std::shared_ptr<FaultPoints>> f =
      FaultPoints::Parse("apply-after-pg-commit:3");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->armed(), FaultPoint::kApplyAfterPgCommit);
  EXPECT_EQ((*f)->count(), 3u);
}

TEST(FaultPoints, AnEmptySpecArmsNothing) {
  absl::StatusOr<std::shared_ptr<FaultPoints>> f = FaultPoints::Parse("");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_FALSE((*f)->armed().has_value());
  (*f)->Reach(FaultPoint::kApplyAfterPgCommit);  // returns
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
       {"apply-after-pg-commit:0", "apply-after-pg-commit:x",
        "apply-after-pg-commit:", "apply-after-pg-commit:-1"}) {
    EXPECT_EQ(FaultPoints::Parse(bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(FaultPointsDeathTest, TheArmedPointKillsAtItsCountAndNoOther) {
  EXPECT_EXIT(
      {
        std::shared_ptr<FaultPoints> f =
            *FaultPoints::Parse("apply-after-pg-commit:2");
        f->Reach(FaultPoint::kApplyBeforePgCommit);  // another point
        f->Reach(FaultPoint::kApplyAfterPgCommit);   // the first time
        f->Reach(FaultPoint::kApplyBeforePgCommit);
        f->Reach(FaultPoint::kApplyAfterPgCommit);  // the second: killed
        _exit(0);
      },
      ::testing::KilledBySignal(SIGKILL),
      "fault point apply-after-pg-commit reached \\(time 2\\): killed");
  // Not reached often enough: the process lives on.
  EXPECT_EXIT(
      {
        std::shared_ptr<FaultPoints> f =
            *FaultPoints::Parse("apply-after-pg-commit:2");
        f->Reach(FaultPoint::kApplyAfterPgCommit);
        _exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace pg
}  // namespace tally
