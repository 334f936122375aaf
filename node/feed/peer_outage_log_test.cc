#include "node/feed/peer_outage_log.h"

#include "gtest/gtest.h"

namespace tally {
namespace node {
namespace {

using Event = PeerOutageLog::Event;

const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

TEST(PeerOutageLog, AFirstFailureIsLoggedAndTheRepeatsAreNot) {
  PeerOutageLog log("10.0.0.2:7400", "sessions", absl::Minutes(5));
  const absl::Status down = absl::UnavailableError("failed to connect");
  EXPECT_EQ(log.OnFailure(kStart, down).event, Event::kDown);
  // A session every 30 s for 4.5 minutes: nothing more.
  for (int i = 1; i < 10; ++i) {
    EXPECT_EQ(log.OnFailure(kStart + absl::Seconds(30 * i), down).event,
              Event::kNone)
        << i;
  }
}

TEST(PeerOutageLog, AStayingOutageIsSummarisedEveryInterval) {
  PeerOutageLog log("p", "feed", absl::Minutes(5));
  const absl::Status down = absl::UnavailableError("x");
  log.OnFailure(kStart, down);
  int summaries = 0;
  PeerOutageLog::Decision last;
  // 16 minutes of failures every 10 s: summaries at 5, 10 and 15 minutes.
  for (int i = 1; i <= 96; ++i) {
    PeerOutageLog::Decision d =
        log.OnFailure(kStart + absl::Seconds(10 * i), down);
    if (d.event == Event::kStillDown) {
      ++summaries;
      last = d;
    }
  }
  EXPECT_EQ(summaries, 3);
  EXPECT_EQ(last.down_for, absl::Minutes(15));
  EXPECT_EQ(last.failures, 91u);  // the first and the 90 that followed it
}

TEST(PeerOutageLog, AChangedErrorCodeIsLoggedAtOnce) {
  PeerOutageLog log("p", "sessions");
  log.OnFailure(kStart, absl::UnavailableError("down"));
  PeerOutageLog::Decision d = log.OnFailure(
      kStart + absl::Seconds(1), absl::FailedPreconditionError("refused"));
  EXPECT_EQ(d.event, Event::kStillDown);
  EXPECT_TRUE(absl::IsFailedPrecondition(d.error));
  EXPECT_EQ(log.OnFailure(kStart + absl::Seconds(2),
                          absl::FailedPreconditionError("refused"))
                .event,
            Event::kNone);
}

TEST(PeerOutageLog, TheFirstSuccessAfterAnOutageSaysHowLongItLasted) {
  PeerOutageLog log("p", "feed");
  EXPECT_EQ(log.OnSuccess(kStart).event, Event::kNone);  // never down
  log.OnFailure(kStart, absl::UnavailableError("x"));
  log.OnFailure(kStart + absl::Seconds(5), absl::UnavailableError("x"));
  PeerOutageLog::Decision back = log.OnSuccess(kStart + absl::Seconds(70));
  EXPECT_EQ(back.event, Event::kBackUp);
  EXPECT_EQ(back.down_for, absl::Seconds(70));
  EXPECT_EQ(back.failures, 2u);
  EXPECT_EQ(log.OnSuccess(kStart + absl::Seconds(80)).event, Event::kNone);
  // A new outage starts a new run.
  EXPECT_EQ(
      log.OnFailure(kStart + absl::Seconds(90), absl::UnavailableError("x"))
          .event,
      Event::kDown);
}

}  // namespace
}  // namespace node
}  // namespace tally
