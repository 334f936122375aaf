#include "node/config/config.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/types/span.h"
#include "mariadb/url.h"
#include "node/client/client.h"
#include "node/client/tls.h"
#include "node/config/postgres_settings.h"
#include "node/config/settings_table.h"
#include "node/observe/log.h"
#include "storage/store.h"
#include "tree/status_macros.h"

namespace tally {
namespace node {
namespace {

// Levenshtein distance, for "did you mean": names are short, so the
// quadratic table costs nothing.
size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1,
                         diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The known name closest to an unknown one if it is near enough to be a
// typo (two edits, one for names of four letters or less: "peers" gives
// "peer", "tls" gives nothing); empty otherwise.
std::string ClosestSettingName(absl::string_view unknown) {
  std::string best;
  size_t best_distance = unknown.size() <= 4 ? 1 : 2;
  for (const SettingInfo& setting : SettingsTable()) {
    const absl::string_view known = setting.name;
    const size_t d = EditDistance(unknown, known);
    if (d <= best_distance && (best.empty() || d < best_distance)) {
      best = std::string(known);
      best_distance = d;
    }
  }
  return best;
}

absl::string_view HostOf(absl::string_view address) {
  const size_t colon = address.rfind(':');
  absl::string_view host =
      colon == absl::string_view::npos ? address : address.substr(0, colon);
  absl::ConsumePrefix(&host, "[");
  absl::ConsumeSuffix(&host, "]");
  return host;
}

// Like ValidateAddress, but with the flag's name in the message; port 0
// picks a free port.
absl::Status ValidateMetricsListen(absl::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--metrics-listen '%s' is not HOST:PORT (e.g. 127.0.0.1:9400; empty "
        "or 'off' turns metrics off)",
        address));
  }
  int port = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--metrics-listen '%s' has a bad port; ports are 0..65535", address));
  }
  if (HostOf(address).empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--metrics-listen '%s' has no host; use HOST:PORT", address));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Span<const absl::string_view> SettingNames() {
  static const std::vector<absl::string_view>* const kNames = [] {
    auto* names = new std::vector<absl::string_view>;
    for (const SettingInfo& setting : SettingsTable()) {
      names->push_back(setting.name);
    }
    return names;
  }();
  return *kNames;
}

bool IsSettingName(absl::string_view name) {
  return FindSetting(name) != nullptr;
}

bool SettingRepeats(absl::string_view name) {
  const SettingInfo* setting = FindSetting(name);
  return setting != nullptr && setting->repeats;
}

bool SamePeerAddress(absl::string_view a, absl::string_view b) {
  return absl::EqualsIgnoreCase(a, b);
}

bool IsLoopbackHost(absl::string_view host) {
  return absl::StartsWith(host, "127.") || host == "::1" || host == "localhost";
}

absl::StatusOr<PeerConfig> ParsePeer(absl::string_view spec) {
  spec = absl::StripAsciiWhitespace(spec);
  std::vector<absl::string_view> parts;
  if (IsDatabaseUrl(spec)) {
    // A URL may hold commas of its own (a password, a query): the options
    // start at the first ",role=".
    const size_t options = spec.find(",role=");
    parts.push_back(spec.substr(0, options));
    if (options != absl::string_view::npos) {
      for (absl::string_view o :
           absl::StrSplit(spec.substr(options + 1), ',')) {
        parts.push_back(o);
      }
    }
  } else {
    parts = absl::StrSplit(spec, ',');
  }
  PeerConfig peer;
  peer.address = std::string(absl::StripAsciiWhitespace(parts[0]));
  if (IsDatabaseUrl(peer.address)) {
    peer.database = true;
    TALLY_RETURN_IF_ERROR(ValidateDatabaseUrl(peer.address));
  } else {
    TALLY_RETURN_IF_ERROR(ValidateAddress(peer.address));
  }
  for (size_t i = 1; i < parts.size(); ++i) {
    const absl::string_view option = absl::StripAsciiWhitespace(parts[i]);
    if (option == "role=source") {
      peer.role = PeerRole::kSource;
    } else if (option == "role=peer") {
      peer.role = PeerRole::kPeer;
    } else {
      return absl::InvalidArgumentError(absl::StrFormat(
          "peer '%s': unknown option '%s'; the only option is role=peer or "
          "role=source",
          peer.database ? MaskConninfo(peer.address) : std::string(spec),
          option));
    }
  }
  if (peer.database && peer.role != PeerRole::kSource) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "peer %s is a database: give it as role=source (this node then "
        "copies its tables, reading them only). tally never writes to a "
        "database peer, so two-way with one is not supported; to replicate "
        "both ways, run a tallyd next to that database and peer with it",
        MaskConninfo(peer.address)));
  }
  return peer;
}

