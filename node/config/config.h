// NodeConfig: everything tallyd is told, from flags or a config file.
//
// The config file (node/config/config_file.h reads it) holds the same settings
// as the flags, one `name = value` per line; names take dashes or underscores
// (data-dir, data_dir). `peer` and `table` may repeat, each peer and table
// once. Flags given on the command line override the file; --peer flags
// replace the file's peers.
//
//   name = eu-west/db-3
//   data-dir = /var/lib/tally
//   listen = 127.0.0.1:7400
//   peer = 10.0.0.2:7400
//   peer = 10.0.0.4:7400
//   sync-interval = 30s
//
// (A copy of a source has that one peer: `peer = 10.0.0.3:7400,role=source`.)
//
// A sidecar to PostgreSQL names its database and tables (`table` repeats
// like `peer`; --table flags replace the file's tables):
//
//   postgres = postgresql://tally@127.0.0.1:5432/app
//   table = public.users
//   table = public.orders
//
// Thread-compatible value types.
#ifndef TALLY_NODE_CONFIG_CONFIG_H_
#define TALLY_NODE_CONFIG_CONFIG_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "node/observe/log.h"
#include "tree/token.h"

namespace tally {
namespace node {

enum class PeerRole {
  kPeer,    // two-way, last writer wins
  kSource,  // authoritative: this node copies it exactly
};

struct PeerConfig {
  // HOST:PORT of a tallyd, or the URL of a database this sidecar copies
  // ("postgresql://reader@master:5432/app"; `database` then).
  std::string address;
  PeerRole role = PeerRole::kPeer;
  // A database the node reads and copies (node/sidecar/database_source.h),
  // always role=source; a tallyd otherwise.
  bool database = false;
};

struct NodeConfig {
  std::string name;
  std::string data_dir;
  std::string listen = "127.0.0.1:7400";
  std::vector<PeerConfig> peers;
  // Time between sessions with each peer; each wait is jittered by ±20%.
  absl::Duration sync_interval = absl::Seconds(30);
  // Sessions running at once, over all peers and keyspaces.
  int max_sessions = 2;
  // Repair traffic per session, MB/s; 0 is unlimited.
  double repair_bandwidth_mb = 0;
  // Repair traffic of the whole node, MB/s, shared by every session and
  // every repair a tool asks it to run (node/sync/bandwidth_limiter.h); 0 is
  // unlimited.
  double node_bandwidth_mb = 0;
  int default_depth = tree::kDefaultDepth;
  // Allow a non-loopback listen address without TLS.
  bool insecure = false;
  // fsync every commit (see storage/store.h).
  bool sync_writes = true;
  // A session that runs longer is abandoned and retried later.
  absl::Duration session_timeout = absl::Minutes(10);
  // Threads serving RPCs that touch the store.
  int rpc_threads = 4;
  // Keyspaces the store holds at most (storage/store.h max_keyspaces).
  int max_keyspaces = 256;
  // Bulk streams (Scan, FetchRows, PushRows, Load) open at once per client
  // host, and how long a stream's message may wait for its reader before
  // the stream is cancelled (node/rpc/stream_limiter.h).
  int max_streams_per_client = 32;
  absl::Duration stream_idle_timeout = absl::Seconds(60);
  // How often the gRPC port's accept queue is checked (node/rpc/
  // listener_watch.h); a listener that stops accepting stops the node.
  // Zero: never checked.
  absl::Duration listener_check_interval = absl::Seconds(5);

  // TLS (PEM files). With a certificate and key the node serves and dials
  // TLS only; with a CA as well, peers and clients must present a
  // certificate signed by it (mutual TLS), and peers' certificates are
  // checked against it.
  std::string tls_cert;
  std::string tls_key;
  std::string tls_ca;
  // How often the TLS files are re-read (renewed certificates are taken
  // without a restart; node/client/tls.h); zero: read once at start.
  absl::Duration tls_refresh_interval = absl::Seconds(60);

