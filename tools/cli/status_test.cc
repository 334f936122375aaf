#include "tools/cli/status.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tally {
namespace cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::StatusResponse MeshStatus() {
  v1::StatusResponse s;
  s.set_node_name("eu/db-1");
  s.set_listen("127.0.0.1:7400");
  s.set_epoch(0x2a);
  s.set_last_sequence(9);
  s.set_first_sequence(3);
  s.set_log_entries_trimmed(2);
  s.set_sessions_ok(4);
  s.set_sessions_failed(1);
  s.set_rows_erased(8);
  s.set_conflicts(2);
  s.set_ties_resolved(1);
  s.mutable_row_filter()->set_keyspaces(1);
  s.mutable_row_filter()->set_built(1);
  s.mutable_row_filter()->set_memory_bytes(49152);
  s.mutable_row_filter()->set_rows_read(2);
  s.mutable_row_filter()->set_reads_skipped(3);
  v1::KeyspaceSummary* ks = s.add_keyspaces();
  ks->set_name("users");
  ks->set_row_count(3);
  ks->set_depth(16);
  ks->set_root(std::string(16, '\x01'));
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
  v1::PeerStatus* p = s.add_peers();
  p->set_address("127.0.0.1:7401");
  p->set_role("peer");
  p->set_name("us/db-2");
  p->set_last_outcome("ok");
  p->set_sessions_ok(4);
  p->set_sessions_failed(1);
  p->set_rows_received(11);
  p->set_rows_sent(12);
  p->set_rows_erased(8);
  p->set_conflicts(2);
  p->set_bytes_repaired(4096);
  p->set_feed_connected(true);
  p->set_feed_position(77);
  p->set_feed_lag_entries(40);
  p->set_feed_lag_seconds(1.5);
  p->set_feed_received(7);
  p->set_feed_applied(5);
  p->set_feed_not_newer(2);
  p->set_feed_skipped_own(6);
  p->set_feed_skipped_superseded(2);
  p->set_feed_reconnects(1);
  v1::FeedSubscriptionStatus* sub = s.add_subscriptions();
  sub->set_subscriber("us/db-2");
  sub->set_position(9);
  sub->set_sent(10);
  sub->set_skipped_own(6);
  sub->set_skipped_superseded(2);
  return s;
}

TEST(StatusText, ShowsFeedCountersLagAndOrigins) {
  const std::string text =
      StatusText(MeshStatus(), "localhost:7400", absl::UnixEpoch());
  EXPECT_EQ(text, R"(  node               eu/db-1
  listen             127.0.0.1:7400
  epoch              000000000000002a
  store              writable
  client writes      accepted
  last sequence      9 (oldest kept 3, 2 trimmed)
  sessions           0 running, 4 ok, 1 failed (8 rows erased, 2 conflicts)
  feed sent          10 (skipped: 6 own, 2 superseded)
  feed received      7 (applied 5, not newer 2, refused timestamps 0)
  tombstones purged  0
  ties resolved      1
  row filter         1 of 1 keyspaces built, 0.05 MB; writes: 2 read their row, 3 skipped the read
  clock behind       0.0 s
  scrub              0 passes, 0 rows checked, 0 damaged found, 0 leaves repaired; damaged now: 0

  process         unknown (the node did not report it)
  node bandwidth  unlimited (node-bandwidth 0)

  KEYSPACE  ROWS  DEPTH  ROOT                              ROOT CHANGES
  users     3     16     01010101010101010101010101010101  5

  ORIGIN   ROWS
  eu/db-1  2
  us/db-2  1

  PEER            ROLE  NAME     LAST SESSION  OUTCOME  RUNNING  OK/FAILED  ROWS IN/OUT  ERASED  CONFLICTS  REPAIRED
  127.0.0.1:7401  peer  us/db-2  never         ok       no       4/1        11/12        8       2          4.0 KB

  SESSION WITH    PHASE  KEYSPACE  FOR  KEYSPACES  DIFFERENCES  ROWS IN/OUT
  127.0.0.1:7401  idle   -         -    0/0        0            0/0

  SESSION TIMES WITH  SESSIONS  MEAN  P50  P90
  127.0.0.1:7401      0         -     -    -

  WHERE THE SESSIONS FOUND DIFFERENCES: each strip is a keyspace's token space, first token at the left, in 64 columns
  127.0.0.1:7401: no session ended yet

  FEED FROM       CONNECTED  POSITION  LAG                RECEIVED  APPLIED  NOT NEWER  SKIPPED OWN/SUPERSEDED  REFUSED  RECONNECTS
  127.0.0.1:7401  yes        77        40 entries, 1.5 s  7         5        2          6/2                     0        1

  SUBSCRIBER  POSITION  SENT  SKIPPED OWN/SUPERSEDED
  us/db-2     9         10    6/2
)");
}