absl::StatusOr<absl::Duration> ParseDuration(absl::string_view text,
                                             absl::Duration max) {
  absl::Duration d;
  double seconds = 0;
  if (absl::SimpleAtod(text, &seconds)) {
    // absl::Seconds turns NaN, infinities and 1e30 into an infinite
    // duration, which reads as "never" to every timer that uses it.
    if (!std::isfinite(seconds)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "'%s' is not a finite duration; write e.g. 30s, 500ms or 2m", text));
    }
    d = absl::Seconds(seconds);
  } else if (!absl::ParseDuration(text, &d)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "'%s' is not a duration; write e.g. 30s, 500ms or 2m", text));
  } else if (d == absl::InfiniteDuration() || d == -absl::InfiniteDuration()) {
    // absl::ParseDuration reads "inf".
    return absl::InvalidArgumentError(absl::StrFormat(
        "'%s' is not a finite duration; write e.g. 30s, 500ms or 2m", text));
  }
  if (d <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("duration '%s' must be positive", text));
  }
  if (d > max) {
    return absl::InvalidArgumentError(
        absl::StrFormat("duration '%s' is longer than the limit of %s", text,
                        absl::FormatDuration(max)));
  }
  return d;
}

absl::Status ApplySetting(absl::string_view name_as_given,
                          absl::string_view value, NodeConfig* config) {
  // Underscores work as dashes, in the file as in the flags: data_dir is
  // data-dir.
  std::string name(name_as_given);
  std::replace(name.begin(), name.end(), '_', '-');
  if (const SettingInfo* setting = FindSetting(name); setting != nullptr) {
    return setting->apply(name, value, config);
  }
  const std::string closest = ClosestSettingName(name);
  return absl::InvalidArgumentError(absl::StrFormat(
      "unknown setting '%s'%s (tallyd --help lists them)", name,
      closest.empty() ? "" : absl::StrFormat("; did you mean '%s'?", closest)));
}

absl::Status ApplyCommandLineSettings(
    const std::vector<std::pair<std::string, std::string>>& settings,
    NodeConfig* config) {
  // Flags override the file: for a setting that repeats, the flags' list
  // replaces the file's rather than adding to it, as a single setting's flag
  // replaces its value.
  std::vector<const SettingInfo*> replaced;
  for (const auto& [name, value] : settings) {
    const SettingInfo* setting = FindSetting(name);
    if (setting != nullptr && setting->clear != nullptr &&
        std::find(replaced.begin(), replaced.end(), setting) ==
            replaced.end()) {
      setting->clear(config);
      replaced.push_back(setting);
    }
    absl::Status s = ApplySetting(name, value, config);
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--%s: %s", name, s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidatePeerRoles(const std::vector<PeerConfig>& peers) {
  const PeerConfig* source = nullptr;
  for (const PeerConfig& peer : peers) {
    if (peer.role != PeerRole::kSource) continue;
    if (source != nullptr) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "peers %s and %s are both role=source: a copy has one source (each "
          "source's sessions would erase the rows only the other has, every "
          "interval)",
          source->address, peer.address));
    }
    source = &peer;
  }
  if (source == nullptr) return absl::OkStatus();
  for (const PeerConfig& peer : peers) {
    if (&peer == source) continue;
    return absl::InvalidArgumentError(absl::StrFormat(
        "peer %s is role=source, so this node is its exact copy and cannot "
        "also take rows two-way from peer %s: the source's sessions would "
        "erase the rows that peer brings and that peer would bring them "
        "back, every interval. Give a copy its source as its only --peer (to "
        "reach more nodes, peer them with the source)",
        source->address, peer.address));
  }
  return absl::OkStatus();
}

absl::Status ValidatePostgresSettings(const NodeConfig& config) {
  if (config.postgres.empty() && config.mariadb.empty() &&
      !config.test_fault_point.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--test-fault-point %s needs --postgres or --mariadb: the fault "
        "points are the sidecar's",
        config.test_fault_point));
  }
  if (!config.postgres.empty() && !config.mariadb.empty()) {
    return absl::InvalidArgumentError(
        "--postgres and --mariadb are both set: a node is a sidecar to one "
        "database; run one tallyd per database");
  }
  if (!HasSidecar(config)) {
    if (!config.tables.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--table %s needs --postgres or --mariadb: tables are kept only by "
          "a sidecar to a database (give --postgres URL or --mariadb URL, or "
          "drop --table)",
          config.tables.front()));
    }
    if (config.mariadb_server_id != 0) {
      return absl::InvalidArgumentError("--mariadb-server-id needs --mariadb");
    }
    return absl::OkStatus();
  }
  if (!config.mariadb.empty()) {
    if (!mariadb::IsMariaDbUrl(config.mariadb)) {
      return absl::InvalidArgumentError(
          "--mariadb takes a mariadb://USER:PASSWORD@HOST:PORT/DB or "
          "mysql://... URL");
    }
    absl::StatusOr<mariadb::MariaDbTarget> target =
        mariadb::ParseMariaDbUrl(config.mariadb);
    if (!target.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--mariadb: ", target.status().message()));
    }
    if (!target->tables.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--mariadb %s: table= is for tally diff; give the tables to keep "
          "as --table DATABASE.TABLE",
          target->display));
    }
  } else {
    TALLY_RETURN_IF_ERROR(ValidateConninfo(config.postgres));
  }
  if (config.tables.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--%s %s needs at least one --table %s: the tables to keep",
        config.postgres.empty() ? "mariadb" : "postgres",
        MaskConninfo(SidecarDatabase(config)),
        config.postgres.empty() ? "DATABASE.TABLE" : "SCHEMA.TABLE"));
  }
  if (config.mariadb_server_id != 0 && config.mariadb.empty()) {
    return absl::InvalidArgumentError("--mariadb-server-id needs --mariadb");
  }
  for (const std::string& table : config.tables) {
    TALLY_RETURN_IF_ERROR(ParseQualifiedTable(table).status());
    TALLY_RETURN_IF_ERROR(storage::ValidateKeyspaceName(table));
  }
  if (static_cast<int>(config.tables.size()) > config.max_keyspaces) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d tables but --max-keyspaces is %d; each table is a keyspace",
        config.tables.size(), config.max_keyspaces));
  }
  return absl::OkStatus();
}

