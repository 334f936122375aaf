#include "pg/sidecar/apply/row_isolation.h"

#include <string>

namespace tally {
namespace pg {

absl::string_view SqlStateOf(const absl::Status& status) {
  constexpr absl::string_view kTag = "[SQLSTATE ";
  const absl::string_view m = status.message();
  const size_t at = m.rfind(kTag);
  if (at == absl::string_view::npos || at + kTag.size() + 6 > m.size() ||
      m[at + kTag.size() + 5] != ']') {
    return "";
  }
  return m.substr(at + kTag.size(), 5);
}

AttemptFailure ClassifyApplyError(const absl::Status& status,
                                  bool connection_healthy) {
  if (!connection_healthy) return AttemptFailure::kFatal;
  const absl::string_view state = SqlStateOf(status);
  if (state.empty()) {
    // No server error: the client's (a timeout that cancelled the query,
    // a protocol failure); nothing says the rows are at fault.
    return absl::IsDeadlineExceeded(status) || absl::IsCancelled(status)
               ? AttemptFailure::kBusy
               : AttemptFailure::kFatal;
  }
  const absl::string_view cls = state.substr(0, 2);
  // lock_not_available (lock_timeout), deadlock, serialization.
  if (state == "55P03" || cls == "40") return AttemptFailure::kBusy;
  // The server going away or refusing work now.
  if (cls == "08" || cls == "57" || cls == "53" || cls == "58" || cls == "XX") {
    return state == "57014" ? AttemptFailure::kBusy : AttemptFailure::kFatal;
  }
  // Data exceptions, integrity constraints, a trigger's RAISE, a view's
  // check option: the value of some row.
  if (cls == "22" || cls == "23" || cls == "P0" || cls == "44" || cls == "27") {
    return AttemptFailure::kRows;
  }
  // Syntax or access rule (a missing table or column, a type mismatch, a
  // privilege), feature not supported, object state: the table.
  return AttemptFailure::kAll;
}

IsolationOutcome IsolateRows(
    absl::Span<const uint32_t> rows, int max_attempts,
    absl::FunctionRef<absl::Status(absl::Span<const uint32_t>)> attempt,
    absl::FunctionRef<AttemptFailure(const absl::Status&)> classify) {
  IsolationOutcome out;
  if (rows.empty()) return out;
  // Groups still to try, the next one last.
  std::vector<absl::Span<const uint32_t>> todo = {rows};
  while (!todo.empty()) {
    const absl::Span<const uint32_t> group = todo.back();
    todo.pop_back();
    ++out.attempts;
    absl::Status s = attempt(group);
    if (s.ok()) continue;
    switch (classify(s)) {
      case AttemptFailure::kFatal:
        out.fatal = std::move(s);
        return out;
      case AttemptFailure::kBusy:
        out.busy.insert(out.busy.end(), group.begin(), group.end());
        continue;
      case AttemptFailure::kRows:
        if (group.size() > 1 &&
            out.attempts + static_cast<int>(todo.size()) + 2 <= max_attempts) {
          const size_t half = group.size() / 2;
          todo.push_back(group.subspan(half));
          todo.push_back(group.subspan(0, half));
          continue;
        }
        break;
      case AttemptFailure::kAll:
        break;
    }
    for (uint32_t row : group) out.rejected.emplace_back(row, s);
  }
  return out;
}

}  // namespace pg
}  // namespace tally
