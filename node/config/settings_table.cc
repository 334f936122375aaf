#include "node/config/settings_table.h"

#include <algorithm>
#include <cmath>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "node/config/postgres_settings.h"
#include "node/observe/log.h"
#include "pg/sidecar/apply/fault_points.h"
#include "tree/status_macros.h"
#include "tree/token.h"

namespace tally {
namespace node {
namespace {

// --help's column of help text.
constexpr size_t kHelpColumn = 27;

absl::StatusOr<bool> ParseBool(absl::string_view name,
                               absl::string_view value) {
  if (value == "true" || value == "1" || value == "yes") return true;
  if (value == "false" || value == "0" || value == "no") return false;
  return absl::InvalidArgumentError(
      absl::StrFormat("%s must be true or false, not '%s'", name, value));
}

absl::StatusOr<int> ParseInt(absl::string_view name, absl::string_view value,
                             int min, int max) {
  int v = 0;
  if (!absl::SimpleAtoi(value, &v) || v < min || v > max) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s must be an integer in %d..%d, not '%s'", name, min, max, value));
  }
  return v;
}

std::string Bool(bool b) { return b ? "true" : "false"; }

// absl::FormatDuration ("30s", "1h30m", "500ms") reads back through
// ParseDuration.
std::string Duration(absl::Duration d) { return absl::FormatDuration(d); }

// The parsers and printers most settings share, one per kind of field.

template <std::string NodeConfig::*kField>
absl::Status ApplyString(absl::string_view, absl::string_view value,
                         NodeConfig* config) {
  config->*kField = std::string(value);
  return absl::OkStatus();
}
template <std::string NodeConfig::*kField>
void ShowString(absl::string_view name, const NodeConfig& config,
                SettingLines* out) {
  out->emplace_back(name, config.*kField);
}
// Shown only when set.
template <std::string NodeConfig::*kField>
void ShowStringIfSet(absl::string_view name, const NodeConfig& config,
                     SettingLines* out) {
  if (!(config.*kField).empty()) out->emplace_back(name, config.*kField);
}

template <bool NodeConfig::*kField>
absl::Status ApplyBool(absl::string_view name, absl::string_view value,
                       NodeConfig* config) {
  TALLY_ASSIGN_OR_RETURN(config->*kField, ParseBool(name, value));
  return absl::OkStatus();
}
template <bool NodeConfig::*kField>
void ShowBool(absl::string_view name, const NodeConfig& config,
              SettingLines* out) {
  out->emplace_back(name, Bool(config.*kField));
}

template <int NodeConfig::*kField, int kMin, int kMax>
absl::Status ApplyInt(absl::string_view name, absl::string_view value,
                      NodeConfig* config) {
  TALLY_ASSIGN_OR_RETURN(config->*kField, ParseInt(name, value, kMin, kMax));
  return absl::OkStatus();
}
template <int NodeConfig::*kField>
void ShowInt(absl::string_view name, const NodeConfig& config,
             SettingLines* out) {
  out->emplace_back(name, absl::StrCat(config.*kField));
}

// The bandwidths a node takes: 0 (unlimited) or 1 KB/s to 1 TB/s. Outside
// it a value is a typo (1e30, 4.9e-324), not a limit anyone means.
constexpr double kMinBandwidthMb = 0.001;
constexpr double kMaxBandwidthMb = 1e6;

// MB/s as decimal digits with at most one point ("12", "0.5"): no sign,
// exponent, hex or "inf", which a C parser takes; 0 is unlimited.
template <double NodeConfig::*kField>
absl::Status ApplyBandwidth(absl::string_view name, absl::string_view value,
                            NodeConfig* config) {
  const bool decimal =
      !value.empty() && value.size() <= 32 &&
      absl::c_all_of(
          value, [](char c) { return absl::ascii_isdigit(c) || c == '.'; }) &&
      absl::c_count(value, '.') <= 1 && value != ".";
  double mb = 0;
  if (!decimal || !absl::SimpleAtod(value, &mb) ||
      (mb != 0 && (mb < kMinBandwidthMb || mb > kMaxBandwidthMb))) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s must be MB/s in decimal digits, 0 (unlimited) or %g to %g, not "
        "'%s'",
        name, kMinBandwidthMb, kMaxBandwidthMb, absl::CHexEscape(value)));
  }
  config->*kField = mb;
  return absl::OkStatus();
}
template <double NodeConfig::*kField>
void ShowDouble(absl::string_view name, const NodeConfig& config,
                SettingLines* out) {
  out->emplace_back(name, absl::StrCat(config.*kField));
}

