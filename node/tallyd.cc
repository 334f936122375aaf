// tallyd: the tally node.
//
//   tallyd --name eu-west/db-3 --data-dir /var/lib/tally
//          --listen 127.0.0.1:7400 --peer 10.0.0.2:7400
//          --peer 10.0.0.4:7400 --sync-interval 30s
//   tallyd --config /etc/tally/tallyd.conf
//
// Every flag is a setting of the config file (node/config/config.h) and is
// parsed by the same code: `--name value` or `--name=value`; `--peer` repeats.
// Flags override the file (node/config/tallyd_command_line.h). `--check-config`
// checks the file and flags as a start would and prints the settings. SIGTERM
// or SIGINT stop the node cleanly: no new RPCs or sessions, running sessions
// end, the store is closed, exit 0. SIGHUP, the usual "reload your config",
// reads the config again and applies what can change while the node runs
// (the log level and format, the node's repair bandwidth), naming the
// settings that changed and take a restart; it never stops the node.
#include <malloc.h>
#include <signal.h>
#include <sys/resource.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "node/config/config.h"
#include "node/config/config_file.h"
#include "node/config/effective_settings.h"
#include "node/config/settings_table.h"
#include "node/config/tallyd_command_line.h"
#include "node/exit.h"
#include "node/node_server.h"
#include "node/observe/log.h"
#include "node/observe/status_fields.h"
#include "node/observe/version.h"
#include "node/rpc/grpc_log.h"
#include "tree/status_macros.h"

namespace tally {
namespace node {
namespace {

constexpr char kUsage[] = R"(usage: tallyd [--config FILE] [--SETTING VALUE]...
       tallyd --check-config [--config FILE] [--SETTING VALUE]...

Runs a tally node: keeps a Merkle tree over its store, serves peers and
tools over gRPC, and runs anti-entropy sessions with its peers.

