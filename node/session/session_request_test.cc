#include "node/session/session_request.h"

#include <thread>

#include "gtest/gtest.h"

namespace tally {
namespace node {
namespace {

TEST(SessionRequest, WaitsUntilStartedAndFinished) {
  SessionRequest request("users");
  EXPECT_EQ(request.keyspace(), "users");
  EXPECT_EQ(request.snapshot().state, SessionRequest::State::kWaiting);
  EXPECT_FALSE(request.WaitUntilDone(absl::Milliseconds(10)));

  // A session that never runs (no store needed to construct: it only
  // reports its progress here).
  auto session = std::make_shared<Session>(nullptr, nullptr, SessionOptions{});
  request.Start(session);
  SessionRequest::Snapshot running = request.snapshot();
  EXPECT_EQ(running.state, SessionRequest::State::kRunning);
  EXPECT_EQ(running.progress.phase, SessionPhase::kIdle);

  SessionRecord record;
  record.outcome = "ok";
  record.rows_received = 3;
  std::thread finisher([&] {
    absl::SleepFor(absl::Milliseconds(20));
    request.Finish(record, {"orders"});
  });
  EXPECT_TRUE(request.WaitUntilDone(absl::Seconds(10)));
  finisher.join();
  const SessionRequest::Snapshot done = request.snapshot();
  EXPECT_EQ(done.state, SessionRequest::State::kDone);
  EXPECT_EQ(done.record.outcome, "ok");
  EXPECT_EQ(done.record.rows_received, 3u);
  ASSERT_EQ(done.differing_after.size(), 1u);
  EXPECT_EQ(done.differing_after[0], "orders");
}

TEST(SessionRequest, TheFirstFinishCountsAndAFinishedOneNeverStarts) {
  SessionRequest request("");
  SessionRecord cancelled;
  cancelled.outcome = "CANCELLED: the tool that asked for it went away";
  request.Finish(cancelled, {});
  SessionRecord late;
  late.outcome = "ok";
  request.Finish(late, {});
  request.Start(std::make_shared<Session>(nullptr, nullptr, SessionOptions{}));
  const SessionRequest::Snapshot done = request.snapshot();
  EXPECT_EQ(done.state, SessionRequest::State::kDone);
  EXPECT_EQ(done.record.outcome, cancelled.outcome);
  EXPECT_TRUE(request.WaitUntilDone(absl::ZeroDuration()));
}

}  // namespace
}  // namespace node
}  // namespace tally