template <absl::Duration NodeConfig::*kField>
absl::Status ApplyDuration(absl::string_view, absl::string_view value,
                           NodeConfig* config) {
  TALLY_ASSIGN_OR_RETURN(config->*kField, ParseDuration(value));
  return absl::OkStatus();
}
// A duration that may be turned off: "0" or "off" is zero.
template <absl::Duration NodeConfig::*kField>
absl::Status ApplyDurationOrOff(absl::string_view, absl::string_view value,
                                NodeConfig* config) {
  if (value == "0" || value == "off") {
    config->*kField = absl::ZeroDuration();
    return absl::OkStatus();
  }
  TALLY_ASSIGN_OR_RETURN(config->*kField, ParseDuration(value));
  return absl::OkStatus();
}
template <absl::Duration NodeConfig::*kField>
void ShowDuration(absl::string_view name, const NodeConfig& config,
                  SettingLines* out) {
  out->emplace_back(name, Duration(config.*kField));
}
// Zero shown as "off".
template <absl::Duration NodeConfig::*kField>
void ShowDurationOrOff(absl::string_view name, const NodeConfig& config,
                       SettingLines* out) {
  out->emplace_back(name, config.*kField == absl::ZeroDuration()
                              ? "off"
                              : Duration(config.*kField));
}

absl::Status ApplyPeer(absl::string_view, absl::string_view value,
                       NodeConfig* config) {
  TALLY_ASSIGN_OR_RETURN(PeerConfig peer, ParsePeer(value));
  // Twice the same peer would run two sessions and two feed
  // subscriptions with it and double its metric series; with two roles
  // it would be ambiguous.
  for (const PeerConfig& known : config->peers) {
    if (SamePeerAddress(known.address, peer.address)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "peer %s is given twice; give each peer once", peer.address));
    }
  }
  config->peers.push_back(std::move(peer));
  return absl::OkStatus();
}
void ShowPeers(absl::string_view name, const NodeConfig& config,
               SettingLines* out) {
  for (const PeerConfig& peer : config.peers) {
    // A database peer's URL may hold a password.
    const std::string address =
        peer.database ? MaskConninfo(peer.address) : peer.address;
    out->emplace_back(name, peer.role == PeerRole::kSource
                                ? absl::StrCat(address, ",role=source")
                                : address);
  }
}

absl::Status ApplyTable(absl::string_view, absl::string_view value,
                        NodeConfig* config) {
  TALLY_RETURN_IF_ERROR(ParseQualifiedTable(value).status());
  for (const std::string& known : config->tables) {
    if (known == value) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "table %s is given twice; give each table once", value));
    }
  }
  config->tables.emplace_back(value);
  return absl::OkStatus();
}
void ShowTables(absl::string_view name, const NodeConfig& config,
                SettingLines* out) {
  for (const std::string& table : config.tables) out->emplace_back(name, table);
}

// Checked in ValidateConfig, so that a file's string and a flag's string
// are refused with the same message; shown masked.
void ShowPostgres(absl::string_view name, const NodeConfig& config,
                  SettingLines* out) {
  if (!config.postgres.empty()) {
    out->emplace_back(name, MaskConninfo(config.postgres));
  }
}

void ShowMariaDb(absl::string_view name, const NodeConfig& config,
                 SettingLines* out) {
  if (!config.mariadb.empty()) {
    out->emplace_back(name, MaskConninfo(config.mariadb));
  }
}
// Shown with --mariadb: the id in use, derived or given.
void ShowMariaDbServerId(absl::string_view name, const NodeConfig& config,
                         SettingLines* out) {
  if (!config.mariadb.empty()) {
    out->emplace_back(name, absl::StrCat(MariaDbServerId(config)));
  }
}