  --config FILE            read settings from FILE, `name = value` a line
                           (the names below without the dashes); flags
                           given too override the file's lines
  --check-config           check the file and the flags as a start would
                           (without opening the store, binding ports or
                           connecting to PostgreSQL), print the settings the
                           node would run with, one `name = value` a line
                           (the PostgreSQL password masked), and exit: 0 if
                           they are valid, 2 with the first error otherwise

Config file: `#` or `;` starts a comment line; after a space or tab, `#` or
`;` starts a comment at the end of a line. A value may be quoted ("..." or
'...'): inside quotes `#` is literal, but ` ;` is refused. Each setting once,
but peer and table (once per peer and table); no [sections], no indented
settings, no empty values. Errors name the file and line (FILE:LINE: ...).

Settings (flags, or `name = value` lines in --config FILE):
)";

// After the settings (SettingsUsage(), from node/config/settings_table.h).
constexpr char kUsageEnd[] = R"(
On start it prints "tallyd NAME listening on HOST:PORT" to stderr, and with
--metrics-listen "metrics on http://HOST:PORT/metrics" and "status page on
http://HOST:PORT/". SIGTERM or SIGINT stop it cleanly; SIGHUP reads the
config again and applies --log-level, --log-format and --node-bandwidth
(other settings take a restart).
--version prints the version and build.
)";

void ApplyLogSettings(const NodeConfig& config) {
  SetLogLevel(config.log_level);
  SetLogFormat(config.log_format);
  RouteGrpcLogs(config.log_level);
}

// The log format a refusal at start is written in: the one the flags ask
// for, else the config file's when it reads, else text. A config that does
// not load still has its --log-format flag honoured, so that a log shipper
// reading JSON sees why tallyd did not start.
LogFormat StartLogFormat(const TallydCommandLine& command) {
  NodeConfig config;
  if (!command.config_file.empty()) {
    ApplyConfigFile(command.config_file, &config).IgnoreError();
  }
  std::vector<std::pair<std::string, std::string>> format_flags;
  for (const auto& setting : command.settings) {
    if (setting.first == "log-format") format_flags.push_back(setting);
  }
  ApplyCommandLineSettings(format_flags, &config).IgnoreError();
  return config.log_format;
}

// Why tallyd does not start, on stderr: "tallyd: MESSAGE" as text, or an
// error line of the JSON log (its message "tallyd did not start", the
// reason in `error`); under systemd with its journal priority. One line
// whatever the message holds (a PostgreSQL error brings its detail and hint
// on lines of their own): the operator's log shows the refusal and its fix
// together.
void LogRefusal(LogFormat format, std::string message) {
  absl::StrReplaceAll({{"\r\n", "; "}, {"\n", "; "}}, &message);
  if (format == LogFormat::kJson) {
    SetLogFormat(LogFormat::kJson);
    LogError("tallyd did not start", {{"error", message}});
    return;
  }
  std::fprintf(stderr, "tallyd: %s\n", EscapeForLog(message).c_str());
}

// node-bandwidth for the reload's log line: "50MB/s" or "unlimited".
std::string BandwidthText(double mb_per_second) {
  if (mb_per_second == 0) return "unlimited";
  return absl::StrCat(mb_per_second, "MB/s");
}

// The names of the settings whose values differ between `a` and `b`
// (repeated settings such as `peer` compare as their whole list).
std::string ChangedSettings(const NodeConfig& a, const NodeConfig& b) {
  std::map<std::string, std::vector<std::string>> before, after;
  for (const auto& [name, value] : EffectiveSettings(a)) {
    before[name].push_back(value);
  }
  for (const auto& [name, value] : EffectiveSettings(b)) {
    after[name].push_back(value);
  }
  std::set<std::string> changed;
  for (const auto& [name, values] : after) {
    if (before[name] != values) changed.insert(name);
  }
  for (const auto& [name, values] : before) {
    if (after[name] != values) changed.insert(name);
  }
  return absl::StrJoin(changed, ",");
}

// SIGHUP: reads the config again (file, then flags, then the checks, as at
// start) and applies what a running node can change: the log level and
// format, the node's repair bandwidth (for the repairs running too) and the
// peers (added and removed; a role or a source changes with a restart).
// Other settings that changed are named; they take a restart. A config
// that no longer validates changes nothing.
void Reload(const TallydCommandLine& command, NodeServer* node,
            NodeConfig* running) {
  absl::StatusOr<NodeConfig> reloaded = LoadNodeConfig(command);
  if (!reloaded.ok()) {
    LogError("SIGHUP: the config does not validate; nothing changed",
             {{"config", command.config_file}, {"error", reloaded.status()}});
    return;
  }
  const LogLevel old_level = running->log_level;
  const LogFormat old_format = running->log_format;
  const double old_bandwidth = running->node_bandwidth_mb;
  // Validated by LoadNodeConfig: 0 or 0.001 to 1000000 MB/s.
  if (const absl::Status set =
          node->SetNodeBandwidth(reloaded->node_bandwidth_mb);
      !set.ok()) {
    LogError("SIGHUP: the config does not validate; nothing changed",
             {{"config", command.config_file}, {"error", set}});
    return;
  }
  running->node_bandwidth_mb = reloaded->node_bandwidth_mb;
  // The peers: added ones are followed and synced with now, removed ones
  // dropped (roles and sources change with a restart only).
  std::string peers = "unchanged";
  auto same = [](const PeerConfig& a, const PeerConfig& b) {
    return a.address == b.address && a.role == b.role;
  };
  if (!std::equal(running->peers.begin(), running->peers.end(),
                  reloaded->peers.begin(), reloaded->peers.end(), same)) {
    absl::StatusOr<SessionScheduler::PeerChanges> changes =
        node->SetPeers(reloaded->peers);
    if (changes.ok()) {
      running->peers = reloaded->peers;
      peers = absl::StrCat("added [", absl::StrJoin(changes->added, ","),
                           "] removed [", absl::StrJoin(changes->removed, ","),
                           "]");
    } else {
      LogError("SIGHUP: the peers were not changed",
               {{"config", command.config_file}, {"error", changes.status()}});
      peers = "not changed (see the error)";
    }
  }
  running->log_level = reloaded->log_level;
  running->log_format = reloaded->log_format;
  ApplyLogSettings(*running);
  LogInfo(
      "SIGHUP: config reloaded",
      {{"config", command.config_file.empty() ? "(none)" : command.config_file},
       {"peers", peers},
       {"log_level", absl::StrCat(LogLevelName(old_level), "->",
                                  LogLevelName(running->log_level))},
       {"log_format", absl::StrCat(LogFormatName(old_format), "->",
                                   LogFormatName(running->log_format))},
       {"node_bandwidth",
        absl::StrCat(BandwidthText(old_bandwidth), "->",
                     BandwidthText(running->node_bandwidth_mb))},
       {"need_restart", ChangedSettings(*running, *reloaded)}});
}

// The soft limit on open files up to the hard one (often 1024 of 524288):
// every connection, table file and log takes one, and running out makes
// gRPC stop accepting for good.
void RaiseFileDescriptorLimit() {
  rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 ||
      limit.rlim_cur >= limit.rlim_max) {
    return;
  }
  const rlim_t before = limit.rlim_cur;
  limit.rlim_cur = limit.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &limit) == 0) {
    LogInfo("open files limit raised to the hard limit",
            {{"from", static_cast<uint64_t>(before)},
             {"to", static_cast<uint64_t>(limit.rlim_max)}});
  }
}

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
  // Sent to itself: a restart to salvage damaged tables.
  sigaddset(&signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::StatusOr<TallydCommandLine> command =
      ParseTallydCommandLine(std::vector<std::string>(argv + 1, argv + argc));
  if (!command.ok()) {
    std::fprintf(stderr, "tallyd: %s\n",
                 std::string(command.status().message()).c_str());
    return 2;
  }
  if (command->action == TallydCommandLine::Action::kHelp) {
    std::fputs(kUsage, stdout);
    std::fputs(SettingsUsage().c_str(), stdout);
    std::fputs(kUsageEnd, stdout);
    return 0;
  }
  if (command->action == TallydCommandLine::Action::kPrintReference) {
    std::string reference;
    if (command->reference == "metrics") {
      reference = StatusFieldsMarkdown();
    } else if (command->reference == "settings") {
      reference = SettingsMarkdown();
    } else if (command->reference == "completion") {
      reference = SettingsBashCompletion();
    } else {
      reference = SettingsManPage(absl::StrCat("tally ", ProjectVersion()));
    }
    std::fputs(reference.c_str(), stdout);
    return 0;
  }
  if (command->action == TallydCommandLine::Action::kVersion) {
    std::printf("%s\n", VersionText("tallyd").c_str());
    return 0;
  }
  // The config file, then the flags, then the checks: the same for a start
  // and for --check-config.
  absl::StatusOr<NodeConfig> loaded = LoadNodeConfig(*command);
  if (!loaded.ok()) {
    LogRefusal(StartLogFormat(*command),
               std::string(loaded.status().message()));
    return 2;
  }
  NodeConfig config = *std::move(loaded);
  if (command->action == TallydCommandLine::Action::kCheckConfig) {
    std::fputs(FormatEffectiveSettings(config).c_str(), stdout);
    std::fprintf(stderr, "tallyd: the configuration is valid (%s)\n",
                 command->config_file.empty() ? "flags only, no --config"
                                              : command->config_file.c_str());
    return 0;
  }
  ApplyLogSettings(config);
  RaiseFileDescriptorLimit();

  // A store that finds a table block it cannot decode is salvaged by a
  // restart of the node in this process (NodeServer::Start salvages before
  // it opens); a few times at most, in case the salvage does not hold.
  constexpr int kMaxSalvageRestarts = 3;
  static std::atomic<bool> listener_stuck{false};
  static std::atomic<bool> tables_damaged{false};
  for (int salvage_restarts = 0;; ++salvage_restarts) {
    absl::StatusOr<std::unique_ptr<NodeServer>> node =
        NodeServer::Start(config);
    if (!node.ok()) {
      LogRefusal(config.log_format, node.status().ToString());
      return 1;
    }
    LogInfo(absl::StrFormat("tallyd %s listening on %s", config.name,
                            (*node)->listen_address()),
            {{"data", config.data_dir},
             {"peers", config.peers.size()},
             {"version", VersionText("tallyd")}});
    // A gRPC listener that stopped accepting cannot be revived in place:
    // the node stops (exit 1) for its service manager to start it again.
    (*node)->SetListenerStuckHandler([] {
      listener_stuck.store(true);
      kill(getpid(), SIGTERM);
    });
    if (salvage_restarts < kMaxSalvageRestarts) {
      (*node)->SetTablesDamagedHandler([] {
        if (!tables_damaged.exchange(true)) kill(getpid(), SIGUSR1);
      });
    }
    // Under systemd (Type=notify, NOTIFY_SOCKET set) the unit is started
    // only now: the store is open and the node listens. Elsewhere a no-op.
    sd_notifyf(0, "READY=1\nSTATUS=listening on %s\nMAINPID=%lu",
               (*node)->listen_address().c_str(),
               static_cast<unsigned long>(getpid()));

    int signal_number = 0;
    for (;;) {
      sigwait(&signals, &signal_number);
      if (signal_number == SIGUSR1 && !tables_damaged.load()) continue;
      if (signal_number != SIGHUP) break;
      sd_notify(0, "RELOADING=1");
      // The default action of SIGHUP ends the process; an operator (or a
      // log rotator, or a closed terminal) sending it expects a reload.
      Reload(*command, node->get(), &config);
      sd_notify(0, "READY=1");
    }
    if (signal_number == SIGUSR1) {
      LogWarning("restarting the node to salvage the store's damaged tables",
                 {{"name", config.name},
                  {"restart", salvage_restarts + 1},
                  {"of", kMaxSalvageRestarts}});
      sd_notify(0, "RELOADING=1\nSTATUS=salvaging damaged tables");
      (*node)->Shutdown();
      node->reset();
      tables_damaged.store(false);
      continue;
    }
    LogInfo("shutting down",
            {{"name", config.name}, {"signal", strsignal(signal_number)}});
    sd_notify(0, "STOPPING=1\nSTATUS=shutting down");
    (*node)->Shutdown();
    node->reset();
    break;
  }
  if (listener_stuck.load()) {
    LogError("stopped: the gRPC listener no longer accepted connections",
             {{"name", config.name}, {"exit", 1}});
    return 1;
  }
  LogInfo("stopped", {{"name", config.name}});
  return 0;
}

}  // namespace
}  // namespace node
}  // namespace tally

namespace {

// glibc gives threads that allocate at once arenas of their own, up to 8
// per core, and an arena keeps much of what it freed. With tallyd's many
// threads (gRPC, sessions, feed, capture, LevelDB) a 500k-row transaction
// through two sidecars (2 cores, back to back) peaked at 207 / 245 MB
// resident (sender / receiver) with glibc's 16 arenas and at 186 / 188 MB
// with 2, in the same time (50 s and 52 s, the machine loaded). An
// operator's MALLOC_ARENA_MAX wins.
void CapMallocArenas() {
  if (std::getenv("MALLOC_ARENA_MAX") != nullptr) return;
  mallopt(M_ARENA_MAX, 2);
}

}  // namespace

int main(int argc, char** argv) {
  CapMallocArenas();
  // Main has closed the store and stopped every thread of its own.
  tally::node::ExitSkippingTeardown(tally::node::Main(argc, argv));
}
