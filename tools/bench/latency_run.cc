#include "tools/bench/latency_run.h"

#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "tools/bench/pg_sidecar_fixture.h"

namespace tally {
namespace bench {

absl::StatusOr<LatencyFigures> MeasureLatency(const LatencyWrite& write,
                                              const LatencyPoll& poll,
                                              absl::string_view what, int keys,
                                              int rate, int count,
                                              int64_t base) {
  std::vector<absl::Time> sent(count);
  std::vector<absl::Time> seen(count, absl::InfiniteFuture());
  std::atomic<int> written{0};
  std::atomic<bool> writer_done{false};
  absl::Status write_status;
  absl::Time write_end;
  const absl::Time start = absl::Now() + absl::Milliseconds(100);
  std::thread writing([&] {
    for (int i = 0; i < count; ++i) {
      const absl::Time due = start + absl::Seconds(1) * i / rate;
      const absl::Time now = absl::Now();
      if (due > now) absl::SleepFor(due - now);
      sent[i] = absl::Now();
      absl::Status s = write(base + i, i % keys + 1, sent[i]);
      if (!s.ok()) {
        write_status = s;
        break;
      }
      written.store(i + 1, std::memory_order_release);
    }
    write_end = absl::Now();
    writer_done.store(true, std::memory_order_release);
  });

  // next[k]: the first write of key k+1 not yet seen in B.
  std::vector<int> next(keys);
  for (int k = 0; k < keys; ++k) next[k] = k;
  int visible = 0;
  absl::Status read_status;
  absl::Time give_up = absl::InfiniteFuture();
  while (visible < count) {
    absl::StatusOr<std::vector<KeyToken>> rows = poll();
    const absl::Time now = absl::Now();
    if (!rows.ok()) {
      read_status = rows.status();
      break;
    }
    for (const KeyToken& row : *rows) {
      if (row.key < 1 || row.key > keys) continue;
      int& i = next[row.key - 1];
      while (i < count && base + i <= row.token) {
        seen[i] = now;
        ++visible;
        i += keys;
      }
    }
    if (give_up == absl::InfiniteFuture() &&
        writer_done.load(std::memory_order_acquire)) {
      if (written.load(std::memory_order_acquire) < count) break;  // failed
      give_up = now + absl::Minutes(5);
    }
    if (now > give_up) break;
    absl::SleepFor(absl::Milliseconds(1));
  }
  writing.join();
  if (!write_status.ok()) return write_status;
  if (!read_status.ok()) return read_status;
  if (visible < count) {
    return absl::DeadlineExceededError(absl::StrCat(
        what, ": ", count - visible, " of ", count,
        " writes on A not visible in B 5 min after the last was sent"));
  }
  Samples ms;
  for (int i = 0; i < count; ++i) {
    ms.Add(absl::ToDoubleMilliseconds(seen[i] - sent[i]));
  }
  LatencyFigures f;
  f.p50_ms = ms.Quantile(0.5);
  f.p99_ms = ms.Quantile(0.99);
  f.max_ms = ms.Max();
  f.rate = count / absl::ToDoubleSeconds(write_end - sent[0]);
  return f;
}

absl::StatusOr<int> LatencyRunWrites(absl::string_view prefix, int rate,
                                     int seconds, int keys) {
  if (rate < 1 || seconds < 1 || keys < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", prefix, "_rate, --", prefix, "_seconds and --",
                     prefix, "_keys must be positive"));
  }
  const int64_t count = static_cast<int64_t>(rate) * seconds;
  if (count >= 1000000) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", prefix, "_rate x --", prefix,
                     "_seconds: under 1,000,000 writes a run"));
  }
  return static_cast<int>(count);
}

absl::StatusOr<LatencyRuns> RunAlternated(const MeasureLatencyRun& measure,
                                          int runs, int rate, int count) {
  // Each run's tokens start a million past the last's: every token is
  // greater than any the tables held before.
  int64_t base = 1000000;
  for (const char* table : {"t", "t2"}) {
    absl::StatusOr<LatencyFigures> warm = measure(table, 100, 200, base);
    if (!warm.ok()) return warm.status();
    base += 1000000;
  }
  LatencyRuns out;
  for (int run = 0; run < runs; ++run) {
    for (int k = 0; k < 2; ++k) {
      const bool tally_turn = (k == run % 2);
      absl::StatusOr<LatencyFigures> f =
          measure(tally_turn ? "t" : "t2", rate, count, base);
      if (!f.ok()) return f.status();
      base += 1000000;
      (tally_turn ? out.tally : out.baseline).push_back(*f);
    }
  }
  return out;
}

void PrintLatencyHeader(std::ostream& out) {
  out << absl::StrFormat("%-38s %-20s %-20s %-22s %-20s\n", "",
                         "p50 ms (min/med/max)", "p99 ms (min/med/max)",
                         "max ms (min/med/max)", "writes/s achieved");
}

void PrintLatencyLine(std::ostream& out, absl::string_view name,
                      const std::vector<LatencyFigures>& runs) {
  Samples p50, p99, max, achieved;
  for (const LatencyFigures& f : runs) {
    p50.Add(f.p50_ms);
    p99.Add(f.p99_ms);
    max.Add(f.max_ms);
    achieved.Add(f.rate);
  }
  out << absl::StrFormat("%-38s %-20s %-20s %-22s %-20s\n", name,
                         p50.Text("%.1f"), p99.Text("%.1f"), max.Text("%.0f"),
                         achieved.Text("%.0f"));
}

}  // namespace bench
}  // namespace tally
