// Scenarios "diff", "wan" and "bootstrap": real tallyd processes on loopback,
// driven over gRPC through the same client library the CLI uses.
//
// diff: N rows on node A, copied to node B; then d differences are made on
// B and `tally diff`'s algorithm runs between the two nodes. In the same
// run, a Cassandra-style baseline compares the same nodes: every leaf
// digest at depth 16 from both sides, then every row of every mismatched
// leaf from both sides. Bytes are serialized message sizes, counted by the
// client.
//
// wan: the same diff through delaying proxies (see RunWan).
//
// bootstrap: rows/s and MB/s into an empty node by one repair, against
// loading the same rows through the Admin service (the node's own ingest
// over gRPC) in the same run.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <random>
#include <set>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "node/client/client.h"
#include "node/client/replica.h"
#include "node/client/wire.h"
#include "node/node_server.h"
#include "node/sync/sync.h"
#include "support/process.h"
#include "support/tcp_proxy.h"
#include "tools/bench/scenario.h"
#include "tools/bench/store_fixture.h"
#include "tree/diff/diff.h"

ABSL_FLAG(std::string, tallyd, "",
          "diff, bootstrap: path of tallyd (default: ../node/tallyd next to "
          "this binary)");
ABSL_FLAG(uint64_t, wan_diffs, 100, "wan: number of differences");
ABSL_FLAG(int, wan_rtt_ms, 50, "wan: round trip through a proxy, ms");
ABSL_FLAG(int, bootstrap_rtt_ms, 0,
          "bootstrap: put the empty node behind a proxy with this round "
          "trip, ms (0: direct)");
ABSL_FLAG(std::string, node_diffs, "0,1,100,1000,100000",
          "diff: numbers of differences to measure (cumulative, ascending)");

namespace tally {
namespace bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr char kKeyspace[] = "bench";

std::string DefaultTallydPath() {
  const std::string flag = absl::GetFlag(FLAGS_tallyd);
  if (!flag.empty()) return flag;
  std::error_code ec;
  const std::filesystem::path self =
      std::filesystem::read_symlink("/proc/self/exe", ec);
  return (self.parent_path().parent_path() / "node" / "tallyd").string();
}

std::string RowKey(uint64_t i) { return absl::StrFormat("k%015d", i); }

// Two (or more) nodes in scratch directories, stopped at the end.
struct Cluster {
  std::vector<std::unique_ptr<testing::TempDir>> dirs;
  std::vector<std::unique_ptr<testing::NodeProcess>> nodes;
  std::vector<std::unique_ptr<node::NodeClient>> clients;

