#include "node/worker_pool.h"

#include <atomic>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace tally {
namespace node {
namespace {

TEST(WorkerPool, RunsEveryScheduledTaskBeforeItIsDestroyed) {
  std::atomic<int> ran{0};
  {
    WorkerPool pool(3, 1000);
    for (int i = 0; i < 500; ++i) {
      ASSERT_TRUE(pool.Schedule([&] { ++ran; }));
    }
  }
  EXPECT_EQ(ran.load(), 500);
}

TEST(WorkerPool, RefusesWorkWhenTheQueueIsFull) {
  WorkerPool pool(1, 2);
  absl::Notification release;
  absl::Notification started;
  ASSERT_TRUE(pool.Schedule([&] {
    started.Notify();
    release.WaitForNotification();
  }));
  started.WaitForNotification();
  EXPECT_TRUE(pool.Schedule([] {}));
  EXPECT_TRUE(pool.Schedule([] {}));
  EXPECT_FALSE(pool.Schedule([] {}));  // bounded: the caller must back off
  release.Notify();
}

// Bulk streams once used every pool thread, and control calls
// (Status, Put, Get) waited behind them.
TEST(WorkerPool, BulkTasksLeaveAThreadForControlTasks) {
  WorkerPool pool(3, 100);
  absl::Notification release;
  std::atomic<int> bulk_started{0};
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(pool.Schedule(
        [&] {
          ++bulk_started;
          release.WaitForNotification();
        },
        WorkerPool::Lane::kBulk));
  }
  // Two of three threads take bulk work; the third stays for control. (The
  // threads pick their tasks up at their own pace: wait for the two rather
  // than reading the count the moment the control task ran.)
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (bulk_started.load() < 2 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(bulk_started.load(), 2);
  absl::Notification control_ran;
  ASSERT_TRUE(pool.Schedule([&] { control_ran.Notify(); }));
  EXPECT_TRUE(control_ran.WaitForNotificationWithTimeout(absl::Seconds(5)));
  // Time for a third thread to take bulk work, were it allowed to.
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(bulk_started.load(), 2);
  release.Notify();
}

TEST(WorkerPool, ControlTasksRunBeforeQueuedBulkTasks) {
  WorkerPool pool(1, 100);
  absl::Notification release;
  absl::Notification started;
  ASSERT_TRUE(pool.Schedule([&] {
    started.Notify();
    release.WaitForNotification();
  }));
  started.WaitForNotification();
  std::vector<int> order;  // written by the one thread only
  ASSERT_TRUE(
      pool.Schedule([&] { order.push_back(1); }, WorkerPool::Lane::kBulk));
  ASSERT_TRUE(pool.Schedule([&] { order.push_back(2); }));
  release.Notify();
  absl::Notification done;
  ASSERT_TRUE(pool.Schedule([&] { done.Notify(); }, WorkerPool::Lane::kBulk));
  done.WaitForNotification();
  EXPECT_EQ(order, (std::vector<int>{2, 1}));
}

}  // namespace
}  // namespace node
}  // namespace tally
