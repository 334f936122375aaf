#include "node/session/saved_history.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "tally/v1/tally.pb.h"

namespace tally {
namespace node {
namespace {

std::string PathIn(const std::string& data_dir) {
  return absl::StrCat(data_dir, "/", kSavedHistoryFile);
}

absl::Status Failed(const std::string& what, const std::string& path) {
  return absl::UnavailableError(
      absl::StrCat("cannot ", what, " ", path, ": ", std::strerror(errno)));
}

SessionRecord FromProto(const v1::SessionRecord& proto) {
  SessionRecord record;
  record.start = proto.started_unix_ms() == 0
                     ? absl::InfinitePast()
                     : absl::FromUnixMillis(proto.started_unix_ms());
  record.duration = absl::Seconds(proto.seconds());
  record.trigger =
      proto.trigger() == SessionTriggerName(SessionTrigger::kRequested)
          ? SessionTrigger::kRequested
          : SessionTrigger::kScheduled;
  record.outcome = proto.outcome();
  record.keyspaces = proto.keyspaces();
  record.differences = proto.differences();
  record.rows_received = proto.rows_received();
  record.rows_sent = proto.rows_sent();
  record.rows_erased = proto.rows_erased();
  record.conflicts = proto.conflicts();
  record.bytes_repaired = proto.bytes_repaired();
  record.rows_changed_during_session = proto.rows_changed_during_session();
  return record;
}

std::map<std::string, SegmentCounts> HeatFromProto(
    const google::protobuf::RepeatedPtrField<v1::KeyspaceHeat>& heat) {
  std::map<std::string, SegmentCounts> by_keyspace;
  for (const v1::KeyspaceHeat& keyspace : heat) {
    if (keyspace.keyspace().empty()) continue;  // a session that found none
    SegmentCounts& counts = by_keyspace[keyspace.keyspace()];
    for (const v1::HeatSegment& s : keyspace.last()) {
      if (s.segment() >= static_cast<uint32_t>(kHeatSegments)) continue;
      counts.differences[s.segment()] += s.differences();
      counts.rows_repaired[s.segment()] += s.rows_repaired();
    }
  }
  return by_keyspace;
}

void HeatToProto(const std::map<std::string, SegmentCounts>& by_keyspace,
                 v1::SessionRecord* record) {
  // A session that found no difference is still one the map adds up: an
  // entry without a keyspace says so.
  if (by_keyspace.empty()) record->add_heat();
  for (const auto& [name, counts] : by_keyspace) {
    v1::KeyspaceHeat* keyspace = record->add_heat();
    keyspace->set_keyspace(name);
    keyspace->set_segments(kHeatSegments);
    for (int i = 0; i < kHeatSegments; ++i) {
      if (counts.differences[i] == 0 && counts.rows_repaired[i] == 0) continue;
      v1::HeatSegment* segment = keyspace->add_last();
      segment->set_segment(static_cast<uint32_t>(i));
      segment->set_differences(counts.differences[i]);
      segment->set_rows_repaired(counts.rows_repaired[i]);
    }
  }
}

}  // namespace

absl::StatusOr<std::map<std::string, SavedPeer>> ReadSavedHistory(
    const std::string& data_dir) {
  const std::string path = PathIn(data_dir);
  std::map<std::string, SavedPeer> by_peer;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return by_peer;
    return Failed("read", path);
  }
  std::stringstream bytes;
  bytes << in.rdbuf();
  if (in.bad()) return Failed("read", path);
  v1::StatusResponse saved;
  if (!saved.ParseFromString(bytes.str())) {
    return absl::DataLossError(
        absl::StrCat(path, " is not a saved session history"));
  }
  for (const v1::PeerStatus& peer : saved.peers()) {
    SavedPeer& saved_peer = by_peer[peer.address()];
    // Heat is saved with the newest records only, and without gaps.
    bool heat_ended = false;
    for (const v1::SessionRecord& r : peer.history()) {
      saved_peer.records.push_back(FromProto(r));
      heat_ended = heat_ended || r.heat_size() == 0;
      if (!heat_ended) saved_peer.heat.push_back(HeatFromProto(r.heat()));
    }
  }
  return by_peer;
}

absl::Status WriteSavedHistory(
    const std::string& data_dir,
    const std::map<std::string, SavedPeer>& by_peer) {
  const std::string path = PathIn(data_dir);
  v1::StatusResponse saved;
  for (const auto& [address, saved_peer] : by_peer) {
    if (saved_peer.records.empty()) continue;
    v1::PeerStatus* peer = saved.add_peers();
    peer->set_address(address);
    for (size_t i = 0; i < saved_peer.records.size(); ++i) {
      v1::SessionRecord* record = peer->add_history();
      SessionRecordToProto(saved_peer.records[i], record);
      if (i < saved_peer.heat.size()) HeatToProto(saved_peer.heat[i], record);
    }
  }
  const std::string temp = absl::StrCat(path, ".tmp");
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out || !saved.SerializeToOstream(&out)) return Failed("write", temp);
    out.flush();
    if (!out) return Failed("write", temp);
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    return Failed("rename to", path);
  }
  return absl::OkStatus();
}

}  // namespace node
}  // namespace tally
