// Scenario "feed": the change feed along a chain of three real tallyd
// processes, A -> B -> C (B follows A, C follows B; sessions only at
// start-up), on loopback.
//
// Throughput: N changes loaded into A as fast as it takes them, measured
// twice:
//   - live: B and C follow while A ingests; the times until A, B and C hold
//     all N (B and C cannot be faster than A here: this is the chain's
//     end-to-end speed);
//   - one link at a time: both links run through TCP proxies and are cut
//     while A takes N more changes; then A -> B heals and B applies the
//     backlog through the feed alone, then B -> C heals and C applies it
//     from B. Changes/s from the first change applied.
// Baseline: A's own ingest of those N changes (Admin.Load), in the same run.
//
// Lag: writes at A at a fixed rate (default 5,000/s for 10 s, several
// writer threads), each key's send time kept; the bench subscribes to C's
// own feed from its head and records when each key arrives there. Lag =
// arrival at the bench through C's feed - start of the Put at A: it
// includes the Put's own round trip and the last hop to the bench.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "node/client/client.h"
#include "support/mesh.h"
#include "support/tcp_proxy.h"
#include "tools/bench/scenario.h"

ABSL_FLAG(uint64_t, feed_changes, 200000,
          "feed: changes loaded into A for the throughput runs");
ABSL_FLAG(uint64_t, feed_rate, 5000, "feed: writes per second for the lag run");
ABSL_FLAG(double, feed_lag_seconds, 10, "feed: length of the lag run");
ABSL_FLAG(uint64_t, feed_lag_batch, 1,
          "feed: rows per write in the lag run: 1 = one Admin.Put per row; "
          "more = one Admin.Load of that many rows, sent together");