// Shown only with TLS on.
void ShowTlsRefreshInterval(absl::string_view name, const NodeConfig& config,
                            SettingLines* out) {
  if (!config.tls_cert.empty() || !config.tls_ca.empty()) {
    ShowDurationOrOff<&NodeConfig::tls_refresh_interval>(name, config, out);
  }
}

absl::Status ApplyMetricsListen(absl::string_view, absl::string_view value,
                                NodeConfig* config) {
  config->metrics_listen = value == "off" ? "" : std::string(value);
  return absl::OkStatus();
}
void ShowMetricsListen(absl::string_view name, const NodeConfig& config,
                       SettingLines* out) {
  out->emplace_back(
      name, config.metrics_listen.empty() ? "off" : config.metrics_listen);
}

absl::Status ApplyLogRetentionEntries(absl::string_view,
                                      absl::string_view value,
                                      NodeConfig* config) {
  if (!absl::SimpleAtoi(value, &config->log_retention_entries)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "log-retention-entries must be a count >= 0 (0: no limit), not '%s'",
        value));
  }
  return absl::OkStatus();
}
void ShowLogRetentionEntries(absl::string_view name, const NodeConfig& config,
                             SettingLines* out) {
  out->emplace_back(name, absl::StrCat(config.log_retention_entries));
}

// Zero shown as "0" (no limit).
void ShowLogRetentionAge(absl::string_view name, const NodeConfig& config,
                         SettingLines* out) {
  out->emplace_back(name, config.log_retention_age == absl::ZeroDuration()
                              ? "0"
                              : Duration(config.log_retention_age));
}

absl::Status ApplyMaxClockSkew(absl::string_view, absl::string_view value,
                               NodeConfig* config) {
  TALLY_ASSIGN_OR_RETURN(config->max_clock_skew,
                         ParseDuration(value, kMaxClockSkewLimit));
  return absl::OkStatus();
}

absl::Status ApplyLogLevel(absl::string_view, absl::string_view value,
                           NodeConfig* config) {
  TALLY_ASSIGN_OR_RETURN(config->log_level, ParseLogLevel(value));
  return absl::OkStatus();
}
void ShowLogLevel(absl::string_view name, const NodeConfig& config,
                  SettingLines* out) {
  out->emplace_back(name, std::string(LogLevelName(config.log_level)));
}

absl::Status ApplyLogFormat(absl::string_view, absl::string_view value,
                            NodeConfig* config) {
  TALLY_ASSIGN_OR_RETURN(config->log_format, ParseLogFormat(value));
  return absl::OkStatus();
}
void ShowLogFormat(absl::string_view name, const NodeConfig& config,
                   SettingLines* out) {
  out->emplace_back(name, std::string(LogFormatName(config.log_format)));
}

absl::Status ApplyTestClockOffset(absl::string_view, absl::string_view value,
                                  NodeConfig* config) {
  // Signed: a clock behind is what the tests play. 0, the default (the
  // system clock), must be writable too.
  const bool behind = absl::StartsWith(value, "-");
  const absl::string_view magnitude = behind ? value.substr(1) : value;
  absl::Duration zero;
  if (absl::ParseDuration(magnitude, &zero) && zero == absl::ZeroDuration()) {
    config->test_clock_offset = absl::ZeroDuration();
    return absl::OkStatus();
  }
  TALLY_ASSIGN_OR_RETURN(config->test_clock_offset, ParseDuration(magnitude));
  if (behind) config->test_clock_offset = -config->test_clock_offset;
  return absl::OkStatus();
}
// Shown only when set.
void ShowTestClockOffset(absl::string_view name, const NodeConfig& config,
                         SettingLines* out) {
  if (config.test_clock_offset != absl::ZeroDuration()) {
    out->emplace_back(name, Duration(config.test_clock_offset));
  }
}

absl::Status ApplyTestFaultPoint(absl::string_view, absl::string_view value,
                                 NodeConfig* config) {
  // Checked here, so that a misspelt point is refused at start rather
  // than silently never reached.
  TALLY_RETURN_IF_ERROR(pg::FaultPoints::Parse(value).status());
  config->test_fault_point = std::string(value);
  return absl::OkStatus();
}

using C = NodeConfig;

