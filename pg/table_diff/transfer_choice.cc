#include "pg/table_diff/transfer_choice.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "tree/status_macros.h"

namespace tally {
namespace pg {
namespace {

constexpr double kProbeBytes = 1 << 20;
// The block hashes' answer: 16 bytes a bucket, 16,384 buckets.
constexpr double kBucketAnswerBytes = 262e3;
// Hashes must be estimated this much faster to be chosen: reading every
// row costs the servers less CPU and reports the tables' roots.
constexpr double kHashesMustWinBy = 1.5;

struct Estimate {
  double rows_seconds = 0;
  double hash_seconds = 0;
};

// A round trip under a millisecond is a LAN or this host, whose throughput
// a 1 MiB answer understates (the first bytes of a connection, the
// server's own work on the answer): at least a gigabit is assumed.
constexpr absl::Duration kNearRoundTrip = absl::Milliseconds(1);
constexpr double kNearBytesPerSecond = 125e6;

double LinkBytesPerSecond(const LinkProbe& p) {
  const double measured = std::max(p.bytes_per_second, 1.0);
  return p.round_trip < kNearRoundTrip ? std::max(measured, kNearBytesPerSecond)
                                       : measured;
}

Estimate EstimateFor(const LinkProbe& p) {
  const double bytes = static_cast<double>(p.table_bytes);
  const double link = LinkBytesPerSecond(p);
  return {bytes / std::min(link, kCopyBytesPerSecond),
          bytes / kHashBytesPerSecond + kBucketAnswerBytes / link};
}

std::string Megabytes(double bytes) {
  return absl::StrFormat("%.0f MB", bytes / 1e6);
}

}  // namespace

absl::StatusOr<LinkProbe> ProbeLink(Connection& conn, absl::string_view table) {
  LinkProbe probe;
  probe.server_version = conn.server_version();
  probe.round_trip = absl::InfiniteDuration();
  for (int i = 0; i < 3; ++i) {
    const absl::Time start = absl::Now();
    TALLY_RETURN_IF_ERROR(conn.Exec("SELECT 1").status());
    probe.round_trip = std::min(probe.round_trip, absl::Now() - start);
  }
  TALLY_ASSIGN_OR_RETURN(Result size,
                         conn.ExecParams("SELECT pg_table_size($1::regclass)",
                                         {Param::Text(std::string(table))}));
  if (size.rows() != 1 || size.IsNull(0, 0) ||
      !absl::SimpleAtoi(size.Value(0, 0), &probe.table_bytes)) {
    return absl::NotFoundError(absl::StrCat("no table ", table));
  }
  const absl::Time start = absl::Now();
  TALLY_ASSIGN_OR_RETURN(
      Result answer,
      conn.Exec(absl::StrCat("SELECT repeat('x', ",
                             static_cast<int>(kProbeBytes), ")")));
  (void)answer;
  const double seconds = absl::ToDoubleSeconds(
      std::max(absl::Now() - start - probe.round_trip, absl::Microseconds(1)));
  probe.bytes_per_second = kProbeBytes / seconds;
  return probe;
}

TransferChoice ChooseTransfer(const LinkProbe& a, const LinkProbe& b) {
  TransferChoice choice;
  for (const LinkProbe* p : {&a, &b}) {
    if (p->server_version < 140000) {
      choice.reason = absl::StrFormat(
          "%s runs PostgreSQL %d, and block hashes need 14 or later",
          p == &a ? "a" : "b", p->server_version / 10000);
      return choice;
    }
  }
  const Estimate ea = EstimateFor(a);
  const Estimate eb = EstimateFor(b);
  // The sides run at once: the slower one decides each estimate.
  const double rows = std::max(ea.rows_seconds, eb.rows_seconds);
  const double hashes = std::max(ea.hash_seconds, eb.hash_seconds);
  // The far side, for the reason.
  const bool b_slower = eb.rows_seconds > ea.rows_seconds;
  const LinkProbe& far = b_slower ? b : a;
  choice.reason = absl::StrFormat(
      "%s %.1f ms away at %.1f MB/s: reading %s ~%.1f s, hashing ~%.1f s",
      b_slower ? "b" : "a", absl::ToDoubleMilliseconds(far.round_trip),
      LinkBytesPerSecond(far) / 1e6, Megabytes(far.table_bytes), rows, hashes);
  choice.transfer = rows > kHashesMustWinBy * hashes ? Transfer::kBlockHashes
                                                     : Transfer::kRows;
  return choice;
}

}  // namespace pg
}  // namespace tally