namespace tally {
namespace bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr char kKeyspace[] = "bench";

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string TallydPath() {
  std::error_code ec;
  const std::filesystem::path self =
      std::filesystem::read_symlink("/proc/self/exe", ec);
  return (self.parent_path().parent_path() / "node" / "tallyd").string();
}

// CPU seconds (user + system) a process has used so far; 0 if unknown.
double CpuSeconds(const testing::NodeProcess* process) {
  if (process == nullptr) return 0;
  std::ifstream in(absl::StrCat("/proc/", process->pid(), "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  // Fields after the command name (which may hold spaces) in parentheses.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::vector<std::string> fields =
      absl::StrSplit(stat.substr(close + 2), ' ', absl::SkipEmpty());
  uint64_t utime = 0, stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime)) {
    return 0;
  }
  return static_cast<double>(utime + stime) / sysconf(_SC_CLK_TCK);
}

// CPU seconds of nodes A, B and C so far.
std::vector<double> MeshCpu(testing::Mesh& mesh) {
  std::vector<double> cpu;
  for (int i = 0; i < mesh.size(); ++i)
    cpu.push_back(CpuSeconds(mesh.process(i)));
  return cpu;
}

absl::StatusOr<uint64_t> LastSequence(testing::Mesh& mesh, int i) {
  auto status = mesh.Status(i);
  if (!status.ok()) return status.status();
  return status->last_sequence();
}

// Loads rows [first, first + n) into node 0; returns the seconds it took.
absl::StatusOr<double> LoadInto(testing::Mesh& mesh, uint64_t first,
                                uint64_t n) {
  uint64_t i = first;
  const std::string value(100, 'v');
  const auto start = Clock::now();
  auto loaded =
      mesh.client(0).Load(kKeyspace, [&](std::string* k, std::string* v) {
        if (i >= first + n) return false;
        *k = absl::StrFormat("k%015d", i++);
        *v = value;
        return true;
      });
  if (!loaded.ok()) return loaded.status();
  return Since(start);
}

// Polls nodes' last sequences every 20 ms (rarely enough not to
// load them) until each reached `target`;
// returns the seconds from `start` at which each did (for node i,
// `reached[i]`), and when each first moved past `from` (`moved[i]`).
absl::Status WaitForSequences(testing::Mesh& mesh,
                              const std::vector<int>& nodes, uint64_t from,
                              uint64_t target, Clock::time_point start,
                              std::vector<double>* moved,
                              std::vector<double>* reached) {
  moved->assign(mesh.size(), -1);
  reached->assign(mesh.size(), -1);
  const auto deadline = Clock::now() + std::chrono::minutes(5);
  while (Clock::now() < deadline) {
    bool all = true;
    for (int i : nodes) {
      if ((*reached)[i] >= 0) continue;
      auto seq = LastSequence(mesh, i);
      if (!seq.ok()) return seq.status();
      if (*seq > from && (*moved)[i] < 0) (*moved)[i] = Since(start);
      if (*seq >= target) {
        (*reached)[i] = Since(start);
      } else {
        all = false;
      }
    }
    if (all) return absl::OkStatus();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return absl::DeadlineExceededError("the chain did not catch up in 5 minutes");
}

double Percentile(std::vector<double> sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t i = std::min(sorted.size() - 1,
                            static_cast<size_t>(p * (sorted.size() - 1) + 0.5));
  return sorted[i];
}

absl::Status RunFeed(std::ostream& out) {
  const uint64_t n = absl::GetFlag(FLAGS_feed_changes);
  const uint64_t rate = absl::GetFlag(FLAGS_feed_rate);
  const double lag_seconds = absl::GetFlag(FLAGS_feed_lag_seconds);
  if (n == 0 || rate == 0 || lag_seconds <= 0) {
    return absl::InvalidArgumentError(
        "--feed_changes, --feed_rate and --feed_lag_seconds must be positive");
  }
  testing::Mesh mesh("feed", 3,
                     {"--sync-writes", "false", "--sync-interval", "1h"},
                     TallydPath());
  // Both links through proxies, so that each can be cut.
  auto proxy_ab = testing::TcpProxy::Start(mesh.address(0));
  if (!proxy_ab.ok()) return proxy_ab.status();
  auto proxy_bc = testing::TcpProxy::Start(mesh.address(1));
  if (!proxy_bc.ok()) return proxy_bc.status();
  mesh.FollowAddress(1, (*proxy_ab)->address());  // B follows A
  mesh.FollowAddress(2, (*proxy_bc)->address());  // C follows B
  if (absl::Status s = mesh.StartAll(); !s.ok()) return s;
  if (!testing::Mesh::WaitUntil([&] { return mesh.FeedsConnected(); },
                                absl::Seconds(30))) {
    return absl::DeadlineExceededError("the feeds did not connect");
  }

  // Live: B and C follow while A ingests rows [0, N).
  std::vector<double> moved, reached;
  const std::vector<double> cpu0 = MeshCpu(mesh);
  auto start = Clock::now();
  absl::StatusOr<double> live_load;
  std::thread loader([&] { live_load = LoadInto(mesh, 0, n); });
  absl::Status live =
      WaitForSequences(mesh, {0, 1, 2}, 0, n, start, &moved, &reached);
  loader.join();
  if (!live_load.ok()) return live_load.status();
  if (!live.ok()) return live;
  const std::vector<double> live_reached = reached;
  const std::vector<double> cpu1 = MeshCpu(mesh);

  // One link at a time: A ingests rows [N, 2N) with both links cut (the
  // baseline), then A -> B heals and B applies the backlog while C is still
  // cut off, then B -> C heals and C applies it from B. Each rate counts
  // from the first change applied, so reconnection backoff is left out.
  (*proxy_ab)->Cut(testing::TcpProxy::CutMode::kReset);
  (*proxy_bc)->Cut(testing::TcpProxy::CutMode::kReset);
  auto ingest = LoadInto(mesh, n, n);
  if (!ingest.ok()) return ingest.status();
  const std::vector<double> cpu2 = MeshCpu(mesh);
  (*proxy_ab)->Heal();
  start = Clock::now();
  if (absl::Status s =
          WaitForSequences(mesh, {1}, n, 2 * n, start, &moved, &reached);
      !s.ok()) {
    return s;
  }
  const double b_seconds = reached[1] - moved[1];
  const std::vector<double> cpu3 = MeshCpu(mesh);
  (*proxy_bc)->Heal();
  start = Clock::now();
  if (absl::Status s =
          WaitForSequences(mesh, {2}, n, 2 * n, start, &moved, &reached);
      !s.ok()) {
    return s;
  }
  const double c_seconds = reached[2] - moved[2];
  const std::vector<double> cpu4 = MeshCpu(mesh);

  out << absl::StrFormat(
      "feed along a chain A -> B -> C of tallyd (sync-writes off), N = %d "
      "changes of 100 bytes\n\n",
      n);
  // CPU: seconds the receiving node (and the sending one) used in the
  // phase, and changes per CPU-second of the receiver: what one core
  // would apply with nothing else running on it. The machine may be
  // shared; wall-clock rates depend on what else runs.
  auto row = [&](const std::string& what, double seconds, double cpu,
                 double sender_cpu) {
    out << absl::StrFormat("%-46s %10.0f %8.2f %8.2f %8.2f %12.0f\n", what,
                           n / seconds, seconds, cpu, sender_cpu,
                           cpu > 0 ? n / cpu : 0);
  };
  out << absl::StrFormat("%-46s %10s %8s %8s %8s %12s\n", "", "changes/s",
                         "seconds", "cpu s", "send cpu", "per cpu-s");
  row("baseline: A ingests N (Admin.Load), links cut", *ingest,
      cpu2[0] - cpu1[0], 0);
  row("one link: B applies A's backlog (C cut off)", b_seconds,
      cpu3[1] - cpu2[1], cpu3[0] - cpu2[0]);
  row("one link: C applies B's backlog (A idle)", c_seconds, cpu4[2] - cpu3[2],
      cpu4[1] - cpu3[1]);
  row("live chain: A ingests while B and C follow", live_reached[0],
      cpu1[0] - cpu0[0], 0);
  row("live chain: all N applied at B", live_reached[1], cpu1[1] - cpu0[1],
      cpu1[0] - cpu0[0]);
  row("live chain: all N applied at C", live_reached[2], cpu1[2] - cpu0[2],
      cpu1[1] - cpu0[1]);
  out << absl::StrFormat(
      "ratios to the baseline (changes/s): B %.2f, C %.2f, live chain at C "
      "%.2f; per CPU-second: B %.2f, C %.2f (goal: >= 100000 changes/s "
      "applied)\n\n",
      *ingest / b_seconds, *ingest / c_seconds, *ingest / live_reached[2],
      (cpu2[0] - cpu1[0]) / (cpu3[1] - cpu2[1]),
      (cpu2[0] - cpu1[0]) / (cpu4[2] - cpu3[2]));

  // Lag: fixed-rate writes at A, arrivals observed on C's own feed.
  const uint64_t total = static_cast<uint64_t>(rate * lag_seconds);
  std::vector<Clock::time_point> sent(total);
  std::vector<Clock::time_point> arrived(total);
  std::vector<char> seen(total, 0);
  std::atomic<uint64_t> arrivals{0};
  std::atomic<bool> stop{false};
  auto observer_client = node::NodeClient::Connect(mesh.address(2), {});
  if (!observer_client.ok()) return observer_client.status();
  std::atomic<bool> subscribed{false};
  absl::Status observer_status;
  std::thread observer([&] {
    v1::SubscribeRequest request;
    request.set_subscriber("bench-observer");
    request.set_from_head(true);
    observer_status =
        (*observer_client)
            ->Subscribe(
                request,
                [&](const v1::FeedBatch& batch) {
                  const auto now = Clock::now();
                  subscribed = true;
                  for (const v1::FeedChange& c : batch.changes()) {
                    uint64_t i;
                    const std::string& key = c.row().key();
                    if (key.size() < 4 || key.compare(0, 4, "lag-") != 0 ||
                        !absl::SimpleAtoi(key.substr(4), &i) || i >= total ||
                        seen[i]) {
                      continue;
                    }
                    seen[i] = 1;
                    arrived[i] = now;
                    if (++arrivals == total) stop = true;
                  }
                  return absl::OkStatus();
                },
                stop);
  });
  // The first heartbeat says the observer is in place.
  for (int i = 0; i < 500 && !subscribed.load(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  constexpr int kWriters = 16;
  const uint64_t batch =
      std::max<uint64_t>(1, absl::GetFlag(FLAGS_feed_lag_batch));
  const uint64_t calls = (total + batch - 1) / batch;
  std::atomic<uint64_t> errors{0};
  const auto lag_start = Clock::now() + std::chrono::milliseconds(10);
  std::vector<std::thread> writers;
  for (int t = 0; t < kWriters; ++t) {
    writers.emplace_back([&, t] {
      for (uint64_t call = t; call < calls; call += kWriters) {
        const uint64_t first = call * batch;
        const uint64_t last = std::min(total, first + batch);
        const auto due =
            lag_start + std::chrono::nanoseconds(first * 1000000000ull / rate);
        std::this_thread::sleep_until(due);
        const auto now = Clock::now();
        for (uint64_t i = first; i < last; ++i) sent[i] = now;
        if (batch == 1) {
          if (!mesh.client(0)
                   .Put(kKeyspace, absl::StrCat("lag-", first), "payload")
                   .ok()) {
            ++errors;
          }
          continue;
        }
        uint64_t i = first;
        auto loaded =
            mesh.client(0).Load(kKeyspace, [&](std::string* k, std::string* v) {
              if (i >= last) return false;
              *k = absl::StrCat("lag-", i++);
              *v = "payload";
              return true;
            });
        if (!loaded.ok()) ++errors;
      }
    });
  }
  for (std::thread& w : writers) w.join();
  const double write_seconds = Since(lag_start);
  const auto wait_until = Clock::now() + std::chrono::seconds(30);
  while (arrivals.load() < total && Clock::now() < wait_until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  stop = true;
  observer.join();
  if (errors.load() > 0) {
    return absl::InternalError(
        absl::StrFormat("%d of %d writes failed", errors.load(), total));
  }
  if (arrivals.load() < total) {
    return absl::InternalError(
        absl::StrFormat("only %d of %d changes reached C within 30 s (%s)",
                        arrivals.load(), total, observer_status.ToString()));
  }
  std::vector<double> lag_ms;
  lag_ms.reserve(total);
  for (uint64_t i = 0; i < total; ++i) {
    lag_ms.push_back(
        std::chrono::duration<double, std::milli>(arrived[i] - sent[i])
            .count());
  }
  std::sort(lag_ms.begin(), lag_ms.end());
  out << absl::StrFormat(
      "lag A -> B -> C: %d writes at %d/s target (%.0f/s achieved, %d "
      "writer threads, %s)\n",
      total, rate, total / write_seconds, kWriters,
      batch == 1 ? std::string("one Admin.Put per row")
                 : absl::StrCat("Admin.Load of ", batch, " rows per call"));
  out << absl::StrFormat("%8s %8s %8s %8s %8s\n", "p50 ms", "p90 ms", "p99 ms",
                         "max ms", "mean ms");
  double sum = 0;
  for (double l : lag_ms) sum += l;
  out << absl::StrFormat("%8.2f %8.2f %8.2f %8.2f %8.2f\n",
                         Percentile(lag_ms, 0.5), Percentile(lag_ms, 0.9),
                         Percentile(lag_ms, 0.99), lag_ms.back(),
                         sum / lag_ms.size());
  out << "lag = arrival through C's feed at the bench - start of the write "
         "call at A "
         "(goal: p99 <= 50 ms)\n";
  for (int i = 0; i < 3; ++i) mesh.Stop(i);
  return absl::OkStatus();
}

}  // namespace

Scenario FeedScenario() {
  return {"feed",
          "change-feed throughput and lag along a 3-node chain of tallyd",
          &RunFeed};
}

}  // namespace bench
}  // namespace tally