  // PostgreSQL sidecar: a libpq connection string or URL. Empty: the node
  // keeps its rows in its own store. Set: the rows live in that database,
  // the store keeps only the index (README "Sidecar to PostgreSQL"). Holds
  // a password maybe: show it only through MaskConninfo
  // (node/config/postgres_settings.h).
  std::string postgres;
  // MariaDB sidecar: a mariadb:// (or mysql://) URL naming the
  // server (mariadb/url.h). Empty: none. Exclusive with `postgres`; shown
  // only through MaskConninfo, like it.
  std::string mariadb;
  // The session server_id that marks this node's own writes in the
  // MariaDB binary log (its binlog reader registers as the next one); 0:
  // derived from the node name (MariaDbServerId).
  int mariadb_server_id = 0;
  // The tables a sidecar keeps, "schema.table" ("database.table" for
  // MariaDB), each the keyspace of that name; in the order given, each
  // once. Required with `postgres` or `mariadb`, refused without either.
  std::vector<std::string> tables;
  // How often the sidecar compares each table's schema in the catalog with
  // the one its index was built with (pg/sidecar/sidecar.h); also at start.
  absl::Duration pg_schema_check_interval = absl::Seconds(60);

  // What the node logs and how (node/observe/log.h); both reloaded at SIGHUP.
  LogLevel log_level = LogLevel::kInfo;
  LogFormat log_format = LogFormat::kText;

  // Refuse client writes (Admin.Put, Delete, Load): rows arrive only from
  // peers (node/rpc/copy_write_guard.h). For a copy of a `role=source` peer.
  bool read_only = false;

  // Prometheus metrics over HTTP at HOST:PORT; empty is off.
  std::string metrics_listen;