std::vector<SettingInfo>* MakeSettingsTable() {
  return new std::vector<SettingInfo>{
      {"name", "Node", "NAME",
       "this node's origin name, unique in the mesh (required)", false, false,
       &ApplyString<&C::name>, &ShowString<&C::name>},
      {"data-dir", "Node", "DIR", "where the store lives (required)", false,
       false, &ApplyString<&C::data_dir>, &ShowString<&C::data_dir>},
      {"listen", "Node", "HOST:PORT",
       "gRPC address (default 127.0.0.1:7400; port 0 picks one)", false, false,
       &ApplyString<&C::listen>, &ShowString<&C::listen>},
      {"peer", "Peers and sessions", "HOST:PORT[,role=source]",
       "\n"
       "a peer; repeat for several, each peer once.\n"
       "role=source marks an authoritative source this\n"
       "node copies exactly (then it is the only peer).\n"
       "A sidecar's source may be a database it may only\n"
       "query: postgresql://USER@HOST/DB,role=source, or\n"
       "a MariaDB one: mariadb://USER@HOST/DB,role=source.\n"
       "--peer flags replace the config file's peers",
       true, false, &ApplyPeer, &ShowPeers,
       [](NodeConfig* config) { config->peers.clear(); }},
      {"sync-interval", "Peers and sessions", "DURATION",
       "time between sessions with each peer, jittered\n"
       "by +-20% (default 30s)",
       false, false, &ApplyDuration<&C::sync_interval>,
       &ShowDuration<&C::sync_interval>},
      {"max-sessions", "Peers and sessions", "N",
       "sessions running at once, all peers (default 2)", false, false,
       &ApplyInt<&C::max_sessions, 1, 256>, &ShowInt<&C::max_sessions>},
      {"repair-bandwidth", "Peers and sessions", "MB",
       "repair traffic per session in MB/s, 0.001 to 1000000\n"
       "(default 0 = unlimited)",
       false, false, &ApplyBandwidth<&C::repair_bandwidth_mb>,
       &ShowDouble<&C::repair_bandwidth_mb>},
      {"node-bandwidth", "Peers and sessions", "MB",
       "repair traffic of the whole node in MB/s, shared by\n"
       "all its sessions and the repairs tools ask it to\n"
       "run, 0.001 to 1000000 (default 0 = unlimited)",
       false, false, &ApplyBandwidth<&C::node_bandwidth_mb>,
       &ShowDouble<&C::node_bandwidth_mb>},
      {"default-depth", "Store", "D",
       "tree depth of new keyspaces, 1..24 (default 16)", false, false,
       &ApplyInt<&C::default_depth, tree::kMinDepth, tree::kMaxDepth>,
       &ShowInt<&C::default_depth>},
      {"session-timeout", "Peers and sessions", "DURATION",
       "abandon a session after this (default 10m)", false, false,
       &ApplyDuration<&C::session_timeout>, &ShowDuration<&C::session_timeout>},
      {"rpc-threads", "Serving", "N",
       "threads serving store reads and writes (default 4)", false, false,
       &ApplyInt<&C::rpc_threads, 1, 256>, &ShowInt<&C::rpc_threads>},
      {"max-keyspaces", "Store", "N",
       "keyspaces the store may hold, 1..10000 (default 256;\n"
       "each keeps its tree in memory, ~2.2 MiB at depth 16)",
       false, false, &ApplyInt<&C::max_keyspaces, 1, 10'000>,
       &ShowInt<&C::max_keyspaces>},
      {"max-streams-per-client", "Serving", "N",
       "bulk streams (scan, fetch, push, load) one\n"
       "client host may have open at once (default 32)",
       false, false, &ApplyInt<&C::max_streams_per_client, 1, 10'000>,
       &ShowInt<&C::max_streams_per_client>},
      {"stream-idle-timeout", "Serving", "DURATION",
       "cancel a stream whose reader took no\n"
       "message for this long (default 60s)",
       false, false, &ApplyDuration<&C::stream_idle_timeout>,
       &ShowDuration<&C::stream_idle_timeout>},
      {"listener-check-interval", "Serving", "DURATION",
       "how often the gRPC port is checked for\n"
       "connections that wait and are never accepted (gRPC\n"
       "stops accepting for good after running out of file\n"
       "descriptors); found 6 times in a row, the node\n"
       "stops with exit 1 for its service manager to\n"
       "restart it (default 5s; 0 = never)",
       false, false, &ApplyDurationOrOff<&C::listener_check_interval>,
       &ShowDurationOrOff<&C::listener_check_interval>},
      {"sync-writes", "Store", "BOOL", "fsync every commit (default true)",
       false, false, &ApplyBool<&C::sync_writes>, &ShowBool<&C::sync_writes>},
      {"insecure", "TLS", "", "allow a non-loopback --listen without TLS",
       false, false, &ApplyBool<&C::insecure>, &ShowBool<&C::insecure>},
      {"tls-cert", "TLS", "FILE", "PEM certificate: serve and dial TLS only",
       false, false, &ApplyString<&C::tls_cert>,
       &ShowStringIfSet<&C::tls_cert>},
      {"tls-key", "TLS", "FILE", "PEM private key of --tls-cert", false, false,
       &ApplyString<&C::tls_key>, &ShowStringIfSet<&C::tls_key>},
      {"tls-ca", "TLS", "FILE",
       "PEM CA: require and check certificates it signed\n"
       "(mutual TLS) on every connection",
       false, false, &ApplyString<&C::tls_ca>, &ShowStringIfSet<&C::tls_ca>},
      {"tls-refresh-interval", "TLS", "DURATION",
       "re-read the TLS files this often: a\n"
       "renewed certificate, key or CA written over them\n"
       "is used without a restart (default 60s; 0 = read\n"
       "once at start)",
       false, false, &ApplyDurationOrOff<&C::tls_refresh_interval>,
       &ShowTlsRefreshInterval},
      {"postgres", "PostgreSQL sidecar", "URL",
       "be a sidecar to this PostgreSQL database: a libpq\n"
       "URL (postgresql://USER@HOST:PORT/DB) or keyword\n"
       "string ('host=... dbname=...'); the rows live in\n"
       "its tables, the store keeps only their index.\n"
       "Needs wal_level=logical, track_commit_timestamp=on,\n"
       "a free replication slot and a role with\n"
       "REPLICATION; the password is never shown",
       false, false, &ApplyString<&C::postgres>, &ShowPostgres},
      {"table", "PostgreSQL sidecar", "SCHEMA.TABLE",
       "a table the sidecar keeps, as the keyspace of that\n"
       "name (needs --postgres or --mariadb, where it is\n"
       "DATABASE.TABLE; repeat for several, each once;\n"
       "every table needs a primary key).\n"
       "--table flags replace the config file's tables",
       true, false, &ApplyTable, &ShowTables,
       [](NodeConfig* config) { config->tables.clear(); }},
      {"pg-schema-check-interval", "PostgreSQL sidecar", "DURATION",
       "how often the sidecar compares each\n"
       "table's schema in the catalog with the one its\n"
       "index was built with, rebuilding on a change\n"
       "(default 60s; also at start)",
       false, false, &ApplyDuration<&C::pg_schema_check_interval>,
       &ShowDuration<&C::pg_schema_check_interval>},
      {"mariadb", "MariaDB sidecar", "URL",
       "be a sidecar to this MariaDB server (tested with\n"
       "10.11; not MySQL): mariadb://USER:PASSWORD@HOST:PORT/DB;\n"
       "the rows live in its tables (--table DB.TABLE), the\n"
       "store keeps only their index. Needs log_bin,\n"
       "binlog_format=ROW, binlog_row_image=FULL,\n"
       "binlog_row_metadata=FULL and a user with REPLICATION\n"
       "SLAVE, BINLOG MONITOR, BINLOG REPLAY; the password\n"
       "is never shown",
       false, false, &ApplyString<&C::mariadb>, &ShowMariaDb},
      {"mariadb-server-id", "MariaDB sidecar", "N",
       "the session server_id marking this node's own\n"
       "writes in the binary log (its binlog reader takes\n"
       "N+1); both must differ from every server's and\n"
       "replica's (default: derived from the node name,\n"
       "1000000000..1999999998)",
       false, false, &ApplyInt<&C::mariadb_server_id, 1, 2147483646>,
       &ShowMariaDbServerId},
      {"metrics-listen", "Monitoring", "HOST:PORT",
       "Prometheus metrics over HTTP at /metrics and\n"
       "a status page at / (default off; port 0 picks\n"
       "one; a non-loopback address needs --insecure:\n"
       "plain HTTP, no TLS)",
       false, false, &ApplyMetricsListen, &ShowMetricsListen},
      {"log-retention-entries", "Change log and maintenance", "N",
       " keep at most N change-log entries\n"
       "(default 10000000; 0 = no limit)",
       false, false, &ApplyLogRetentionEntries, &ShowLogRetentionEntries},
      {"log-retention-age", "Change log and maintenance", "DURATION",
       "keep change-log entries this long\n"
       "(default 168h; 0 = no limit)",
       false, false, &ApplyDurationOrOff<&C::log_retention_age>,
       &ShowLogRetentionAge},
      {"tombstone-min-age", "Change log and maintenance", "DURATION",
       "purge a tombstone once it arrived here this\n"
       "long ago (by this node's clock, not its\n"
       "timestamp) and every peer has synced past it\n"
       "(default 24h)",
       false, false, &ApplyDuration<&C::tombstone_min_age>,
       &ShowDuration<&C::tombstone_min_age>},
      {"max-clock-skew", "Change log and maintenance", "DURATION",
       "refuse remote timestamps further ahead of this\n"
       "node's clock (default 60s)",
       false, false, &ApplyMaxClockSkew, &ShowDuration<&C::max_clock_skew>},
      {"maintenance-interval", "Change log and maintenance", "DURATION",
       "how often the log is trimmed and\n"
       "tombstones purged (default 10s)",
       false, false, &ApplyDuration<&C::maintenance_interval>,
       &ShowDuration<&C::maintenance_interval>},
      {"scrub-interval", "Change log and maintenance", "DURATION",
       "how often every row is checked against its\n"
       "digest in the background (default 6h, jittered;\n"
       "0 = never)",
       false, false, &ApplyDurationOrOff<&C::scrub_interval>,
       &ShowDurationOrOff<&C::scrub_interval>},
      {"log-level", "Logging", "LEVEL",
       "debug, info, warning or error (default info)", false, false,
       &ApplyLogLevel, &ShowLogLevel},
      {"log-format", "Logging", "FORMAT",
       "text (key=value fields, quoted where needed) or\n"
       "json (one object per line) (default text)",
       false, false, &ApplyLogFormat, &ShowLogFormat},
      {"read-only", "Node", "",
       "refuse Put, Delete and Load from clients: rows\n"
       "arrive only from peers (for a copy of a\n"
       "role=source peer, which otherwise counts such\n"
       "writes and warns)",
       false, false, &ApplyBool<&C::read_only>, &ShowBool<&C::read_only>},
      {"test-clock-offset", "Tests", "[-]DURATION",
       "FOR TESTS ONLY: run this node's clock\n"
       "this far ahead (or, with -, behind) of the system\n"
       "clock",
       false, true, &ApplyTestClockOffset, &ShowTestClockOffset},
      // For crash tests only, not in --help.
      {"test-fault-point", "Tests", "NAME[:COUNT]", "", false, true,
       &ApplyTestFaultPoint, &ShowStringIfSet<&C::test_fault_point>},
  };
}

