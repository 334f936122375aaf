#include "node/worker_pool.h"

#include <atomic>

#include "absl/synchronization/notification.h"
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

}  // namespace
}  // namespace node
}  // namespace tally