// What a running session is doing, per peer: its phase, the
// keyspace, for how long, and its counts so far; a failed one names the
// phase it failed in.
TEST(StatusText, ShowsEachPeersSessionPhaseKeyspaceAndForHowLong) {
  v1::StatusResponse s = MeshStatus();
  v1::SessionProgress* running = s.mutable_peers(0)->mutable_session();
  running->set_phase("repair");
  running->set_keyspace("users");
  running->set_phase_since_unix_ms(1764500000000);
  running->set_phase_seconds(2.5);
  running->set_keyspaces(3);
  running->set_keyspaces_done(1);
  running->set_differences(1200);
  running->set_rows_received(1000);
  running->set_rows_sent(7);
  v1::PeerStatus* other = s.add_peers();
  other->set_address("127.0.0.1:7402");
  v1::SessionProgress* failed = other->mutable_session();
  failed->set_phase("failed");
  failed->set_failed_in("handshake");
  failed->set_phase_since_unix_ms(1764500000000);
  failed->set_phase_seconds(61);
  const std::string text = StatusText(s, "x:1", absl::UnixEpoch());
  EXPECT_THAT(text, HasSubstr(R"(
  SESSION WITH    PHASE                KEYSPACE  FOR     KEYSPACES  DIFFERENCES  ROWS IN/OUT
  127.0.0.1:7401  repair               users     2.5 s   1/3        1200         1000/7
  127.0.0.1:7402  failed in handshake  -         61.0 s  0/0        0            0/0
)"));
}

// A running session's rows against its total, its rate and
// time left, on a line of its own — "ETA unknown" without a total.
TEST(StatusText, ShowsARunningSessionsTotalRateAndTimeLeft) {
  v1::StatusResponse s = MeshStatus();
  v1::SessionProgress* bootstrap = s.mutable_peers(0)->mutable_session();
  bootstrap->set_phase("repair");
  bootstrap->set_rows_received(12000);
  bootstrap->set_rows_expected(50000);
  bootstrap->set_rows_per_second(2000);
  bootstrap->set_eta_seconds(19);
  v1::PeerStatus* other = s.add_peers();
  other->set_address("127.0.0.1:7402");
  other->mutable_session()->set_phase("diff");
  other->mutable_session()->set_rows_sent(300);
  other->mutable_session()->set_rows_per_second(100);
  const std::string text = StatusText(s, "x:1", absl::UnixEpoch());
  EXPECT_THAT(text, HasSubstr("  session with 127.0.0.1:7401: 12000 of 50000 "
                              "rows (24%), 2000 rows/s, ETA 19s\n"));
  EXPECT_THAT(text, HasSubstr("  session with 127.0.0.1:7402: 300 rows, 100 "
                              "rows/s, ETA unknown\n"));
  // A session that ended has no such line.
  bootstrap->set_phase("done");
  EXPECT_THAT(StatusText(s, "x:1", absl::UnixEpoch()),
              Not(HasSubstr("session with 127.0.0.1:7401:")));

  const Json j = StatusJson(s, "x:1")["peers"];
  EXPECT_EQ(j[0]["session"]["rows_expected"], 50000);
  EXPECT_EQ(j[0]["session"]["rows_per_second"], 2000.0);
  EXPECT_EQ(j[0]["session"]["eta_seconds"], 19.0);
  EXPECT_TRUE(j[1]["session"]["rows_expected"].is_null());
  EXPECT_TRUE(j[1]["session"]["eta_seconds"].is_null());
}

// The last sessions with each peer, newest first, a small
// table per peer that had any; a paused peer says so in the peers table.
TEST(StatusText, ShowsEachPeersLastSessionsAndAPause) {
  v1::StatusResponse s = MeshStatus();
  v1::PeerStatus* p = s.mutable_peers(0);
  p->set_paused(true);
  v1::SessionRecord* newest = p->add_history();
  newest->set_started_unix_ms(1764500060000);
  newest->set_seconds(0.3);
  newest->set_trigger("requested");
  newest->set_outcome("CANCELLED: session stopped: the peer was paused");
  newest->set_keyspaces(1);
  newest->set_differences(2000);
  newest->set_rows_received(1000);
  newest->set_bytes_repaired(40000);
  v1::SessionRecord* older = p->add_history();
  older->set_started_unix_ms(1764500000000);
  older->set_seconds(1.5);
  older->set_trigger("scheduled");
  older->set_outcome("ok");
  older->set_keyspaces(2);
  older->set_differences(3);
  older->set_rows_received(1);
  older->set_rows_sent(2);
  older->set_rows_erased(4);
  older->set_conflicts(5);
  older->set_bytes_repaired(100);
  s.add_peers()->set_address("127.0.0.1:7402");  // no session yet: no table
  const std::string text = StatusText(s, "x:1", absl::UnixEpoch());
  EXPECT_THAT(text, HasSubstr("  127.0.0.1:7401  peer  us/db-2  never         "
                              "ok       paused "));
  EXPECT_THAT(text, HasSubstr(R"(
  LAST SESSIONS WITH 127.0.0.1:7401 (us/db-2), newest first
  STARTED               TOOK   TRIGGER    OUTCOME                                          KEYSPACES  DIFFERENCES  ROWS IN/OUT  ERASED  CONFLICTS  MOVED
  2025-11-30T10:54:20Z  0.3 s  requested  CANCELLED: session stopped: the peer was paused  1          2000         1000/0       0       0          39.1 KB
  2025-11-30T10:53:20Z  1.5 s  scheduled  ok                                               2          3            1/2          4       5          100 B
)"));
  EXPECT_THAT(text,
              ::testing::Not(HasSubstr("LAST SESSIONS WITH 127.0.0.1:7402")));
}

TEST(StatusJson, HoldsEachPeersHistoryNewestFirstAndThePause) {
  v1::StatusResponse s = MeshStatus();
  v1::PeerStatus* p = s.mutable_peers(0);
  p->set_paused(true);
  p->set_paused_since_unix_ms(1764500070000);
  p->mutable_session()->set_trigger("requested");
  for (int i = 0; i < 2; ++i) {
    v1::SessionRecord* r = p->add_history();
    r->set_started_unix_ms(1764500060000 - i * 60000);
    r->set_seconds(1.5);
    r->set_trigger("scheduled");
    r->set_outcome(i == 0 ? "ok" : "UNAVAILABLE: down");
    r->set_keyspaces(2);
    r->set_differences(3);
    r->set_rows_received(10 + i);
    r->set_rows_sent(20);
    r->set_rows_erased(4);
    r->set_conflicts(5);
    r->set_bytes_repaired(100);
  }
  const Json peer = StatusJson(s, "x:1")["peers"][0];
  EXPECT_EQ(peer["paused"], true);
  EXPECT_EQ(peer["paused_since_unix_ms"], 1764500070000);
  EXPECT_EQ(peer["session"]["trigger"], "requested");
  ASSERT_EQ(peer["history"].size(), 2u);
  const Json& newest = peer["history"][0];
  EXPECT_EQ(newest["started_unix_ms"], 1764500060000);
  EXPECT_EQ(newest["seconds"], 1.5);
  EXPECT_EQ(newest["trigger"], "scheduled");
  EXPECT_EQ(newest["outcome"], "ok");
  EXPECT_EQ(newest["keyspaces"], 2);
  EXPECT_EQ(newest["differences"], 3);
  EXPECT_EQ(newest["rows_received"], 10);
  EXPECT_EQ(newest["rows_sent"], 20);
  EXPECT_EQ(newest["rows_erased"], 4);
  EXPECT_EQ(newest["conflicts"], 5);
  EXPECT_EQ(newest["bytes_repaired"], 100);
  EXPECT_EQ(peer["history"][1]["outcome"], "UNAVAILABLE: down");
  // No history yet: an empty list, not null.
  EXPECT_EQ(StatusJson(MeshStatus(), "x:1")["peers"][0]["history"].size(), 0u);
  EXPECT_EQ(StatusJson(MeshStatus(), "x:1")["peers"][0]["paused"], false);
}

TEST(StatusJson, HoldsEachPeersSession) {
  v1::StatusResponse s = MeshStatus();
  v1::SessionProgress* session = s.mutable_peers(0)->mutable_session();
  session->set_phase("diff");
  session->set_keyspace("users");
  session->set_phase_since_unix_ms(1764500000000);
  session->set_phase_seconds(0.5);
  session->set_started_unix_ms(1764499999000);
  session->set_keyspaces(2);
  session->set_keyspaces_done(1);
  session->set_differences(9);
  session->set_rows_received(4);
  session->set_rows_sent(5);
  const Json j = StatusJson(s, "x:1")["peers"][0]["session"];
  EXPECT_EQ(j["phase"], "diff");
  EXPECT_EQ(j["failed_in"], "");
  EXPECT_EQ(j["keyspace"], "users");
  EXPECT_EQ(j["phase_since_unix_ms"], 1764500000000);
  EXPECT_EQ(j["phase_seconds"], 0.5);
  EXPECT_EQ(j["started_unix_ms"], 1764499999000);
  EXPECT_EQ(j["keyspaces"], 2);
  EXPECT_EQ(j["keyspaces_done"], 1);
  EXPECT_EQ(j["differences"], 9);
  EXPECT_EQ(j["rows_received"], 4);
  EXPECT_EQ(j["rows_sent"], 5);
  // A peer that had no session yet.
  EXPECT_EQ(StatusJson(MeshStatus(), "x:1")["peers"][0]["session"]["phase"],
            "idle");
}

// A peer that is down failed its last session with gRPC's whole error: in
// one cell, rows ran to ~370 columns. The cell is cut; the error follows the
// table whole, wrapped.
TEST(StatusText, ALongOutcomeIsCutInItsCellAndWrittenWholeBelow) {
  v1::StatusResponse status;
  v1::PeerStatus* p = status.add_peers();
  p->set_address("10.0.0.2:7400");
  const std::string error =
      "failed: UNAVAILABLE: node 10.0.0.2:7400 is unavailable (Handshake): "
      "failed to connect to all addresses; last error: UNKNOWN: "
      "ipv4:10.0.0.2:7400: Failed to connect to remote host: Connection "
      "refused; the peer may be down, or not listening on that address";
  p->set_last_outcome(error);
  const std::string text =
      StatusText(status, "127.0.0.1:7400", absl::UnixEpoch());
  size_t widest = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    widest = std::max(widest, line.size());
  }
  EXPECT_LE(widest, 200u) << text;
  EXPECT_THAT(text, HasSubstr("failed: UNAVAILABLE: node 10.0.0.2:74..."));
  EXPECT_THAT(text, HasSubstr("last outcomes in full:\n  10.0.0.2:7400: "
                              "failed: UNAVAILABLE:"));
  // Every word of the error is there, in order.
  std::string joined;
  const size_t below = text.find("last outcomes in full:");
  for (absl::string_view word : absl::StrSplit(
           text.substr(below), absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
    absl::StrAppend(&joined, word, " ");
  }
  EXPECT_THAT(joined, HasSubstr(error));
}

TEST(StatusText, EmptyNodeSaysSo) {
  v1::StatusResponse s;
  s.set_node_name("n");
  const std::string text = StatusText(s, "127.0.0.1:1", absl::UnixEpoch());
  EXPECT_THAT(text, HasSubstr("  listen             127.0.0.1:1\n"));
  EXPECT_THAT(text, HasSubstr("  last sequence      0\n"));
  EXPECT_THAT(text, HasSubstr("  no keyspaces\n"));
  EXPECT_THAT(text, HasSubstr("  no rows from any origin\n"));
  EXPECT_THAT(text, HasSubstr("  no peers\n"));
  EXPECT_THAT(text, HasSubstr("  no subscribers\n"));
  EXPECT_THAT(text, testing::Not(HasSubstr("FEED FROM")));
  EXPECT_THAT(text, testing::Not(HasSubstr("SESSION WITH")));
}

TEST(StatusJson, HoldsFeedLagAndOrigins) {
  const Json j = StatusJson(MeshStatus(), "x:1");
  EXPECT_EQ(j["listen"], "127.0.0.1:7400");
  EXPECT_EQ(j["first_sequence"], 3);
  EXPECT_EQ(j["log_entries_trimmed"], 2);
  EXPECT_EQ(j["sessions_ok"], 4);
  EXPECT_EQ(j["feed"]["sent"], 10);
  EXPECT_EQ(j["feed"]["skipped_own"], 6);
  EXPECT_EQ(j["feed"]["skipped_superseded"], 2);
  EXPECT_EQ(j["feed"]["received"], 7);
  EXPECT_EQ(j["feed"]["applied"], 5);
  EXPECT_EQ(j["feed"]["not_newer"], 2);
  EXPECT_EQ(j["keyspaces"][0]["root_changes"], 5);
  EXPECT_EQ(j["origins"][1]["origin"], "us/db-2");
  EXPECT_EQ(j["origins"][1]["rows"], 1);
  const Json& peer = j["peers"][0];
  EXPECT_EQ(peer["bytes_repaired"], 4096);
  EXPECT_EQ(peer["feed"]["connected"], true);
  EXPECT_EQ(peer["feed"]["lag_entries"], 40);
  EXPECT_EQ(peer["feed"]["lag_seconds"], 1.5);
  EXPECT_EQ(peer["feed"]["skipped_superseded"], 2);
  EXPECT_EQ(j["subscriptions"][0]["subscriber"], "us/db-2");
  EXPECT_EQ(j["subscriptions"][0]["sent"], 10);
  EXPECT_EQ(j["clock_behind_seconds"], 0.0);
  EXPECT_EQ(j["scrub"]["damaged_rows"], 0);
  EXPECT_EQ(peer["clock_behind_seconds"], 0.0);
  // One line, parseable.
  const std::string line = DumpJson(j);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_EQ(Json::parse(line), j);
}

// Rows erased by a source and conflicts were only in a
// log line; status shows them per peer and in total.
TEST(StatusJson, CountsErasedRowsAndConflictsPerPeerAndInTotal) {
  const Json j = StatusJson(MeshStatus(), "x:1");
  EXPECT_EQ(j["rows_erased"], 8);
  EXPECT_EQ(j["conflicts"], 2);
  EXPECT_EQ(j["ties_resolved"], 1);
  EXPECT_EQ(j["peers"][0]["rows_erased"], 8);
  EXPECT_EQ(j["peers"][0]["conflicts"], 2);
}

// Diffs a tool asked the node to run (Admin.RunDiff) are not sessions.
TEST(StatusJson, CountsDiffsRunningApartFromSessions) {
  v1::StatusResponse s;
  s.set_sessions_running(1);
  s.set_diffs_running(2);
  const Json j = StatusJson(s, "x:1");
  EXPECT_EQ(j["sessions_running"], 1);
  EXPECT_EQ(j["diffs_running"], 2);
}

// A random epoch above 2^53 was a JSON number, which jq
// and JavaScript round; it is now the same 16 hex digits as in the text
// (and the metrics' tally_node_info label).
TEST(StatusJson, EpochAbove2To53IsWrittenAsInTextAndMetrics) {
  v1::StatusResponse s = MeshStatus();
  s.set_epoch(0xfedcba9876543211);
  const Json j = StatusJson(s, "x:1");
  ASSERT_TRUE(j["epoch"].is_string()) << j["epoch"];
  EXPECT_EQ(j["epoch"], "fedcba9876543211");
  EXPECT_THAT(StatusText(s, "x:1", absl::UnixEpoch()),
              HasSubstr("  epoch              fedcba9876543211\n"));
}

v1::StatusResponse SidecarStatus() {
  v1::StatusResponse s = MeshStatus();
  v1::PostgresStatus* pg = s.mutable_postgres();
  pg->set_database("postgresql://tally:********@127.0.0.1:5432/app");
  pg->set_slot("tally_eu_db_1_0123abcd");
  pg->set_publication("tally_eu_db_1_0123abcd");
  pg->set_origin("tally_eu_db_1_0123abcd");
  pg->set_phase("following");
  pg->set_last_error("connection refused; retrying in 4 s");
  pg->set_received_lsn("0/16B3760");
  pg->set_confirmed_lsn("0/16B3748");
  pg->set_slot_lag_bytes(2048);
  pg->set_slot_wal_status("reserved");
  pg->set_capture_lag_seconds(1.5);
  pg->set_transactions_captured(12);
  pg->set_rows_captured(34);
  pg->set_own_transactions_replayed(5);
  pg->set_rows_applied(56);
  pg->set_rows_refused(7);
  v1::PostgresTable* t = pg->add_tables();
  t->set_keyspace("public.users");
  t->set_state("rebuilding");
  t->set_rows(99);
  t->set_schema_fingerprint("9f86d081884c7d65");
  return s;
}

// An index build's rows, rate and time left to the estimate.
TEST(StatusText, ShowsABuildsRateAndTimeLeft) {
  v1::StatusResponse s = SidecarStatus();
  v1::PostgresStatus* pg = s.mutable_postgres();
  pg->set_phase("building");
  pg->set_build_rows_done(120000);
  pg->set_build_rows_estimated(500000);
  pg->set_build_rows_per_second(24000);
  pg->set_build_eta_seconds(15.8);
  pg->set_build_seconds(5);
  EXPECT_THAT(StatusText(s, "x:1", absl::Now()),
              HasSubstr("building (120000 of ~500000 rows, 24000 rows/s, "
                        "ETA 16s)"));
  const Json j = StatusJson(s, "x:1")["postgres"];
  EXPECT_EQ(j["build_rows_per_second"], 24000.0);
  EXPECT_EQ(j["build_eta_seconds"], 15.8);
  EXPECT_EQ(j["build_seconds"], 5.0);
  pg->clear_build_eta_seconds();
  EXPECT_THAT(StatusText(s, "x:1", absl::Now()),
              HasSubstr("24000 rows/s, ETA unknown)"));
  EXPECT_TRUE(StatusJson(s, "x:1")["postgres"]["build_eta_seconds"].is_null());
}

TEST(StatusText, ShowsTheSidecarsSlotPositionLagCountersAndTables) {
  const std::string text =
      StatusText(SidecarStatus(), "127.0.0.1:7400", absl::Now());
  for (const char* part :
       {"postgresql://tally:********@127.0.0.1:5432/app", "following",
        "connection refused; retrying in 4 s", "tally_eu_db_1_0123abcd",
        "received 0/16B3760, confirmed 0/16B3748", "2.0 KB",
        "wal_status reserved", "1.5 s", "12 transactions, 34 rows",
        "replayed: 5", "56 rows", "since indexed: 7", "public.users",
        "rebuilding", "9f86d081884c7d65"}) {
    EXPECT_THAT(text, HasSubstr(part));
  }
  // A node without a sidecar shows none of it.
  EXPECT_THAT(StatusText(MeshStatus(), "127.0.0.1:7400", absl::Now()),
              ::testing::Not(HasSubstr("slot lag")));
}

TEST(StatusText, ShowsAnIndexLossOnlyAfterOne) {
  v1::StatusResponse s = SidecarStatus();
  EXPECT_THAT(StatusText(s, "127.0.0.1:7400", absl::Now()),
              ::testing::Not(HasSubstr("index lost")));
  s.mutable_postgres()->set_index_lost(true);
  s.mutable_postgres()->set_index_loss_fresh_rows(30);
  EXPECT_THAT(StatusText(s, "127.0.0.1:7400", absl::Now()),
              HasSubstr("rebuilt; 30 rows last written here got fresh "
                        "versions"));
  const Json json = StatusJson(s, "127.0.0.1:7400");
  EXPECT_EQ(json.at("postgres").at("index_lost"), true);
  EXPECT_EQ(json.at("postgres").at("index_loss_fresh_rows"), 30);
}

TEST(StatusJson, HoldsTheSidecarOrNullWithoutOne) {
  const Json json = StatusJson(SidecarStatus(), "127.0.0.1:7400");
  const Json& pg = json.at("postgres");
  EXPECT_EQ(pg.at("phase"), "following");
  EXPECT_EQ(pg.at("slot"), "tally_eu_db_1_0123abcd");
  EXPECT_EQ(pg.at("confirmed_lsn"), "0/16B3748");
  EXPECT_EQ(pg.at("slot_lag_bytes"), 2048);
  EXPECT_EQ(pg.at("capture_lag_seconds"), 1.5);
  EXPECT_EQ(pg.at("rows_applied"), 56);
  EXPECT_EQ(pg.at("rows_refused"), 7);
  EXPECT_EQ(pg.at("tables").at(0).at("keyspace"), "public.users");
  EXPECT_EQ(pg.at("tables").at(0).at("state"), "rebuilding");
  EXPECT_TRUE(StatusJson(MeshStatus(), "x").at("postgres").is_null());
}

// What Admin.Status carries beyond the counters — the
// process, how long sessions take, and where they found differences.
v1::StatusResponse WatchedStatus(absl::Time now) {
  v1::StatusResponse s = MeshStatus();
  s.set_node_bandwidth_bytes_per_second(50e6);
  v1::ProcessStatus* process = s.mutable_process();
  process->set_cpu_seconds(12.5);
  process->set_resident_anon_bytes(100 << 20);
  process->set_resident_file_bytes(1800 << 20);
  process->set_resident_shmem_bytes(4096);
  process->set_virtual_bytes(uint64_t{3} << 30);
  process->set_open_fds(42);
  process->set_max_fds(1024);
  process->set_threads(17);
  process->set_start_unix_ms(absl::ToUnixMillis(now - absl::Hours(3)));
  v1::PeerStatus* p = s.mutable_peers(0);
  // 10 sessions: 4 took up to 1 s, 4 from 1 to 5 s, 2 from 5 to 10 s.
  v1::DurationHistogram* h = p->mutable_session_seconds();
  for (double bound : {1.0, 5.0, 10.0}) h->add_upper_bounds(bound);
  for (uint64_t count : {4, 4, 2, 0}) h->add_counts(count);
  h->set_sum_seconds(30);
  h->set_count(10);
  p->set_heat_sessions(3);
  v1::KeyspaceHeat* heat = p->add_heat();
  heat->set_keyspace("users");
  heat->set_segments(64);
  for (const auto& [segment, differences] :
       std::vector<std::pair<uint32_t, uint64_t>>{{0, 1}, {10, 4}}) {
    v1::HeatSegment* seg = heat->add_last();
    seg->set_segment(segment);
    seg->set_differences(differences);
    seg->set_rows_repaired(differences);
  }
  for (const auto& [segment, differences] :
       std::vector<std::pair<uint32_t, uint64_t>>{{0, 2}, {10, 8}, {63, 1}}) {
    v1::HeatSegment* seg = heat->add_recent();
    seg->set_segment(segment);
    seg->set_differences(differences);
    seg->set_rows_repaired(differences);
  }
  return s;
}

TEST(StatusText, ShowsTheProcessAndTheNodesBandwidthLimit) {
  const absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  const std::string text = StatusText(WatchedStatus(now), "x:1", now);
  EXPECT_THAT(
      text,
      HasSubstr("  up              3.0 h (since 2027-01-15T05:00:00Z)\n"));
  EXPECT_THAT(
      text,
      HasSubstr("  cpu             12.5 s (user + system), 17 threads\n"));
  EXPECT_THAT(text,
              HasSubstr("  memory          resident 100.0 MB anon (heap), "
                        "1.8 GB file (mapped tables), 4.0 KB shared; "
                        "virtual 3.0 GB\n"));
  EXPECT_THAT(text, HasSubstr("  open files      42 open of 1024\n"));
  EXPECT_THAT(text, HasSubstr("  node bandwidth  50.0 MB/s over all repairs "
                              "(node-bandwidth)\n"));

  v1::StatusResponse near = WatchedStatus(now);
  near.mutable_process()->set_open_fds(900);
  near.set_node_bandwidth_bytes_per_second(0);
  const std::string warned = StatusText(near, "x:1", now);
  EXPECT_THAT(warned, HasSubstr("900 open of 1024 (WARNING: near the limit"));
  EXPECT_THAT(warned,
              HasSubstr("node bandwidth  unlimited (node-bandwidth 0)"));
  // A node that sends no process (an older one) says so.
  v1::StatusResponse older = MeshStatus();
  EXPECT_THAT(StatusText(older, "x:1", now),
              HasSubstr("  process         unknown (the node did not report "
                        "it)\n"));
}

TEST(StatusText, ShowsHowLongEachPeersSessionsTake) {
  const absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  const std::string text = StatusText(WatchedStatus(now), "x:1", now);
  // p50: the 5th of 10 is the first of the 1..5 s bucket's 4: ~2 s; p90:
  // half way through 5..10 s.
  EXPECT_THAT(text, HasSubstr(R"(
  SESSION TIMES WITH  SESSIONS  MEAN   P50     P90
  127.0.0.1:7401      10        3.0 s  ~2.0 s  ~7.5 s
)"));
  // Nothing counted yet: dashes, not zeros.
  const std::string fresh = StatusText(MeshStatus(), "x:1", now);
  EXPECT_THAT(fresh,
              HasSubstr("  127.0.0.1:7401      0         -     -    -\n"));
}

TEST(StatusText, DrawsEachPeerAndKeyspaceAsAStripOfTheTokenSpace) {
  const absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  v1::StatusResponse s = WatchedStatus(now);
  v1::PeerStatus* fresh = s.add_peers();
  fresh->set_address("127.0.0.1:7402");
  v1::PeerStatus* in_sync = s.add_peers();
  in_sync->set_address("127.0.0.1:7403");
  in_sync->set_heat_sessions(2);
  const std::string text = StatusText(s, "x:1", now);
  // One scale for the map, up to the hottest column (8): the last session's
  // 1 and 4 are ':' and '+', the recent 2, 8 and 1 are '-', '@' and ':' —
  // at the left, a tenth in, and at the right end of the token space.
  const std::string last =
      ":" + std::string(9, ' ') + "+" + std::string(53, ' ');
  const std::string recent =
      "-" + std::string(9, ' ') + "@" + std::string(52, ' ') + ":";
  EXPECT_THAT(text, HasSubstr("  127.0.0.1:7401  users     last session     |" +
                              last + "|  5            5\n"));
  EXPECT_THAT(text, HasSubstr("                            last 3 sessions  |" +
                              recent + "|  11           11\n"));
  EXPECT_THAT(text,
              HasSubstr("  shades (differences in a column): ' ' 0  "
                        "':' 1  '-' 2  '=' 3  '+' 4  '*' 5  '#' 6  '%' 7  "
                        "'@' 8\n"));
  EXPECT_THAT(text, HasSubstr("  127.0.0.1:7402: no session ended yet\n"));
  EXPECT_THAT(text, HasSubstr("  127.0.0.1:7403: no differences in the last 2 "
                              "sessions\n"));
  // A heat that cannot be drawn says why instead of a strip.
  s.mutable_peers(0)->mutable_heat(0)->set_segments(0);
  EXPECT_THAT(StatusText(s, "x:1", now),
              HasSubstr("(the heat has 0 segments; expected 1..1024)"));
}

TEST(StatusJson, HoldsTheProcessDurationsAndHeat) {
  const absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  const Json json = StatusJson(WatchedStatus(now), "x:1");
  EXPECT_EQ(json.at("node_bandwidth_bytes_per_second"), 50e6);
  const Json& process = json.at("process");
  EXPECT_EQ(process.at("cpu_seconds"), 12.5);
  EXPECT_EQ(process.at("resident_anon_bytes"), 100 << 20);
  EXPECT_EQ(process.at("resident_file_bytes"), 1800 << 20);
  EXPECT_EQ(process.at("open_fds"), 42);
  EXPECT_EQ(process.at("max_fds"), 1024);
  EXPECT_EQ(process.at("threads"), 17);
  EXPECT_EQ(process.at("start_unix_ms"),
            absl::ToUnixMillis(now - absl::Hours(3)));
  const Json& peer = json.at("peers").at(0);
  const Json& durations = peer.at("session_seconds");
  EXPECT_EQ(durations.at("count"), 10);
  EXPECT_EQ(durations.at("mean_seconds"), 3.0);
  EXPECT_EQ(durations.at("p50_seconds"), 2.0);
  EXPECT_EQ(durations.at("p90_seconds"), 7.5);
  EXPECT_EQ(durations.at("upper_bounds"), Json::parse("[1.0, 5.0, 10.0]"));
  EXPECT_EQ(durations.at("counts"), Json::parse("[4, 4, 2, 0]"));
  EXPECT_EQ(peer.at("heat_sessions"), 3);
  EXPECT_EQ(peer.at("heat_keyspaces_left_out"), 0);
  const Json& heat = peer.at("heat").at(0);
  EXPECT_EQ(heat.at("keyspace"), "users");
  EXPECT_EQ(heat.at("segments"), 64);
  EXPECT_EQ(heat.at("last").size(), 2u);
  EXPECT_EQ(heat.at("recent").at(1).at("segment"), 10);
  EXPECT_EQ(heat.at("recent").at(1).at("differences"), 8);
  EXPECT_EQ(heat.at("recent").at(1).at("rows_repaired"), 8);
  // Nothing counted: null quantiles; no process reported: null.
  const Json empty = StatusJson(MeshStatus(), "x:1");
  EXPECT_TRUE(empty.at("process").is_null());
  EXPECT_TRUE(empty.at("peers")
                  .at(0)
                  .at("session_seconds")
                  .at("p50_seconds")
                  .is_null());
  EXPECT_TRUE(empty.at("peers")
                  .at(0)
                  .at("session_seconds")
                  .at("mean_seconds")
                  .is_null());
}

}  // namespace
}  // namespace cli
}  // namespace tally