// A table cell: `|` would end it.
std::string Cell(absl::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

// The help text on one line.
std::string OneLine(absl::string_view help) {
  std::string out(absl::StripAsciiWhitespace(help));
  absl::StrReplaceAll({{"\n", " "}}, &out);
  return out;
}

// What --check-config shows for a config that leaves the setting out,
// each value in `quote`s; empty if nothing.
std::string DefaultOf(const SettingInfo& setting, absl::string_view open,
                      absl::string_view close) {
  const NodeConfig defaults;
  SettingLines lines;
  setting.show(setting.name, defaults, &lines);
  std::vector<std::string> values;
  for (const auto& [name, value] : lines) {
    if (!value.empty()) values.push_back(absl::StrCat(open, value, close));
  }
  return absl::StrJoin(values, ", ");
}

// Text for roff: a backslash escaped, and a line that would start with a
// control character guarded.
std::string Roff(absl::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '\\') {
      out += "\\e";
    } else if (c == '-') {
      out += "\\-";
    } else {
      out += c;
    }
  }
  if (!out.empty() && (out[0] == '.' || out[0] == '\'')) {
    out.insert(0, "\\&");
  }
  return out;
}

}  // namespace

const std::vector<SettingInfo>& SettingsTable() {
  static const std::vector<SettingInfo>* const kTable = MakeSettingsTable();
  return *kTable;
}