  absl::Status Add(const std::string& name) {
    dirs.push_back(std::make_unique<testing::TempDir>());
    auto node = testing::NodeProcess::Start(name, dirs.back()->path() + "/data",
                                            {"--sync-writes", "false"},
                                            "127.0.0.1:0", DefaultTallydPath());
    if (!node.ok()) return node.status();
    auto client = node::NodeClient::Connect((*node)->address(), {});
    if (!client.ok()) return client.status();
    nodes.push_back(std::move(*node));
    clients.push_back(std::move(*client));
    return absl::OkStatus();
  }
};

// Loads rows [0, n) with 100-byte values.
absl::StatusOr<double> LoadRows(node::NodeClient& client, uint64_t n,
                                uint64_t seed) {
  std::mt19937_64 rng(seed);
  uint64_t i = 0;
  const auto start = Clock::now();
  auto loaded = client.Load(kKeyspace, [&](std::string* k, std::string* v) {
    if (i >= n) return false;
    *k = RowKey(i++);
    *v = RandomBytes(rng, 100);
    return true;
  });
  if (!loaded.ok()) return loaded.status();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Measured {
  uint64_t rounds = 0;
  uint64_t bytes = 0;
  uint64_t differences = 0;
  double seconds = 0;
};

// Runs the diff algorithm between two views and measures it.
// `options` says which view, if any, answers in process.
absl::StatusOr<Measured> MeasureDiff(tree::TreeView& a, tree::TreeView& b,
                                     const tree::DiffOptions& options = {}) {
  tree::DiffStats stats;
  const auto start = Clock::now();
  absl::Status s = tree::DiffViews(
      a, b, options,
      [](const tree::RowEntry*, const tree::RowEntry*) {
        return absl::OkStatus();
      },
      &stats);
  if (!s.ok()) return s;
  Measured m;
  m.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  m.rounds = stats.rounds;
  m.bytes = stats.payload_bytes();
  m.differences = stats.differences;
  return m;
}

// Connects before the clock starts, as `tally diff` does: the diff's time
// is its rounds, not the connection set-up.
absl::StatusOr<std::unique_ptr<node::NodeClient>> ConnectedClient(
    const std::string& address) {
  auto client = node::NodeClient::Connect(address, {});
  if (!client.ok()) return client.status();
  if (!(*client)->AwaitConnection(absl::Seconds(10))) {
    return absl::UnavailableError("cannot connect to " + address);
  }
  return client;
}

// tally's diff between two nodes, as `tally diff` runs it.
absl::StatusOr<Measured> TallyDiff(const std::string& a, const std::string& b) {
  auto ca = ConnectedClient(a);
  auto cb = ConnectedClient(b);
  if (!ca.ok()) return ca.status();
  if (!cb.ok()) return cb.status();
  return MeasureDiff(*(*ca)->NewTreeView(kKeyspace),
                     *(*cb)->NewTreeView(kKeyspace));
}

// A node's own session with a peer: its store is local (nothing of it
// crosses the network), the peer is remote.
absl::StatusOr<Measured> SessionDiff(storage::Store& a, const std::string& b) {
  auto cb = ConnectedClient(b);
  if (!cb.ok()) return cb.status();
  auto va = a.NewTreeView(kKeyspace);
  if (!va.ok()) return va.status();
  // As node/session/session.cc asks: the local store first, its fingerprints
  // sent.
  tree::DiffOptions options;
  options.own_view = tree::DiffOptions::OwnView::kA;
  return MeasureDiff(**va, *(*cb)->NewTreeView(kKeyspace), options);
}

// Cassandra-style: all leaves at depth 16 from both sides, then every row of
// each mismatched leaf from both sides.
absl::StatusOr<Measured> LeafExchangeBaseline(const std::string& a,
                                              const std::string& b) {
  constexpr int kDepth = 16;
  auto ca = node::NodeClient::Connect(a, {});
  auto cb = node::NodeClient::Connect(b, {});
  if (!ca.ok()) return ca.status();
  if (!cb.ok()) return cb.status();
  const auto start = Clock::now();
  v1::ExchangeRequest request;
  request.set_keyspace(kKeyspace);
  v1::DescendRequest* d = request.add_descend();
  d->mutable_node()->set_level(0);
  d->set_levels_ahead(kDepth);
  auto ra = (*ca)->Exchange(request);
  auto rb = (*cb)->Exchange(request);
  if (!ra.ok()) return ra.status();
  if (!rb.ok()) return rb.status();
  std::vector<tree::NodeRef> mismatched;
  for (int i = 0; i < ra->fingerprints_size(); ++i) {
    if (ra->fingerprints(i) != rb->fingerprints(i) ||
        ra->counts(i) != rb->counts(i)) {
      mismatched.push_back(tree::NodeRef{kDepth, static_cast<uint64_t>(i)});
    }
  }
  // Every row of each mismatched leaf, both sides; the keys that differ
  // are found by comparing the two lists.
  std::map<std::string, std::pair<uint64_t, uint64_t>> rows;
  uint64_t rounds = 1;
  for (size_t start_i = 0; start_i < mismatched.size();
       start_i += node::kMaxScanRanges) {
    ++rounds;
    v1::ScanRequest scan;
    scan.set_keyspace(kKeyspace);
    for (size_t i = start_i;
         i < std::min(mismatched.size(), start_i + node::kMaxScanRanges); ++i) {
      node::ToProto(mismatched[i], scan.add_ranges());
    }
    for (int side = 0; side < 2; ++side) {
      node::NodeClient& c = side == 0 ? **ca : **cb;
      absl::Status s = c.Scan(scan, [&](const v1::ScanResponse& response) {
        for (const v1::RowEntry& e : response.entries()) {
          (side == 0 ? rows[e.key()].first : rows[e.key()].second) =
              e.fingerprint();
        }
        return absl::OkStatus();
      });
      if (!s.ok()) return s;
    }
  }
  Measured m;
  m.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  m.rounds = rounds;
  const tree::ViewTraffic ta = (*ca)->traffic();
  const tree::ViewTraffic tb = (*cb)->traffic();
  m.bytes =
      ta.bytes_sent + ta.bytes_received + tb.bytes_sent + tb.bytes_received;
  for (const auto& [key, digests] : rows) {
    if (digests.first != digests.second) ++m.differences;
  }
  return m;
}

// Makes B a copy of A with one repair; returns seconds.
absl::StatusOr<node::SyncStats> Bootstrap(node::NodeClient& a,
                                          node::NodeClient& b) {
  auto ra = node::NewRemoteReplica(&a);
  auto rb = node::NewRemoteReplica(&b);
  node::SyncOptions options;
  options.keyspace = kKeyspace;
  options.batch_rows = 5000;
  return node::SyncKeyspace(*ra, *rb, options);
}

absl::Status RunNodeDiff(std::ostream& out) {
  const uint64_t rows = absl::GetFlag(FLAGS_rows);
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  std::vector<uint64_t> diffs;
  for (absl::string_view part :
       absl::StrSplit(absl::GetFlag(FLAGS_node_diffs), ',')) {
    uint64_t d;
    if (!absl::SimpleAtoi(part, &d) || d > rows) {
      return absl::InvalidArgumentError(
          "--node_diffs must be numbers no larger than --rows");
    }
    diffs.push_back(d);
  }
  std::sort(diffs.begin(), diffs.end());
  // Node A runs inside this process, so that its own session with B can be
  // measured as tallyd runs it (A's tree local); B is a tallyd process.
  testing::TempDir dir_a;
  node::NodeConfig config_a;
  config_a.name = "a";
  config_a.data_dir = dir_a.path() + "/data";
  config_a.listen = "127.0.0.1:0";
  config_a.sync_writes = false;
  auto node_a = node::NodeServer::Start(config_a);
  if (!node_a.ok()) return node_a.status();
  const std::string address_a = (*node_a)->listen_address();
  auto client_a = node::NodeClient::Connect(address_a, {});
  if (!client_a.ok()) return client_a.status();
  Cluster cluster;
  if (absl::Status s = cluster.Add("b"); !s.ok()) return s;
  const std::string address_b = cluster.nodes[0]->address();
  auto loaded = LoadRows(**client_a, rows, seed);
  if (!loaded.ok()) return loaded.status();
  auto copied = Bootstrap(**client_a, *cluster.clients[0]);
  if (!copied.ok()) return copied.status();

  out << absl::StrFormat(
      "diff between two tallyd over gRPC on loopback, N = %d, depth 16; "
      "baseline: every\ndepth-16 leaf from both nodes, then every row of "
      "each mismatched leaf from both\n\n",
      rows);
  out << "tally diff: a third party asks both nodes (both sides' answers "
         "travel);\nsession: node A's own session with B (A's tree is "
         "local, only B's answers travel)\n\n";
  out << absl::StrFormat(
      "%9s %7s %6s %11s %8s %8s | %11s %8s | %6s %12s %8s %10s\n", "N", "d",
      "rounds", "diff B", "B/diff", "seconds", "session B", "B/diff", "b.rnd",
      "baseline B", "b.secs", "diff/base");
  // Distinct keys to change, in a fixed random order.
  std::vector<uint64_t> order(rows);
  for (uint64_t i = 0; i < rows; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed + 1));
  uint64_t made = 0;
  std::mt19937_64 rng(seed + 2);
  for (uint64_t d : diffs) {
    // Updates on B of keys not yet changed.
    uint64_t i = made;
    auto drift = cluster.clients[0]->Load(kKeyspace,
                                          [&](std::string* k, std::string* v) {
                                            if (i >= d) return false;
                                            *k = RowKey(order[i++]);
                                            *v = RandomBytes(rng, 100);
                                            return true;
                                          });
    if (!drift.ok()) return drift.status();
    made = d;
    auto tally = TallyDiff(address_a, address_b);
    if (!tally.ok()) return tally.status();
    auto session = SessionDiff((*node_a)->store(), address_b);
    if (!session.ok()) return session.status();
    auto base = LeafExchangeBaseline(address_a, address_b);
    if (!base.ok()) return base.status();
    if (tally->differences != d || session->differences != d ||
        base->differences != d) {
      return absl::InternalError(absl::StrFormat(
          "made %d differences; tally found %d, the session %d, the "
          "baseline %d",
          d, tally->differences, session->differences, base->differences));
    }
    auto per_diff = [d](uint64_t bytes) {
      return d == 0 ? std::string("-")
                    : absl::StrFormat("%.0f", 1.0 * bytes / d);
    };
    out << absl::StrFormat(
        "%9d %7d %6d %11d %8s %8.3f | %11d %8s | %6d %12d %8.3f %10.4f\n", rows,
        d, tally->rounds, tally->bytes, per_diff(tally->bytes), tally->seconds,
        session->bytes, per_diff(session->bytes), base->rounds, base->bytes,
        base->seconds, 1.0 * tally->bytes / base->bytes);
  }
  out << "bytes = serialized request and response payload; diff/base = "
         "payload ratio\n";
  return absl::OkStatus();
}

// wan: the diff when the nodes are far away. N rows on A, copied to B, d
// keys updated on B; then the same diffs through delaying proxies
// (support/tcp_proxy.h with a delay, half the round trip each way): `tally
// diff` with one node behind a proxy and with both, and A's own session with B
// behind one. Three runs each; the goal is wall time <= (rounds + 1) x the
// round trip.
absl::Status RunWan(std::ostream& out) {
  const uint64_t rows = absl::GetFlag(FLAGS_rows);
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  const uint64_t d = absl::GetFlag(FLAGS_wan_diffs);
  const absl::Duration rtt =
      absl::Milliseconds(absl::GetFlag(FLAGS_wan_rtt_ms));
  if (d > rows) {
    return absl::InvalidArgumentError("--wan_diffs must be at most --rows");
  }
  testing::TempDir dir_a;
  node::NodeConfig config_a;
  config_a.name = "a";
  config_a.data_dir = dir_a.path() + "/data";
  config_a.listen = "127.0.0.1:0";
  config_a.sync_writes = false;
  auto node_a = node::NodeServer::Start(config_a);
  if (!node_a.ok()) return node_a.status();
  const std::string address_a = (*node_a)->listen_address();
  auto client_a = node::NodeClient::Connect(address_a, {});
  if (!client_a.ok()) return client_a.status();
  Cluster cluster;
  if (absl::Status s = cluster.Add("b"); !s.ok()) return s;
  const std::string address_b = cluster.nodes[0]->address();
  auto loaded = LoadRows(**client_a, rows, seed);
  if (!loaded.ok()) return loaded.status();
  auto copied = Bootstrap(**client_a, *cluster.clients[0]);
  if (!copied.ok()) return copied.status();
  std::mt19937_64 rng(seed + 2);
  std::vector<uint64_t> order(rows);
  for (uint64_t i = 0; i < rows; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed + 1));
  uint64_t i = 0;
  auto drift =
      cluster.clients[0]->Load(kKeyspace, [&](std::string* k, std::string* v) {
        if (i >= d) return false;
        *k = RowKey(order[i++]);
        *v = RandomBytes(rng, 100);
        return true;
      });
  if (!drift.ok()) return drift.status();

