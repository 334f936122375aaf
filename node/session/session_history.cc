#include "node/session/session_history.h"

#include <utility>

namespace tally {
namespace node {

const char* SessionTriggerName(SessionTrigger trigger) {
  switch (trigger) {
    case SessionTrigger::kScheduled:
      return "scheduled";
    case SessionTrigger::kRequested:
      return "requested";
  }
  return "unknown";
}

void SessionRecordToProto(const SessionRecord& record, v1::SessionRecord* out) {
  out->set_started_unix_ms(record.start == absl::InfinitePast()
                               ? 0
                               : absl::ToUnixMillis(record.start));
  out->set_seconds(absl::ToDoubleSeconds(record.duration));
  out->set_trigger(SessionTriggerName(record.trigger));
  out->set_outcome(record.outcome);
  out->set_keyspaces(record.keyspaces);
  out->set_differences(record.differences);
  out->set_rows_received(record.rows_received);
  out->set_rows_sent(record.rows_sent);
  out->set_rows_erased(record.rows_erased);
  out->set_conflicts(record.conflicts);
  out->set_bytes_repaired(record.bytes_repaired);
  out->set_rows_changed_during_session(record.rows_changed_during_session);
}

SessionHistory::SessionHistory(size_t capacity)
    : ring_(capacity > 0 ? capacity : 1) {}

void SessionHistory::Record(SessionRecord record) {
  ring_[next_] = std::move(record);
  next_ = (next_ + 1) % ring_.size();
  if (size_ < ring_.size()) ++size_;
}

std::vector<SessionRecord> SessionHistory::Newest() const {
  std::vector<SessionRecord> out;
  out.reserve(size_);
  for (size_t i = 1; i <= size_; ++i) {
    out.push_back(ring_[(next_ + ring_.size() - i) % ring_.size()]);
  }
  return out;
}

}  // namespace node
}  // namespace tally
