#include "node/sync/repair_heat.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "google/protobuf/repeated_ptr_field.h"

namespace tally {
namespace node {
namespace {

// Appends the segments of `counts` with a count, in segment order.
void AppendSegments(const SegmentCounts& counts,
                    google::protobuf::RepeatedPtrField<v1::HeatSegment>* out) {
  for (int i = 0; i < kHeatSegments; ++i) {
    if (counts.differences[i] == 0 && counts.rows_repaired[i] == 0) continue;
    v1::HeatSegment* segment = out->Add();
    segment->set_segment(static_cast<uint32_t>(i));
    segment->set_differences(counts.differences[i]);
    segment->set_rows_repaired(counts.rows_repaired[i]);
  }
}

}  // namespace

bool SegmentCounts::empty() const {
  for (int i = 0; i < kHeatSegments; ++i) {
    if (differences[i] != 0 || rows_repaired[i] != 0) return false;
  }
  return true;
}

void SegmentCounts::Add(const SegmentCounts& other) {
  for (int i = 0; i < kHeatSegments; ++i) {
    differences[i] += other.differences[i];
    rows_repaired[i] += other.rows_repaired[i];
  }
}

void SessionHeat::AddDifference(const std::string& keyspace, tree::Token token,
                                bool moves_row) {
  if (has_pending_ && pending_keyspace_ != keyspace) {
    // The earlier keyspace's last batch was never written.
    pending_.fill(0);
    has_pending_ = false;
  }
  const int segment = HeatSegmentOf(token);
  ++keyspaces_[keyspace].differences[segment];
  if (!moves_row) return;
  if (!has_pending_) {
    pending_keyspace_ = keyspace;
    has_pending_ = true;
  }
  ++pending_[segment];
}

void SessionHeat::CommitRepairs() {
  if (!has_pending_) return;
  SegmentCounts& counts = keyspaces_[pending_keyspace_];
  for (int i = 0; i < kHeatSegments; ++i)
    counts.rows_repaired[i] += pending_[i];
  pending_.fill(0);
  has_pending_ = false;
}

RepairHeatHistory::RepairHeatHistory(size_t window)
    : window_(std::max<size_t>(window, 1)) {}

void RepairHeatHistory::AddSession(const SessionHeat& session) {
  AddSessionCounts(session.keyspaces());
}

void RepairHeatHistory::AddSessionCounts(
    std::map<std::string, SegmentCounts> session) {
  for (auto it = session.begin(); it != session.end();) {
    it = it->second.empty() ? session.erase(it) : std::next(it);
  }
  sessions_.push_back(std::move(session));
  while (sessions_.size() > window_) sessions_.pop_front();
}

std::vector<std::map<std::string, SegmentCounts>>
RepairHeatHistory::NewestFirst() const {
  return std::vector<std::map<std::string, SegmentCounts>>(sessions_.rbegin(),
                                                           sessions_.rend());
}

void RepairHeatHistory::ToProto(v1::PeerStatus* peer,
                                size_t max_keyspaces) const {
  peer->clear_heat();
  peer->set_heat_sessions(static_cast<uint32_t>(sessions_.size()));
  std::map<std::string, SegmentCounts> recent;
  for (const auto& session : sessions_) {
    for (const auto& [keyspace, counts] : session) recent[keyspace].Add(counts);
  }
  peer->set_heat_keyspaces_left_out(0);
  if (recent.size() > max_keyspaces) {
    // Keep the hottest; ties by name.
    std::vector<std::pair<uint64_t, std::string>> by_heat;
    for (const auto& [keyspace, counts] : recent) {
      uint64_t differences = 0;
      for (const uint64_t d : counts.differences) differences += d;
      by_heat.emplace_back(differences, keyspace);
    }
    std::sort(by_heat.begin(), by_heat.end(), [](const auto& x, const auto& y) {
      return x.first != y.first ? x.first > y.first : x.second < y.second;
    });
    for (size_t i = max_keyspaces; i < by_heat.size(); ++i) {
      recent.erase(by_heat[i].second);
    }
    peer->set_heat_keyspaces_left_out(
        static_cast<uint32_t>(by_heat.size() - max_keyspaces));
  }
  for (const auto& [keyspace, counts] : recent) {
    v1::KeyspaceHeat* heat = peer->add_heat();
    heat->set_keyspace(keyspace);
    heat->set_segments(kHeatSegments);
    if (!sessions_.empty()) {
      const auto last = sessions_.back().find(keyspace);
      if (last != sessions_.back().end()) {
        AppendSegments(last->second, heat->mutable_last());
      }
    }
    AppendSegments(counts, heat->mutable_recent());
  }
}

}  // namespace node
}  // namespace tally
