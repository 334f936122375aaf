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

}  // namespace

absl::StatusOr<std::map<std::string, std::vector<SessionRecord>>>
ReadSavedHistory(const std::string& data_dir) {
  const std::string path = PathIn(data_dir);
  std::map<std::string, std::vector<SessionRecord>> by_peer;
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
    std::vector<SessionRecord>& records = by_peer[peer.address()];
    for (const v1::SessionRecord& r : peer.history()) {
      records.push_back(FromProto(r));
    }
  }
  return by_peer;
}

absl::Status WriteSavedHistory(
    const std::string& data_dir,
    const std::map<std::string, std::vector<SessionRecord>>& by_peer) {
  const std::string path = PathIn(data_dir);
  v1::StatusResponse saved;
  for (const auto& [address, records] : by_peer) {
    if (records.empty()) continue;
    v1::PeerStatus* peer = saved.add_peers();
    peer->set_address(address);
    for (const SessionRecord& record : records) {
      SessionRecordToProto(record, peer->add_history());
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