  // Change-log retention: keep at most this many entries (0: no limit) and
  // entries younger than this age (zero: no limit). Trimmed in the
  // background every `maintenance_interval`.
  uint64_t log_retention_entries = 10'000'000;
  absl::Duration log_retention_age = absl::Hours(24 * 7);
  // A tombstone is purged once it is older than this and every peer has
  // completed a session that started after it.
  absl::Duration tombstone_min_age = absl::Hours(24);
  // Remote timestamps further ahead of this node's clock are refused; also
  // the margin the tombstone purge allows for clocks that disagree.
  absl::Duration max_clock_skew = absl::Seconds(60);
  // How often retention and tombstone purge run.
  absl::Duration maintenance_interval = absl::Seconds(10);
  // Time between background scrub passes (node/upkeep/scrubber.h), jittered;
  // zero: no scrubbing.
  absl::Duration scrub_interval = absl::Hours(6);
  // For tests only: shifts this node's clock (what it stamps writes with,
  // judges tombstone ages by and tells its peers), to play a node whose
  // clock is wrong.
  absl::Duration test_clock_offset = absl::ZeroDuration();
  // For crash tests only (hidden `test-fault-point`): "NAME[:COUNT]", a
  // point of pg/sidecar/apply/fault_points.h at which the sidecar kills the
  // process (the COUNT-th time it is reached). Needs `postgres`. Empty: none.
  std::string test_fault_point;
};

// Parses "HOST:PORT" or "HOST:PORT,role=source" (or role=peer), or a
// database's URL with ",role=source" ("postgresql://..." or
// "postgres://...", which libpq must parse; without role=source it is
// refused: tally never writes to a database peer).
absl::StatusOr<PeerConfig> ParsePeer(absl::string_view spec);

// Durations above this are refused: a year between sessions, or a session
// timeout of a year, is a typo, and an infinite one ("inf", "nan", "1e30")
// would silently mean "never".
inline constexpr absl::Duration kMaxSettingDuration = absl::Hours(24 * 365);
// max-clock-skew's own limit: a larger skew guards nothing (clocks an hour
// apart are broken, not skewed), and it is also the margin the tombstone
// purge waits on top of tombstone-min-age.
inline constexpr absl::Duration kMaxClockSkewLimit = absl::Hours(1);

// Parses a duration such as "30s", "500ms", "2m" or a bare number of
// seconds. Returns kInvalidArgument unless it is finite, positive and at
// most `max`.
absl::StatusOr<absl::Duration> ParseDuration(
    absl::string_view text, absl::Duration max = kMaxSettingDuration);

// Applies one setting (`name` as in the file and the flags, underscores
// as dashes), by its row of the settings table (node/config/settings_table.h).
// An unknown name is refused with the nearest known one as a hint ("did you
// mean 'sync-interval'?"); a `peer` whose address another already has
// (SamePeerAddress), or a `table` given twice, is refused. The config file is
// read by node/config/config_file.h.
absl::Status ApplySetting(absl::string_view name, absl::string_view value,
                          NodeConfig* config);

// The names ApplySetting knows (the settings table's), with dashes, in the
// order of --help.
absl::Span<const absl::string_view> SettingNames();
// True if ApplySetting knows `name` (with dashes).
bool IsSettingName(absl::string_view name);
// True for the settings that may be given more than once (`peer`, `table`);
// a config file that gives any other twice is refused.
bool SettingRepeats(absl::string_view name);
// True if two peer addresses are the same as written: equal but for the
// case of letters (host names are case-insensitive). Two spellings of one
// node (a name and its IP) are caught later, by the handshake.
bool SamePeerAddress(absl::string_view a, absl::string_view b);

// Applies the settings given on the command line, in order, over a config
// the file (if any) has filled: each overrides the file's value. Returns
// kInvalidArgument naming the flag ("--max-sessions: ...").
absl::Status ApplyCommandLineSettings(
    const std::vector<std::pair<std::string, std::string>>& settings,
    NodeConfig* config);

// What the sample config (packaging/tallyd.conf) gives `name`, refused by
// ValidateConfig: "CHANGE-ME/db-1".
inline constexpr absl::string_view kSampleNamePlaceholder = "CHANGE-ME";

// True when the node is a sidecar to a database (PostgreSQL or MariaDB).
inline bool HasSidecar(const NodeConfig& config) {
  return !config.postgres.empty() || !config.mariadb.empty();
}
// The sidecar's database: `postgres` or `mariadb`, whichever is set.
inline const std::string& SidecarDatabase(const NodeConfig& config) {
  return config.postgres.empty() ? config.mariadb : config.postgres;
}
// The server_id a MariaDB sidecar's apply marks its writes with:
// `mariadb_server_id` when set, else one derived from the node name (FNV-1a)
// in 1,000,000,000..1,999,999,998 — far from the small ids servers are
// usually given; its binlog reader takes the id after it.
uint32_t MariaDbServerId(const NodeConfig& config);

// Checks a complete config: a name (not the sample's placeholder), a data
// directory, a valid listen
// address that is loopback unless TLS is on (tls_cert and tls_key) or
// `insecure`, TLS files that can be read and fit together (node/client/tls.h),
// valid peers, sane numbers; `postgres` and `table` only together, a
// connection string libpq parses, tables named SCHEMA.TABLE.
absl::Status ValidateConfig(const NodeConfig& config);

// Checks that the peers' roles fit together: at most one `role=source`, and
// a node with a source has no other peer. A copy of a source that also took
// rows two-way would flap forever (the source's sessions erase what the
// other peers bring, and they bring it back). kInvalidArgument naming the
// peers otherwise.
absl::Status ValidatePeerRoles(const std::vector<PeerConfig>& peers);

// Checks the sidecar settings: `postgres` and `table` only together, a
// connection string libpq parses, tables named SCHEMA.TABLE (each a valid
// keyspace name), no more tables than keyspaces. kInvalidArgument naming
// the fix otherwise; a message shows the connection string masked.
absl::Status ValidatePostgresSettings(const NodeConfig& config);

// True for "127.x.y.z", "::1", "[::1]" and "localhost".
bool IsLoopbackHost(absl::string_view host);

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_CONFIG_CONFIG_H_