  auto proxy_a = ::tally::testing::TcpProxy::Start(address_a, rtt / 2);
  if (!proxy_a.ok()) return proxy_a.status();
  auto proxy_b = ::tally::testing::TcpProxy::Start(address_b, rtt / 2);
  if (!proxy_b.ok()) return proxy_b.status();
  const std::string far_a = (*proxy_a)->address();
  const std::string far_b = (*proxy_b)->address();

  out << absl::StrFormat(
      "wan: N = %d, d = %d keys updated on B, round trip through a delaying "
      "proxy %s;\nthree runs each, connections set up before the clock "
      "starts\n\n",
      rows, d, absl::FormatDuration(rtt));
  out << absl::StrFormat("%-34s %6s %10s %8s %26s %8s\n", "placement", "rounds",
                         "bytes", "B/diff", "wall ms (min/med/max)", "goal ms");
  struct Placement {
    const char* name;
    std::function<absl::StatusOr<Measured>()> run;
  };
  const std::vector<Placement> placements = {
      {"tally diff, no proxy", [&] { return TallyDiff(address_a, address_b); }},
      {"tally diff, B behind the proxy",
       [&] { return TallyDiff(address_a, far_b); }},
      {"tally diff, A and B behind proxies",
       [&] { return TallyDiff(far_a, far_b); }},
      {"session of A, B behind the proxy",
       [&] { return SessionDiff((*node_a)->store(), far_b); }},
  };
  for (const Placement& p : placements) {
    std::vector<double> millis;
    Measured m;
    for (int run = 0; run < 3; ++run) {
      auto measured = p.run();
      if (!measured.ok()) return measured.status();
      if (measured->differences != d) {
        return absl::InternalError(
            absl::StrFormat("%s: made %d differences, found %d", p.name, d,
                            measured->differences));
      }
      m = *measured;
      millis.push_back(m.seconds * 1000);
    }
    std::sort(millis.begin(), millis.end());
    const bool direct = p.name == placements.front().name;
    const std::string goal =
        direct ? std::string("-")
               : absl::StrFormat(
                     "%.0f", (m.rounds + 1) * absl::ToDoubleMilliseconds(rtt));
    out << absl::StrFormat(
        "%-34s %6d %10d %8s %26s %8s\n", p.name, m.rounds, m.bytes,
        d == 0 ? std::string("-") : absl::StrFormat("%.0f", 1.0 * m.bytes / d),
        absl::StrFormat("%.0f / %.0f / %.0f", millis[0], millis[1], millis[2]),
        goal);
  }
  out << "goal: wall time <= (rounds + 1) x round trip\n";
  return absl::OkStatus();
}

