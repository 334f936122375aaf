// tallyd: the tally node.
//
//   tallyd --name eu-west/db-3 --data-dir /var/lib/tally
//          --listen 127.0.0.1:7400 --peer 10.0.0.2:7400
//          --peer 10.0.0.4:7400 --sync-interval 30s
//   tallyd --config /etc/tally/tallyd.conf
//
// Every flag is a setting of the config file (node/config.h) and is parsed
// by the same code: `--name value` or `--name=value`; `--peer` repeats.
// Flags override the file. SIGTERM or SIGINT stop the node cleanly: no new
// RPCs or sessions, running sessions end, the store is closed, exit 0.
// SIGHUP, the usual "reload your config", is logged and ignored: no setting
// can change while the node runs yet, and a node must not die of it.
#include <signal.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "node/config.h"
#include "node/exit.h"
#include "node/log.h"
#include "node/node_server.h"
#include "node/version.h"

namespace tally {
namespace node {
namespace {

constexpr char kUsage[] = R"(usage: tallyd [--config FILE] [--SETTING VALUE]...

Runs a tally node: keeps a Merkle tree over its store, serves peers and
tools over gRPC, and runs anti-entropy sessions with its peers.

Settings (flags, or `name = value` lines in --config FILE):
  --name NAME              this node's origin name, unique in the mesh (required)
  --data-dir DIR           where the store lives (required)
  --listen HOST:PORT       gRPC address (default 127.0.0.1:7400; port 0 picks one)
  --peer HOST:PORT[,role=source]
                           a peer; repeat for several, each peer once.
                           role=source marks an authoritative source this
                           node copies exactly (then it is the only peer).
                           --peer flags replace the config file's peers
  --sync-interval DURATION time between sessions with each peer, jittered
                           by +-20% (default 30s)
  --max-sessions N         sessions running at once, all peers (default 2)
  --repair-bandwidth MB    repair traffic per session in MB/s (default 0 = unlimited)
  --default-depth D        tree depth of new keyspaces, 1..24 (default 16)
  --session-timeout DURATION  abandon a session after this (default 10m)
  --rpc-threads N          threads serving store reads and writes (default 4)
  --max-keyspaces N        keyspaces the store may hold, 1..10000 (default 256;
                           each keeps its tree in memory, ~2.2 MiB at depth 16)
  --max-streams-per-client N  bulk streams (scan, fetch, push, load) one
                           client host may have open at once (default 32)
  --stream-idle-timeout DURATION  cancel a stream whose reader took no
                           message for this long (default 60s)
  --sync-writes BOOL       fsync every commit (default true)
  --insecure               allow a non-loopback --listen without TLS
  --tls-cert FILE          PEM certificate: serve and dial TLS only
  --tls-key FILE           PEM private key of --tls-cert
  --tls-ca FILE            PEM CA: require and check certificates it signed
                           (mutual TLS) on every connection
  --postgres URL           be a sidecar to this PostgreSQL database: a libpq
                           URL (postgresql://USER@HOST:PORT/DB) or keyword
                           string ('host=... dbname=...'); the rows live in
                           its tables, the store keeps only their index.
                           Needs wal_level=logical, track_commit_timestamp=on,
                           a free replication slot and a role with
                           REPLICATION; the password is never shown
  --table SCHEMA.TABLE     a table the sidecar keeps, as the keyspace of that
                           name (needs --postgres; repeat for several, each
                           once; every table needs a primary key).
                           --table flags replace the config file's tables
  --pg-schema-check-interval DURATION  how often the sidecar compares each
                           table's schema in the catalog with the one its
                           index was built with, rebuilding on a change
                           (default 60s; also at start)
  --metrics-listen HOST:PORT  Prometheus metrics over HTTP at /metrics and
                           a status page at / (default off; port 0 picks
                           one; a non-loopback address needs --insecure:
                           plain HTTP, no TLS)
  --log-retention-entries N   keep at most N change-log entries
                           (default 10000000; 0 = no limit)
  --log-retention-age DURATION  keep change-log entries this long
                           (default 168h; 0 = no limit)
  --tombstone-min-age DURATION  purge a tombstone once it arrived here this
                           long ago (by this node's clock, not its
                           timestamp) and every peer has synced past it
                           (default 24h)
  --max-clock-skew DURATION  refuse remote timestamps further ahead of this
                           node's clock (default 60s)
  --maintenance-interval DURATION  how often the log is trimmed and
                           tombstones purged (default 10s)
  --scrub-interval DURATION  how often every row is checked against its
                           digest in the background (default 6h, jittered;
                           0 = never)
  --test-clock-offset [-]DURATION  FOR TESTS ONLY: run this node's clock
                           this far ahead (or, with -, behind) of the system
                           clock

On start it prints "tallyd NAME listening on HOST:PORT" to stderr, and with
--metrics-listen "metrics on http://HOST:PORT/metrics" and "status page on
http://HOST:PORT/". SIGTERM or SIGINT stop it cleanly; SIGHUP is logged and
ignored (nothing is reloadable yet).
--version prints the version and build.
)";

bool IsBoolSetting(const std::string& name) { return name == "insecure"; }

int Main(int argc, char** argv) {
  // Debian's Abseil checks every Mutex acquisition for lock-order cycles
  // (a debug aid costing ~1-2% of a busy node); tallyd's tests run with it,
  // production without.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  // Signals go to the thread that waits for them, never to gRPC's or the
  // store's threads: block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // (name, value) pairs in command-line order; --config applies first.
  std::vector<std::pair<std::string, std::string>> settings;
  std::string config_file;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h" || arg == "help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (arg == "--version" || arg == "-version") {
      std::printf("%s\n", VersionText("tallyd").c_str());
      return 0;
    }
    if (!absl::StartsWith(arg, "--")) {
      std::fprintf(stderr, "tallyd: unexpected argument '%s' (see --help)\n",
                   arg.c_str());
      return 2;
    }
    std::string name = arg.substr(2);
    std::string value;
    const size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else if (IsBoolSetting(name)) {
      value = "true";
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      std::fprintf(stderr, "tallyd: --%s needs a value (see --help)\n",
                   name.c_str());
      return 2;
    }
    // Underscores too, for habit: --data_dir is --data-dir.
    for (char& c : name) c = c == '_' ? '-' : c;
    if (name == "config") {
      config_file = value;
    } else {
      settings.emplace_back(name, value);
    }
  }

