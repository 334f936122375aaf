#include "tools/cli/progress_report.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tally {
namespace cli {
namespace {

std::string Amount(uint64_t n, absl::string_view unit) {
  if (unit == kBytes) return HumanBytes(n);
  return absl::StrCat(n, " ", unit);
}

}  // namespace

std::string EtaText(const std::optional<absl::Duration>& remaining) {
  if (!remaining.has_value()) return "ETA unknown";
  return absl::StrCat("ETA ", tree::FormatRemaining(*remaining));
}

std::string ProgressText(const tree::ProgressEstimate& e,
                         absl::string_view unit) {
  std::string text;
  if (e.total.has_value()) {
    // The percentage rounds down: 100% only when done.
    const double percent = std::floor(e.fraction.value_or(0) * 100);
    text = unit == kBytes
               ? absl::StrFormat("%s of %s (%.0f%%)", HumanBytes(e.done),
                                 HumanBytes(*e.total), percent)
               : absl::StrFormat("%d of %d %s (%.0f%%)", e.done, *e.total, unit,
                                 percent);
  } else {
    text = Amount(e.done, unit);
  }
  const std::string rate =
      unit == kBytes
          ? absl::StrCat(HumanBytes(static_cast<uint64_t>(e.rate)), "/s")
          : absl::StrFormat("%.0f %s/s", e.rate, unit);
  return absl::StrCat(text, ", ", rate, ", ", EtaText(e.remaining));
}

tree::ProgressEstimate EstimateFromNode(uint64_t done,
                                        std::optional<uint64_t> total,
                                        double rate,
                                        std::optional<double> eta_seconds,
                                        absl::Duration elapsed) {
  tree::ProgressEstimate e;
  e.done = done;
  e.total = total;
  if (total.has_value()) {
    e.fraction = *total == 0 ? 1.0
                             : std::min(1.0, static_cast<double>(done) /
                                                 static_cast<double>(*total));
  }
  e.rate = rate;
  if (eta_seconds.has_value()) e.remaining = absl::Seconds(*eta_seconds);
  e.elapsed = elapsed;
  return e;
}

tree::ProgressEstimate SessionEstimate(const v1::SessionProgress& s,
                                       absl::Time now) {
  return EstimateFromNode(
      s.rows_received() + s.rows_sent(),
      s.has_rows_expected() ? std::optional<uint64_t>(s.rows_expected())
                            : std::nullopt,
      s.rows_per_second(),
      s.has_eta_seconds() ? std::optional<double>(s.eta_seconds())
                          : std::nullopt,
      s.started_unix_ms() > 0 ? now - absl::FromUnixMillis(s.started_unix_ms())
                              : absl::ZeroDuration());
}

Json ProgressJson(const tree::ProgressEstimate& e, absl::string_view unit) {
  Json out = Json::object();
  out["done"] = e.done;
  out["total"] = e.total.has_value() ? Json(*e.total) : Json();
  out["unit"] = std::string(unit);
  out["fraction"] = e.fraction.has_value() ? Json(*e.fraction) : Json();
  out["rate"] = e.rate;
  out["eta_seconds"] = e.remaining.has_value()
                           ? Json(absl::ToDoubleSeconds(*e.remaining))
                           : Json();
  out["elapsed_seconds"] = absl::ToDoubleSeconds(e.elapsed);
  return out;
}

}  // namespace cli
}  // namespace tally
