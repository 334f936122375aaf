#include "support/mesh.h"

#include <unistd.h>

#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"

namespace tally {
namespace testing {

std::vector<std::pair<int, int>> RingLinks(int nodes) {
  std::vector<std::pair<int, int>> links;
  for (int i = 0; i < nodes; ++i) {
    links.emplace_back(i, (i + 1) % nodes);
    links.emplace_back((i + 1) % nodes, i);
  }
  return links;
}

std::vector<std::pair<int, int>> FullMeshLinks(int nodes) {
  std::vector<std::pair<int, int>> links;
  for (int i = 0; i < nodes; ++i) {
    for (int j = 0; j < nodes; ++j) {
      if (i != j) links.emplace_back(i, j);
    }
  }
  return links;
}

std::vector<std::pair<int, int>> ChainLinks(int nodes) {
  std::vector<std::pair<int, int>> links;
  for (int i = 0; i + 1 < nodes; ++i) {
    links.emplace_back(i, i + 1);
    links.emplace_back(i + 1, i);
  }
  return links;
}

Mesh::Mesh(std::string prefix, int nodes, std::vector<std::string> flags,
           std::string tallyd_path)
    : flags_(std::move(flags)),
      tallyd_path_(std::move(tallyd_path)),
      nodes_(nodes) {
  for (int i = 0; i < nodes; ++i) {
    Node& n = nodes_[i];
    n.name = absl::StrCat(prefix, "-", i);
    n.address = FreeLoopbackAddress();
    n.dir = std::make_unique<TempDir>();
    // The channel connects lazily and reconnects after restarts.
    n.client = std::move(*node::NodeClient::Connect(n.address, {}));
  }
}

Mesh::~Mesh() { StopAll(); }

std::vector<int> Mesh::StopAll() {
  // In parallel: a node can take a few seconds to exit.
  std::vector<int> codes(nodes_.size(), -1);
  std::vector<std::thread> stoppers;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].process == nullptr) continue;
    stoppers.emplace_back([this, i, &codes] { codes[i] = Stop(i); });
  }
  for (std::thread& t : stoppers) t.join();
  return codes;
}

void Mesh::Follow(int follower, int publisher) {
  FollowAddress(follower, nodes_[publisher].address);
}

void Mesh::FollowAddress(int follower, const std::string& address) {
  nodes_[follower].peers.push_back(address);
}

int Mesh::links() const {
  int links = 0;
  for (const Node& n : nodes_) links += static_cast<int>(n.peers.size());
  return links;
}

absl::Status Mesh::StartAll() {
  for (int i = 0; i < size(); ++i) {
    if (absl::Status s = Start(i); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Mesh::Start(int i) {
  Node& n = nodes_[i];
  std::vector<std::string> flags = flags_;
  for (const std::string& peer : n.peers) {
    flags.push_back("--peer");
    flags.push_back(peer);
  }
  absl::StatusOr<std::unique_ptr<NodeProcess>> process =
      NodeProcess::Start(n.name, DataDir(i), flags, n.address, tallyd_path_);
  if (!process.ok()) return process.status();
  n.process = std::move(*process);
  return absl::OkStatus();
}

int Mesh::Stop(int i) {
  const int code = nodes_[i].process->Stop();
  nodes_[i].process.reset();
  return code;
}

void Mesh::Kill(int i) {
  nodes_[i].process->Kill();
  nodes_[i].process.reset();
}

void Mesh::WipeData(int i) { std::filesystem::remove_all(DataDir(i)); }

absl::StatusOr<v1::StatusResponse> Mesh::Status(int i) {
  return nodes_[i].client->Status();
}

std::pair<std::string, uint64_t> Mesh::Root(int i,
                                            const std::string& keyspace) {
  absl::StatusOr<v1::HandshakeResponse> hs =
      nodes_[i].client->Handshake({keyspace}, 0);
  if (!hs.ok() || hs->keyspaces_size() == 0) return {"", 0};
  return {hs->keyspaces(0).root(), hs->keyspaces(0).row_count()};
}

bool Mesh::RootsEqual(const std::string& keyspace, uint64_t rows) {
  const std::pair<std::string, uint64_t> first = Root(0, keyspace);
  if (first.second != rows) return false;
  for (int i = 1; i < size(); ++i) {
    if (Root(i, keyspace) != first) return false;
  }
  return true;
}

bool Mesh::FeedsConnected() {
  for (int i = 0; i < size(); ++i) {
    absl::StatusOr<v1::StatusResponse> status = Status(i);
    if (!status.ok()) return false;
    for (const v1::PeerStatus& peer : status->peers()) {
      if (!peer.feed_connected()) return false;
    }
  }
  return true;
}

bool Mesh::SessionsIdle() {
  for (int i = 0; i < size(); ++i) {
    absl::StatusOr<v1::StatusResponse> status = Status(i);
    if (!status.ok()) return false;
    for (const v1::PeerStatus& peer : status->peers()) {
      if (peer.session_running() ||
          peer.sessions_ok() + peer.sessions_failed() == 0) {
        return false;
      }
    }
  }
  return true;
}

bool Mesh::WaitUntil(const std::function<bool()>& done,
                     absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() > deadline) return done();
    absl::SleepFor(absl::Milliseconds(50));
  }
  return true;
}

}  // namespace testing
}  // namespace tally
