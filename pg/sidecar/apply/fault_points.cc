#include "pg/sidecar/apply/fault_points.h"

#include <signal.h>
#include <unistd.h>

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tally {
namespace pg {
namespace {

constexpr FaultPoint kAll[] = {
    FaultPoint::kCaptureAfterIndexCommit,
    FaultPoint::kApplyBeforeDbCommit,
    FaultPoint::kApplyAfterDbCommit,
    FaultPoint::kApplyAfterStoreCommit,
};

}  // namespace

absl::string_view FaultPointName(FaultPoint point) {
  switch (point) {
    case FaultPoint::kCaptureAfterIndexCommit:
      return "capture-after-index-commit";
    case FaultPoint::kApplyBeforeDbCommit:
      return "apply-before-db-commit";
    case FaultPoint::kApplyAfterDbCommit:
      return "apply-after-db-commit";
    case FaultPoint::kApplyAfterStoreCommit:
      return "apply-after-store-commit";
  }
  return "unknown";
}

absl::StatusOr<std::shared_ptr<FaultPoints>> FaultPoints::Parse(
    absl::string_view spec) {
  if (spec.empty()) {
    return std::shared_ptr<FaultPoints>(new FaultPoints(std::nullopt, 0));
  }
  absl::string_view name = spec;
  uint64_t count = 1;
  const size_t colon = spec.find(':');
  if (colon != absl::string_view::npos) {
    name = spec.substr(0, colon);
    const absl::string_view n = spec.substr(colon + 1);
    if (!absl::SimpleAtoi(n, &count) || count == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("fault point '", spec, "': the count after ':' must be ",
                       "a positive integer, not '", n, "'"));
    }
  }
  std::vector<std::string> known;
  for (FaultPoint p : kAll) {
    if (FaultPointName(p) == name) {
      return std::shared_ptr<FaultPoints>(new FaultPoints(p, count));
    }
    known.emplace_back(FaultPointName(p));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown fault point '", name,
                   "'; the points are: ", absl::StrJoin(known, ", ")));
}

void FaultPoints::Reach(FaultPoint point) {
  if (!armed_.has_value() || *armed_ != point) return;
  if (reached_.fetch_add(1) + 1 != count_) return;
  // write(2), not a stream: nothing buffered may be lost, and nothing else
  // of this process runs after the line.
  const std::string line =
      absl::StrCat("tallyd: fault point ", FaultPointName(point),
                   " reached (time ", count_, "): killed\n");
  (void)!write(STDERR_FILENO, line.data(), line.size());
  raise(SIGKILL);
}

}  // namespace pg
}  // namespace tally
