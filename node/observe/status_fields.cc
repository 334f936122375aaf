#include "node/observe/status_fields.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "node/observe/session_phase.h"
#include "node/observe/version.h"

namespace tally {
namespace node {
namespace {

using S = const v1::StatusResponse&;
using Label = std::pair<absl::string_view, absl::string_view>;

StatusValue Count(uint64_t v) { return StatusValue::Count(v); }
StatusValue Real(double v) { return StatusValue::Real(v); }
StatusValue Flag(bool b) { return StatusValue::Flag(b); }
StatusValue UnixMs(int64_t v) { return StatusValue::UnixMs(v); }

constexpr MetricType kCounter = MetricType::kCounter;
constexpr MetricType kGauge = MetricType::kGauge;

constexpr StatusScope kNode = StatusScope::kNode;
constexpr StatusScope kPeer = StatusScope::kPeer;

// The phases of a sidecar (pg/sidecar/sidecar.h), each a series of
// tally_pg_phase.
constexpr absl::string_view kPostgresPhases[] = {"building", "following",
                                                 "reconnecting", "failed"};

void NodeInfo(S s, MetricSink sink) {
  const std::string epoch = absl::StrFormat("%016x", s.epoch());
  const Label labels[] = {{"node", s.node_name()}, {"epoch", epoch}};
  sink("", labels, Count(1));
}

// The Prometheus enum idiom: one series per phase, 1 for the current one,
// so that `tally_session_phase{phase="repair"} == 1` selects the peers
// whose session repairs now.
void SessionPhases(S s, MetricSink sink) {
  for (const v1::PeerStatus& p : s.peers()) {
    // A peer without a session record has had no session.
    const absl::string_view current =
        p.session().phase().empty() ? SessionPhaseName(SessionPhase::kIdle)
                                    : absl::string_view(p.session().phase());
    for (SessionPhase phase : kSessionPhases) {
      const absl::string_view name = SessionPhaseName(phase);
      const Label labels[] = {{"peer", p.address()}, {"phase", name}};
      sink("", labels, Flag(name == current));
    }
  }
}

// A histogram's series: NAME_bucket (cumulative, with `le`), NAME_sum and
// NAME_count.
void SessionDurations(S s, MetricSink sink) {
  for (const v1::PeerStatus& p : s.peers()) {
    if (!p.has_session_seconds()) continue;
    const v1::DurationHistogram& h = p.session_seconds();
    uint64_t cumulative = 0;
    for (int i = 0; i < h.counts_size(); ++i) {
      cumulative += h.counts(i);
      const std::string le = i < h.upper_bounds_size()
                                 ? FormatPrometheusValue(h.upper_bounds(i))
                                 : "+Inf";
      const Label labels[] = {{"peer", p.address()}, {"le", le}};
      sink("_bucket", labels, Count(cumulative));
    }
    const Label labels[] = {{"peer", p.address()}};
    sink("_sum", labels, Real(h.sum_seconds()));
    sink("_count", labels, Count(h.count()));
  }
}

void KeyspaceRowsRejected(S s, MetricSink sink) {
  for (const v1::KeyspaceTroubleStatus& t : s.keyspace_trouble()) {
    for (const v1::ReasonCount& c : t.rejected()) {
      const Label labels[] = {{"keyspace", t.keyspace()},
                              {"reason", c.reason()}};
      sink("", labels, Count(c.rows()));
    }
  }
}

void BuildInfo(S, MetricSink sink) {
  const std::string version(ProjectVersion());
  const std::string build(BuildDescription());
  const Label labels[] = {{"version", version}, {"build", build}};
  sink("", labels, Count(1));
}

void PostgresInfo(S s, MetricSink sink) {
  if (!s.has_postgres()) return;
  const v1::PostgresStatus& pg = s.postgres();
  const Label labels[] = {{"slot", pg.slot()},
                          {"publication", pg.publication()},
                          {"origin", pg.origin()}};
  sink("", labels, Count(1));
}

void PostgresPhases(S s, MetricSink sink) {
  if (!s.has_postgres()) return;
  for (absl::string_view phase : kPostgresPhases) {
    const Label labels[] = {{"phase", phase}};
    sink("", labels, Flag(s.postgres().phase() == phase));
  }
}

void PostgresTablesReady(S s, MetricSink sink) {
  if (!s.has_postgres()) return;
  for (const v1::PostgresTable& t : s.postgres().tables()) {
    const Label labels[] = {{"keyspace", t.keyspace()}, {"state", t.state()}};
    sink("", labels, Flag(t.state() == "ready"));
  }
}

const v1::PeerStatus& Peer(S s, int i) { return s.peers(i); }

std::vector<StatusField>* MakeStatusFields() {
  return new std::vector<StatusField>{
      {"tally_node_info",
       kGauge,
       kNode,
       "`node`, `epoch`",
       "",
       "Always 1; the labels name the node and its change-log epoch.",
       {},
       &NodeInfo},

      // Keyspaces.
      {"tally_keyspace_rows",
       kGauge,
       StatusScope::kKeyspace,
       "",
       "rows",
       "Rows in the keyspace, tombstones included.",
       {{"", "", "keyspaces[].rows",
         [](S s, int i) { return Count(s.keyspaces(i).row_count()); }}}},
      {"tally_keyspace_root_changes_total",
       kCounter,
       StatusScope::kKeyspace,
       "",
       "commits",
       "Commits that changed the keyspace's Merkle root.",
       {{"", "", "keyspaces[].root_changes",
         [](S s, int i) { return Count(s.keyspaces(i).root_changes()); }}}},
      // The tree's shape, which follows from the rows (tally_keyspace_rows):
      // no family of its own.
      {"",
       kGauge,
       StatusScope::kKeyspace,
       "",
       "levels",
       "Depth of the keyspace's Merkle tree.",
       {{"", "", "keyspaces[].depth",
         [](S s, int i) { return Count(s.keyspaces(i).depth()); }}}},
      {"tally_origin_rows",
       kGauge,
       StatusScope::kOrigin,
       "",
       "rows",
       "Rows (tombstones included, all keyspaces) whose version was "
       "written by the origin.",
       {{"", "", "origins[].rows",
         [](S s, int i) { return Count(s.origins(i).rows()); }}}},

      // Anti-entropy sessions.
      {"tally_sessions_running",
       kGauge,
       kNode,
       "",
       "sessions",
       "Anti-entropy sessions running now.",
       {{"", "", "sessions_running",
         [](S s, int) { return Count(s.sessions_running()); }}}},
      {"tally_diffs_running",
       kGauge,
       kNode,
       "",
       "runs",
       "Diffs and repairs against another node that tools asked this "
       "node to run (Admin.RunDiff), running now.",
       {{"", "", "diffs_running",
         [](S s, int) { return Count(s.diffs_running()); }}}},
      {"tally_sessions_total",
       kCounter,
       kNode,
       "",
       "sessions",
       "Anti-entropy sessions finished, by outcome, over all peers.",
       {{"outcome", "ok", "sessions_ok",
         [](S s, int) { return Count(s.sessions_ok()); }},
        {"outcome", "failed", "sessions_failed",
         [](S s, int) { return Count(s.sessions_failed()); }}}},
      {"tally_peer_sessions_total",
       kCounter,
       kPeer,
       "",
       "sessions",
       "Anti-entropy sessions finished with the peer, by outcome.",
       {{"outcome", "ok", "peers[].sessions_ok",
         [](S s, int i) { return Count(Peer(s, i).sessions_ok()); }},
        {"outcome", "failed", "peers[].sessions_failed",
         [](S s, int i) { return Count(Peer(s, i).sessions_failed()); }}}},
      // Times as Unix seconds, the Prometheus way; a peer with none yet has
      // no series (a 0 would read as "1970", and alerts on age would fire).
      {"tally_peer_last_session_timestamp_seconds",
       kGauge,
       kPeer,
       "",
       "seconds",
       "Start of the last anti-entropy session with the peer, whatever "
       "its outcome (Unix seconds).",
       {{"", "", "peers[].last_session_unix_ms",
         [](S s, int i) {
           return UnixMs(Peer(s, i).last_session_unix_ms());
         }}}},
      {"tally_peer_last_success_timestamp_seconds",
       kGauge,
       kPeer,
       "",
       "seconds",
       "Start of the last anti-entropy session with the peer that "
       "succeeded (Unix seconds); alert on its age.",
       {{"", "", "peers[].last_success_unix_ms",
         [](S s, int i) {
           return UnixMs(Peer(s, i).last_success_unix_ms());
         }}}},
      {"tally_session_phase",
       kGauge,
       kPeer,
       "`peer`, `phase` = `idle` / `handshake` / `diff` / `repair` / `done` "
       "/ `failed`",
       "",
       "1 for the phase the session with the peer is in (the last "
       "session's done or failed while none runs), 0 for the others.",
       {},
       &SessionPhases},
      {"tally_peer_paused",
       kGauge,
       kPeer,
       "",
       "",
       "1 while an operator has paused the sessions with the peer "
       "(tally peer pause), 0 otherwise.",
       {{"", "", "peers[].paused",
         [](S s, int i) { return Flag(Peer(s, i).paused()); }}}},
      {"tally_peer_paused_since_timestamp_seconds",
       kGauge,
       kPeer,
       "",
       "seconds",
       "When an operator paused the sessions with the peer (Unix "
       "seconds); absent while they are not paused.",
       {{"", "", "peers[].paused_since_unix_ms",
         [](S s, int i) {
           return UnixMs(Peer(s, i).paused_since_unix_ms());
         }}}},
      {"tally_session_phase_seconds",
       kGauge,
       kPeer,
       "",
       "seconds",
       "Seconds the session with the peer has been in its phase.",
       {{"", "", "peers[].session.phase_seconds",
         [](S s, int i) {
           return Real(Peer(s, i).session().phase_seconds());
         }}}},
      {"tally_session_duration_seconds",
       MetricType::kHistogram,
       kPeer,
       "`peer`, `le`",
       "seconds",
       "How long anti-entropy sessions with the peer took, every "
       "outcome.",
       {},
       &SessionDurations},
      {"tally_repair_rows_total",
       kCounter,
       kPeer,
       "",
       "rows",
       "Rows repaired by anti-entropy sessions with the peer, by "
       "direction (received: written here; sent: written there); the "
       "running session's rows count as they are written.",
       {{"direction", "received", "peers[].rows_received",
         [](S s, int i) { return Count(Peer(s, i).rows_received()); }},
        {"direction", "sent", "peers[].rows_sent",
         [](S s, int i) { return Count(Peer(s, i).rows_sent()); }}}},
      {"tally_repair_bytes_total",
       kCounter,
       kPeer,
       "",
       "bytes",
       "Key and value bytes moved by repairs with the peer, both ways.",
       {{"", "", "peers[].bytes_repaired",
         [](S s, int i) { return Count(Peer(s, i).bytes_repaired()); }}}},
      {"tally_node_bandwidth_bytes_per_second",
       kGauge,
       kNode,
       "",
       "bytes per second",
       "The node's repair bandwidth limit (node-bandwidth, shared by all "
       "its sessions and tool-driven repairs) as in force now; SIGHUP "
       "reloads it. 0 when unlimited.",
       // Whole bytes: StrCat of a double keeps 6 digits (1.23457e+06).
       {{"", "", "node_bandwidth_bytes_per_second",
         [](S s, int) {
           return Count(static_cast<uint64_t>(std::llround(
               std::max(0.0, s.node_bandwidth_bytes_per_second()))));
         }}}},
      // A count that keeps rising is a mesh undoing its own work: a copy
      // that something keeps writing to, or keys that last writer wins
      // cannot order.
      {"tally_rows_erased_total",
       kCounter,
       kNode,
       "",
       "rows",
       "Rows erased here by sessions with a source peer because the "
       "source lacks them, over all peers.",
       {{"", "", "rows_erased",
         [](S s, int) { return Count(s.rows_erased()); }}}},
      {"tally_peer_rows_erased_total",
       kCounter,
       kPeer,
       "",
       "rows",
       "Rows erased here by sessions with the peer (a source) because it "
       "lacks them.",
       {{"", "", "peers[].rows_erased",
         [](S s, int i) { return Count(Peer(s, i).rows_erased()); }}}},
      {"tally_conflicts_total",
       kCounter,
       kNode,
       "",
       "keys",
       "Keys sessions found with equal versions and different content, "
       "which the tie rule settles (the higher row digest wins), over all "
       "peers.",
       {{"", "", "conflicts", [](S s, int) { return Count(s.conflicts()); }}}},
      {"tally_rows_changed_during_session_total",
       kCounter,
       kNode,
       "",
       "rows",
       "Rows sessions left to the capture because an application changed "
       "them in a sidecar's table while the session read them, over all "
       "peers.",
       {{"", "", "rows_changed_during_session",
         [](S s, int) { return Count(s.rows_changed_during_session()); }}}},
      {"tally_ties_resolved_total",
       kCounter,
       kNode,
       "",
       "rows",
       "Rows this node's store replaced under the tie rule: the same "
       "version as the stored row, other content, a higher row digest.",
       {{"", "", "ties_resolved",
         [](S s, int) { return Count(s.ties_resolved()); }}}},
      {"tally_unlisted_callers",
       kGauge,
       kNode,
       "",
       "nodes",
       "Nodes that run sessions with this node but are not among its "
       "peers (a one-sided link: their writes arrive only with their "
       "sessions); `tally status` names them.",
       {{"", "", "",
         [](S s, int) { return Count(s.unlisted_callers_size()); }}}},
      {"tally_row_filter_rows_read_total",
       kCounter,
       kNode,
       "",
       "writes",
       "Writes whose row the store read first (last writer wins).",
       {{"", "", "row_filter.rows_read",
         [](S s, int) { return Count(s.row_filter().rows_read()); }}}},
      {"tally_row_filter_reads_skipped_total",
       kCounter,
       kNode,
       "",
       "writes",
       "Writes of keys the row filter showed absent: no read.",
       {{"", "", "row_filter.reads_skipped",
         [](S s, int) { return Count(s.row_filter().reads_skipped()); }}}},
      {"tally_row_filter_bytes",
       kGauge,
       kNode,
       "",
       "bytes",
       "Memory of the store's row filters (about 1.5 bytes a row).",
       {{"", "", "row_filter.memory_bytes",
         [](S s, int) { return Count(s.row_filter().memory_bytes()); }}}},
      {"tally_row_filter_keyspaces_unbuilt",
       kGauge,
       kNode,
       "",
       "keyspaces",
       "Keyspaces whose row filter is still being built after the open "
       "(their writes read every row).",
       {{"", "", "",
         [](S s, int) {
           return Count(
               uint64_t{s.row_filter().keyspaces() - s.row_filter().built()});
         }}}},
      // The two numbers tally_row_filter_keyspaces_unbuilt is the
      // difference of: the views say "3 of 4 built".
      {"",
       kGauge,
       kNode,
       "",
       "keyspaces",
       "Keyspaces with a row filter.",
       {{"", "", "row_filter.keyspaces",
         [](S s, int) { return Count(s.row_filter().keyspaces()); }}}},
      {"",
       kGauge,
       kNode,
       "",
       "keyspaces",
       "Keyspaces whose row filter is built.",
       {{"", "", "row_filter.built",
         [](S s, int) { return Count(s.row_filter().built()); }}}},
      {"tally_peer_conflicts_total",
       kCounter,
       kPeer,
       "",
       "keys",
       "Keys sessions with the peer found with equal versions and "
       "different content.",
       {{"", "", "peers[].conflicts",
         [](S s, int i) { return Count(Peer(s, i).conflicts()); }}}},
      {"tally_peer_rows_changed_during_session_total",
       kCounter,
       kPeer,
       "",
       "rows",
       "Rows sessions with the peer left to the capture, changed by an "
       "application while the session read them.",
       {{"", "", "peers[].rows_changed_during_session",
         [](S s, int i) {
           return Count(Peer(s, i).rows_changed_during_session());
         }}}},

      // The change feed, node totals.
      {"tally_feed_entries_sent_total",
       kCounter,
       kNode,
       "",
       "entries",
       "Change-log entries this node's feed sent, over all subscribers.",
       {{"", "", "feed.sent",
         [](S s, int) { return Count(s.feed().sent()); }}}},
      {"tally_feed_entries_received_total",
       kCounter,
       kNode,
       "",
       "changes",
       "Changes received from upstream feeds, over all upstreams.",
       {{"", "", "feed.received",
         [](S s, int) { return Count(s.feed().received()); }}}},
      {"tally_feed_entries_applied_total",
       kCounter,
       kNode,
       "",
       "changes",
       "Received changes applied here (newer than the stored row).",
       {{"", "", "feed.applied",
         [](S s, int) { return Count(s.feed().applied()); }}}},
      {"tally_feed_entries_skipped_total",
       kCounter,
       kNode,
       "",
       "entries",
       "Feed entries not applied, by reason: own and superseded are "
       "skipped by this node's feed before sending; not_newer are "
       "received changes no newer than the stored row.",
       {{"reason", "own", "feed.skipped_own",
         [](S s, int) { return Count(s.feed().skipped_own()); }},
        {"reason", "superseded", "feed.skipped_superseded",
         [](S s, int) { return Count(s.feed().skipped_superseded()); }},
        {"reason", "not_newer", "feed.not_newer",
         [](S s, int) { return Count(s.feed().not_newer()); }}}},
      {"tally_refused_timestamps_total",
       kCounter,
       kNode,
       "",
       "changes",
       "Received changes refused because their timestamp was too far "
       "ahead of this node's clock.",
       {{"", "", "feed.refused_skew",
         [](S s, int) { return Count(s.feed().refused_skew()); }}}},
      // sum(tally_feed_upstream_entries_rejected_total) in a query: no
      // family of its own.
      {"",
       kCounter,
       kNode,
       "",
       "changes",
       "Received changes left out because their keyspace was in trouble, "
       "over all upstreams (tally_feed_upstream_entries_rejected_total has "
       "each upstream's; tally_keyspace_rows_rejected_total says which "
       "keyspace and why).",
       {{"", "", "feed.rejected",
         [](S s, int) { return Count(s.feed().rejected()); }}}},

      // Keyspaces in trouble (node/feed/keyspace_trouble.h): listed only once
      // one had rows left out, so a node without trouble shows neither
      // family.
      {"tally_keyspace_rows_rejected_total",
       kCounter,
       StatusScope::kKeyspaceTrouble,
       "`keyspace`, `reason` = `rejected` / `not-taken` / `schema` / "
       "`dropped`",
       "rows",
       "Rows of the keyspace from peers that this node could not take "
       "and left out, by reason: rejected (its backend's database "
       "refused the row), not-taken (the keyspace took no rows, being "
       "rebuilt), schema (its schema fingerprint differs from the "
       "peer's), dropped (the keyspace was dropped here, and the peer "
       "still holds it). Sessions repair them once the cause is gone "
       "(a dropped keyspace's never come).",
       {},
       &KeyspaceRowsRejected},
      {"tally_keyspace_in_trouble",
       kGauge,
       StatusScope::kKeyspaceTrouble,
       "",
       "",
       "1 while the keyspace's rows from a peer are being left out "
       "(until a later change of it is applied with none left out, or a "
       "session syncs it).",
       {{"", "", "keyspace_trouble[].in_trouble",
         [](S s, int i) { return Flag(s.keyspace_trouble(i).in_trouble()); }}}},
      {"tally_keyspace_trouble_since_timestamp_seconds",
       kGauge,
       StatusScope::kKeyspaceTrouble,
       "",
       "seconds",
       "When the keyspace's current trouble began (Unix seconds); absent "
       "while its rows flow.",
       {{"", "", "keyspace_trouble[].since_unix_ms",
         [](S s, int i) {
           return UnixMs(s.keyspace_trouble(i).since_unix_ms());
         }}}},
      {"tally_keyspace_last_row_left_out_timestamp_seconds",
       kGauge,
       StatusScope::kKeyspaceTrouble,
       "",
       "seconds",
       "When a row of the keyspace from a peer was last left out (Unix "
       "seconds).",
       {{"", "", "keyspace_trouble[].last_unix_ms",
         [](S s, int i) {
           return UnixMs(s.keyspace_trouble(i).last_unix_ms());
         }}}},
      // sum without (reason) (tally_keyspace_rows_rejected_total).
      {"",
       kCounter,
       StatusScope::kKeyspaceTrouble,
       "",
       "rows",
       "Rows of the keyspace from peers left out since the node started, "
       "every reason.",
       {{"", "", "keyspace_trouble[].rows_rejected",
         [](S s, int i) {
           return Count(s.keyspace_trouble(i).rows_rejected());
         }}}},

      // The change feed, per upstream peer.
      {"tally_feed_upstream_entries_received_total",
       kCounter,
       kPeer,
       "",
       "changes",
       "Changes received from the peer's feed.",
       {{"", "", "peers[].feed.received",
         [](S s, int i) { return Count(Peer(s, i).feed_received()); }}}},
      {"tally_feed_upstream_entries_applied_total",
       kCounter,
       kPeer,
       "",
       "changes",
       "Changes from the peer's feed applied here.",
       {{"", "", "peers[].feed.applied",
         [](S s, int i) { return Count(Peer(s, i).feed_applied()); }}}},
      {"tally_feed_upstream_entries_skipped_total",
       kCounter,
       kPeer,
       "",
       "entries",
       "Entries of the peer's feed not applied here, by reason (own and "
       "superseded as the peer reported them).",
       {{"reason", "own", "peers[].feed.skipped_own",
         [](S s, int i) { return Count(Peer(s, i).feed_skipped_own()); }},
        {"reason", "superseded", "peers[].feed.skipped_superseded",
         [](S s, int i) {
           return Count(Peer(s, i).feed_skipped_superseded());
         }},
        {"reason", "not_newer", "peers[].feed.not_newer",
         [](S s, int i) { return Count(Peer(s, i).feed_not_newer()); }}}},
      {"tally_feed_upstream_refused_timestamps_total",
       kCounter,
       kPeer,
       "",
       "changes",
       "Changes from the peer refused for a timestamp too far ahead.",
       {{"", "", "peers[].feed.refused_skew",
         [](S s, int i) { return Count(Peer(s, i).feed_refused_skew()); }}}},
      {"tally_feed_upstream_entries_rejected_total",
       kCounter,
       kPeer,
       "",
       "changes",
       "Changes from the peer's feed left out because their keyspace was "
       "in trouble; the feed moves past them, and sessions repair them once "
       "the cause is gone.",
       {{"", "", "peers[].feed.rejected",
         [](S s, int i) { return Count(Peer(s, i).feed_rejected()); }}}},
      {"tally_feed_lag_entries",
       kGauge,
       kPeer,
       "",
       "entries",
       "Entries of the peer's change log not yet applied here, as of "
       "its last message.",
       {{"", "", "peers[].feed.lag_entries",
         [](S s, int i) { return Count(Peer(s, i).feed_lag_entries()); }}}},
      {"tally_feed_lag_seconds",
       kGauge,
       kPeer,
       "",
       "seconds",
       "Age of what this node has applied from the peer's feed: now "
       "minus the write time of the newest change applied, while "
       "behind; 0 when caught up; growing while the feed is down.",
       {{"", "", "peers[].feed.lag_seconds",
         [](S s, int i) { return Real(Peer(s, i).feed_lag_seconds()); }}}},
      {"tally_feed_connected",
       kGauge,
       kPeer,
       "",
       "",
       "1 while the subscription to the peer's feed is connected.",
       {{"", "", "peers[].feed.connected",
         [](S s, int i) { return Flag(Peer(s, i).feed_connected()); }}}},
      {"tally_feed_reconnects_total",
       kCounter,
       kPeer,
       "",
       "reconnects",
       "Times the subscription to the peer's feed was re-established.",
       {{"", "", "peers[].feed.reconnects",
         [](S s, int i) { return Count(Peer(s, i).feed_reconnects()); }}}},
      {"tally_clock_behind_seconds",
       kGauge,
       kPeer,
       "",
       "seconds",
       "How far this node's clock was behind the peer's at the last "
       "handshake (negative: ahead).",
       {{"", "", "peers[].clock_behind_seconds",
         [](S s, int i) { return Real(Peer(s, i).clock_behind_seconds()); }}}},
      // max(tally_clock_behind_seconds) in a query: no family of its own.
      {"",
       kGauge,
       kNode,
       "",
       "seconds",
       "The most this node's clock was behind any peer's at the last "
       "handshakes (0 when not behind).",
       {{"", "", "clock_behind_seconds",
         [](S s, int) { return Real(s.clock_behind_seconds()); }}}},
      {"tally_feed_upstream_position",
       kGauge,
       kPeer,
       "",
       "sequence",
       "The peer's change-log sequence applied up to.",
       {{"", "", "peers[].feed.position",
         [](S s, int i) { return Count(Peer(s, i).feed_position()); }}}},

      // The change feed, per subscriber this node serves.
      {"tally_feed_subscriber_entries_sent_total",
       kCounter,
       StatusScope::kSubscriber,
       "",
       "entries",
       "Change-log entries sent to the subscriber by its current "
       "subscription.",
       {{"", "", "subscriptions[].sent",
         [](S s, int i) { return Count(s.subscriptions(i).sent()); }}}},
      {"tally_feed_subscriber_entries_skipped_total",
       kCounter,
       StatusScope::kSubscriber,
       "",
       "entries",
       "Change-log entries the subscriber's current subscription skipped, "
       "by reason: own (written by the subscriber itself) and superseded "
       "(a newer change of the key follows).",
       {{"reason", "own", "subscriptions[].skipped_own",
         [](S s, int i) { return Count(s.subscriptions(i).skipped_own()); }},
        {"reason", "superseded", "subscriptions[].skipped_superseded",
         [](S s, int i) {
           return Count(s.subscriptions(i).skipped_superseded());
         }}}},
      {"tally_feed_subscriber_position",
       kGauge,
       StatusScope::kSubscriber,
       "",
       "sequence",
       "The last sequence sent or skipped for the subscriber.",
       {{"", "", "subscriptions[].position",
         [](S s, int i) { return Count(s.subscriptions(i).position()); }}}},

      {"tally_build_info",
       kGauge,
       kNode,
       "`version`, `build`",
       "",
       "Always 1; its labels say which tally this node runs: the "
       "project version and the build (git describe).",
       {},
       &BuildInfo},

      {"tally_copy_writes_total",
       kCounter,
       StatusScope::kCopyWrites,
       "",
       "rows",
       "Rows clients wrote directly to this copy of a role=source peer "
       "(Put, Delete, Load), by origin; its next session with the source "
       "undoes them. Any increase is a warning sign.",
       {{"", "", "copy_writes.<origin>",
         [](S s, int i) { return Count(s.copy_writes(i).rows()); }}}},
      {"tally_read_only",
       kGauge,
       kNode,
       "",
       "",
       "1 when the node refuses client writes (--read-only).",
       {{"", "", "read_only", [](S s, int) { return Flag(s.read_only()); }}}},
      {"tally_writes_refused_total",
       kCounter,
       kNode,
       "",
       "rows",
       "Rows of client writes a read-only node refused.",
       {{"", "", "writes_refused",
         [](S s, int) { return Count(s.writes_refused()); }}}},

      {"tally_store_writable",
       kGauge,
       kNode,
       "",
       "",
       "1 while the store takes writes; 0 once a failed write (a full "
       "disk, an I/O error) made it refuse them until a restart.",
       {{"", "", "",
         [](S s, int) { return Flag(s.store_write_error().empty()); }}}},

      // The change log and tombstones.
      {"tally_log_last_sequence",
       kGauge,
       kNode,
       "",
       "sequence",
       "The newest change-log sequence.",
       {{"", "", "last_sequence",
         [](S s, int) { return Count(s.last_sequence()); }}}},
      {"tally_log_first_sequence",
       kGauge,
       kNode,
       "",
       "sequence",
       "The oldest change-log sequence kept (older entries were "
       "trimmed).",
       {{"", "", "first_sequence",
         [](S s, int) { return Count(s.first_sequence()); }}}},
      {"tally_log_entries_trimmed_total",
       kCounter,
       kNode,
       "",
       "entries",
       "Change-log entries removed by retention.",
       {{"", "", "log_entries_trimmed",
         [](S s, int) { return Count(s.log_entries_trimmed()); }}}},
      {"tally_tombstones_purged_total",
       kCounter,
       kNode,
       "",
       "tombstones",
       "Tombstones purged once every peer had seen them.",
       {{"", "", "tombstones_purged",
         [](S s, int) { return Count(s.tombstones_purged()); }}}},
      {"tally_scrub_passes_total",
       kCounter,
       kNode,
       "",
       "passes",
       "Complete scrub passes (every row checked against its digest).",
       {{"", "", "scrub.passes",
         [](S s, int) { return Count(s.scrub().passes()); }}}},
      {"tally_scrub_rows_checked_total",
       kCounter,
       kNode,
       "",
       "rows",
       "Rows the scrubber checked against their digests.",
       {{"", "", "scrub.rows_checked",
         [](S s, int) { return Count(s.scrub().rows_checked()); }}}},
      {"tally_scrub_damaged_rows_total",
       kCounter,
       kNode,
       "",
       "rows",
       "Rows the scrubber found damaged on disk (marked for repair).",
       {{"", "", "scrub.damaged_rows_found",
         [](S s, int) { return Count(s.scrub().damaged_rows_found()); }}}},
      {"tally_scrub_leaves_repaired_total",
       kCounter,
       kNode,
       "",
       "leaves",
       "Leaves the scrubber corrected from their rows.",
       {{"", "", "scrub.leaves_repaired",
         [](S s, int) { return Count(s.scrub().leaves_repaired()); }}}},
      {"tally_damaged_rows",
       kGauge,
       kNode,
       "",
       "rows",
       "Rows marked damaged now, awaiting a peer's copy; alert on > 0.",
       {{"", "", "scrub.damaged_rows",
         [](S s, int) { return Count(s.scrub().damaged_rows()); }}}},

      // The process, under the names every Prometheus client library uses
      // (process_*), and resident memory by kind.
      {"process_cpu_seconds_total",
       kCounter,
       StatusScope::kProcess,
       "",
       "seconds",
       "Total user and system CPU time spent in seconds.",
       {{"", "", "process.cpu_seconds",
         [](S s, int) { return Real(s.process().cpu_seconds()); }}}},
      {"process_resident_memory_bytes",
       kGauge,
       StatusScope::kProcess,
       "",
       "bytes",
       "Resident memory size in bytes (anonymous, file-backed and "
       "shared).",
       {{"", "", "",
         [](S s, int) {
           const v1::ProcessStatus& p = s.process();
           return Count(p.resident_anon_bytes() + p.resident_file_bytes() +
                        p.resident_shmem_bytes());
         }}}},
      {"tally_process_resident_memory_bytes",
       kGauge,
       StatusScope::kProcess,
       "",
       "bytes",
       "Resident memory by kind: anon (heap, trees, caches: what the "
       "node uses), file (LevelDB's mapped tables and the binary: page "
       "cache the kernel reclaims at will) and shmem.",
       {{"kind", "anon", "process.resident_anon_bytes",
         [](S s, int) { return Count(s.process().resident_anon_bytes()); }},
        {"kind", "file", "process.resident_file_bytes",
         [](S s, int) { return Count(s.process().resident_file_bytes()); }},
        {"kind", "shmem", "process.resident_shmem_bytes",
         [](S s, int) { return Count(s.process().resident_shmem_bytes()); }}}},
      {"process_virtual_memory_bytes",
       kGauge,
       StatusScope::kProcess,
       "",
       "bytes",
       "Virtual memory size in bytes.",
       {{"", "", "process.virtual_bytes",
         [](S s, int) { return Count(s.process().virtual_bytes()); }}}},
      {"process_open_fds",
       kGauge,
       StatusScope::kProcess,
       "",
       "descriptors",
       "Number of open file descriptors.",
       {{"", "", "process.open_fds",
         [](S s, int) { return Count(s.process().open_fds()); }}}},
      // Left out when the limit is unknown.
      {"process_max_fds",
       kGauge,
       StatusScope::kProcess,
       "",
       "descriptors",
       "Maximum number of open file descriptors.",
       {{"", "", "process.max_fds",
         [](S s, int) {
           return s.process().max_fds() > 0 ? Count(s.process().max_fds())
                                            : StatusValue::Absent();
         }}}},
      {"process_threads",
       kGauge,
       StatusScope::kProcess,
       "",
       "threads",
       "Threads of the process.",
       {{"", "", "process.threads",
         [](S s, int) { return Count(s.process().threads()); }}}},
      {"process_start_time_seconds",
       kGauge,
       StatusScope::kProcess,
       "",
       "seconds",
       "Start time of the process since unix epoch in seconds.",
       {{"", "", "process.start_unix_ms",
         [](S s, int) { return UnixMs(s.process().start_unix_ms()); }}}},

      // A sidecar to PostgreSQL: only on a node with --postgres.
      {"tally_pg_info",
       kGauge,
       StatusScope::kPostgres,
       "`slot`, `publication`, `origin`",
       "",
       "1, labelled with the sidecar's slot, publication and "
       "replication origin.",
       {},
       &PostgresInfo},
      {"tally_pg_phase",
       kGauge,
       StatusScope::kPostgres,
       "`phase` = `building` / `following` / `reconnecting` / `failed`",
       "",
       "1 for the phase the sidecar is in (building, following, "
       "reconnecting, failed), 0 for the others.",
       {},
       &PostgresPhases},
      {"tally_pg_slot_lag_bytes",
       kGauge,
       StatusScope::kPostgres,
       "",
       "bytes",
       "WAL the replication slot keeps on the server: the current WAL "
       "position minus the slot's confirmed position.",
       {{"", "", "postgres.slot_lag_bytes",
         [](S s, int) { return Count(s.postgres().slot_lag_bytes()); }}}},
      {"tally_pg_confirmed_lsn",
       kGauge,
       StatusScope::kPostgres,
       "",
       "bytes",
       "The WAL position confirmed to the slot (indexed and committed "
       "to the store), in bytes.",
       {{"", "", "",
         [](S s, int) { return Count(s.postgres().confirmed_lsn_bytes()); }}}},
      {"tally_pg_capture_lag_seconds",
       kGauge,
       StatusScope::kPostgres,
       "",
       "seconds",
       "Now minus the commit time of the last transaction indexed, "
       "while capture is behind; 0 when caught up.",
       {{"", "", "postgres.capture_lag_seconds",
         [](S s, int) { return Real(s.postgres().capture_lag_seconds()); }}}},
      {"tally_pg_transactions_captured_total",
       kCounter,
       StatusScope::kPostgres,
       "",
       "transactions",
       "Application transactions captured and indexed.",
       {{"", "", "postgres.transactions_captured",
         [](S s, int) {
           return Count(s.postgres().transactions_captured());
         }}}},
      {"tally_pg_rows_captured_total",
       kCounter,
       StatusScope::kPostgres,
       "",
       "rows",
       "Rows of application transactions captured and indexed.",
       {{"", "", "postgres.rows_captured",
         [](S s, int) { return Count(s.postgres().rows_captured()); }}}},
      {"tally_pg_own_transactions_replayed_total",
       kCounter,
       StatusScope::kPostgres,
       "",
       "transactions",
       "tally's own apply transactions read back from the slot (not "
       "logged as local changes).",
       {{"", "", "postgres.own_transactions_replayed",
         [](S s, int) {
           return Count(s.postgres().own_transactions_replayed());
         }}}},
      {"tally_pg_builds_total",
       kCounter,
       StatusScope::kPostgres,
       "",
       "builds",
       "Index builds and rebuilds since the node started, by a sidecar to "
       "MariaDB (its DDL, TRUNCATE and purged-log rebuilds); a sidecar to "
       "PostgreSQL reports 0.",
       {{"", "", "postgres.builds",
         [](S s, int) { return Count(s.postgres().builds()); }}}},
      {"tally_pg_rows_applied_total",
       kCounter,
       StatusScope::kPostgres,
       "",
       "rows",
       "Rows written into PostgreSQL by repairs and the feed.",
       {{"", "", "postgres.rows_applied",
         [](S s, int) { return Count(s.postgres().rows_applied()); }}}},
      {"tally_pg_rows_refused_total",
       kCounter,
       StatusScope::kPostgres,
       "",
       "rows",
       "Rows an apply left alone because the application changed them "
       "since tallyd indexed them.",
       {{"", "", "postgres.rows_refused",
         [](S s, int) { return Count(s.postgres().rows_refused()); }}}},
      {"tally_pg_build_rows",
       kGauge,
       StatusScope::kPostgres,
       "",
       "rows",
       "Rows scanned by the running or last build of the index.",
       {{"", "", "postgres.build_rows_done",
         [](S s, int) { return Count(s.postgres().build_rows_done()); }}}},
      {"tally_pg_build_rows_estimated",
       kGauge,
       StatusScope::kPostgres,
       "",
       "rows",
       "Rows the tables hold by PostgreSQL's estimate, at the build's "
       "start.",
       {{"", "", "postgres.build_rows_estimated",
         [](S s, int) { return Count(s.postgres().build_rows_estimated()); }}}},
      {"tally_pg_build_rows_per_second",
       kGauge,
       StatusScope::kPostgres,
       "",
       "rows per second",
       "While building: rows scanned per second over the last 30 s; 0 "
       "otherwise.",
       {{"", "", "postgres.build_rows_per_second",
         [](S s, int) { return Real(s.postgres().build_rows_per_second()); }}}},
      // Absent, and null in the JSON, while not known: a 0 would read as
      // "done".
      {"tally_pg_build_eta_seconds",
       kGauge,
       StatusScope::kPostgres,
       "",
       "seconds",
       "While building: the time left at that rate to the estimated rows; "
       "absent when not known (no estimate, nothing moving, or the "
       "estimate passed).",
       {{"", "", "postgres.build_eta_seconds",
         [](S s, int) {
           return s.postgres().has_build_eta_seconds()
                      ? Real(s.postgres().build_eta_seconds())
                      : StatusValue::Absent();
         },
         /*json_null_when_absent=*/true}}},
      {"tally_pg_build_seconds",
       kGauge,
       StatusScope::kPostgres,
       "",
       "seconds",
       "While building: seconds since the build started; 0 otherwise.",
       {{"", "", "postgres.build_seconds",
         [](S s, int) { return Real(s.postgres().build_seconds()); }}}},
      {"tally_pg_index_lost",
       kGauge,
       StatusScope::kPostgres,
       "",
       "",
       "1 when the last build found the index lost (none in the store, "
       "the database marked as built) and rebuilt it.",
       {{"", "", "postgres.index_lost",
         [](S s, int) { return Flag(s.postgres().index_lost()); }}}},
      {"tally_pg_index_loss_fresh_rows",
       kGauge,
       StatusScope::kPostgres,
       "",
       "rows",
       "Rows the application last wrote here that the build after a lost "
       "index gave fresh local versions; 0 after any other build.",
       {{"", "", "postgres.index_loss_fresh_rows",
         [](S s, int) {
           return Count(s.postgres().index_loss_fresh_rows());
         }}}},
      {"tally_pg_table_ready",
       kGauge,
       StatusScope::kPostgresTable,
       "`keyspace`, `state`",
       "",
       "1 when a table's index is built and followed, 0 while it "
       "builds or rebuilds (its sessions are refused).",
       {},
       &PostgresTablesReady},
      {"tally_pg_table_rows",
       kGauge,
       StatusScope::kPostgresTable,
       "",
       "rows",
       "Rows a table's index holds.",
       {{"", "", "postgres.tables[].rows",
         [](S s, int i) { return Count(s.postgres().tables(i).rows()); }}}},

      // A sidecar whose source is a database (peer = postgresql://...).
      {"tally_source_sessions_ok_total",
       kCounter,
       StatusScope::kDatabaseSource,
       "",
       "sessions",
       "Sessions with the database source that copied every table.",
       {{"", "", "database_source.sessions_ok",
         [](S s, int) { return Count(s.database_source().sessions_ok()); }}}},
      {"tally_source_sessions_failed_total",
       kCounter,
       StatusScope::kDatabaseSource,
       "",
       "sessions",
       "Sessions with the database source that failed, in whole or for "
       "some table (the reason is in status: last_error).",
       {{"", "", "database_source.sessions_failed",
         [](S s, int) {
           return Count(s.database_source().sessions_failed());
         }}}},
      {"tally_source_last_success_timestamp_seconds",
       kGauge,
       StatusScope::kDatabaseSource,
       "",
       "seconds",
       "Start of the last session with the database source that copied "
       "every table (absent before the first).",
       {{"", "", "database_source.last_success_unix_ms",
         [](S s, int) {
           return UnixMs(s.database_source().last_success_unix_ms());
         }}}},
      {"tally_source_last_session_seconds",
       kGauge,
       StatusScope::kDatabaseSource,
       "",
       "seconds",
       "How long the last session with the database source took.",
       {{"", "", "database_source.last_session_seconds",
         [](S s, int) {
           return Real(s.database_source().last_session_seconds());
         }}}},
      {"tally_source_last_session_timestamp_seconds",
       kGauge,
       StatusScope::kDatabaseSource,
       "",
       "seconds",
       "Start of the last session with the database source, whatever its "
       "outcome (absent before the first).",
       {{"", "", "database_source.last_session_start_unix_ms",
         [](S s, int) {
           return UnixMs(s.database_source().last_session_start_unix_ms());
         }}}},
      {"tally_source_differences_total",
       kCounter,
       StatusScope::kDatabaseSource,
       "",
       "rows",
       "Keys found different from the database source.",
       {{"", "", "database_source.differences",
         [](S s, int) { return Count(s.database_source().differences()); }}}},
      {"tally_source_last_session_differences",
       kGauge,
       StatusScope::kDatabaseSource,
       "",
       "rows",
       "Keys the last session found different from the database source.",
       {{"", "", "database_source.last_differences",
         [](S s, int) {
           return Count(s.database_source().last_differences());
         }}}},
      {"tally_source_rows_copied_total",
       kCounter,
       StatusScope::kDatabaseSource,
       "",
       "rows",
       "Rows copied from the database source into this node's database.",
       {{"", "", "database_source.rows_copied",
         [](S s, int) { return Count(s.database_source().rows_copied()); }}}},
      {"tally_source_rows_deleted_total",
       kCounter,
       StatusScope::kDatabaseSource,
       "",
       "rows",
       "Rows deleted here because the database source lacks them.",
       {{"", "", "database_source.rows_deleted",
         [](S s, int) { return Count(s.database_source().rows_deleted()); }}}},
      {"tally_source_rows_refused_total",
       kCounter,
       StatusScope::kDatabaseSource,
       "",
       "rows",
       "Rows left for the next session because the application changed "
       "them here first (the compare-and-swap).",
       {{"", "", "database_source.rows_refused",
         [](S s, int) { return Count(s.database_source().rows_refused()); }}}},
      {"tally_source_rows_rejected_total",
       kCounter,
       StatusScope::kDatabaseSource,
       "",
       "rows",
       "Rows from the database source this node's database or store "
       "would not take.",
       {{"", "", "database_source.rows_rejected",
         [](S s, int) { return Count(s.database_source().rows_rejected()); }}}},
      {"tally_source_bytes_read_total",
       kCounter,
       StatusScope::kDatabaseSource,
       "",
       "bytes",
       "Bytes of values read from the database source (block hashes "
       "and rows, without the protocol's framing).",
       {{"", "", "database_source.bytes_from_source",
         [](S s, int) {
           return Count(s.database_source().bytes_from_source());
         }}}},
      {"tally_source_last_session_bytes_read",
       kGauge,
       StatusScope::kDatabaseSource,
       "",
       "bytes",
       "Bytes read from the database source by the last session.",
       {{"", "", "database_source.last_bytes_from_source",
         [](S s, int) {
           return Count(s.database_source().last_bytes_from_source());
         }}}},
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

// The reference's labels column: the scope's label, then each label that
// tells the series apart with its values.
std::string LabelsOf(const StatusField& field) {
  if (!field.labels.empty()) return std::string(field.labels);
  std::vector<std::string> labels;
  static const v1::StatusResponse* const kOneOfEach = [] {
    auto* s = new v1::StatusResponse;
    s->add_keyspaces();
    s->add_origins();
    s->add_peers();
    s->add_keyspace_trouble();
    s->add_subscriptions();
    s->add_copy_writes();
    s->mutable_process();
    s->mutable_postgres()->add_tables();
    return s;
  }();
  const absl::string_view scope_label =
      StatusScopeLabel(*kOneOfEach, field.scope, 0).first;
  if (!scope_label.empty())
    labels.push_back(absl::StrCat("`", scope_label, "`"));
  std::vector<std::pair<absl::string_view, std::vector<std::string>>> fixed;
  for (const StatusSeries& series : field.series) {
    if (series.label.empty()) continue;
    if (fixed.empty() || fixed.back().first != series.label) {
      fixed.push_back({series.label, {}});
    }
    fixed.back().second.push_back(absl::StrCat("`", series.label_value, "`"));
  }
  for (const auto& [label, values] : fixed) {
    labels.push_back(
        absl::StrCat("`", label, "` = ", absl::StrJoin(values, " / ")));
  }
  return absl::StrJoin(labels, ", ");
}

std::string JsonKeysOf(const StatusField& field) {
  std::vector<std::string> keys;
  for (const StatusSeries& series : field.series) {
    if (!series.json_key.empty()) {
      keys.push_back(absl::StrCat("`", series.json_key, "`"));
    }
  }
  return absl::StrJoin(keys, ", ");
}

}  // namespace

absl::string_view MetricTypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

std::string FormatPrometheusValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return absl::StrCat(v);
}

std::string StatusValue::Format() const {
  switch (kind_) {
    case Kind::kCount:
    case Kind::kFlag:
      return absl::StrCat(count_);
    case Kind::kReal:
      return FormatPrometheusValue(real_);
    case Kind::kUnixMs:
      // Every digit kept (a double through StrCat would keep 6 significant
      // digits: 1.7e+09).
      return absl::StrFormat("%d.%03d", unix_ms_ / 1000, unix_ms_ % 1000);
    case Kind::kAbsent:
      break;
  }
  return "";
}

int StatusScopeSize(const v1::StatusResponse& status, StatusScope scope) {
  switch (scope) {
    case StatusScope::kNode:
      return 1;
    case StatusScope::kKeyspace:
      return status.keyspaces_size();
    case StatusScope::kOrigin:
      return status.origins_size();
    case StatusScope::kPeer:
      return status.peers_size();
    case StatusScope::kKeyspaceTrouble:
      return status.keyspace_trouble_size();
    case StatusScope::kSubscriber:
      return status.subscriptions_size();
    case StatusScope::kCopyWrites:
      return status.copy_writes_size();
    case StatusScope::kProcess:
      return status.has_process() ? 1 : 0;
    case StatusScope::kPostgres:
      return status.has_postgres() ? 1 : 0;
    case StatusScope::kPostgresTable:
      return status.has_postgres() ? status.postgres().tables_size() : 0;
    case StatusScope::kDatabaseSource:
      return status.has_database_source() ? 1 : 0;
  }
  return 0;
}

std::pair<absl::string_view, absl::string_view> StatusScopeLabel(
    const v1::StatusResponse& status, StatusScope scope, int item) {
  switch (scope) {
    case StatusScope::kNode:
    case StatusScope::kProcess:
    case StatusScope::kPostgres:
    case StatusScope::kDatabaseSource:
      return {};
    case StatusScope::kKeyspace:
      return {"keyspace", status.keyspaces(item).name()};
    case StatusScope::kOrigin:
      return {"origin", status.origins(item).origin()};
    case StatusScope::kPeer:
      return {"peer", status.peers(item).address()};
    case StatusScope::kKeyspaceTrouble:
      return {"keyspace", status.keyspace_trouble(item).keyspace()};
    case StatusScope::kSubscriber:
      return {"subscriber", status.subscriptions(item).subscriber()};
    case StatusScope::kCopyWrites:
      return {"origin", status.copy_writes(item).origin()};
    case StatusScope::kPostgresTable:
      return {"keyspace", status.postgres().tables(item).keyspace()};
  }
  return {};
}

const std::vector<StatusField>& StatusFields() {
  static const std::vector<StatusField>* const kFields = MakeStatusFields();
  return *kFields;
}

void StatusFieldSamples(const StatusField& field,
                        const v1::StatusResponse& status, MetricSink sink) {
  if (field.samples != nullptr) {
    field.samples(status, sink);
    return;
  }
  const int items = StatusScopeSize(status, field.scope);
  for (int item = 0; item < items; ++item) {
    const Label scope_label = StatusScopeLabel(status, field.scope, item);
    for (const StatusSeries& series : field.series) {
      const StatusValue value = series.value(status, item);
      if (value.kind() == StatusValue::Kind::kAbsent) continue;
      Label labels[2];
      int n = 0;
      if (!scope_label.first.empty()) labels[n++] = scope_label;
      if (!series.label.empty())
        labels[n++] = {series.label, series.label_value};
      sink("", MetricLabels(labels, n), value);
    }
  }
}

const std::vector<StatusNumberRef>& StatusNumbersWithJsonKey() {
  static const auto* const kNumbers = [] {
    auto* numbers = new std::vector<StatusNumberRef>;
    for (const StatusField& field : StatusFields()) {
      for (const StatusSeries& series : field.series) {
        if (!series.json_key.empty()) {
          numbers->push_back(StatusNumberRef{&field, &series});
        }
      }
    }
    return numbers;
  }();
  return *kNumbers;
}

namespace {

// The table's numbers by JSON key: their index in
// StatusNumbersWithJsonKey(), built once.
const absl::flat_hash_map<absl::string_view, int>& NumberIndexByJsonKey() {
  static const auto* const kIndex = [] {
    auto* index = new absl::flat_hash_map<absl::string_view, int>;
    const std::vector<StatusNumberRef>& numbers = StatusNumbersWithJsonKey();
    for (int i = 0; i < static_cast<int>(numbers.size()); ++i) {
      index->emplace(numbers[i].series->json_key, i);
    }
    return index;
  }();
  return *kIndex;
}

std::string UnknownKeyText(absl::string_view json_key) {
  return absl::StrCat("<no status number ", json_key, ">");
}

}  // namespace

absl::StatusOr<StatusValue> StatusNumber(const v1::StatusResponse& status,
                                         absl::string_view json_key, int item) {
  const auto& index = NumberIndexByJsonKey();
  const auto it = index.find(json_key);
  if (it == index.end()) {
    return absl::NotFoundError(UnknownKeyText(json_key));
  }
  const StatusNumberRef& number = StatusNumbersWithJsonKey()[it->second];
  if (item < 0 || item >= StatusScopeSize(status, number.field->scope)) {
    return absl::NotFoundError(
        absl::StrFormat("status number %s has no item %d", json_key, item));
  }
  return number.series->value(status, item);
}

uint64_t StatusCount(const v1::StatusResponse& status,
                     absl::string_view json_key, int item) {
  const absl::StatusOr<StatusValue> value =
      StatusNumber(status, json_key, item);
  if (!value.ok()) return 0;
  switch (value->kind()) {
    case StatusValue::Kind::kCount:
    case StatusValue::Kind::kFlag:
      return value->count();
    case StatusValue::Kind::kReal:
      return value->real() > 0 ? static_cast<uint64_t>(value->real()) : 0;
    case StatusValue::Kind::kUnixMs:
      return static_cast<uint64_t>(value->unix_ms());
    case StatusValue::Kind::kAbsent:
      return 0;
  }
  return 0;
}

double StatusReal(const v1::StatusResponse& status, absl::string_view json_key,
                  int item) {
  const absl::StatusOr<StatusValue> value =
      StatusNumber(status, json_key, item);
  if (!value.ok()) return std::nan("");
  if (value->kind() == StatusValue::Kind::kReal) return value->real();
  return static_cast<double>(StatusCount(status, json_key, item));
}

std::string StatusNumberText(const v1::StatusResponse& status,
                             absl::string_view json_key, int item) {
  const absl::StatusOr<StatusValue> value =
      StatusNumber(status, json_key, item);
  if (!value.ok()) return UnknownKeyText(json_key);
  switch (value->kind()) {
    case StatusValue::Kind::kFlag:
      return value->count() != 0 ? "true" : "false";
    case StatusValue::Kind::kReal:
      return FormatPrometheusValue(value->real());
    case StatusValue::Kind::kUnixMs:
      return absl::StrCat(value->unix_ms());
    case StatusValue::Kind::kCount:
    case StatusValue::Kind::kAbsent:
      return absl::StrCat(value->count());
  }
  return "";
}

std::string StatusNumberCaption(absl::string_view json_key) {
  std::vector<std::string> words;
  for (absl::string_view part : absl::StrSplit(json_key, '.')) {
    // "peers[]" and "<origin>" name the item, which the views show apart.
    if (absl::EndsWith(part, "[]") || absl::StartsWith(part, "<")) continue;
    words.push_back(absl::StrReplaceAll(part, {{"_", " "}}));
  }
  return absl::StrJoin(words, " ");
}

std::string StatusValueForPeople(const StatusValue& value,
                                 absl::string_view unit) {
  const auto with_unit = [unit](std::string number) {
    if (!unit.empty()) absl::StrAppend(&number, " ", unit);
    return number;
  };
  switch (value.kind()) {
    case StatusValue::Kind::kCount:
      return with_unit(absl::StrCat(value.count()));
    case StatusValue::Kind::kFlag:
      return value.count() != 0 ? "yes" : "no";
    case StatusValue::Kind::kReal:
      return with_unit(FormatPrometheusValue(value.real()));
    case StatusValue::Kind::kUnixMs:
      return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ",
                              absl::FromUnixMillis(value.unix_ms()),
                              absl::UTCTimeZone());
    case StatusValue::Kind::kAbsent:
      break;
  }
  return "-";
}

StatusNumberReader::StatusNumberReader(const v1::StatusResponse& status)
    : status_(status), placed_(StatusNumbersWithJsonKey().size(), false) {}

void StatusNumberReader::Mark(absl::string_view json_key) {
  const auto& index = NumberIndexByJsonKey();
  const auto it = index.find(json_key);
  if (it != index.end()) {
    placed_[it->second] = true;
  } else if (std::find(unknown_.begin(), unknown_.end(), json_key) ==
             unknown_.end()) {
    unknown_.emplace_back(json_key);
  }
}

std::string StatusNumberReader::Text(absl::string_view json_key, int item) {
  Mark(json_key);
  return StatusNumberText(status_, json_key, item);
}

uint64_t StatusNumberReader::Count(absl::string_view json_key, int item) {
  Mark(json_key);
  return StatusCount(status_, json_key, item);
}

double StatusNumberReader::Real(absl::string_view json_key, int item) {
  Mark(json_key);
  return StatusReal(status_, json_key, item);
}

StatusValue StatusNumberReader::Value(absl::string_view json_key, int item) {
  Mark(json_key);
  const absl::StatusOr<StatusValue> value =
      StatusNumber(status_, json_key, item);
  return value.ok() ? *value : StatusValue::Absent();
}

void StatusNumberReader::Place(absl::string_view json_key) { Mark(json_key); }

std::vector<StatusNumberRef> StatusNumberReader::Unplaced() const {
  std::vector<StatusNumberRef> unplaced;
  const std::vector<StatusNumberRef>& numbers = StatusNumbersWithJsonKey();
  for (size_t i = 0; i < numbers.size(); ++i) {
    if (!placed_[i]) unplaced.push_back(numbers[i]);
  }
  return unplaced;
}

std::string StatusFieldsMarkdown() {
  std::string out =
      "# Metrics reference\n"
      "\n"
      "<!-- Generated from node/observe/status_fields.cc by "
      "`tallyd --print-reference=metrics`; do not edit. -->\n"
      "\n"
      "Every metric family a node serves at `/metrics` (`metrics-listen`), "
      "in the order of the exposition. Counters end in `_total` and count "
      "since the node started; gauges are current values. A family without "
      "samples (no peers, no subscribers) is left out of a scrape. The JSON "
      "column names the same number in `tally status --json` (`peers[]`: "
      "in each peer's object).\n"
      "\n"
      "| Metric | Type | Labels | Unit | JSON | Meaning |\n"
      "|---|---|---|---|---|---|\n";
  for (const StatusField& field : StatusFields()) {
    if (!HasFamily(field)) continue;
    absl::StrAppend(&out, "| `", field.metric, "` | ",
                    MetricTypeName(field.type), " | ", Cell(LabelsOf(field)),
                    " | ", field.unit, " | ", Cell(JsonKeysOf(field)), " | ",
                    Cell(field.help), " |\n");
  }
  absl::StrAppend(
      &out,
      "\n"
      "## Numbers of `tally status` only\n"
      "\n"
      "Numbers `tally status` (its text, `--json` and the status page) shows "
      "that are no family of their own: each is a sum or a maximum of a "
      "family's series, a part of one, or follows from one.\n"
      "\n"
      "| JSON | Labels | Unit | Meaning |\n"
      "|---|---|---|---|\n");
  for (const StatusField& field : StatusFields()) {
    if (HasFamily(field)) continue;
    absl::StrAppend(&out, "| ", Cell(JsonKeysOf(field)), " | ",
                    Cell(LabelsOf(field)), " | ", field.unit, " | ",
                    Cell(field.help), " |\n");
  }
  return out;
}

}  // namespace node
}  // namespace tally
