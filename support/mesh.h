// Mesh: a set of real tallyd processes on loopback wired into a topology,
// for the multi-process mesh tests and the feed benchmark.
//
//   Mesh mesh("ring", 5, {"--sync-writes", "false", "--sync-interval", "1h"});
//   for (auto [from, to] : RingLinks(5)) mesh.Follow(from, to);
//   ASSERT_TRUE(mesh.StartAll().ok());
//   mesh.client(2).Put("default", "k", "v");
//   EXPECT_TRUE(mesh.WaitUntil([&] { return mesh.RootsEqual("default", 1); },
//                              absl::Seconds(20)));
//
// Each node gets its own temporary data directory and a loopback address
// chosen when the Mesh is made, so that peers can name each other before
// any of them starts, and a node restarts on the same address. `Follow(a,
// b)` gives node a `--peer` b: a follows b's change feed and runs sessions
// with it. Every process is stopped (SIGKILL if needed) by the destructor.
//
// Thread-compatible; client(i) may be used from many threads.
#ifndef TALLY_SUPPORT_MESH_H_
#define TALLY_SUPPORT_MESH_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "node/client/client.h"
#include "support/process.h"
#include "support/temp_dir.h"

namespace tally {
namespace testing {

// Directed links (follower, publisher) of common topologies: every pair of
// neighbours follows each other both ways.
std::vector<std::pair<int, int>> RingLinks(int nodes);
std::vector<std::pair<int, int>> FullMeshLinks(int nodes);
std::vector<std::pair<int, int>> ChainLinks(int nodes);

class Mesh {
 public:
  // `nodes` nodes named "<prefix>-<i>", each started with `flags`, by the
  // tallyd at `tallyd_path`.
  Mesh(std::string prefix, int nodes, std::vector<std::string> flags,
       std::string tallyd_path = TallydPath());
  ~Mesh();
  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;

  // Node `follower` gets `--peer` of node `publisher` (or of `address`,
  // e.g. a proxy in front of it). REQUIRES: before the follower starts.
  void Follow(int follower, int publisher);
  void FollowAddress(int follower, const std::string& address);

  // Starts every node (or one, again after Stop/Kill, on its address and
  // data directory).
  absl::Status StartAll();
  absl::Status Start(int i);
  // SIGTERM and wait: the exit code. SIGKILL.
  int Stop(int i);
  // Stops every running node at once; their exit codes (-1: not running).
  std::vector<int> StopAll();
  void Kill(int i);
  // Removes node i's data directory. REQUIRES: node i is not running.
  void WipeData(int i);

  int size() const { return static_cast<int>(nodes_.size()); }
  const std::string& name(int i) const { return nodes_[i].name; }
  const std::string& address(int i) const { return nodes_[i].address; }
  node::NodeClient& client(int i) { return *nodes_[i].client; }
  // The running process, or nullptr.
  NodeProcess* process(int i) { return nodes_[i].process.get(); }
  // Directed feed subscriptions (--peer flags) over all nodes.
  int links() const;
  // The --peer addresses node i was given.
  const std::vector<std::string>& peers(int i) const { return nodes_[i].peers; }

  // Admin.Status of node i.
  absl::StatusOr<v1::StatusResponse> Status(int i);
  // Root digest and row count of `keyspace` on node i ("" and 0 when the
  // node lacks it or cannot be reached).
  std::pair<std::string, uint64_t> Root(int i, const std::string& keyspace);
  // True when every node's root of `keyspace` is the same and holds `rows`
  // rows.
  bool RootsEqual(const std::string& keyspace, uint64_t rows);
  // True when every node reports every one of its feeds connected.
  bool FeedsConnected();
  // True when every node has finished a session with every peer and runs
  // none now (after start-up, the next are an interval away).
  bool SessionsIdle();

  // Polls `done` every 50 ms until it is true or `timeout` passes; returns
  // its last answer.
  static bool WaitUntil(const std::function<bool()>& done,
                        absl::Duration timeout);

 private:
  struct Node {
    std::string name;
    std::string address;
    std::unique_ptr<TempDir> dir;
    std::vector<std::string> peers;
    std::unique_ptr<node::NodeClient> client;
    std::unique_ptr<NodeProcess> process;
  };
  std::string DataDir(int i) const { return nodes_[i].dir->path() + "/data"; }

  const std::vector<std::string> flags_;
  const std::string tallyd_path_;
  std::vector<Node> nodes_;
};

}  // namespace testing
}  // namespace tally

#endif  // TALLY_SUPPORT_MESH_H_
