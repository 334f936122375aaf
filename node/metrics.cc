#include "node/metrics.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "node/session.h"
#include "node/version.h"

namespace tally {
namespace node {
namespace {

using Labels =
    std::initializer_list<std::pair<absl::string_view, absl::string_view>>;

// HELP text escapes only backslash and newline.
std::string EscapeHelp(absl::string_view help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return absl::StrCat(v);
}

// Builds the exposition one family at a time. A family's # HELP and # TYPE
// lines are written with its first sample, so a family without samples
// leaves no trace.
class Exposition {
 public:
  void Family(absl::string_view name, absl::string_view type,
              absl::string_view help) {
    name_ = std::string(name);
    pending_header_ = absl::StrCat("# HELP ", name, " ", EscapeHelp(help),
                                   "\n# TYPE ", name, " ", type, "\n");
  }

  void Sample(Labels labels, uint64_t value) {
    Line(labels, absl::StrCat(value));
  }
  void Sample(Labels labels, double value) { Line(labels, FormatValue(value)); }
  void Sample(uint64_t value) { Line({}, absl::StrCat(value)); }
  // A Unix time given in milliseconds, as seconds with every digit kept
  // (a double through StrCat would keep 6 significant digits: 1.7e+09).
  void SampleUnixSeconds(Labels labels, int64_t unix_ms) {
    Line(labels, absl::StrFormat("%d.%03d", unix_ms / 1000, unix_ms % 1000));
  }

  // A histogram's series: NAME_bucket (cumulative, with `le`), NAME_sum
  // and NAME_count, each with `labels`.
  void Histogram(absl::string_view label, absl::string_view label_value,
                 const v1::DurationHistogram& h) {
    uint64_t cumulative = 0;
    for (int i = 0; i < h.counts_size(); ++i) {
      cumulative += h.counts(i);
      const std::string le =
          i < h.upper_bounds_size() ? FormatValue(h.upper_bounds(i)) : "+Inf";
      Line("_bucket", {{label, label_value}, {"le", le}},
           absl::StrCat(cumulative));
    }
    Line("_sum", {{label, label_value}}, FormatValue(h.sum_seconds()));
    Line("_count", {{label, label_value}}, absl::StrCat(h.count()));
  }

  std::string Take() { return std::move(out_); }

 private:
  void Line(Labels labels, const std::string& value) {
    Line("", labels, value);
  }
  void Line(absl::string_view suffix, Labels labels, const std::string& value) {
    out_ += pending_header_;
    pending_header_.clear();
    out_ += name_;
    out_.append(suffix.data(), suffix.size());
    if (labels.size() > 0) {
      out_ += '{';
      bool first = true;
      for (const auto& [label, label_value] : labels) {
        if (!first) out_ += ',';
        first = false;
        absl::StrAppend(&out_, label, "=\"",
                        EscapePrometheusLabelValue(label_value), "\"");
      }
      out_ += '}';
    }
    absl::StrAppend(&out_, " ", value, "\n");
  }