absl::Status RunBootstrap(std::ostream& out) {
  const uint64_t rows = absl::GetFlag(FLAGS_rows);
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  Cluster cluster;
  for (const char* name : {"a", "b", "c"}) {
    if (absl::Status s = cluster.Add(name); !s.ok()) return s;
  }
  auto loaded = LoadRows(*cluster.clients[0], rows, seed);
  if (!loaded.ok()) return loaded.status();
  // A far target: its pushes pay the round trip.
  const int rtt_ms = absl::GetFlag(FLAGS_bootstrap_rtt_ms);
  std::unique_ptr<::tally::testing::TcpProxy> proxy;
  std::unique_ptr<node::NodeClient> far_client;
  node::NodeClient* target = cluster.clients[1].get();
  if (rtt_ms > 0) {
    auto started = ::tally::testing::TcpProxy::Start(
        cluster.nodes[1]->address(), absl::Milliseconds(rtt_ms) / 2);
    if (!started.ok()) return started.status();
    proxy = std::move(*started);
    auto connected = node::NodeClient::Connect(proxy->address(), {});
    if (!connected.ok()) return connected.status();
    far_client = std::move(*connected);
    target = far_client.get();
  }
  const auto start = Clock::now();
  auto copied = Bootstrap(*cluster.clients[0], *target);
  if (!copied.ok()) return copied.status();
  const double seconds =
      std::chrono::duration<double>(Clock::now() - start).count();
  // Baseline: the same rows loaded into an empty node through Admin.Load,
  // after the repair, so that both run behind one earlier load's
  // compactions.
  auto baseline = LoadRows(*cluster.clients[2], rows, seed);
  if (!baseline.ok()) return baseline.status();
  if (copied->rows_to_b != rows) {
    return absl::InternalError(absl::StrFormat(
        "bootstrap copied %d rows, not %d", copied->rows_to_b, rows));
  }
  const double mb = static_cast<double>(copied->repair_bytes) / 1e6;
  out << absl::StrFormat(
      "bootstrap: %d rows of 100 bytes into an empty node by one repair%s\n",
      rows,
      rtt_ms > 0 ? absl::StrFormat(" (node behind a %d ms round trip)", rtt_ms)
                 : "");
  out << absl::StrFormat("%-28s %10s %10s %8s\n", "", "rows/s", "MB/s",
                         "seconds");
  out << absl::StrFormat("%-28s %10.0f %10.1f %8.2f\n",
                         "repair into empty node", rows / seconds, mb / seconds,
                         seconds);
  out << absl::StrFormat("%-28s %10.0f %10.1f %8.2f\n", "baseline: Admin.Load",
                         rows / *baseline, mb / *baseline, *baseline);
  out << absl::StrFormat(
      "ratio (repair / load): %.2f (goal: repair >= "
      "100000 rows/s)\n",
      *baseline / seconds);
  return absl::OkStatus();
}

}  // namespace

Scenario NodeDiffScenario() {
  return {"diff",
          "tally diff between two real tallyd over gRPC vs a leaf-exchange "
          "baseline",
          &RunNodeDiff};
}

Scenario WanScenario() {
  return {"wan",
          "tally diff and a session through delaying proxies (a long link)",
          &RunWan};
}

Scenario BootstrapScenario() {
  return {"bootstrap", "one repair into an empty node vs Admin.Load",
          &RunBootstrap};
}

}  // namespace bench
}  // namespace tally
