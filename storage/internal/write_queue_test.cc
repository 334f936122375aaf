#include "storage/internal/write_queue.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tally {
namespace storage {
namespace internal {
namespace {

using ::testing::ElementsAre;

// A writer carrying a number; the commit doubles it into `result`.
struct NumberWrite : WriteQueue::Writer {
  NumberWrite(int n, size_t items, size_t bytes, bool alone = false)
      : Writer(items, bytes, alone), number(n) {}
  int number;
  int result = 0;
  // The writer whose thread ran the commit of this writer's group.
  int committed_by = -1;
};

NumberWrite* AsNumber(WriteQueue::Writer* w) {
  return static_cast<NumberWrite*>(w);
}

// Records every group a queue commits, as the numbers of its writers.
class GroupLog {
 public:
  void Add(absl::Span<WriteQueue::Writer* const> group) {
    std::vector<int> numbers;
    for (WriteQueue::Writer* w : group) numbers.push_back(AsNumber(w)->number);
    absl::MutexLock lock(&mu_);
    groups_.push_back(std::move(numbers));
  }
  std::vector<std::vector<int>> groups() const {
    absl::MutexLock lock(&mu_);
    return groups_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::vector<int>> groups_ ABSL_GUARDED_BY(mu_);
};

void WaitForQueued(const WriteQueue& queue, size_t n) {
  while (queue.size() < n) absl::SleepFor(absl::Milliseconds(1));
}

TEST(WriteQueue, LoneWriterCommitsItselfAndGetsTheCommitStatus) {
  WriteQueue queue({/*max_items=*/10, /*max_bytes=*/100});
  NumberWrite w(7, 1, 1);
  int calls = 0;
  EXPECT_TRUE(queue
                  .Write(&w,
                         [&](absl::Span<WriteQueue::Writer* const> group) {
                           ++calls;
                           EXPECT_THAT(group, ElementsAre(&w));
                           return absl::OkStatus();
                         })
                  .ok());
  EXPECT_EQ(calls, 1);
  NumberWrite failing(8, 1, 1);
  EXPECT_EQ(queue
                .Write(&failing,
                       [](absl::Span<WriteQueue::Writer* const>) {
                         return absl::UnavailableError("disk gone");
                       })
                .code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(queue.size(), 0u);
}

// Writers 1..3 queue while writer 0 commits: writer 1 leads next and
// commits all three in one group, in arrival order, each with its own
// result.
TEST(WriteQueue, WritersQueuedBehindALeaderCommitAsTheNextGroup) {
  WriteQueue queue({/*max_items=*/10, /*max_bytes=*/100});
  GroupLog log;
  absl::Notification release;
  std::vector<std::unique_ptr<NumberWrite>> writers;
  for (int i = 0; i < 4; ++i) {
    writers.push_back(std::make_unique<NumberWrite>(i, 1, 1));
  }
  auto run = [&](int i) {
    const absl::Status s = queue.Write(
        writers[i].get(), [&, i](absl::Span<WriteQueue::Writer* const> group) {
          if (i == 0) release.WaitForNotification();
          log.Add(group);
          for (WriteQueue::Writer* w : group) {
            AsNumber(w)->result = AsNumber(w)->number * 2;
            AsNumber(w)->committed_by = i;
          }
          return absl::OkStatus();
        });
    EXPECT_TRUE(s.ok()) << s;
  };
  std::vector<std::thread> threads;
  threads.emplace_back(run, 0);
  WaitForQueued(queue, 1);
  for (int i = 1; i < 4; ++i) {
    threads.emplace_back(run, i);
    WaitForQueued(queue, i + 1);  // arrival order is 1, 2, 3
  }
  release.Notify();
  for (std::thread& t : threads) t.join();
  EXPECT_THAT(log.groups(), ElementsAre(ElementsAre(0), ElementsAre(1, 2, 3)));
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(writers[i]->result, 2 * i);
    EXPECT_EQ(writers[i]->committed_by, i == 0 ? 0 : 1);
  }
}

// Runs writers with the given sizes queued behind a blocked first writer
// (items 1, bytes 1) and returns the groups committed. The writers whose
// numbers are in `alone` are made alone.
std::vector<std::vector<int>> GroupsFor(
    WriteQueue::Limits limits,
    const std::vector<std::pair<size_t, size_t>>&
        sizes /* (items, bytes) of each */,
    const std::vector<int>& alone = {}) {
  WriteQueue queue(limits);
  GroupLog log;
  absl::Notification release;
  std::vector<std::unique_ptr<NumberWrite>> writers;
  writers.push_back(std::make_unique<NumberWrite>(0, 1, 1));
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int number = static_cast<int>(i + 1);
    writers.push_back(std::make_unique<NumberWrite>(
        number, sizes[i].first, sizes[i].second,
        std::find(alone.begin(), alone.end(), number) != alone.end()));
  }
  auto run = [&](size_t i) {
    EXPECT_TRUE(queue
                    .Write(writers[i].get(),
                           [&, i](absl::Span<WriteQueue::Writer* const> group) {
                             if (i == 0) release.WaitForNotification();
                             log.Add(group);
                             return absl::OkStatus();
                           })
                    .ok());
  };
  std::vector<std::thread> threads;
  for (size_t i = 0; i < writers.size(); ++i) {
    threads.emplace_back(run, i);
    WaitForQueued(queue, i + 1);
  }
  release.Notify();
  for (std::thread& t : threads) t.join();
  return log.groups();
}

TEST(WriteQueue, GroupStopsBeforeTheWriterThatPassesTheItemLimit) {
  EXPECT_THAT(
      GroupsFor({/*max_items=*/5, /*max_bytes=*/1000},
                {{2, 1}, {3, 1}, {1, 1}, {4, 1}}),
      ElementsAre(ElementsAre(0), ElementsAre(1, 2), ElementsAre(3, 4)));
}

TEST(WriteQueue, GroupStopsBeforeTheWriterThatPassesTheByteLimit) {
  EXPECT_THAT(
      GroupsFor({/*max_items=*/1000, /*max_bytes=*/10},
                {{1, 6}, {1, 4}, {1, 1}, {1, 9}}),
      ElementsAre(ElementsAre(0), ElementsAre(1, 2), ElementsAre(3, 4)));
}

TEST(WriteQueue, WriterLargerThanTheLimitsCommitsAlone) {
  EXPECT_THAT(GroupsFor({/*max_items=*/5, /*max_bytes=*/10},
                        {{1, 1}, {9, 1}, {1, 50}, {1, 1}}),
              ElementsAre(ElementsAre(0), ElementsAre(1), ElementsAre(2),
                          ElementsAre(3), ElementsAre(4)));
}

// A writer made alone neither joins the group before it nor takes the
// writers behind it, although all of them fit the limits.
TEST(WriteQueue, AloneWriterCommitsInAGroupOfItsOwn) {
  EXPECT_THAT(GroupsFor({/*max_items=*/100, /*max_bytes=*/100},
                        {{1, 1}, {1, 1}, {1, 1}, {1, 1}, {1, 1}},
                        /*alone=*/{2, 5}),
              ElementsAre(ElementsAre(0), ElementsAre(1), ElementsAre(2),
                          ElementsAre(3, 4), ElementsAre(5)));
}

// A failed commit fails exactly the writers of its group; the next group
// commits normally.
TEST(WriteQueue, FailedCommitFailsOnlyTheWritersOfItsGroup) {
  WriteQueue queue({/*max_items=*/10, /*max_bytes=*/100});
  absl::Notification release;
  std::vector<std::unique_ptr<NumberWrite>> writers;
  for (int i = 0; i < 3; ++i) {
    writers.push_back(std::make_unique<NumberWrite>(i, 1, 1));
  }
  std::vector<absl::Status> statuses(3);
  auto run = [&](int i) {
    statuses[i] = queue.Write(
        writers[i].get(), [&, i](absl::Span<WriteQueue::Writer* const> group) {
          if (i == 0) {
            release.WaitForNotification();
            return absl::OkStatus();
          }
          // The second group holds writers 1 and 2 and fails.
          EXPECT_EQ(group.size(), 2u);
          return absl::DataLossError("bad batch");
        });
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back(run, i);
    WaitForQueued(queue, i + 1);
  }
  release.Notify();
  for (std::thread& t : threads) t.join();
  EXPECT_TRUE(statuses[0].ok());
  EXPECT_EQ(statuses[1].code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(statuses[2].code(), absl::StatusCode::kDataLoss);

  NumberWrite after(3, 1, 1);
  EXPECT_TRUE(queue
                  .Write(&after,
                         [](absl::Span<WriteQueue::Writer* const>) {
                           return absl::OkStatus();
                         })
                  .ok());
}

// Many threads at once: every write commits exactly once, one group at a
// time, each thread's writes in the order it made them, and every writer
// gets its own result.
TEST(WriteQueue, ConcurrentWritersCommitEachWriteOnceInOrder) {
  constexpr int kThreads = 8;
  constexpr int kWritesPerThread = 300;
  WriteQueue queue({/*max_items=*/16, /*max_bytes=*/1 << 20});
  GroupLog log;
  std::atomic<int> committing{0};
  std::atomic<int> overlaps{0};
  std::atomic<int> wrong_results{0};
  auto commit = [&](absl::Span<WriteQueue::Writer* const> group) {
    if (committing.fetch_add(1) != 0) overlaps.fetch_add(1);
    log.Add(group);
    for (WriteQueue::Writer* w : group) {
      AsNumber(w)->result = AsNumber(w)->number + 1;
    }
    committing.fetch_sub(1);
    return absl::OkStatus();
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kWritesPerThread; ++i) {
        NumberWrite w(t * kWritesPerThread + i, 1, 8);
        EXPECT_TRUE(queue.Write(&w, commit).ok());
        if (w.result != w.number + 1) wrong_results.fetch_add(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(wrong_results.load(), 0);
  std::vector<int> last(kThreads, -1);
  std::vector<int> seen(kThreads * kWritesPerThread, 0);
  for (const std::vector<int>& group : log.groups()) {
    EXPECT_LE(group.size(), 16u);
    for (int n : group) {
      ++seen[n];
      const int t = n / kWritesPerThread;
      EXPECT_GT(n, last[t]) << "thread " << t << " out of order";
      last[t] = n;
    }
  }
  for (int n = 0; n < kThreads * kWritesPerThread; ++n) {
    ASSERT_EQ(seen[n], 1) << "write " << n;
  }
  EXPECT_EQ(queue.size(), 0u);
}

}  // namespace
}  // namespace internal
}  // namespace storage
}  // namespace tally