  std::string out_;
  std::string name_;
  std::string pending_header_;
};

// The phases of a sidecar (pg/sidecar.h), each a series of
// tally_pg_phase.
constexpr absl::string_view kPostgresPhases[] = {"building", "following",
                                                 "reconnecting", "failed"};

// A sidecar to PostgreSQL: only on a node with --postgres.
void RenderPostgres(const v1::PostgresStatus& pg, Exposition* e) {
  constexpr absl::string_view kCounter = "counter";
  constexpr absl::string_view kGauge = "gauge";
  e->Family("tally_pg_info", kGauge,
            "1, labelled with the sidecar's slot, publication and "
            "replication origin.");
  e->Sample({{"slot", pg.slot()},
             {"publication", pg.publication()},
             {"origin", pg.origin()}},
            uint64_t{1});
  e->Family("tally_pg_phase", kGauge,
            "1 for the phase the sidecar is in (building, following, "
            "reconnecting, failed), 0 for the others.");
  for (absl::string_view phase : kPostgresPhases) {
    e->Sample({{"phase", phase}}, uint64_t{pg.phase() == phase ? 1u : 0u});
  }
  e->Family("tally_pg_slot_lag_bytes", kGauge,
            "WAL the replication slot keeps on the server: the current WAL "
            "position minus the slot's confirmed position.");
  e->Sample(pg.slot_lag_bytes());
  e->Family("tally_pg_confirmed_lsn", kGauge,
            "The WAL position confirmed to the slot (indexed and committed "
            "to the store), in bytes.");
  e->Sample(pg.confirmed_lsn_bytes());
  e->Family("tally_pg_capture_lag_seconds", kGauge,
            "Now minus the commit time of the last transaction indexed, "
            "while capture is behind; 0 when caught up.");
  e->Sample({}, pg.capture_lag_seconds());
  e->Family("tally_pg_transactions_captured_total", kCounter,
            "Application transactions captured and indexed.");
  e->Sample(pg.transactions_captured());
  e->Family("tally_pg_rows_captured_total", kCounter,
            "Rows of application transactions captured and indexed.");
  e->Sample(pg.rows_captured());
  e->Family("tally_pg_own_transactions_replayed_total", kCounter,
            "tally's own apply transactions read back from the slot (not "
            "logged as local changes).");
  e->Sample(pg.own_transactions_replayed());
  e->Family("tally_pg_rows_applied_total", kCounter,
            "Rows written into PostgreSQL by repairs and the feed.");
  e->Sample(pg.rows_applied());
  e->Family("tally_pg_rows_refused_total", kCounter,
            "Rows an apply left alone because the application changed them "
            "since tallyd indexed them.");
  e->Sample(pg.rows_refused());
  e->Family("tally_pg_build_rows", kGauge,
            "Rows scanned by the running or last build of the index.");
  e->Sample(pg.build_rows_done());
  e->Family("tally_pg_build_rows_estimated", kGauge,
            "Rows the tables hold by PostgreSQL's estimate, at the build's "
            "start.");
  e->Sample(pg.build_rows_estimated());
  e->Family("tally_pg_table_ready", kGauge,
            "1 when a table's index is built and followed, 0 while it "
            "builds or rebuilds (its sessions are refused).");
  for (const v1::PostgresTable& t : pg.tables()) {
    e->Sample({{"keyspace", t.keyspace()}, {"state", t.state()}},
              uint64_t{t.state() == "ready" ? 1u : 0u});
  }
  e->Family("tally_pg_table_rows", kGauge, "Rows a table's index holds.");
  for (const v1::PostgresTable& t : pg.tables()) {
    e->Sample({{"keyspace", t.keyspace()}}, t.rows());
  }
}

// The process, under the names every Prometheus client library uses
// (process_*), and resident memory by kind.
void RenderProcess(const v1::ProcessStatus& process, Exposition* e) {
  e->Family("process_cpu_seconds_total", "counter",
            "Total user and system CPU time spent in seconds.");
  e->Sample({}, process.cpu_seconds());
  e->Family("process_resident_memory_bytes", "gauge",
            "Resident memory size in bytes (anonymous, file-backed and "
            "shared).");
  e->Sample(process.resident_anon_bytes() + process.resident_file_bytes() +
            process.resident_shmem_bytes());
  e->Family("tally_process_resident_memory_bytes", "gauge",
            "Resident memory by kind: anon (heap, trees, caches: what the "
            "node uses), file (LevelDB's mapped tables and the binary: page "
            "cache the kernel reclaims at will) and shmem.");
  e->Sample({{"kind", "anon"}}, process.resident_anon_bytes());
  e->Sample({{"kind", "file"}}, process.resident_file_bytes());
  e->Sample({{"kind", "shmem"}}, process.resident_shmem_bytes());
  e->Family("process_virtual_memory_bytes", "gauge",
            "Virtual memory size in bytes.");
  e->Sample(process.virtual_bytes());
  e->Family("process_open_fds", "gauge", "Number of open file descriptors.");
  e->Sample(process.open_fds());
  if (process.max_fds() > 0) {
    e->Family("process_max_fds", "gauge",
              "Maximum number of open file descriptors.");
    e->Sample(process.max_fds());
  }
  e->Family("process_threads", "gauge", "Threads of the process.");
  e->Sample(uint64_t{process.threads()});
  if (process.start_unix_ms() > 0) {
    e->Family("process_start_time_seconds", "gauge",
              "Start time of the process since unix epoch in seconds.");
    e->SampleUnixSeconds({}, process.start_unix_ms());
  }
}

}  // namespace

std::string EscapePrometheusLabelValue(absl::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string RenderPrometheus(const v1::StatusResponse& status) {
  Exposition e;
  constexpr absl::string_view kCounter = "counter";
  constexpr absl::string_view kGauge = "gauge";

  e.Family("tally_node_info", kGauge,
           "Always 1; the labels name the node and its change-log epoch.");
  e.Sample({{"node", status.node_name()},
            {"epoch", absl::StrFormat("%016x", status.epoch())}},
           uint64_t{1});

  // Keyspaces.
  e.Family("tally_keyspace_rows", kGauge,
           "Rows in the keyspace, tombstones included.");
  for (const v1::KeyspaceSummary& ks : status.keyspaces()) {
    e.Sample({{"keyspace", ks.name()}}, ks.row_count());
  }
  e.Family("tally_keyspace_root_changes_total", kCounter,
           "Commits that changed the keyspace's Merkle root.");
  for (const v1::KeyspaceSummary& ks : status.keyspaces()) {
    e.Sample({{"keyspace", ks.name()}}, ks.root_changes());
  }
  e.Family("tally_origin_rows", kGauge,
           "Rows (tombstones included, all keyspaces) whose version was "
           "written by the origin.");
  for (const v1::OriginRows& o : status.origins()) {
    e.Sample({{"origin", o.origin()}}, o.rows());
  }

  // Anti-entropy sessions.
  e.Family("tally_sessions_running", kGauge,
           "Anti-entropy sessions running now.");
  e.Sample(uint64_t{status.sessions_running()});
  e.Family("tally_diffs_running", kGauge,
           "Diffs and repairs against another node that tools asked this "
           "node to run (Admin.RunDiff), running now.");
  e.Sample(uint64_t{status.diffs_running()});
  e.Family("tally_sessions_total", kCounter,
           "Anti-entropy sessions finished, by outcome, over all peers.");
  e.Sample({{"outcome", "ok"}}, status.sessions_ok());
  e.Sample({{"outcome", "failed"}}, status.sessions_failed());
  e.Family("tally_peer_sessions_total", kCounter,
           "Anti-entropy sessions finished with the peer, by outcome.");
  for (const v1::PeerStatus& p : status.peers()) {
    e.Sample({{"peer", p.address()}, {"outcome", "ok"}}, p.sessions_ok());
    e.Sample({{"peer", p.address()}, {"outcome", "failed"}},
             p.sessions_failed());
  }
  // Times as Unix seconds, the Prometheus way; a peer with none yet has no
  // series (a 0 would read as "1970", and alerts on age would fire).
  e.Family("tally_peer_last_session_timestamp_seconds", kGauge,
           "Start of the last anti-entropy session with the peer, whatever "
           "its outcome (Unix seconds).");
  for (const v1::PeerStatus& p : status.peers()) {
    if (p.last_session_unix_ms() > 0) {
      e.SampleUnixSeconds({{"peer", p.address()}}, p.last_session_unix_ms());
    }
  }
  e.Family("tally_peer_last_success_timestamp_seconds", kGauge,
           "Start of the last anti-entropy session with the peer that "
           "succeeded (Unix seconds); alert on its age.");
  for (const v1::PeerStatus& p : status.peers()) {
    if (p.last_success_unix_ms() > 0) {
      e.SampleUnixSeconds({{"peer", p.address()}}, p.last_success_unix_ms());
    }
  }
  // The Prometheus enum idiom: one series per phase, 1 for the current one,
  // so that `tally_session_phase{phase="repair"} == 1` selects the peers
  // whose session repairs now.
  e.Family("tally_session_phase", kGauge,
           "1 for the phase the session with the peer is in (the last "
           "session's done or failed while none runs), 0 for the others.");
  for (const v1::PeerStatus& p : status.peers()) {
    // A peer without a session record has had no session.
    const absl::string_view current =
        p.session().phase().empty() ? SessionPhaseName(SessionPhase::kIdle)
                                    : absl::string_view(p.session().phase());
    for (SessionPhase phase : kSessionPhases) {
      const absl::string_view name = SessionPhaseName(phase);
      e.Sample({{"peer", p.address()}, {"phase", name}},
               uint64_t{name == current ? 1u : 0u});
    }
  }
  e.Family("tally_peer_paused", kGauge,
           "1 while an operator has paused the sessions with the peer "
           "(tally peer pause), 0 otherwise.");
  for (const v1::PeerStatus& p : status.peers()) {
    e.Sample({{"peer", p.address()}}, uint64_t{p.paused() ? 1u : 0u});
  }
  e.Family("tally_session_phase_seconds", kGauge,
           "Seconds the session with the peer has been in its phase.");
  for (const v1::PeerStatus& p : status.peers()) {
    e.Sample({{"peer", p.address()}}, p.session().phase_seconds());
  }
  e.Family("tally_session_duration_seconds", "histogram",
           "How long anti-entropy sessions with the peer took, every "
           "outcome.");
  for (const v1::PeerStatus& p : status.peers()) {
    if (p.has_session_seconds()) {
      e.Histogram("peer", p.address(), p.session_seconds());
    }
  }
  e.Family("tally_repair_rows_total", kCounter,
           "Rows repaired by anti-entropy sessions with the peer, by "
           "direction (received: written here; sent: written there); the "
           "running session's rows count as they are written.");
  for (const v1::PeerStatus& p : status.peers()) {
    e.Sample({{"peer", p.address()}, {"direction", "received"}},
             p.rows_received());
    e.Sample({{"peer", p.address()}, {"direction", "sent"}}, p.rows_sent());
  }
  e.Family("tally_repair_bytes_total", kCounter,
           "Key and value bytes moved by repairs with the peer, both ways.");
  for (const v1::PeerStatus& p : status.peers()) {
    e.Sample({{"peer", p.address()}}, p.bytes_repaired());
  }
  e.Family("tally_node_bandwidth_bytes_per_second", kGauge,
           "The node's repair bandwidth limit (node-bandwidth, shared by all "
           "its sessions and tool-driven repairs) as in force now; SIGHUP "
           "reloads it. 0 when unlimited.");
  // Whole bytes: StrCat of a double keeps 6 digits (1.23457e+06).
  e.Sample(static_cast<uint64_t>(
      std::llround(std::max(0.0, status.node_bandwidth_bytes_per_second()))));
  // A count that keeps rising is a mesh undoing its own work: a copy that
  // something keeps writing to, or keys that last writer wins cannot order.
  e.Family("tally_rows_erased_total", kCounter,
           "Rows erased here by sessions with a source peer because the "
           "source lacks them, over all peers.");
  e.Sample(status.rows_erased());
  e.Family("tally_peer_rows_erased_total", kCounter,
           "Rows erased here by sessions with the peer (a source) because it "
           "lacks them.");
  for (const v1::PeerStatus& p : status.peers()) {
    e.Sample({{"peer", p.address()}}, p.rows_erased());
  }
  e.Family("tally_conflicts_total", kCounter,
           "Keys sessions found with equal versions and different content, "
           "which the tie rule settles (the higher row digest wins), over all "
           "peers.");
  e.Sample(status.conflicts());
  e.Family("tally_rows_changed_during_session_total", kCounter,
           "Rows sessions left to the capture because an application changed "
           "them in a sidecar's table while the session read them, over all "
           "peers.");
  e.Sample(status.rows_changed_during_session());
  e.Family("tally_ties_resolved_total", kCounter,
           "Rows this node's store replaced under the tie rule: the same "
           "version as the stored row, other content, a higher row digest.");
  e.Sample(status.ties_resolved());
  const v1::RowFilterStatus& filter = status.row_filter();
  e.Family("tally_row_filter_rows_read_total", kCounter,
           "Writes whose row the store read first (last writer wins).");
  e.Sample(filter.rows_read());
  e.Family("tally_row_filter_reads_skipped_total", kCounter,
           "Writes of keys the row filter showed absent: no read.");
  e.Sample(filter.reads_skipped());
  e.Family("tally_row_filter_bytes", kGauge,
           "Memory of the store's row filters (about 1.5 bytes a row).");
  e.Sample(filter.memory_bytes());
  e.Family("tally_row_filter_keyspaces_unbuilt", kGauge,
           "Keyspaces whose row filter is still being built after the open "
           "(their writes read every row).");
  e.Sample(uint64_t{filter.keyspaces() - filter.built()});
  e.Family("tally_peer_conflicts_total", kCounter,
           "Keys sessions with the peer found with equal versions and "
           "different content.");
  for (const v1::PeerStatus& p : status.peers()) {
    e.Sample({{"peer", p.address()}}, p.conflicts());
  }
  e.Family("tally_peer_rows_changed_during_session_total", kCounter,
           "Rows sessions with the peer left to the capture, changed by an "
           "application while the session read them.");
  for (const v1::PeerStatus& p : status.peers()) {
    e.Sample({{"peer", p.address()}}, p.rows_changed_during_session());
  }

  // The change feed, node totals.
  const v1::FeedTotals& feed = status.feed();
  e.Family("tally_feed_entries_sent_total", kCounter,
           "Change-log entries this node's feed sent, over all subscribers.");
  e.Sample(feed.sent());
  e.Family("tally_feed_entries_received_total", kCounter,
           "Changes received from upstream feeds, over all upstreams.");
  e.Sample(feed.received());
  e.Family("tally_feed_entries_applied_total", kCounter,
           "Received changes applied here (newer than the stored row).");
  e.Sample(feed.applied());
  e.Family("tally_feed_entries_skipped_total", kCounter,
           "Feed entries not applied, by reason: own and superseded are "
           "skipped by this node's feed before sending; not_newer are "
           "received changes no newer than the stored row.");
  e.Sample({{"reason", "own"}}, feed.skipped_own());
  e.Sample({{"reason", "superseded"}}, feed.skipped_superseded());
  e.Sample({{"reason", "not_newer"}}, feed.not_newer());
  e.Family("tally_refused_timestamps_total", kCounter,
           "Received changes refused because their timestamp was too far "
           "ahead of this node's clock.");
  e.Sample(feed.refused_skew());

  // Keyspaces in trouble (node/keyspace_trouble.h): listed only once one
  // had rows left out, so a node without trouble shows neither family.
  e.Family("tally_keyspace_rows_rejected_total", kCounter,
           "Rows of the keyspace from peers that this node could not take "
           "and left out, by reason: rejected (its backend's database "
           "refused the row), not-taken (the keyspace took no rows, being "
           "rebuilt), schema (its schema fingerprint differs from the "
           "peer's). Sessions repair them once the cause is gone.");
  for (const v1::KeyspaceTroubleStatus& t : status.keyspace_trouble()) {
    for (const v1::ReasonCount& c : t.rejected()) {
      e.Sample({{"keyspace", t.keyspace()}, {"reason", c.reason()}}, c.rows());
    }
  }
  e.Family("tally_keyspace_in_trouble", kGauge,
           "1 while the keyspace's rows from a peer are being left out "
           "(until a later change of it is applied with none left out, or a "
           "session syncs it).");
  for (const v1::KeyspaceTroubleStatus& t : status.keyspace_trouble()) {
    e.Sample({{"keyspace", t.keyspace()}}, uint64_t{t.in_trouble() ? 1u : 0u});
  }

  // The change feed, per upstream peer.
  e.Family("tally_feed_upstream_entries_received_total", kCounter,
           "Changes received from the peer's feed.");
  for (const v1::PeerStatus& p : status.peers()) {
    e.Sample({{"peer", p.address()}}, p.feed_received());
  }
  e.Family("tally_feed_upstream_entries_applied_total", kCounter,
           "Changes from the peer's feed applied here.");
  for (const v1::PeerStatus& p : status.peers()) {
    e.Sample({{"peer", p.address()}}, p.feed_applied());
  }
  e.Family("tally_feed_upstream_entries_skipped_total", kCounter,
           "Entries of the peer's feed not applied here, by reason (own and "
           "superseded as the peer reported them).");
  for (const v1::PeerStatus& p : status.peers()) {
    e.Sample({{"peer", p.address()}, {"reason", "own"}}, p.feed_skipped_own());
    e.Sample({{"peer", p.address()}, {"reason", "superseded"}},
             p.feed_skipped_superseded());
    e.Sample({{"peer", p.address()}, {"reason", "not_newer"}},
             p.feed_not_newer());
  }
  e.Family("tally_feed_upstream_refused_timestamps_total", kCounter,
           "Changes from the peer refused for a timestamp too far ahead.");
  for (const v1::PeerStatus& p : status.peers()) {
    e.Sample({{"peer", p.address()}}, p.feed_refused_skew());
  }
  e.Family("tally_feed_lag_entries", kGauge,
           "Entries of the peer's change log not yet applied here, as of "
           "its last message.");
  for (const v1::PeerStatus& p : status.peers()) {
    e.Sample({{"peer", p.address()}}, p.feed_lag_entries());
  }
  e.Family("tally_feed_lag_seconds", kGauge,
           "Age of what this node has applied from the peer's feed: now "
           "minus the write time of the newest change applied, while "
           "behind; 0 when caught up; growing while the feed is down.");
  for (const v1::PeerStatus& p : status.peers()) {
    e.Sample({{"peer", p.address()}}, p.feed_lag_seconds());
  }
  e.Family("tally_feed_connected", kGauge,
           "1 while the subscription to the peer's feed is connected.");
  for (const v1::PeerStatus& p : status.peers()) {
    e.Sample({{"peer", p.address()}}, uint64_t{p.feed_connected() ? 1u : 0u});
  }
  e.Family("tally_feed_reconnects_total", kCounter,
           "Times the subscription to the peer's feed was re-established.");
  for (const v1::PeerStatus& p : status.peers()) {
    e.Sample({{"peer", p.address()}}, p.feed_reconnects());
  }
  e.Family("tally_clock_behind_seconds", kGauge,
           "How far this node's clock was behind the peer's at the last "
           "handshake (negative: ahead).");
  for (const v1::PeerStatus& p : status.peers()) {
    e.Sample({{"peer", p.address()}}, p.clock_behind_seconds());
  }
  e.Family("tally_feed_upstream_position", kGauge,
           "The peer's change-log sequence applied up to.");
  for (const v1::PeerStatus& p : status.peers()) {
    e.Sample({{"peer", p.address()}}, p.feed_position());
  }

  // The change feed, per subscriber this node serves.
  e.Family("tally_feed_subscriber_entries_sent_total", kCounter,
           "Change-log entries sent to the subscriber by its current "
           "subscription.");
  for (const v1::FeedSubscriptionStatus& s : status.subscriptions()) {
    e.Sample({{"subscriber", s.subscriber()}}, s.sent());
  }
  e.Family("tally_feed_subscriber_position", kGauge,
           "The last sequence sent or skipped for the subscriber.");
  for (const v1::FeedSubscriptionStatus& s : status.subscriptions()) {
    e.Sample({{"subscriber", s.subscriber()}}, s.position());
  }

  e.Family("tally_build_info", kGauge,
           "Always 1; its labels say which tally this node runs: the "
           "project version and the build (git describe).");
  e.Sample({{"version", std::string(ProjectVersion())},
            {"build", std::string(BuildDescription())}},
           uint64_t{1});

  e.Family("tally_copy_writes_total", kCounter,
           "Rows clients wrote directly to this copy of a role=source peer "
           "(Put, Delete, Load), by origin; its next session with the source "
           "undoes them. Any increase is a warning sign.");
  for (const v1::OriginRows& o : status.copy_writes()) {
    e.Sample({{"origin", o.origin()}}, o.rows());
  }
  e.Family("tally_read_only", kGauge,
           "1 when the node refuses client writes (--read-only).");
  e.Sample(uint64_t{status.read_only() ? 1u : 0u});
  e.Family("tally_writes_refused_total", kCounter,
           "Rows of client writes a read-only node refused.");
  e.Sample(status.writes_refused());

  e.Family("tally_store_writable", kGauge,
           "1 while the store takes writes; 0 once a failed write (a full "
           "disk, an I/O error) made it refuse them until a restart.");
  e.Sample(status.store_write_error().empty() ? 1 : 0);

  // The change log and tombstones.
  e.Family("tally_log_last_sequence", kGauge,
           "The newest change-log sequence.");
  e.Sample(status.last_sequence());
  e.Family("tally_log_first_sequence", kGauge,
           "The oldest change-log sequence kept (older entries were "
           "trimmed).");
  e.Sample(status.first_sequence());
  e.Family("tally_log_entries_trimmed_total", kCounter,
           "Change-log entries removed by retention.");
  e.Sample(status.log_entries_trimmed());
  e.Family("tally_tombstones_purged_total", kCounter,
           "Tombstones purged once every peer had seen them.");
  e.Sample(status.tombstones_purged());
  const v1::ScrubStatus& scrub = status.scrub();
  e.Family("tally_scrub_passes_total", kCounter,
           "Complete scrub passes (every row checked against its digest).");
  e.Sample(scrub.passes());
  e.Family("tally_scrub_rows_checked_total", kCounter,
           "Rows the scrubber checked against their digests.");
  e.Sample(scrub.rows_checked());
  e.Family("tally_scrub_damaged_rows_total", kCounter,
           "Rows the scrubber found damaged on disk (marked for repair).");
  e.Sample(scrub.damaged_rows_found());
  e.Family("tally_scrub_leaves_repaired_total", kCounter,
           "Leaves the scrubber corrected from their rows.");
  e.Sample(scrub.leaves_repaired());
  e.Family("tally_damaged_rows", kGauge,
           "Rows marked damaged now, awaiting a peer's copy; alert on > 0.");
  e.Sample(scrub.damaged_rows());

  if (status.has_process()) RenderProcess(status.process(), &e);
  if (status.has_postgres()) RenderPostgres(status.postgres(), &e);
  return e.Take();
}

}  // namespace node
}  // namespace tally