const SettingInfo* FindSetting(absl::string_view name) {
  for (const SettingInfo& setting : SettingsTable()) {
    if (setting.name == name) return &setting;
  }
  return nullptr;
}

std::string SettingsUsage() {
  std::string out;
  for (const SettingInfo& setting : SettingsTable()) {
    if (setting.help.empty()) continue;
    std::string line = absl::StrCat("  --", setting.name);
    if (!setting.value_name.empty()) {
      absl::StrAppend(&line, " ", setting.value_name);
    }
    const std::vector<absl::string_view> lines =
        absl::StrSplit(setting.help, '\n');
    if (!lines[0].empty()) {
      line.append(line.size() < kHelpColumn ? kHelpColumn - line.size() : 2,
                  ' ');
      absl::StrAppend(&line, lines[0]);
    }
    absl::StrAppend(&out, line, "\n");
    for (size_t i = 1; i < lines.size(); ++i) {
      absl::StrAppend(&out, std::string(kHelpColumn, ' '), lines[i], "\n");
    }
  }
  return out;
}

std::string SettingsMarkdown() {
  std::string out =
      "# Settings reference\n"
      "\n"
      "<!-- Generated from node/config/settings_table.cc by "
      "`tallyd --print-reference=settings`; do not edit. -->\n"
      "\n"
      "Every setting of tallyd, in the order of `tallyd --help`. Each is a "
      "flag (`--NAME VALUE` or `--NAME=VALUE`) and a line of the config file "
      "(`NAME = VALUE`, see `packaging/tallyd.conf`); a flag overrides the "
      "file's line. Names take dashes or underscores. `peer` and `table` "
      "repeat; their flags replace the file's list. The default is what "
      "`tallyd --check-config` shows for a config that leaves the setting "
      "out (nothing: none, or shown only when set).\n"
      "\n"
      "| Setting | Value | Default | Section | Meaning |\n"
      "|---|---|---|---|---|\n";
  for (const SettingInfo& setting : SettingsTable()) {
    if (setting.for_tests) continue;
    absl::StrAppend(
        &out, "| `", setting.name, "` | ",
        setting.value_name.empty() ? std::string("`BOOL` (a flag alone: true)")
                                   : absl::StrCat("`", setting.value_name, "`"),
        " | ", Cell(DefaultOf(setting, "`", "`")), " | ", setting.section,
        " | ", Cell(OneLine(setting.help)), " |\n");
  }
  return out;
}

