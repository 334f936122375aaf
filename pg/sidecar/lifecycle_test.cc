#include "pg/sidecar/lifecycle.h"

#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace tally {
namespace pg {
namespace {

// The state of a sidecar whose database answered at Prepare.
SidecarLoopState Reached(SidecarPhase phase = SidecarPhase::kPreparing) {
  SidecarLoopState s;
  s.phase = phase;
  s.database_reached = true;
  return s;
}

TEST(SidecarLifecycleTest, PhaseNamesAreTheOnesEverySurfaceShows) {
  EXPECT_EQ(SidecarPhaseName(SidecarPhase::kPreparing), "preparing");
  EXPECT_EQ(SidecarPhaseName(SidecarPhase::kBuilding), "building");
  EXPECT_EQ(SidecarPhaseName(SidecarPhase::kFollowing), "following");
  EXPECT_EQ(SidecarPhaseName(SidecarPhase::kReconnecting), "reconnecting");
  EXPECT_EQ(SidecarPhaseName(SidecarPhase::kFailed), "failed");
  EXPECT_EQ(SidecarPhaseName(SidecarPhase::kStopped), "stopped");
}

TEST(SidecarLifecycleTest, StartBuildsOrResumesWhenReachedElseReaches) {
  SidecarStep step = NextSidecarStep(Reached(), SidecarEvent::kStarted);
  EXPECT_EQ(step.action, SidecarAction::kIndexAndFollow);
  EXPECT_EQ(step.next.phase, SidecarPhase::kPreparing);

  step = NextSidecarStep(SidecarLoopState{}, SidecarEvent::kStarted);
  EXPECT_EQ(step.action, SidecarAction::kReachDatabase);
  EXPECT_EQ(step.next.phase, SidecarPhase::kPreparing);
  EXPECT_EQ(step.last_error, SidecarLastError::kKeep);
}

TEST(SidecarLifecycleTest, FirstBuildThenFollow) {
  SidecarStep step = NextSidecarStep(Reached(), SidecarEvent::kBuildStarted);
  EXPECT_EQ(step.next.phase, SidecarPhase::kBuilding);
  EXPECT_EQ(step.action, SidecarAction::kIndexAndFollow);
  EXPECT_EQ(step.last_error, SidecarLastError::kClear);
  EXPECT_FALSE(step.next.made_progress);

  // Still building until the capture follows.
  step = NextSidecarStep(step.next, SidecarEvent::kBuilt);
  EXPECT_EQ(step.next.phase, SidecarPhase::kBuilding);
  EXPECT_EQ(step.action, SidecarAction::kIndexAndFollow);
  EXPECT_EQ(step.last_error, SidecarLastError::kKeep);
  EXPECT_TRUE(step.next.made_progress);

  step = NextSidecarStep(step.next, SidecarEvent::kResumed);
  EXPECT_EQ(step.next.phase, SidecarPhase::kFollowing);
  EXPECT_EQ(step.action, SidecarAction::kIndexAndFollow);
  EXPECT_EQ(step.last_error, SidecarLastError::kClear);
}

TEST(SidecarLifecycleTest, ResumeFollowsWithoutBuilding) {
  SidecarLoopState s = Reached(SidecarPhase::kReconnecting);
  s.backoff = absl::Seconds(8);
  const SidecarStep step = NextSidecarStep(s, SidecarEvent::kResumed);
  EXPECT_EQ(step.next.phase, SidecarPhase::kFollowing);
  EXPECT_EQ(step.last_error, SidecarLastError::kClear);
  EXPECT_TRUE(step.next.made_progress);
  // The backoff starts over only after the next error.
  EXPECT_EQ(step.next.backoff, absl::Seconds(8));
}

TEST(SidecarLifecycleTest, ErrorsInARowDoubleTheBackoffUpTo30Seconds) {
  SidecarLoopState s = Reached();
  std::vector<absl::Duration> waits;
  for (int i = 0; i < 7; ++i) {
    const SidecarStep step =
        NextSidecarStep(s, i % 2 == 0 ? SidecarEvent::kConnectionLost
                                      : SidecarEvent::kRetryableError);
    EXPECT_EQ(step.next.phase, SidecarPhase::kReconnecting);
    EXPECT_EQ(step.action, SidecarAction::kWait);
    EXPECT_EQ(step.last_error, SidecarLastError::kRecord);
    waits.push_back(step.wait);
    const SidecarStep after = NextSidecarStep(step.next, SidecarEvent::kWaited);
    EXPECT_EQ(after.action, SidecarAction::kIndexAndFollow);
    EXPECT_EQ(after.next.phase, SidecarPhase::kReconnecting);
    EXPECT_EQ(after.last_error, SidecarLastError::kKeep);
    s = after.next;
  }
  EXPECT_EQ(waits, (std::vector<absl::Duration>{
                       absl::Seconds(1), absl::Seconds(2), absl::Seconds(4),
                       absl::Seconds(8), absl::Seconds(16), absl::Seconds(30),
                       absl::Seconds(30)}));
}

TEST(SidecarLifecycleTest, AnAttemptThatGotSomewhereStartsTheBackoffOver) {
  SidecarLoopState s = Reached(SidecarPhase::kReconnecting);
  s.backoff = absl::Seconds(16);
  SidecarStep step = NextSidecarStep(s, SidecarEvent::kResumed);
  step = NextSidecarStep(step.next, SidecarEvent::kConnectionLost);
  EXPECT_EQ(step.next.phase, SidecarPhase::kReconnecting);
  // The wait already due, then from 1 s again.
  EXPECT_EQ(step.wait, absl::Seconds(16));
  EXPECT_EQ(step.next.backoff, kSidecarFirstBackoff);
  EXPECT_FALSE(step.next.made_progress);
  step = NextSidecarStep(step.next, SidecarEvent::kWaited);
  step = NextSidecarStep(step.next, SidecarEvent::kConnectionLost);
  EXPECT_EQ(step.wait, absl::Seconds(1));
  EXPECT_EQ(step.next.backoff, absl::Seconds(2));

  // A build that finished counts though the capture never followed.
  s = Reached(SidecarPhase::kBuilding);
  s.backoff = absl::Seconds(4);
  step = NextSidecarStep(s, SidecarEvent::kBuilt);
  step = NextSidecarStep(step.next, SidecarEvent::kRetryableError);
  EXPECT_EQ(step.wait, absl::Seconds(4));
  EXPECT_EQ(step.next.backoff, kSidecarFirstBackoff);
}

TEST(SidecarLifecycleTest, DatabaseDownAtStartIsReachedWithTheBackoff) {
  SidecarLoopState s;  // not reached
  SidecarStep step = NextSidecarStep(s, SidecarEvent::kStarted);
  ASSERT_EQ(step.action, SidecarAction::kReachDatabase);
  for (absl::Duration expected :
       {absl::Seconds(1), absl::Seconds(2), absl::Seconds(4)}) {
    step = NextSidecarStep(
        step.next, ReachEvent(absl::UnavailableError("connection refused"),
                              /*stop_requested=*/false));
    EXPECT_EQ(step.next.phase, SidecarPhase::kReconnecting);
    EXPECT_EQ(step.action, SidecarAction::kWait);
    EXPECT_EQ(step.wait, expected);
    EXPECT_EQ(step.last_error, SidecarLastError::kRecord);
    step = NextSidecarStep(step.next, SidecarEvent::kWaited);
    EXPECT_EQ(step.action, SidecarAction::kReachDatabase);
  }
  // Reached: the phase and its reason stay until the index is built or
  // resumed; the backoff starts over.
  step = NextSidecarStep(
      step.next, ReachEvent(absl::OkStatus(), /*stop_requested=*/false));
  EXPECT_TRUE(step.next.database_reached);
  EXPECT_EQ(step.next.phase, SidecarPhase::kReconnecting);
  EXPECT_EQ(step.action, SidecarAction::kIndexAndFollow);
  EXPECT_EQ(step.next.backoff, kSidecarFirstBackoff);
  EXPECT_EQ(step.last_error, SidecarLastError::kKeep);
  step = NextSidecarStep(step.next, SidecarEvent::kConnectionLost);
  EXPECT_EQ(step.wait, absl::Seconds(1));
  step = NextSidecarStep(step.next, SidecarEvent::kWaited);
  EXPECT_EQ(step.action, SidecarAction::kIndexAndFollow);
}

TEST(SidecarLifecycleTest, PreflightRefusalWhileReachingFails) {
  const SidecarEvent e =
      ReachEvent(absl::FailedPreconditionError("wal_level is replica"), false);
  EXPECT_EQ(e, SidecarEvent::kPermanentError);
  EXPECT_EQ(ReachEvent(absl::PermissionDeniedError("no REPLICATION"), false),
            SidecarEvent::kPermanentError);
  SidecarLoopState s;
  s.phase = SidecarPhase::kReconnecting;
  const SidecarStep step = NextSidecarStep(s, e);
  EXPECT_EQ(step.next.phase, SidecarPhase::kFailed);
  EXPECT_EQ(step.action, SidecarAction::kExit);
  EXPECT_EQ(step.last_error, SidecarLastError::kRecord);
}

TEST(SidecarLifecycleTest, PermanentErrorsFailAndEndTheThread) {
  for (const absl::Status& s : {absl::DataLossError("malformed stream"),
                                absl::InvalidArgumentError("bad position"),
                                absl::OutOfRangeError("past the end")}) {
    const SidecarEvent e = AttemptEndEvent(s, false, false);
    EXPECT_EQ(e, SidecarEvent::kPermanentError) << s;
    // Also while a schema change waits for its rebuild.
    EXPECT_EQ(AttemptEndEvent(s, false, true), SidecarEvent::kPermanentError);
    for (SidecarPhase phase :
         {SidecarPhase::kPreparing, SidecarPhase::kBuilding,
          SidecarPhase::kFollowing, SidecarPhase::kReconnecting}) {
      const SidecarStep step = NextSidecarStep(Reached(phase), e);
      EXPECT_EQ(step.next.phase, SidecarPhase::kFailed);
      EXPECT_EQ(step.action, SidecarAction::kExit);
      EXPECT_EQ(step.last_error, SidecarLastError::kRecord);
    }
  }
}

TEST(SidecarLifecycleTest, OtherErrorsAreRetried) {
  EXPECT_EQ(
      AttemptEndEvent(absl::UnavailableError("server closed"), false, false),
      SidecarEvent::kConnectionLost);
  EXPECT_EQ(
      AttemptEndEvent(absl::UnavailableError("server closed"), false, true),
      SidecarEvent::kConnectionLost);
  for (const absl::Status& s :
       {absl::NotFoundError("no table"), absl::InternalError("store"),
        absl::FailedPreconditionError("slot in use"),
        absl::AbortedError("not a schema change")}) {
    EXPECT_EQ(AttemptEndEvent(s, false, false), SidecarEvent::kRetryableError)
        << s;
  }
  // A rebuild that fails is retried with the backoff, as a lost
  // connection.
  SidecarLoopState s = Reached(SidecarPhase::kBuilding);
  const SidecarEvent e =
      AttemptEndEvent(absl::NotFoundError("no table"), false, true);
  EXPECT_EQ(e, SidecarEvent::kRetryableError);
  const SidecarStep step = NextSidecarStep(s, e);
  EXPECT_EQ(step.next.phase, SidecarPhase::kReconnecting);
  EXPECT_EQ(step.action, SidecarAction::kWait);
}

TEST(SidecarLifecycleTest, SchemaChangeRebuildsAtOnce) {
  SidecarLoopState s = Reached(SidecarPhase::kFollowing);
  s.backoff = absl::Seconds(8);
  const SidecarEvent e = AttemptEndEvent(
      absl::AbortedError("the schema of public.a changed"), false, true);
  ASSERT_EQ(e, SidecarEvent::kSchemaChanged);
  SidecarStep step = NextSidecarStep(s, e);
  EXPECT_EQ(step.action, SidecarAction::kIndexAndFollow);
  EXPECT_EQ(step.wait, absl::ZeroDuration());
  // Following until the rebuild starts.
  EXPECT_EQ(step.next.phase, SidecarPhase::kFollowing);
  EXPECT_EQ(step.next.backoff, kSidecarFirstBackoff);
  EXPECT_EQ(step.last_error, SidecarLastError::kKeep);
  step = NextSidecarStep(step.next, SidecarEvent::kBuildStarted);
  EXPECT_EQ(step.next.phase, SidecarPhase::kBuilding);
}

TEST(SidecarLifecycleTest, CatalogChangeRebuildsAtOnceKeepingTheBackoff) {
  SidecarLoopState s = Reached(SidecarPhase::kFollowing);
  s.backoff = absl::Seconds(8);
  const SidecarEvent e = AttemptEndEvent(absl::OkStatus(), false, false);
  ASSERT_EQ(e, SidecarEvent::kCatalogChanged);
  const SidecarStep step = NextSidecarStep(s, e);
  EXPECT_EQ(step.action, SidecarAction::kIndexAndFollow);
  EXPECT_EQ(step.next.phase, SidecarPhase::kFollowing);
  EXPECT_EQ(step.next.backoff, absl::Seconds(8));
  EXPECT_EQ(step.last_error, SidecarLastError::kKeep);
}

TEST(SidecarLifecycleTest, StopWinsOverHowTheStepEnded) {
  for (const absl::Status& s :
       {absl::OkStatus(), absl::DataLossError("x"), absl::UnavailableError("x"),
        absl::AbortedError("x")}) {
    EXPECT_EQ(AttemptEndEvent(s, true, true), SidecarEvent::kStopRequested)
        << s;
    EXPECT_EQ(ReachEvent(s, true), SidecarEvent::kStopRequested) << s;
  }
  for (SidecarPhase phase :
       {SidecarPhase::kPreparing, SidecarPhase::kBuilding,
        SidecarPhase::kFollowing, SidecarPhase::kReconnecting}) {
    const SidecarStep step =
        NextSidecarStep(Reached(phase), SidecarEvent::kStopRequested);
    EXPECT_EQ(step.next.phase, SidecarPhase::kStopped);
    EXPECT_EQ(step.action, SidecarAction::kExit);
    EXPECT_EQ(step.last_error, SidecarLastError::kClear);
  }
}

TEST(SidecarLifecycleTest, FailedAndStoppedAreTerminal) {
  for (SidecarPhase phase : {SidecarPhase::kFailed, SidecarPhase::kStopped}) {
    for (SidecarEvent e :
         {SidecarEvent::kStarted, SidecarEvent::kReached,
          SidecarEvent::kBuildStarted, SidecarEvent::kBuilt,
          SidecarEvent::kResumed, SidecarEvent::kSchemaChanged,
          SidecarEvent::kCatalogChanged, SidecarEvent::kConnectionLost,
          SidecarEvent::kRetryableError, SidecarEvent::kPermanentError,
          SidecarEvent::kStopRequested, SidecarEvent::kWaited}) {
      const SidecarStep step = NextSidecarStep(Reached(phase), e);
      EXPECT_EQ(step.next.phase, phase);
      EXPECT_EQ(step.action, SidecarAction::kExit);
      EXPECT_EQ(step.last_error, SidecarLastError::kKeep);
    }
  }
}

}  // namespace
}  // namespace pg
}  // namespace tally
