#include "node/session/quiet_session_log.h"

#include <utility>

#include "absl/strings/str_join.h"
#include "node/observe/log.h"

namespace tally {
namespace node {

QuietSessionLog::QuietSessionLog(std::string peer,
                                 absl::Duration summary_interval)
    : peer_(std::move(peer)), summary_interval_(summary_interval) {}

std::optional<QuietSessionLog::Summary> QuietSessionLog::TakeLocked(
    absl::Time now) {
  if (syncs_ == 0) return std::nullopt;
  Summary summary;
  summary.syncs = syncs_;
  summary.keyspaces = std::move(keyspaces_);
  summary.over = now - first_;
  syncs_ = 0;
  keyspaces_.clear();
  return summary;
}

std::optional<QuietSessionLog::Summary> QuietSessionLog::OnQuiet(
    absl::Time now, absl::string_view keyspace) {
  absl::MutexLock lock(&mu_);
  if (syncs_ == 0) first_ = now;
  ++syncs_;
  keyspaces_.insert(std::string(keyspace));
  if (now - first_ < summary_interval_) return std::nullopt;
  return TakeLocked(now);
}

std::optional<QuietSessionLog::Summary> QuietSessionLog::OnEventful(
    absl::Time now) {
  absl::MutexLock lock(&mu_);
  return TakeLocked(now);
}

void QuietSessionLog::Quiet(absl::Time now, absl::string_view name,
                            absl::string_view keyspace) {
  if (std::optional<Summary> summary = OnQuiet(now, keyspace)) {
    Log(name, *summary);
  }
}

void QuietSessionLog::Eventful(absl::Time now, absl::string_view name) {
  if (std::optional<Summary> summary = OnEventful(now)) Log(name, *summary);
}

void QuietSessionLog::Log(absl::string_view name,
                          const Summary& summary) const {
  LogInfo("sessions quiet",
          {{"peer", peer_},
           {"name", name},
           {"syncs", summary.syncs},
           {"keyspaces", absl::StrJoin(summary.keyspaces, ",")},
           {"over", summary.over}});
}

}  // namespace node
}  // namespace tally
