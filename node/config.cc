#include "node/config.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "node/client.h"
#include "node/tls.h"
#include "storage/store.h"
#include "tree/status_macros.h"

namespace tally {
namespace node {
namespace {

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

bool IsLoopbackHost(absl::string_view host) {
  return absl::StartsWith(host, "127.") || host == "::1" || host == "localhost";
}

absl::StatusOr<PeerConfig> ParsePeer(absl::string_view spec) {
  std::vector<absl::string_view> parts = absl::StrSplit(spec, ',');
  PeerConfig peer;
  peer.address = std::string(absl::StripAsciiWhitespace(parts[0]));
  TALLY_RETURN_IF_ERROR(ValidateAddress(peer.address));
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
          spec, option));
    }
  }
  return peer;
}

absl::StatusOr<absl::Duration> ParseDuration(absl::string_view text) {
  absl::Duration d;
  double seconds = 0;
  if (absl::SimpleAtod(text, &seconds)) {
    d = absl::Seconds(seconds);
  } else if (!absl::ParseDuration(text, &d)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "'%s' is not a duration; write e.g. 30s, 500ms or 2m", text));
  }
  if (d <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("duration '%s' must be positive", text));
  }
  return d;
}

absl::Status ApplySetting(absl::string_view name, absl::string_view value,
                          NodeConfig* config) {
  if (name == "name") {
    config->name = std::string(value);
  } else if (name == "data-dir") {
    config->data_dir = std::string(value);
  } else if (name == "listen") {
    config->listen = std::string(value);
  } else if (name == "peer") {
    TALLY_ASSIGN_OR_RETURN(PeerConfig peer, ParsePeer(value));
    config->peers.push_back(std::move(peer));
  } else if (name == "sync-interval") {
    TALLY_ASSIGN_OR_RETURN(config->sync_interval, ParseDuration(value));
  } else if (name == "session-timeout") {
    TALLY_ASSIGN_OR_RETURN(config->session_timeout, ParseDuration(value));
  } else if (name == "max-sessions") {
    TALLY_ASSIGN_OR_RETURN(config->max_sessions, ParseInt(name, value, 1, 256));
  } else if (name == "rpc-threads") {
    TALLY_ASSIGN_OR_RETURN(config->rpc_threads, ParseInt(name, value, 1, 256));
  } else if (name == "repair-bandwidth") {
    if (!absl::SimpleAtod(value, &config->repair_bandwidth_mb) ||
        config->repair_bandwidth_mb < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "repair-bandwidth must be a number of MB/s >= 0, not '%s'", value));
    }
  } else if (name == "default-depth") {
    TALLY_ASSIGN_OR_RETURN(
        config->default_depth,
        ParseInt(name, value, tree::kMinDepth, tree::kMaxDepth));
  } else if (name == "insecure") {
    TALLY_ASSIGN_OR_RETURN(config->insecure, ParseBool(name, value));
  } else if (name == "sync-writes") {
    TALLY_ASSIGN_OR_RETURN(config->sync_writes, ParseBool(name, value));
  } else if (name == "tls-cert") {
    config->tls_cert = std::string(value);
  } else if (name == "tls-key") {
    config->tls_key = std::string(value);
  } else if (name == "tls-ca") {
    config->tls_ca = std::string(value);
  } else if (name == "metrics-listen") {
    config->metrics_listen = value == "off" ? "" : std::string(value);
  } else if (name == "log-retention-entries") {
    if (!absl::SimpleAtoi(value, &config->log_retention_entries)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "log-retention-entries must be a count >= 0 (0: no limit), not '%s'",
          value));
    }
  } else if (name == "log-retention-age") {
    if (value == "0" || value == "off") {
      config->log_retention_age = absl::ZeroDuration();
    } else {
      TALLY_ASSIGN_OR_RETURN(config->log_retention_age, ParseDuration(value));
    }
  } else if (name == "tombstone-min-age") {
    TALLY_ASSIGN_OR_RETURN(config->tombstone_min_age, ParseDuration(value));
  } else if (name == "max-clock-skew") {
    TALLY_ASSIGN_OR_RETURN(config->max_clock_skew, ParseDuration(value));
  } else if (name == "maintenance-interval") {
    TALLY_ASSIGN_OR_RETURN(config->maintenance_interval, ParseDuration(value));
  } else if (name == "scrub-interval") {
    if (value == "0" || value == "off") {
      config->scrub_interval = absl::ZeroDuration();
    } else {
      TALLY_ASSIGN_OR_RETURN(config->scrub_interval, ParseDuration(value));
    }
  } else if (name == "test-clock-offset") {
    // Signed: a clock behind is what the tests play.
    const bool behind = absl::StartsWith(value, "-");
    TALLY_ASSIGN_OR_RETURN(config->test_clock_offset,
                           ParseDuration(behind ? value.substr(1) : value));
    if (behind) config->test_clock_offset = -config->test_clock_offset;
  } else {
    return absl::InvalidArgumentError(
        absl::StrFormat("unknown setting '%s'", name));
  }
  return absl::OkStatus();
}

absl::Status ApplyConfigText(absl::string_view text, NodeConfig* config) {
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    const size_t hash = line.find('#');
    if (hash != absl::string_view::npos) line = line.substr(0, hash);
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrFormat("config line %d: expected 'name = value', got '%s'",
                          line_number, line));
    }
    const absl::string_view name =
        absl::StripAsciiWhitespace(line.substr(0, eq));
    const absl::string_view value =
        absl::StripAsciiWhitespace(line.substr(eq + 1));
    absl::Status s = ApplySetting(name, value, config);
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("config line %d: %s", line_number, s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status ApplyConfigFile(const std::string& path, NodeConfig* config) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrFormat("cannot read config file %s", path));
  }
  std::stringstream text;
  text << in.rdbuf();
  absl::Status s = ApplyConfigText(text.str(), config);
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s", path, s.message()));
  }
  return absl::OkStatus();
}

absl::Status ValidateConfig(const NodeConfig& config) {
  if (config.name.empty()) {
    return absl::InvalidArgumentError(
        "--name is required: the node's origin name, unique in the mesh");
  }
  TALLY_RETURN_IF_ERROR(storage::ValidateNodeName(config.name));
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
  for (const PeerConfig& peer : config.peers) {
    if (peer.address == config.listen) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "peer %s is this node's own listen address", peer.address));
    }
  }
  return absl::OkStatus();
}

}  // namespace node
}  // namespace tally