std::string SettingsManPage(absl::string_view version) {
  std::string out = absl::StrCat(
      ".\\\" Generated from node/config/settings_table.cc by tallyd "
      "--print-reference=man; do not edit.\n"
      ".TH TALLYD.CONF 5 \"\" \"",
      Roff(version),
      "\" \"File Formats Manual\"\n"
      ".SH NAME\n"
      "tallyd.conf \\- settings of tallyd, the tally node\n"
      ".SH SYNOPSIS\n"
      "/etc/tally/tallyd.conf\n"
      ".SH DESCRIPTION\n"
      "tallyd reads the file named by \\fB\\-\\-config\\fR: one "
      "\\fIname\\fR = \\fIvalue\\fR a line, the names of tallyd's flags "
      "without the dashes (underscores work as dashes). A flag given on the "
      "command line overrides the file's line. A line starting with # or ; "
      "is a comment, and so is the end of a line from a # or ; after a "
      "space; a value in double or single quotes keeps a # inside. Each "
      "setting is given once, but \\fBpeer\\fR and \\fBtable\\fR, which "
      "repeat (their flags replace the file's list). No sections, no "
      "indented or empty settings. \\fBtallyd \\-\\-check\\-config\\fR "
      "checks a file and prints the settings a node would run with.\n"
      ".SH SETTINGS\n");
  // By section, in the order the sections first appear.
  std::vector<absl::string_view> sections;
  for (const SettingInfo& setting : SettingsTable()) {
    if (setting.for_tests) continue;
    if (std::find(sections.begin(), sections.end(), setting.section) ==
        sections.end()) {
      sections.push_back(setting.section);
    }
  }
  for (absl::string_view section : sections) {
    absl::StrAppend(&out, ".SS ", Roff(section), "\n");
    for (const SettingInfo& setting : SettingsTable()) {
      if (setting.for_tests || setting.section != section) continue;
      absl::StrAppend(&out, ".TP\n\\fB", Roff(setting.name), "\\fR = \\fI",
                      setting.value_name.empty() ? std::string("true|false")
                                                 : Roff(setting.value_name),
                      "\\fR\n", Roff(OneLine(setting.help)), "\n");
      const std::string default_value = DefaultOf(setting, "", "");
      if (!default_value.empty()) {
        absl::StrAppend(&out, ".br\nDefault: ", Roff(default_value), "\n");
      }
    }
  }
  absl::StrAppend(&out,
                  ".SH FILES\n"
                  "/etc/tally/tallyd.conf (the sample the package installs "
                  "names every setting)\n"
                  ".SH SEE ALSO\n"
                  "\\fBtallyd\\fR(8), \\fBtally\\fR(1)\n");
  return out;
}

