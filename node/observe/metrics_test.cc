// Metrics: the Prometheus rendering of a status, and a node that serves its
// own metrics (the HTTP server itself: metrics_server_test.cc).
#include "node/observe/metrics.h"

#include <httplib.h>

#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/config/config.h"
#include "node/node_server.h"
#include "node/observe/duration_histogram.h"
#include "node/observe/version.h"
#include "storage/store.h"
#include "support/temp_dir.h"

namespace tally {
namespace node {
namespace {

using ::tally::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

v1::StatusResponse SmallStatus() {
  v1::StatusResponse s;
  s.set_node_name("eu/db-1");
  s.set_epoch(0x2a);
  s.set_last_sequence(9);
  s.set_first_sequence(3);
  s.set_log_entries_trimmed(2);
  s.set_tombstones_purged(1);
  s.set_sessions_ok(4);
  s.set_sessions_failed(1);
  s.set_diffs_running(1);
  s.set_rows_erased(8);
  s.set_conflicts(2);
  s.set_ties_resolved(3);
  s.mutable_row_filter()->set_rows_read(11);
  s.mutable_row_filter()->set_reads_skipped(12);
  s.mutable_row_filter()->set_keyspaces(2);
  s.mutable_row_filter()->set_built(1);
  s.mutable_row_filter()->set_memory_bytes(98304);
  v1::KeyspaceSummary* ks = s.add_keyspaces();
  ks->set_name("users");
  ks->set_row_count(3);
  ks->set_root_changes(5);
  v1::OriginRows* o = s.add_origins();
  o->set_origin("eu/db-1");
  o->set_rows(2);
  o = s.add_origins();
  o->set_origin("us/db-2");
  o->set_rows(1);
  v1::FeedTotals* feed = s.mutable_feed();
  feed->set_sent(10);
  feed->set_skipped_own(6);
  feed->set_skipped_superseded(2);
  feed->set_received(7);
  feed->set_applied(5);
  feed->set_not_newer(2);
  feed->set_refused_skew(1);
  return s;
}

TEST(RenderPrometheus, SmallStatusRendersExactly) {
  const std::string expected =
      R"(# HELP tally_node_info Always 1; the labels name the node and its change-log epoch.
# TYPE tally_node_info gauge
tally_node_info{node="eu/db-1",epoch="000000000000002a"} 1
# HELP tally_keyspace_rows Rows in the keyspace, tombstones included.
# TYPE tally_keyspace_rows gauge
tally_keyspace_rows{keyspace="users"} 3
# HELP tally_keyspace_root_changes_total Commits that changed the keyspace's Merkle root.
# TYPE tally_keyspace_root_changes_total counter
tally_keyspace_root_changes_total{keyspace="users"} 5
# HELP tally_origin_rows Rows (tombstones included, all keyspaces) whose version was written by the origin.
# TYPE tally_origin_rows gauge
tally_origin_rows{origin="eu/db-1"} 2
tally_origin_rows{origin="us/db-2"} 1
# HELP tally_sessions_running Anti-entropy sessions running now.
# TYPE tally_sessions_running gauge
tally_sessions_running 0
# HELP tally_diffs_running Diffs and repairs against another node that tools asked this node to run (Admin.RunDiff), running now.
# TYPE tally_diffs_running gauge
tally_diffs_running 1
# HELP tally_sessions_total Anti-entropy sessions finished, by outcome, over all peers.
# TYPE tally_sessions_total counter
tally_sessions_total{outcome="ok"} 4
tally_sessions_total{outcome="failed"} 1
# HELP tally_node_bandwidth_bytes_per_second The node's repair bandwidth limit (node-bandwidth, shared by all its sessions and tool-driven repairs) as in force now; SIGHUP reloads it. 0 when unlimited.
# TYPE tally_node_bandwidth_bytes_per_second gauge
tally_node_bandwidth_bytes_per_second 0
# HELP tally_rows_erased_total Rows erased here by sessions with a source peer because the source lacks them, over all peers.
# TYPE tally_rows_erased_total counter
tally_rows_erased_total 8
# HELP tally_conflicts_total Keys sessions found with equal versions and different content, which the tie rule settles (the higher row digest wins), over all peers.
# TYPE tally_conflicts_total counter
tally_conflicts_total 2
# HELP tally_rows_changed_during_session_total Rows sessions left to the capture because an application changed them in a sidecar's table while the session read them, over all peers.
# TYPE tally_rows_changed_during_session_total counter
tally_rows_changed_during_session_total 0
# HELP tally_ties_resolved_total Rows this node's store replaced under the tie rule: the same version as the stored row, other content, a higher row digest.
# TYPE tally_ties_resolved_total counter
tally_ties_resolved_total 3
# HELP tally_unlisted_callers Nodes that run sessions with this node but are not among its peers (a one-sided link: their writes arrive only with their sessions); `tally status` names them.
# TYPE tally_unlisted_callers gauge
tally_unlisted_callers 0
# HELP tally_row_filter_rows_read_total Writes whose row the store read first (last writer wins).
# TYPE tally_row_filter_rows_read_total counter
tally_row_filter_rows_read_total 11
# HELP tally_row_filter_reads_skipped_total Writes of keys the row filter showed absent: no read.
# TYPE tally_row_filter_reads_skipped_total counter
tally_row_filter_reads_skipped_total 12
# HELP tally_row_filter_bytes Memory of the store's row filters (about 1.5 bytes a row).
# TYPE tally_row_filter_bytes gauge
tally_row_filter_bytes 98304
# HELP tally_row_filter_keyspaces_unbuilt Keyspaces whose row filter is still being built after the open (their writes read every row).
# TYPE tally_row_filter_keyspaces_unbuilt gauge
tally_row_filter_keyspaces_unbuilt 1
# HELP tally_feed_entries_sent_total Change-log entries this node's feed sent, over all subscribers.
# TYPE tally_feed_entries_sent_total counter
tally_feed_entries_sent_total 10
# HELP tally_feed_entries_received_total Changes received from upstream feeds, over all upstreams.
# TYPE tally_feed_entries_received_total counter
tally_feed_entries_received_total 7
# HELP tally_feed_entries_applied_total Received changes applied here (newer than the stored row).
# TYPE tally_feed_entries_applied_total counter
tally_feed_entries_applied_total 5
# HELP tally_feed_entries_skipped_total Feed entries not applied, by reason: own and superseded are skipped by this node's feed before sending; not_newer are received changes no newer than the stored row.
# TYPE tally_feed_entries_skipped_total counter
tally_feed_entries_skipped_total{reason="own"} 6
tally_feed_entries_skipped_total{reason="superseded"} 2
tally_feed_entries_skipped_total{reason="not_newer"} 2
# HELP tally_refused_timestamps_total Received changes refused because their timestamp was too far ahead of this node's clock.
# TYPE tally_refused_timestamps_total counter
tally_refused_timestamps_total 1
# HELP tally_build_info Always 1; its labels say which tally this node runs: the project version and the build (git describe).
# TYPE tally_build_info gauge
tally_build_info{version=")" +
      std::string(ProjectVersion()) + R"(",build=")" +
      std::string(BuildDescription()) + R"("} 1
# HELP tally_read_only 1 when the node refuses client writes (--read-only).
# TYPE tally_read_only gauge
tally_read_only 0
# HELP tally_writes_refused_total Rows of client writes a read-only node refused.
# TYPE tally_writes_refused_total counter
tally_writes_refused_total 0
# HELP tally_store_writable 1 while the store takes writes; 0 once a failed write (a full disk, an I/O error) made it refuse them until a restart.
# TYPE tally_store_writable gauge
tally_store_writable 1
# HELP tally_log_last_sequence The newest change-log sequence.
# TYPE tally_log_last_sequence gauge
tally_log_last_sequence 9
# HELP tally_log_first_sequence The oldest change-log sequence kept (older entries were trimmed).
# TYPE tally_log_first_sequence gauge
tally_log_first_sequence 3
# HELP tally_log_entries_trimmed_total Change-log entries removed by retention.
# TYPE tally_log_entries_trimmed_total counter
tally_log_entries_trimmed_total 2
# HELP tally_tombstones_purged_total Tombstones purged once every peer had seen them.
# TYPE tally_tombstones_purged_total counter
tally_tombstones_purged_total 1
# HELP tally_scrub_passes_total Complete scrub passes (every row checked against its digest).
# TYPE tally_scrub_passes_total counter
tally_scrub_passes_total 0
# HELP tally_scrub_rows_checked_total Rows the scrubber checked against their digests.
# TYPE tally_scrub_rows_checked_total counter
tally_scrub_rows_checked_total 0
# HELP tally_scrub_damaged_rows_total Rows the scrubber found damaged on disk (marked for repair).
# TYPE tally_scrub_damaged_rows_total counter
tally_scrub_damaged_rows_total 0
# HELP tally_scrub_leaves_repaired_total Leaves the scrubber corrected from their rows.
# TYPE tally_scrub_leaves_repaired_total counter
tally_scrub_leaves_repaired_total 0
# HELP tally_damaged_rows Rows marked damaged now, awaiting a peer's copy; alert on > 0.
# TYPE tally_damaged_rows gauge
tally_damaged_rows 0
)";
  EXPECT_EQ(RenderPrometheus(SmallStatus()), expected);
}

TEST(RenderPrometheus, PeersAndSubscribersGetTheirOwnSeries) {
  v1::StatusResponse s = SmallStatus();
  v1::PeerStatus* p = s.add_peers();
  p->set_address("127.0.0.1:7401");
  p->set_sessions_ok(3);
  p->set_sessions_failed(1);
  p->set_rows_received(11);
  p->set_rows_sent(12);
  p->set_bytes_repaired(4096);
  p->set_rows_erased(8);
  p->set_conflicts(2);
  p->set_feed_received(7);
  p->set_feed_applied(5);
  p->set_feed_not_newer(2);
  p->set_feed_skipped_own(6);
  p->set_feed_lag_entries(40);
  p->set_feed_lag_seconds(1.5);
  p->set_feed_connected(true);
  p->set_feed_reconnects(2);
  p->set_feed_position(77);
  p->set_last_session_unix_ms(1700000300042);
  p->set_last_success_unix_ms(1700000000500);
  p->set_paused(true);
  s.add_peers()->set_address("127.0.0.1:7402");  // not paused
  v1::FeedSubscriptionStatus* sub = s.add_subscriptions();
  sub->set_subscriber("us/db-2");
  sub->set_sent(10);
  sub->set_position(9);
  const std::string text = RenderPrometheus(s);
  for (const char* line : {
           "tally_peer_sessions_total{peer=\"127.0.0.1:7401\",outcome=\"ok\"} "
           "3\n",
           "tally_peer_sessions_total{peer=\"127.0.0.1:7401\",outcome="
           "\"failed\"} 1\n",
           "tally_repair_rows_total{peer=\"127.0.0.1:7401\",direction="
           "\"received\"} 11\n",
           "tally_repair_rows_total{peer=\"127.0.0.1:7401\",direction="
           "\"sent\"} 12\n",
           "tally_repair_bytes_total{peer=\"127.0.0.1:7401\"} 4096\n",
           "tally_peer_rows_erased_total{peer=\"127.0.0.1:7401\"} 8\n",
           "tally_peer_conflicts_total{peer=\"127.0.0.1:7401\"} 2\n",
           "tally_feed_upstream_entries_received_total{peer=\"127.0.0.1:"
           "7401\"} 7\n",
           "tally_feed_upstream_entries_applied_total{peer=\"127.0.0.1:"
           "7401\"} 5\n",
           "tally_feed_upstream_entries_skipped_total{peer=\"127.0.0.1:7401\","
           "reason=\"own\"} 6\n",
           "tally_feed_upstream_entries_skipped_total{peer=\"127.0.0.1:7401\","
           "reason=\"not_newer\"} 2\n",
           "tally_feed_lag_entries{peer=\"127.0.0.1:7401\"} 40\n",
           "tally_feed_lag_seconds{peer=\"127.0.0.1:7401\"} 1.5\n",
           "tally_feed_connected{peer=\"127.0.0.1:7401\"} 1\n",
           "tally_feed_reconnects_total{peer=\"127.0.0.1:7401\"} 2\n",
           "tally_feed_upstream_position{peer=\"127.0.0.1:7401\"} 77\n",
           "tally_feed_subscriber_entries_sent_total{subscriber=\"us/db-2\"} "
           "10\n",
           "tally_feed_subscriber_position{subscriber=\"us/db-2\"} 9\n",
           // Times keep every digit (not 1.7e+09).
           "tally_peer_last_session_timestamp_seconds{peer=\"127.0.0.1:7401\"} "
           "1700000300.042\n",
           "tally_peer_last_success_timestamp_seconds{peer=\"127.0.0.1:7401\"} "
           "1700000000.500\n",
           "# TYPE tally_peer_paused gauge\n"
           "tally_peer_paused{peer=\"127.0.0.1:7401\"} 1\n"
           "tally_peer_paused{peer=\"127.0.0.1:7402\"} 0\n",
           "# TYPE tally_feed_lag_seconds gauge\n",
           "# TYPE tally_repair_bytes_total counter\n",
       }) {
    EXPECT_THAT(text, HasSubstr(line));
  }
}

// The Prometheus enum idiom: every phase has a series per peer, 1 for the
// phase the peer's session is in and 0 for the others.
TEST(RenderPrometheus, SessionPhaseIsOneSeriesPerPhaseOneForTheCurrent) {
  v1::StatusResponse s = SmallStatus();
  v1::PeerStatus* p = s.add_peers();
  p->set_address("127.0.0.1:7401");
  p->mutable_session()->set_phase("repair");
  p->mutable_session()->set_phase_seconds(2.5);
  s.add_peers()->set_address("127.0.0.1:7402");  // no session yet
  const std::string text = RenderPrometheus(s);
  EXPECT_THAT(text, HasSubstr("# TYPE tally_session_phase gauge\n"
                              "tally_session_phase{peer=\"127.0.0.1:7401\","
                              "phase=\"idle\"} 0\n"
                              "tally_session_phase{peer=\"127.0.0.1:7401\","
                              "phase=\"handshake\"} 0\n"
                              "tally_session_phase{peer=\"127.0.0.1:7401\","
                              "phase=\"diff\"} 0\n"
                              "tally_session_phase{peer=\"127.0.0.1:7401\","
                              "phase=\"repair\"} 1\n"
                              "tally_session_phase{peer=\"127.0.0.1:7401\","
                              "phase=\"done\"} 0\n"
                              "tally_session_phase{peer=\"127.0.0.1:7401\","
                              "phase=\"failed\"} 0\n"
                              "tally_session_phase{peer=\"127.0.0.1:7402\","
                              "phase=\"idle\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("tally_session_phase{peer=\"127.0.0.1:7402\","
                              "phase=\"repair\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE tally_session_phase_seconds gauge\n"
                              "tally_session_phase_seconds{peer=\"127.0.0.1:"
                              "7401\"} 2.5\n"));
}

// A status as a running node answers it: with its process, and a peer
// with sessions.
v1::StatusResponse FullStatus() {
  v1::StatusResponse s = SmallStatus();
  v1::PeerStatus* peer = s.add_peers();
  peer->set_address("127.0.0.1:1");
  DurationHistogram durations({0.1, 1});
  durations.Add(absl::Milliseconds(50));
  durations.Add(absl::Milliseconds(700));
  durations.Add(absl::Seconds(4));
  durations.ToProto(peer->mutable_session_seconds());
  s.add_subscriptions()->set_subscriber("x");
  v1::ProcessStatus* process = s.mutable_process();
  process->set_cpu_seconds(1.5);
  process->set_resident_anon_bytes(100 << 20);
  process->set_resident_file_bytes(1800 << 20);
  process->set_resident_shmem_bytes(4096);
  process->set_virtual_bytes(uint64_t{3} << 30);
  process->set_open_fds(42);
  process->set_max_fds(1024);
  process->set_threads(17);
  process->set_start_unix_ms(1796274850123);
  v1::OriginRows* copy = s.add_copy_writes();
  copy->set_origin("eu/db-1");
  copy->set_rows(3);
  return s;
}

TEST(RenderPrometheus, EveryFamilyHasHelpAndTypeOnceAndCountersEndInTotal) {
  v1::StatusResponse s = FullStatus();
  const std::string text = RenderPrometheus(s);
  std::string family;
  bool histogram = false;
  std::set<std::string> seen;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty()) continue;
    if (absl::StartsWith(line, "# HELP ")) {
      std::vector<std::string> words = absl::StrSplit(line, ' ');
      family = words[2];
      EXPECT_TRUE(seen.insert(family).second) << "twice: " << family;
      continue;
    }
    if (absl::StartsWith(line, "# TYPE ")) {
      histogram = line == absl::StrCat("# TYPE ", family, " histogram");
      EXPECT_TRUE(line == absl::StrCat("# TYPE ", family, " counter") ||
                  line == absl::StrCat("# TYPE ", family, " gauge") ||
                  histogram)
          << line;
      EXPECT_EQ(absl::EndsWith(family, "_total"),
                absl::EndsWith(line, " counter"))
          << line;
      continue;
    }
    // A sample of the current family: name, optional labels, value (a
    // histogram's with _bucket, _sum or _count).
    bool named = absl::StartsWith(line, family + "{") ||
                 absl::StartsWith(line, family + " ");
    for (const char* suffix : {"_bucket{", "_sum{", "_count{"}) {
      named |= histogram && absl::StartsWith(line, family + suffix);
    }
    EXPECT_TRUE(named) << line << " under " << family;
  }
  // Every family, with a peer and a subscriber: 60 of the node (the session
  // duration histogram, the copy's writes, the paused gauge, the node's
  // bandwidth limit, the rows sessions left to the capture, the unlisted
  // callers, the upstream's changes left out and the subscriber's skipped
  // entries among them; a peer not paused has no paused-since time) and 8
  // of the process.
  EXPECT_EQ(seen.size(), 68u);
  // A peer with no session yet has no time series (a 0 would read as 1970).
  EXPECT_THAT(text, Not(HasSubstr("_timestamp_seconds")));
}

TEST(RenderPrometheus, TheNodeBandwidthLimitIsAGaugeInWholeBytes) {
  v1::StatusResponse s = SmallStatus();
  // 0: unlimited, as node-bandwidth says it.
  EXPECT_THAT(RenderPrometheus(s),
              HasSubstr("# TYPE tally_node_bandwidth_bytes_per_second gauge\n"
                        "tally_node_bandwidth_bytes_per_second 0\n"));
  // Every digit (a double through StrCat would print 1.23457e+06).
  s.set_node_bandwidth_bytes_per_second(1234567);
  EXPECT_THAT(RenderPrometheus(s),
              HasSubstr("tally_node_bandwidth_bytes_per_second 1234567\n"));
}

TEST(RenderPrometheus, SessionDurationsAreACumulativeHistogram) {
  const std::string text = RenderPrometheus(FullStatus());
  for (const char* line : {
           "# TYPE tally_session_duration_seconds histogram\n",
           "tally_session_duration_seconds_bucket{peer=\"127.0.0.1:1\",le="
           "\"0.1\"} 1\n",
           "tally_session_duration_seconds_bucket{peer=\"127.0.0.1:1\",le="
           "\"1\"} 2\n",
           "tally_session_duration_seconds_bucket{peer=\"127.0.0.1:1\",le="
           "\"+Inf\"} 3\n",
           "tally_session_duration_seconds_sum{peer=\"127.0.0.1:1\"} 4.75\n",
           "tally_session_duration_seconds_count{peer=\"127.0.0.1:1\"} 3\n",
       }) {
    EXPECT_THAT(text, HasSubstr(line));
  }
}

TEST(RenderPrometheus, TheProcessSplitsResidentMemoryByKind) {
  const std::string text = RenderPrometheus(FullStatus());
  for (const char* line : {
           "process_cpu_seconds_total 1.5\n",
           "process_resident_memory_bytes 1992298496\n",
           "tally_process_resident_memory_bytes{kind=\"anon\"} 104857600\n",
           "tally_process_resident_memory_bytes{kind=\"file\"} 1887436800\n",
           "process_open_fds 42\n",
           "process_max_fds 1024\n",
           "process_threads 17\n",
           "process_start_time_seconds 1796274850.123\n",
       }) {
    EXPECT_THAT(text, HasSubstr(line));
  }
  // Without a process (a status from an older node) none of them.
  EXPECT_THAT(RenderPrometheus(SmallStatus()), Not(HasSubstr("process_")));
}

TEST(RenderPrometheus, ASidecarAddsItsFamiliesAndItsPhaseAsOneSeriesEach) {
  v1::StatusResponse s = SmallStatus();
  s.add_peers()->set_address("127.0.0.1:1");
  s.add_subscriptions()->set_subscriber("x");
  v1::PostgresStatus* pg = s.mutable_postgres();
  pg->set_slot("tally_a_0123abcd");
  pg->set_publication("tally_a_0123abcd");
  pg->set_origin("tally_a_0123abcd");
  pg->set_phase("following");
  pg->set_slot_lag_bytes(176);
  pg->set_confirmed_lsn_bytes(0x16B3748);
  pg->set_capture_lag_seconds(0.25);
  pg->set_rows_captured(10);
  pg->set_rows_applied(7);
  pg->set_rows_refused(1);
  v1::PostgresTable* t = pg->add_tables();
  t->set_keyspace("public.users");
  t->set_state("ready");
  t->set_rows(42);
  v1::PostgresTable* t2 = pg->add_tables();
  t2->set_keyspace("public.orders");
  t2->set_state("rebuilding");
  const std::string text = RenderPrometheus(s);
  for (const char* line : {
           "tally_pg_phase{phase=\"building\"} 0\n",
           "tally_pg_phase{phase=\"following\"} 1\n",
           "tally_pg_phase{phase=\"failed\"} 0\n",
           "tally_pg_slot_lag_bytes 176\n",
           "tally_pg_confirmed_lsn 23803720\n",
           "tally_pg_capture_lag_seconds 0.25\n",
           "tally_pg_rows_captured_total 10\n",
           "tally_pg_rows_applied_total 7\n",
           "tally_pg_rows_refused_total 1\n",
           "tally_pg_table_ready{keyspace=\"public.users\",state=\"ready\"} "
           "1\n",
           "tally_pg_table_ready{keyspace=\"public.orders\",state="
           "\"rebuilding\"} "
           "0\n",
           "tally_pg_table_rows{keyspace=\"public.users\"} 42\n",
           "tally_pg_info{slot=\"tally_a_0123abcd\",publication=\"tally_a_"
           "0123abcd\",origin=\"tally_a_0123abcd\"} 1\n",
       }) {
    EXPECT_THAT(text, HasSubstr(line));
  }
  std::set<std::string> families;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(line, "# HELP ")) {
      std::vector<std::string> words = absl::StrSplit(line, ' ');
      EXPECT_TRUE(families.insert(words[2]).second) << "twice: " << words[2];
    }
  }
  // The 58 of every node (without a process, a session or a copy's writes;
  // the upstream's changes left out and the subscriber's skipped entries
  // among them) and the sidecar's 19 (the build's rate and time so far and
  // the lost index's two among them; the time left is absent while not
  // known).
  EXPECT_EQ(families.size(), 58u + 19u);
  // Without a sidecar none of them.
  EXPECT_THAT(RenderPrometheus(SmallStatus()),
              ::testing::Not(HasSubstr("tally_pg_")));
}