absl::Status ValidateConfig(const NodeConfig& config) {
  if (config.name.empty()) {
    return absl::InvalidArgumentError(
        "--name is required: the node's origin name, unique in the mesh");
  }
  TALLY_RETURN_IF_ERROR(storage::ValidateNodeName(config.name));
  // Versions tally makes itself carry origins under "tally." (a PostgreSQL
  // sidecar's first build indexes every row as "tally.bootstrap",
  // pg/schema/names.h): a node of that name would have its own writes mistaken
  // for them, and theirs for its own.
  if (absl::StartsWith(config.name, "tally.")) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--name '%s' is reserved: names beginning with 'tally.' are the "
        "origins of versions tally makes itself; choose another name",
        config.name));
  }
  // The sample config's placeholder: a store keeps its first name for good,
  // so a node started with it would carry it for ever.
  if (absl::StrContains(config.name, kSampleNamePlaceholder)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--name '%s' is the sample config's placeholder: give this node its "
        "own name, unique in the mesh (the store keeps it for good)",
        config.name));
  }
  if (config.data_dir.empty()) {
    return absl::InvalidArgumentError(
        "--data-dir is required: where the node keeps its store");
  }
  TALLY_RETURN_IF_ERROR(ValidateAddress(config.listen));
  TALLY_RETURN_IF_ERROR(ValidateServerTlsFiles(
      TlsFiles{config.tls_cert, config.tls_key, config.tls_ca}));
  // Validated above: a certificate comes with its key.
  const bool tls = !config.tls_cert.empty();
  if (!IsLoopbackHost(HostOf(config.listen)) && !tls && !config.insecure) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "--listen %s is not a loopback address: without TLS, anyone who can "
        "reach it can read and write every row. Give --tls-cert and "
        "--tls-key (and --tls-ca to require client certificates), or pass "
        "--insecure to do it anyway.",
        config.listen));
  }
  if (!config.metrics_listen.empty()) {
    // Metrics are plain HTTP, never TLS: off loopback only on request.
    TALLY_RETURN_IF_ERROR(ValidateMetricsListen(config.metrics_listen));
    if (!IsLoopbackHost(HostOf(config.metrics_listen)) && !config.insecure) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "--metrics-listen %s is not a loopback address: metrics are served "
          "over plain HTTP, without TLS, to anyone who can reach it. Pass "
          "--insecure to do it anyway.",
          config.metrics_listen));
    }
  }
  TALLY_RETURN_IF_ERROR(ValidatePeerRoles(config.peers));
  TALLY_RETURN_IF_ERROR(ValidatePostgresSettings(config));
  for (const PeerConfig& peer : config.peers) {
    if (peer.database && config.postgres.empty() && config.mariadb.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "peer %s is a database, which only a sidecar can copy: give "
          "--postgres or --mariadb (this node's own database) and --table for "
          "each table to copy",
          MaskConninfo(peer.address)));
    }
    if (peer.address == config.listen) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "peer %s is this node's own listen address", peer.address));
    }
  }
  return absl::OkStatus();
}

uint32_t MariaDbServerId(const NodeConfig& config) {
  if (config.mariadb_server_id != 0) {
    return static_cast<uint32_t>(config.mariadb_server_id);
  }
  uint32_t hash = 2166136261u;  // FNV-1a: the same id at every start
  for (unsigned char c : config.name) {
    hash ^= c;
    hash *= 16777619u;
  }
  // Even, so that the id and the reader's (id + 1) stay in the range.
  return 1000000000u + (hash % 500000000u) * 2u;
}

}  // namespace node
}  // namespace tally
