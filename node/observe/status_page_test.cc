// StatusPage: escaping, the segments of the heat map and their counts, the
// peers' sessions, and the page served at GET / by MetricsServer and by a
// running node.
#include "node/observe/status_page.h"

#include <httplib.h>

#include <regex>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/config/config.h"
#include "node/node_server.h"
#include "node/observe/metrics_server.h"
#include "node/sync/repair_heat.h"
#include "storage/store.h"
#include "support/temp_dir.h"

namespace tally {
namespace node {
namespace {

using ::tally::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

// The <svg> strip of `peer`, `keyspace` and `window` in `html`, or "".
std::string Strip(const std::string& html, const std::string& peer,
                  const std::string& keyspace, const std::string& window) {
  const std::string start =
      absl::StrCat("<svg class=\"strip\" data-peer=\"", EscapeHtml(peer),
                   "\" data-keyspace=\"", EscapeHtml(keyspace),
                   "\" data-window=\"", window, "\"");
  const size_t from = html.find(start);
  if (from == std::string::npos) return "";
  const size_t to = html.find("</svg>", from);
  return html.substr(from, to - from);
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

// The opening <rect ...> of segment `segment` in `strip`.
std::string Segment(const std::string& strip, int segment) {
  std::smatch m;
  const std::regex rect(absl::StrCat("<rect class=\"[^\"]*\" data-segment=\"",
                                     segment, "\"[^>]*>"));
  return std::regex_search(strip, m, rect) ? m.str() : "";
}

void AddSegment(google::protobuf::RepeatedPtrField<v1::HeatSegment>* list,
                uint32_t segment, uint64_t differences, uint64_t repaired) {
  v1::HeatSegment* s = list->Add();
  s->set_segment(segment);
  s->set_differences(differences);
  s->set_rows_repaired(repaired);
}

v1::StatusResponse StatusWithHeat() {
  v1::StatusResponse status;
  status.set_node_name("eu/db-1");
  status.set_listen("127.0.0.1:7000");
  v1::KeyspaceSummary* ks = status.add_keyspaces();
  ks->set_name("users");
  ks->set_row_count(1200);
  status.add_keyspaces()->set_name("quiet");
  v1::PeerStatus* peer = status.add_peers();
  peer->set_address("10.0.0.2:7000");
  peer->set_name("eu/db-2");
  peer->set_role("peer");
  peer->set_heat_sessions(4);
  v1::KeyspaceHeat* heat = peer->add_heat();
  heat->set_keyspace("users");
  heat->set_segments(64);
  AddSegment(heat->mutable_last(), 5, 3, 2);
  AddSegment(heat->mutable_recent(), 5, 9, 8);
  AddSegment(heat->mutable_recent(), 40, 1, 1);
  return status;
}

TEST(EscapeHtml, EscapesEveryCharacterThatEndsTextOrAnAttribute) {
  EXPECT_EQ(EscapeHtml("plain name/1"), "plain name/1");
  EXPECT_EQ(EscapeHtml("<a href=\"x\">&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;");
}

TEST(SegmentFirstToken, EqualRangesOfTheTokenSpace) {
  EXPECT_EQ(SegmentFirstToken(0, 64), 0u);
  EXPECT_EQ(SegmentFirstToken(1, 64), uint64_t{1} << 58);
  EXPECT_EQ(SegmentFirstToken(63, 64), uint64_t{63} << 58);
  EXPECT_EQ(SegmentFirstToken(64, 64), 0u) << "the end, 2^64, wraps";
  EXPECT_EQ(SegmentFirstToken(1, 3), ~uint64_t{0} / 3);
  // The same ranges as the recording's (node/sync/repair_heat.h).
  for (int i = 0; i < kHeatSegments; ++i) {
    EXPECT_EQ(HeatSegmentOf(SegmentFirstToken(i, kHeatSegments)), i);
    EXPECT_EQ(HeatSegmentOf(SegmentFirstToken(i + 1, kHeatSegments) - 1), i);
  }
}

TEST(RenderStatusPage, EveryNameIsEscaped) {
  v1::StatusResponse status;
  status.set_node_name("<script>alert(1)</script>");
  status.add_keyspaces()->set_name("a&b<i>");
  v1::PeerStatus* peer = status.add_peers();
  peer->set_address("\"peer\"><img src=x>");
  peer->set_name("n'1");
  peer->set_last_session_unix_ms(absl::ToUnixMillis(kNow) - 1000);
  peer->set_last_outcome("UNAVAILABLE: <connect failed>");
  peer->mutable_session()->set_phase("failed");
  peer->mutable_session()->set_keyspace("a&b<i>");
  status.set_store_write_error("disk <full>");
  const std::string html = RenderStatusPage(status, kNow);
  for (const char* raw : {"<script>alert", "a&b<i>", "\"peer\">", "<img", "n'1",
                          "<connect failed>", "disk <full>"}) {
    EXPECT_THAT(html, Not(HasSubstr(raw)));
  }
  EXPECT_THAT(html, HasSubstr("&lt;script&gt;alert(1)&lt;/script&gt;"));
  EXPECT_THAT(html, HasSubstr("a&amp;b&lt;i&gt;"));
  EXPECT_THAT(html, HasSubstr("&quot;peer&quot;&gt;&lt;img src=x&gt;"));
  EXPECT_THAT(html, HasSubstr("n&#39;1"));
  EXPECT_THAT(html, HasSubstr("UNAVAILABLE: &lt;connect failed&gt;"));
  EXPECT_THAT(html, HasSubstr("disk &lt;full&gt;"));
  EXPECT_THAT(html, Not(HasSubstr("<script")));
}

TEST(RenderStatusPage, HeatSegmentsCarryTheirCountsAndTheHotOnesShow) {
  const std::string html = RenderStatusPage(StatusWithHeat(), kNow);
  EXPECT_THAT(html, HasSubstr("<!DOCTYPE html>"));
  EXPECT_THAT(html, HasSubstr("<meta http-equiv=\"refresh\" content=\"5\">"));

  const std::string last = Strip(html, "10.0.0.2:7000", "users", "last");
  ASSERT_FALSE(last.empty()) << html;
  EXPECT_EQ(Count(last, "<rect "), 64);
  EXPECT_EQ(Count(last, "class=\"seg hot\""), 1);
  EXPECT_THAT(Segment(last, 5), HasSubstr("class=\"seg hot\""));
  EXPECT_THAT(Segment(last, 5), HasSubstr("data-differences=\"3\""));
  EXPECT_THAT(Segment(last, 5), HasSubstr("data-rows-repaired=\"2\""));
  EXPECT_THAT(Segment(last, 4), HasSubstr("class=\"seg\""));
  EXPECT_THAT(Segment(last, 4), HasSubstr("data-differences=\"0\""));
  // The tooltip names the segment's token range.
  EXPECT_THAT(last, HasSubstr("segment 5: tokens 1400000000000000-"
                              "17ffffffffffffff: 3 differences, 2 rows "
                              "repaired"));
  EXPECT_THAT(last, HasSubstr("fill=\"#e4e7eb\""));  // the cold ones

  const std::string recent = Strip(html, "10.0.0.2:7000", "users", "recent");
  ASSERT_FALSE(recent.empty());
  EXPECT_EQ(Count(recent, "class=\"seg hot\""), 2);
  EXPECT_THAT(Segment(recent, 5), HasSubstr("data-differences=\"9\""));
  EXPECT_THAT(Segment(recent, 40), HasSubstr("data-differences=\"1\""));
  EXPECT_THAT(html, HasSubstr("<span class=\"label\">last 4 sessions</span>"));
  EXPECT_THAT(html, HasSubstr("<span class=\"label\">last session</span>"));
  EXPECT_THAT(html, HasSubstr("10 differences, 9 rows repaired, in 2 of 64 "
                              "segments; hottest #5 (9)"));
  // The hottest segment is the darkest.
  EXPECT_THAT(Segment(recent, 5), HasSubstr("fill=\"#991b1b\""));
  EXPECT_THAT(Segment(recent, 40), Not(HasSubstr("fill=\"#991b1b\"")));

  // A keyspace the sessions found nothing in is drawn cold.
  const std::string quiet = Strip(html, "10.0.0.2:7000", "quiet", "last");
  ASSERT_FALSE(quiet.empty());
  EXPECT_EQ(Count(quiet, "<rect "), 64);
  EXPECT_EQ(Count(quiet, "hot"), 0);
}

TEST(RenderStatusPage, SegmentsOutOfRangeAreLeftOutAndBadCountsSaidSo) {
  v1::StatusResponse status = StatusWithHeat();
  v1::KeyspaceHeat* users = status.mutable_peers(0)->mutable_heat(0);
  AddSegment(users->mutable_last(), 64, 7, 7);  // past the end
  v1::KeyspaceHeat* odd = status.mutable_peers(0)->add_heat();
  odd->set_keyspace("odd");
  odd->set_segments(0);
  const std::string html = RenderStatusPage(status, kNow);
  const std::string last = Strip(html, "10.0.0.2:7000", "users", "last");
  EXPECT_EQ(Count(last, "class=\"seg hot\""), 1);
  EXPECT_THAT(html, HasSubstr("the heat has 0 segments; expected 1..1024"));
}

TEST(RenderStatusPage, KeyspacesLeftOutOfTheHeatAreNotDrawnCold) {
  v1::StatusResponse status = StatusWithHeat();
  status.mutable_peers(0)->set_heat_keyspaces_left_out(3);
  const std::string html = RenderStatusPage(status, kNow);
  EXPECT_FALSE(Strip(html, "10.0.0.2:7000", "users", "last").empty());
  EXPECT_TRUE(Strip(html, "10.0.0.2:7000", "quiet", "last").empty())
      << "quiet may be one of the keyspaces left out";
  EXPECT_THAT(html, HasSubstr("3 more keyspaces with differences are not "
                              "listed (only the 1 hottest are sent)"));
}

TEST(RenderStatusPage, PeersShowTheirSessionAndFeed) {
  v1::StatusResponse status = StatusWithHeat();
  v1::PeerStatus* peer = status.mutable_peers(0);
  peer->set_last_session_unix_ms(absl::ToUnixMillis(kNow - absl::Seconds(12)));
  peer->set_last_outcome("ok");
  peer->set_sessions_ok(7);
  peer->set_sessions_failed(2);
  peer->set_rows_received(40);
  peer->set_rows_sent(3);
  peer->set_feed_connected(true);
  peer->set_feed_lag_entries(17);
  peer->set_feed_lag_seconds(2.5);
  v1::SessionProgress* s = peer->mutable_session();
  s->set_phase("repair");
  s->set_keyspace("users");
  s->set_phase_since_unix_ms(absl::ToUnixMillis(kNow) - 1500);
  s->set_phase_seconds(1.5);
  s->set_keyspaces(4);
  s->set_keyspaces_done(1);
  s->set_differences(120);
  s->set_rows_received(100);
  s->set_rows_sent(20);
  const std::string html = RenderStatusPage(status, kNow);
  EXPECT_THAT(html,
              HasSubstr("<tr class=\"peer\" data-peer=\"10.0.0.2:7000\">"));
  EXPECT_THAT(html, HasSubstr("eu/db-2 &middot; peer"));
  EXPECT_THAT(html, HasSubstr("<span class=\"phase phase-repair\">repair</span>"
                              " &middot; keyspace users &middot; for 1.5 s"));
  EXPECT_THAT(html, HasSubstr("style=\"width:25%\""));
  EXPECT_THAT(html, HasSubstr("1/4 keyspaces"));
  EXPECT_THAT(html, HasSubstr("120 differences, 100 rows in, 20 rows out"));
  EXPECT_THAT(html, HasSubstr("started 2027-01-15 07:59:48 UTC (12.0 s ago)"));
  EXPECT_THAT(html, HasSubstr("<span class=\"ok\">ok</span>"));
  EXPECT_THAT(html, HasSubstr("7 / 2"));
  EXPECT_THAT(html, HasSubstr("40 / 3"));
  EXPECT_THAT(html, HasSubstr("connected</span><br>lag 17 entries, 2.5 s"));
  EXPECT_THAT(html, HasSubstr("last success never"));
}

// The page reads the status table's numbers by their JSON keys; a key the
// table lacks would show as "<no status number KEY>", a real one as nan.
TEST(RenderStatusPage, ReadsOnlyNumbersTheStatusTableHolds) {
  v1::StatusResponse status = StatusWithHeat();
  status.set_last_sequence(91);
  status.add_keyspaces()->set_name("users");
  status.mutable_peers(0)->set_feed_lag_seconds(0.5);
  const std::string html = RenderStatusPage(status, kNow);
  EXPECT_THAT(html, Not(HasSubstr("no status number")));
  EXPECT_THAT(html, Not(HasSubstr("nan")));
  EXPECT_THAT(html, HasSubstr("change log 0..91"));
}

// A paused peer whose last session ended well read "done" in green, as a
// peer in sync does, while `tally status` said paused.
TEST(RenderStatusPage, APausedPeerSaysPausedBeforeItsLastSession) {
  v1::StatusResponse status = StatusWithHeat();
  v1::PeerStatus* peer = status.mutable_peers(0);
  peer->set_last_outcome("ok");
  peer->set_paused(true);
  peer->set_paused_since_unix_ms(absl::ToUnixMillis(kNow - absl::Minutes(5)));
  peer->mutable_session()->set_phase("done");
  const std::string html = RenderStatusPage(status, kNow);
  const size_t paused =
      html.find("<span class=\"phase phase-paused\">paused</span>");
  const size_t done = html.find("<span class=\"phase phase-done\">done</span>");
  ASSERT_NE(paused, std::string::npos) << html;
  ASSERT_NE(done, std::string::npos);
  EXPECT_LT(paused, done);
  EXPECT_THAT(html, HasSubstr("paused</span> since 2027-01-15 07:55:00 UTC"));
  EXPECT_THAT(html, HasSubstr("last session: <span class=\"phase phase-done"));

  // Not paused: no such line.
  peer->set_paused(false);
  EXPECT_THAT(RenderStatusPage(status, kNow),
              Not(HasSubstr("phase-paused\">paused")));
}

TEST(RenderStatusPage, ASessionWithATotalShowsItsShareRateAndTimeLeft) {
  v1::StatusResponse status = StatusWithHeat();
  v1::SessionProgress* s = status.mutable_peers(0)->mutable_session();
  s->set_phase("repair");
  s->set_rows_received(12000);
  s->set_rows_expected(50000);
  s->set_rows_per_second(2000);
  s->set_eta_seconds(19);
  const std::string html = RenderStatusPage(status, kNow);
  EXPECT_THAT(html, HasSubstr("title=\"rows moved of the rows expected\">"
                              "<span style=\"width:24%\"></span></span> "
                              "12000 of 50000 rows, 2000 rows/s, ETA 19s"));
  // Without a total: no bar, no time left.
  s->clear_rows_expected();
  s->clear_eta_seconds();
  EXPECT_THAT(RenderStatusPage(status, kNow),
              Not(HasSubstr("rows moved of the rows expected")));
}

TEST(RenderStatusPage, ANodeWithoutPeersOrKeyspacesSaysSo) {
  v1::StatusResponse status;
  status.set_node_name("lonely");
  const std::string html = RenderStatusPage(status, kNow);
  EXPECT_THAT(html, HasSubstr("<title>tally: lonely</title>"));
  EXPECT_THAT(html, HasSubstr("no peers (--peer)"));
  EXPECT_THAT(html, HasSubstr("none yet"));
  EXPECT_EQ(Count(html, "<svg"), 0);
}

// A status with one item in every scope of the status table, each number
// set.
v1::StatusResponse StatusWithEveryScope() {
  v1::StatusResponse status = StatusWithHeat();
  status.set_last_sequence(91);
  status.set_read_only(true);
  status.add_origins()->set_origin("eu/db-1");
  v1::OriginRows* copy = status.add_copy_writes();
  copy->set_origin("eu/db-3");
  copy->set_rows(4);
  v1::KeyspaceTroubleStatus* trouble = status.add_keyspace_trouble();
  trouble->set_keyspace("users");
  trouble->set_in_trouble(true);
  status.add_subscriptions()->set_subscriber("eu/db-4");
  status.mutable_process()->set_open_fds(12);
  status.mutable_postgres()->set_phase("building");
  status.mutable_postgres()->add_tables()->set_keyspace("users");
  status.mutable_database_source()->set_rows_copied(5);
  v1::PeerStatus* peer = status.mutable_peers(0);
  peer->set_paused(true);
  peer->set_feed_lag_entries(17);
  peer->mutable_session()->set_phase("repair");
  return status;
}

// Every number of the status table is on the page or left to `tally
// status` on purpose: none ends under "Other numbers".
TEST(RenderStatusPage, EveryNumberOfTheTableIsPlacedOrLeftOut) {
  v1::StatusResponse status = StatusWithEveryScope();
  for (StatusScope scope :
       {StatusScope::kNode, StatusScope::kKeyspace, StatusScope::kOrigin,
        StatusScope::kPeer, StatusScope::kKeyspaceTrouble,
        StatusScope::kSubscriber, StatusScope::kCopyWrites,
        StatusScope::kProcess, StatusScope::kPostgres,
        StatusScope::kPostgresTable, StatusScope::kDatabaseSource}) {
    ASSERT_GT(StatusScopeSize(status, scope), 0) << static_cast<int>(scope);
  }
  std::string html = RenderStatusPage(status, kNow);
  EXPECT_THAT(html, Not(HasSubstr("Other numbers"))) << html;
  EXPECT_THAT(html, Not(HasSubstr("no status number")));

  status.mutable_peers(0)->set_paused(false);
  status.mutable_peers(0)->mutable_session()->set_phase_since_unix_ms(0);
  status.mutable_keyspace_trouble(0)->set_in_trouble(false);
  html = RenderStatusPage(status, kNow);
  EXPECT_THAT(html, Not(HasSubstr("Other numbers"))) << html;
}

// A number the page does not name — as a number new to the status table
// is — shows under "Other numbers" with its caption, item and value.
TEST(RenderStatusPage, ANumberThePageDoesNotNameShowsUnderOtherNumbers) {
  const v1::StatusResponse status = StatusWithEveryScope();
  StatusNumberReader nothing_read(status);
  const std::string html = RenderOtherNumbers(nothing_read);
  EXPECT_THAT(html, HasSubstr("<h2>Other numbers</h2>\n<table "
                              "id=\"other-numbers\">"));
  EXPECT_THAT(html, HasSubstr("<tr data-key=\"peers[].feed.lag_entries\">"
                              "<td>feed lag entries</td><td>peer "
                              "10.0.0.2:7000</td><td class=\"n\">17 "
                              "entries</td></tr>"));
  EXPECT_THAT(html, HasSubstr("<tr data-key=\"last_sequence\"><td>last "
                              "sequence</td><td></td>"));
  EXPECT_THAT(html, HasSubstr("<tr data-key=\"peers[].paused\"><td>paused"
                              "</td><td>peer 10.0.0.2:7000</td><td "
                              "class=\"n\">yes</td></tr>"));
  for (const StatusNumberRef& number : StatusNumbersWithJsonKey()) {
    EXPECT_THAT(html, HasSubstr(absl::StrCat(
                          "<tr data-key=\"",
                          EscapeHtml(number.series->json_key), "\">")));
  }

  StatusNumberReader all_placed(status);
  for (const StatusNumberRef& number : StatusNumbersWithJsonKey()) {
    all_placed.Place(number.series->json_key);
  }
  EXPECT_EQ(RenderOtherNumbers(all_placed), "");
  all_placed.Place("peers[].no_such_number");
  EXPECT_THAT(RenderOtherNumbers(all_placed),
              HasSubstr("&lt;no status number peers[].no_such_number&gt;"));
}

TEST(MetricsServer, ServesThePageAtTheRootAsHtml) {
  auto server = MetricsServer::Start(
      "127.0.0.1:0", [] { return absl::StatusOr<std::string>("m 1\n"); },
      [] { return absl::StatusOr<std::string>("<p>page</p>"); });
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client("127.0.0.1", (*server)->port());
  httplib::Result page = client.Get("/");
  ASSERT_TRUE(page) << httplib::to_string(page.error());
  EXPECT_EQ(page->status, 200);
  EXPECT_EQ(page->body, "<p>page</p>");
  EXPECT_EQ(page->get_header_value("Content-Type"), "text/html; charset=utf-8");
  httplib::Result metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->body, "m 1\n");
  httplib::Result other = client.Get("/nope");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);
  EXPECT_THAT(other->body, HasSubstr("the status page at GET /"));
}

TEST(MetricsServer, APageErrorAnswers500) {
  auto server = MetricsServer::Start(
      "127.0.0.1:0", [] { return absl::StatusOr<std::string>(""); },
      [] {
        return absl::StatusOr<std::string>(
            absl::UnavailableError("store closed"));
      });
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client("127.0.0.1", (*server)->port());
  httplib::Result r = client.Get("/");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500);
  EXPECT_THAT(r->body, HasSubstr("store closed"));
}

TEST(NodeServerStatusPage, TheNodeServesItsStatusAtTheRoot) {
  TempDir dir;
  NodeConfig config;
  config.name = "page-node";
  config.data_dir = dir.path();
  config.listen = "127.0.0.1:0";
  config.metrics_listen = "127.0.0.1:0";
  config.sync_writes = false;
  auto node = NodeServer::Start(config);
  ASSERT_TRUE(node.ok()) << node.status();
  storage::WriteRequest write;
  write.mutations.push_back(storage::Mutation::Put("orders", "k1", "v"));
  ASSERT_TRUE((*node)->store().Write(std::move(write)).ok());

  httplib::Client client("127.0.0.1", (*node)->metrics_port());
  httplib::Result r = client.Get("/");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_THAT(r->body, HasSubstr("<span id=\"node-name\">page-node</span>"));
  EXPECT_THAT(r->body, HasSubstr("<tr data-keyspace=\"orders\"><td>orders</td>"
                                 "<td class=\"n\">1</td>"));
  (*node)->Shutdown();
}

}  // namespace
}  // namespace node
}  // namespace tally