  NodeConfig config;
  if (!config_file.empty()) {
    absl::Status s = ApplyConfigFile(config_file, &config);
    if (!s.ok()) {
      std::fprintf(stderr, "tallyd: %s\n", std::string(s.message()).c_str());
      return 2;
    }
  }
  absl::Status applied = ApplyCommandLineSettings(settings, &config);
  if (!applied.ok()) {
    std::fprintf(stderr, "tallyd: %s\n",
                 std::string(applied.message()).c_str());
    return 2;
  }
  absl::Status valid = ValidateConfig(config);
  if (!valid.ok()) {
    std::fprintf(stderr, "tallyd: %s\n", std::string(valid.message()).c_str());
    return 2;
  }

  absl::StatusOr<std::unique_ptr<NodeServer>> node = NodeServer::Start(config);
  if (!node.ok()) {
    // One line, whatever the message holds (a PostgreSQL error brings its
    // detail and hint on lines of their own): the operator's log shows the
    // refusal and its fix together.
    std::string message = node.status().ToString();
    absl::StrReplaceAll({{"\r\n", "; "}, {"\n", "; "}}, &message);
    std::fprintf(stderr, "tallyd: %s\n", message.c_str());
    return 1;
  }
  LogInfo(absl::StrFormat("tallyd %s listening on %s (data %s, %d peers)",
                          config.name, (*node)->listen_address(),
                          config.data_dir, config.peers.size()));
  // Under systemd (Type=notify, NOTIFY_SOCKET set) the unit is started only
  // now: the store is open and the node listens. Elsewhere a no-op.
  sd_notifyf(0, "READY=1\nSTATUS=listening on %s\nMAINPID=%lu",
             (*node)->listen_address().c_str(),
             static_cast<unsigned long>(getpid()));

  int signal_number = 0;
  for (;;) {
    sigwait(&signals, &signal_number);
    if (signal_number != SIGHUP) break;
    sd_notify(0, "RELOADING=1");
    // The default action of SIGHUP ends the process; an operator (or a
    // log rotator, or a closed terminal) sending it expects a reload.
    LogInfo(absl::StrFormat(
        "tallyd %s: SIGHUP received; no setting is reloadable yet, so it is "
        "ignored (restart the node to apply a changed config)",
        config.name));
    sd_notify(0, "READY=1");
  }
  LogInfo(absl::StrFormat("tallyd %s: %s received, shutting down", config.name,
                          strsignal(signal_number)));
  sd_notify(0, "STOPPING=1\nSTATUS=shutting down");
  (*node)->Shutdown();
  node->reset();
  LogInfo(absl::StrFormat("tallyd %s: stopped", config.name));
  return 0;
}

}  // namespace
}  // namespace node
}  // namespace tally

int main(int argc, char** argv) {
  // Main has closed the store and stopped every thread of its own.
  tally::node::ExitSkippingTeardown(tally::node::Main(argc, argv));
}