std::string SettingsBashCompletion() {
  std::string flags = "--config --check-config --help --version";
  std::string dirs, files, bools;
  for (const SettingInfo& setting : SettingsTable()) {
    if (setting.for_tests) continue;
    const std::string flag = absl::StrCat("--", setting.name);
    absl::StrAppend(&flags, " ", flag);
    if (setting.value_name == "DIR") absl::StrAppend(&dirs, "|", flag);
    if (setting.value_name == "FILE") absl::StrAppend(&files, "|", flag);
    if (setting.value_name == "BOOL") absl::StrAppend(&bools, "|", flag);
  }
  std::string out =
      "# bash completion for tallyd, generated from its settings table by\n"
      "# `tallyd --print-reference=completion`.\n"
      "_tallyd() {\n"
      "  local cur=${COMP_WORDS[COMP_CWORD]}\n"
      "  local prev=${COMP_WORDS[COMP_CWORD-1]}\n"
      // The flag whose value is being completed, and that value: `--flag
      // VALUE`, or `--flag=VALUE` (one word, or three when '=' breaks
      // words, as it does by default).
      "  local flag=$prev value=$cur prefix=\n"
      "  if [[ $cur == = ]]; then value=\n"
      "  elif [[ $prev == = ]]; then flag=${COMP_WORDS[COMP_CWORD-2]}\n"
      "  elif [[ $cur == --*=* ]]; then\n"
      "    flag=${cur%%=*}; value=${cur#*=}; prefix=$flag=\n"
      "  fi\n"
      "  case $flag in\n";
  absl::StrAppend(
      &out, "    --config", files,
      ")\n"
      "      COMPREPLY=($(compgen -f -P \"$prefix\" -- \"$value\")); "
      "return ;;\n");
  if (!dirs.empty()) {
    absl::StrAppend(
        &out, "    ", dirs.substr(1),
        ")\n"
        "      COMPREPLY=($(compgen -d -P \"$prefix\" -- \"$value\")); "
        "return ;;\n");
  }
  if (!bools.empty()) {
    absl::StrAppend(&out, "    ", bools.substr(1),
                    ")\n"
                    "      COMPREPLY=($(compgen -W 'true false' -P "
                    "\"$prefix\" -- \"$value\")); return ;;\n");
  }
  absl::StrAppend(&out,
                  "  esac\n"
                  "  COMPREPLY=($(compgen -W '",
                  flags,
                  "' -- \"$cur\"))\n"
                  "}\n"
                  "complete -F _tallyd tallyd\n");
  return out;
}

}  // namespace node
}  // namespace tally
