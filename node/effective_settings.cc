#include "node/effective_settings.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "node/postgres_settings.h"

namespace tally {
namespace node {
namespace {

std::string Bool(bool b) { return b ? "true" : "false"; }

// absl::FormatDuration ("30s", "1h30m", "500ms") reads back through
// ParseDuration.
std::string Duration(absl::Duration d) { return absl::FormatDuration(d); }

// The value as a config file must hold it to read back as itself
// (node/config_file.h): quoted if it holds a comment character or
// whitespace at an end, or starts with a quote.
std::string Quoted(const std::string& value) {
  const bool plain = value.find_first_of("#;") == std::string::npos &&
                     absl::StripAsciiWhitespace(value) == value &&
                     !absl::StartsWith(value, "\"") &&
                     !absl::StartsWith(value, "'");
  if (plain) return value;
  const char quote = value.find('"') == std::string::npos ? '"' : '\'';
  return absl::StrCat(std::string(1, quote), value, std::string(1, quote));
}

}  // namespace

std::vector<std::pair<std::string, std::string>> EffectiveSettings(
    const NodeConfig& config) {
  std::vector<std::pair<std::string, std::string>> settings;
  auto add = [&settings](const char* name, std::string value) {
    settings.emplace_back(name, std::move(value));
  };
  auto add_if_set = [&add](const char* name, const std::string& value) {
    if (!value.empty()) add(name, value);
  };
  add("name", config.name);
  add("data-dir", config.data_dir);
  add("listen", config.listen);
  for (const PeerConfig& peer : config.peers) {
    add("peer", peer.role == PeerRole::kSource
                    ? absl::StrCat(peer.address, ",role=source")
                    : peer.address);
  }
  add("sync-interval", Duration(config.sync_interval));
  add("max-sessions", absl::StrCat(config.max_sessions));
  add("repair-bandwidth", absl::StrCat(config.repair_bandwidth_mb));
  add("node-bandwidth", absl::StrCat(config.node_bandwidth_mb));
  add("default-depth", absl::StrCat(config.default_depth));
  add("session-timeout", Duration(config.session_timeout));
  add("rpc-threads", absl::StrCat(config.rpc_threads));
  add("max-keyspaces", absl::StrCat(config.max_keyspaces));
  add("max-streams-per-client", absl::StrCat(config.max_streams_per_client));
  add("stream-idle-timeout", Duration(config.stream_idle_timeout));
  add("sync-writes", Bool(config.sync_writes));
  add("insecure", Bool(config.insecure));
  add_if_set("tls-cert", config.tls_cert);
  add_if_set("tls-key", config.tls_key);
  add_if_set("tls-ca", config.tls_ca);
  if (!config.tls_cert.empty() || !config.tls_ca.empty()) {
    add("tls-refresh-interval",
        config.tls_refresh_interval == absl::ZeroDuration()
            ? "off"
            : Duration(config.tls_refresh_interval));
  }
  if (!config.postgres.empty()) add("postgres", MaskConninfo(config.postgres));
  for (const std::string& table : config.tables) add("table", table);
  add("pg-schema-check-interval", Duration(config.pg_schema_check_interval));
  add("metrics-listen",
      config.metrics_listen.empty() ? "off" : config.metrics_listen);
  add("log-retention-entries", absl::StrCat(config.log_retention_entries));
  add("log-retention-age", config.log_retention_age == absl::ZeroDuration()
                               ? "0"
                               : Duration(config.log_retention_age));
  add("tombstone-min-age", Duration(config.tombstone_min_age));
  add("max-clock-skew", Duration(config.max_clock_skew));
  add("maintenance-interval", Duration(config.maintenance_interval));
  add("scrub-interval", config.scrub_interval == absl::ZeroDuration()
                            ? "off"
                            : Duration(config.scrub_interval));
  add("log-level", std::string(LogLevelName(config.log_level)));
  add("log-format", std::string(LogFormatName(config.log_format)));
  add("read-only", Bool(config.read_only));
  if (config.test_clock_offset != absl::ZeroDuration()) {
    add("test-clock-offset", Duration(config.test_clock_offset));
  }
  add_if_set("test-fault-point", config.test_fault_point);
  return settings;
}

std::string FormatEffectiveSettings(const NodeConfig& config) {
  std::string text;
  for (const auto& [name, value] : EffectiveSettings(config)) {
    absl::StrAppend(&text, name, " = ", Quoted(value), "\n");
  }
  return text;
}

}  // namespace node
}  // namespace tally