TEST(RenderPrometheus, LabelValuesAreEscaped) {
  EXPECT_EQ(EscapePrometheusLabelValue("plain/name-1"), "plain/name-1");
  EXPECT_EQ(EscapePrometheusLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  v1::StatusResponse s;
  s.set_node_name("we\"ird\\node\n");
  v1::OriginRows* o = s.add_origins();
  o->set_origin("x\"y");
  o->set_rows(1);
  const std::string text = RenderPrometheus(s);
  EXPECT_THAT(text, HasSubstr("tally_node_info{node=\"we\\\"ird\\\\node\\n\","
                              "epoch=\"0000000000000000\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("tally_origin_rows{origin=\"x\\\"y\"} 1\n"));
}

// ------------------------------------------------------- a running node

std::string Scrape(int port) {
  httplib::Client client("127.0.0.1", port);
  httplib::Result r = client.Get("/metrics");
  if (!r) return "scrape failed: " + httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  return r->body;
}

TEST(NodeServerMetrics, ScrapeSeesAPutAndTheOrigin) {
  TempDir dir;
  NodeConfig config;
  config.name = "metrics-node";
  config.data_dir = dir.path();
  config.listen = "127.0.0.1:0";
  config.metrics_listen = "127.0.0.1:0";
  config.sync_writes = false;
  auto node = NodeServer::Start(config);
  ASSERT_TRUE(node.ok()) << node.status();
  const int port = (*node)->metrics_port();
  ASSERT_GT(port, 0);

  const std::string before = Scrape(port);
  EXPECT_THAT(before, HasSubstr("tally_node_info{node=\"metrics-node\","));
  EXPECT_THAT(before, Not(HasSubstr("tally_keyspace_rows{")));

  storage::WriteRequest write;
  write.mutations.push_back(storage::Mutation::Put("ks", "k1", "v"));
  write.mutations.push_back(storage::Mutation::Put("ks", "k2", "v"));
  ASSERT_TRUE((*node)->store().Write(std::move(write)).ok());
  storage::WriteRequest del;
  del.mutations.push_back(storage::Mutation::Delete("ks", "k2"));
  ASSERT_TRUE((*node)->store().Write(std::move(del)).ok());

  const std::string after = Scrape(port);
  EXPECT_THAT(after, HasSubstr("tally_keyspace_rows{keyspace=\"ks\"} 2\n"));
  EXPECT_THAT(after, HasSubstr("tally_keyspace_root_changes_total{keyspace="
                               "\"ks\"} 2\n"));
  EXPECT_THAT(after,
              HasSubstr("tally_origin_rows{origin=\"metrics-node\"} 2\n"));
  EXPECT_THAT(after, HasSubstr("tally_log_last_sequence 3\n"));
  (*node)->Shutdown();
  httplib::Client client("127.0.0.1", port);
  EXPECT_FALSE(client.Get("/metrics")) << "still serving after Shutdown";
}

TEST(NodeServerMetrics, NoMetricsListenServesNothing) {
  TempDir dir;
  NodeConfig config;
  config.name = "quiet-node";
  config.data_dir = dir.path();
  config.listen = "127.0.0.1:0";
  auto node = NodeServer::Start(config);
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ((*node)->metrics_port(), 0);
}

}  // namespace
}  // namespace node
}  // namespace tally
