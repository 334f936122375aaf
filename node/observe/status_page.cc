#include "node/observe/status_page.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "node/observe/status_fields.h"
#include "tree/progress_meter.h"

namespace tally {
namespace node {
namespace {

// Segments a strip may have: more would not be told apart on a screen.
constexpr uint32_t kMaxSegments = 1024;
// A strip's size in CSS pixels.
constexpr double kStripWidth = 640;
constexpr int kStripHeight = 22;
// Clocks further apart than this are shown as a warning (as the scheduler
// warns in its log).
constexpr double kClockBehindWarningSeconds = 5;

constexpr char kStyle[] = R"(
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1f2933;background:#fff}
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.15em;margin:1.4em 0 .4em}
h3{font-size:1em;margin:1em 0 .3em}h4{font-size:.95em;margin:.6em 0 .2em;font-weight:600}
.meta{color:#52606d}.warn{background:#fde8e8;border-left:4px solid #c81e1e;padding:.4em .8em}
table{border-collapse:collapse}th,td{text-align:left;padding:.25em .7em;border-bottom:1px solid #e4e7eb;vertical-align:top}
th{background:#f5f7fa;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}
.ok{color:#0e7c3a}.bad{color:#c81e1e}.dim{color:#7b8794}
.phase{display:inline-block;padding:0 .4em;border-radius:3px;background:#e4e7eb}
.phase-diff,.phase-repair,.phase-handshake{background:#fff3c4}.phase-done{background:#d5f5e3}.phase-failed{background:#fde8e8}.phase-paused{background:#e0e7ff;font-weight:600}
.bar{display:inline-block;width:120px;height:8px;background:#e4e7eb;border-radius:4px;vertical-align:middle}
.bar>span{display:block;height:8px;background:#3b82f6;border-radius:4px}
.strip-row{display:flex;align-items:center;gap:.6em;margin:.15em 0}
.strip-row .label{width:9em;color:#52606d;font-size:.9em}
.summary{font-size:.9em;color:#52606d}
.legend span{display:inline-block;width:14px;height:10px;margin-right:2px;vertical-align:middle}
)";

std::string FormatCount(uint64_t n) { return absl::StrCat(n); }

// The numbers of the status table this page leaves to `tally status`, its
// JSON and /metrics: the page is the node, its keyspaces and its peers at a
// glance. A number the table gains is not here, so it shows under "Other
// numbers" until the page gives it a place or adds it here.
constexpr absl::string_view kNumbersLeftToTallyStatus[] = {
    "origins[].rows",
    "diffs_running",
    "row_filter.rows_read",
    "row_filter.reads_skipped",
    "row_filter.memory_bytes",
    "row_filter.keyspaces",
    "row_filter.built",
    "feed.rejected",
    "peers[].feed.rejected",
    "peers[].bytes_repaired",
    "node_bandwidth_bytes_per_second",
    "peers[].rows_erased",
    "rows_changed_during_session",
    "ties_resolved",
    "peers[].conflicts",
    "peers[].rows_changed_during_session",
    "feed.sent",
    "feed.received",
    "feed.applied",
    "feed.skipped_own",
    "feed.skipped_superseded",
    "feed.not_newer",
    "feed.refused_skew",
    "peers[].feed.skipped_own",
    "peers[].feed.skipped_superseded",
    "peers[].feed.not_newer",
    "peers[].feed.refused_skew",
    "peers[].feed.reconnects",
    "peers[].clock_behind_seconds",
    "peers[].feed.position",
    "subscriptions[].sent",
    "subscriptions[].skipped_own",
    "subscriptions[].skipped_superseded",
    "subscriptions[].position",
    "copy_writes.<origin>",
    "read_only",
    "writes_refused",
    "log_entries_trimmed",
    "tombstones_purged",
    "scrub.passes",
    "scrub.rows_checked",
    "scrub.damaged_rows_found",
    "scrub.leaves_repaired",
    "scrub.damaged_rows",
    "process.cpu_seconds",
    "process.virtual_bytes",
    "process.open_fds",
    "process.max_fds",
    "process.threads",
    "process.start_unix_ms",
    "process.resident_anon_bytes",
    "process.resident_file_bytes",
    "process.resident_shmem_bytes",
    "postgres.slot_lag_bytes",
    "postgres.capture_lag_seconds",
    "postgres.transactions_captured",
    "postgres.rows_captured",
    "postgres.own_transactions_replayed",
    "postgres.rows_applied",
    "postgres.rows_refused",
    "postgres.builds",
    "postgres.build_rows_done",
    "postgres.build_rows_estimated",
    "postgres.build_rows_per_second",
    "postgres.build_eta_seconds",
    "postgres.build_seconds",
    "postgres.index_lost",
    "postgres.index_loss_fresh_rows",
    "postgres.tables[].rows",
    "database_source.sessions_ok",
    "database_source.sessions_failed",
    "database_source.last_success_unix_ms",
    "database_source.last_session_seconds",
    "database_source.last_session_start_unix_ms",
    "database_source.last_differences",
    "database_source.differences",
    "database_source.rows_copied",
    "database_source.rows_deleted",
    "database_source.rows_refused",
    "database_source.rows_rejected",
    "database_source.bytes_from_source",
    "database_source.last_bytes_from_source",
};

std::string FormatUtc(int64_t unix_ms) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%S UTC",
                          absl::FromUnixMillis(unix_ms), absl::UTCTimeZone());
}

// "3.2 s", "4 min", "2.5 h".
std::string FormatSeconds(double seconds) {
  if (seconds < 0) seconds = 0;
  if (seconds < 90) return absl::StrFormat("%.1f s", seconds);
  if (seconds < 90 * 60) return absl::StrFormat("%.0f min", seconds / 60);
  if (seconds < 48 * 3600) return absl::StrFormat("%.1f h", seconds / 3600);
  return absl::StrFormat("%.1f d", seconds / 86400);
}

// "2026-12-03 05:10:00 UTC (12.0 s ago)", or "never" for 0.
std::string When(int64_t unix_ms, absl::Time now) {
  if (unix_ms == 0) return "never";
  const double ago = absl::ToDoubleSeconds(now - absl::FromUnixMillis(unix_ms));
  return absl::StrCat(FormatUtc(unix_ms), " (", FormatSeconds(ago), " ago)");
}

// A segment's fill: grey for none, then from amber to dark red by the
// count's share of the strip's largest, on a log scale (one difference in a
// strip of thousands still shows).
std::string HeatColor(uint64_t count, uint64_t max) {
  if (count == 0 || max == 0) return "#e4e7eb";
  const double share = std::log1p(static_cast<double>(count)) /
                       std::log1p(static_cast<double>(max));
  const double t = 0.25 + 0.75 * std::clamp(share, 0.0, 1.0);
  const auto mix = [t](int from, int to) {
    return static_cast<int>(std::lround(from + (to - from) * t));
  };
  // #fde047 (amber) to #991b1b (dark red).
  return absl::StrFormat("#%02x%02x%02x", mix(0xfd, 0x99), mix(0xe0, 0x1b),
                         mix(0x47, 0x1b));
}

struct SegmentCount {
  uint64_t differences = 0;
  uint64_t rows_repaired = 0;
};

// One strip: the token space of `keyspace` cut into `segments`, coloured by
// `counts`.
void AppendStrip(const std::string& peer, const std::string& keyspace,
                 absl::string_view window, absl::string_view label,
                 uint32_t segments,
                 const google::protobuf::RepeatedPtrField<v1::HeatSegment>& in,
                 std::string* out) {
  std::vector<SegmentCount> counts(segments);
  uint64_t max = 0;
  uint64_t differences = 0;
  uint64_t repaired = 0;
  for (const v1::HeatSegment& s : in) {
    if (s.segment() >= segments) continue;  // not ours to draw
    counts[s.segment()].differences += s.differences();
    counts[s.segment()].rows_repaired += s.rows_repaired();
  }
  uint32_t hot = 0;
  uint32_t hottest = 0;
  for (uint32_t i = 0; i < segments; ++i) {
    differences += counts[i].differences;
    repaired += counts[i].rows_repaired;
    if (counts[i].differences > 0) ++hot;
    if (counts[i].differences > max) {
      max = counts[i].differences;
      hottest = i;
    }
  }
  const double width = kStripWidth / segments;
  absl::StrAppend(out, "<div class=\"strip-row\"><span class=\"label\">",
                  EscapeHtml(label), "</span>");
  absl::StrAppendFormat(
      out,
      "<svg class=\"strip\" data-peer=\"%s\" data-keyspace=\"%s\" "
      "data-window=\"%s\" width=\"%.0f\" height=\"%d\" viewBox=\"0 0 %.0f "
      "%d\" role=\"img\" aria-label=\"%s\">",
      EscapeHtml(peer), EscapeHtml(keyspace), EscapeHtml(window), kStripWidth,
      kStripHeight, kStripWidth, kStripHeight, EscapeHtml(label));
  for (uint32_t i = 0; i < segments; ++i) {
    const SegmentCount& c = counts[i];
    const uint64_t first = SegmentFirstToken(i, segments);
    const uint64_t last = SegmentFirstToken(i + 1, segments) - 1;
    absl::StrAppendFormat(
        out,
        "<rect class=\"seg%s\" data-segment=\"%d\" data-differences=\"%d\" "
        "data-rows-repaired=\"%d\" x=\"%.3f\" y=\"0\" width=\"%.3f\" "
        "height=\"%d\" fill=\"%s\" stroke=\"#fff\" stroke-width=\"0.5\">"
        "<title>segment %d: tokens %016x-%016x: %d differences, %d rows "
        "repaired</title></rect>",
        c.differences > 0 ? " hot" : "", i, c.differences, c.rows_repaired,
        i * width, width, kStripHeight, HeatColor(c.differences, max), i, first,
        last, c.differences, c.rows_repaired);
  }
  absl::StrAppend(out, "</svg><span class=\"summary\">");
  if (differences == 0) {
    absl::StrAppend(out, "no differences");
  } else {
    absl::StrAppendFormat(
        out,
        "%d differences, %d rows repaired, in %d of %d segments; hottest "
        "#%d (%d)",
        differences, repaired, hot, segments, hottest, max);
  }
  absl::StrAppend(out, "</span></div>\n");
}

void AppendHeader(StatusNumberReader& numbers, absl::Time now,
                  std::string* out) {
  const v1::StatusResponse& status = numbers.status();
  absl::StrAppend(out, "<h1>tally node <span id=\"node-name\">",
                  EscapeHtml(status.node_name()), "</span></h1>\n");
  absl::StrAppendFormat(
      out,
      "<p class=\"meta\">listening on %s &middot; epoch %016x &middot; change "
      "log %s..%s &middot; sessions running %s, ok %s, failed %s &middot; "
      "rows erased %s, conflicts %s &middot; as of %s, reloads every %d "
      "s</p>\n",
      EscapeHtml(status.listen().empty() ? "?" : status.listen()),
      status.epoch(), numbers.Text("first_sequence"),
      numbers.Text("last_sequence"), numbers.Text("sessions_running"),
      numbers.Text("sessions_ok"), numbers.Text("sessions_failed"),
      numbers.Text("rows_erased"), numbers.Text("conflicts"),
      FormatUtc(absl::ToUnixMillis(now)), kStatusPageRefreshSeconds);
  if (!status.store_write_error().empty()) {
    absl::StrAppend(out,
                    "<p class=\"warn\">The store refuses writes until the node "
                    "is restarted: ",
                    EscapeHtml(status.store_write_error()), "</p>\n");
  }
  const double clock_behind_seconds = numbers.Real("clock_behind_seconds");
  if (clock_behind_seconds > kClockBehindWarningSeconds) {
    absl::StrAppendFormat(out,
                          "<p class=\"warn\">This node's clock is %.1f s "
                          "behind a peer's: fix its time source (NTP).</p>\n",
                          clock_behind_seconds);
  }
}

void AppendKeyspaces(StatusNumberReader& numbers, std::string* out) {
  const v1::StatusResponse& status = numbers.status();
  absl::StrAppend(out, "<h2>Keyspaces</h2>\n");
  if (status.keyspaces().empty()) {
    absl::StrAppend(out, "<p class=\"dim\">none yet</p>\n");
    return;
  }
  absl::StrAppend(out,
                  "<table id=\"keyspaces\"><tr><th>Keyspace</th><th>Rows</th>"
                  "<th>Tree depth</th><th>Root changes</th></tr>\n");
  for (int i = 0; i < status.keyspaces_size(); ++i) {
    const v1::KeyspaceSummary& ks = status.keyspaces(i);
    absl::StrAppend(
        out, "<tr data-keyspace=\"", EscapeHtml(ks.name()), "\"><td>",
        EscapeHtml(ks.name()), "</td><td class=\"n\">",
        numbers.Text("keyspaces[].rows", i), "</td><td class=\"n\">",
        numbers.Text("keyspaces[].depth", i), "</td><td class=\"n\">",
        numbers.Text("keyspaces[].root_changes", i), "</td></tr>\n");
  }
  absl::StrAppend(out, "</table>\n");
}

// Keyspaces whose rows from peers were left out (node/feed/keyspace_trouble.h):
// nothing when none ever was; a warning while one is in trouble.
void AppendTrouble(StatusNumberReader& numbers, absl::Time now,
                   std::string* out) {
  const v1::StatusResponse& status = numbers.status();
  if (status.keyspace_trouble().empty()) return;
  std::vector<bool> in_trouble_now;
  int in_trouble = 0;
  for (int i = 0; i < status.keyspace_trouble_size(); ++i) {
    in_trouble_now.push_back(
        numbers.Count("keyspace_trouble[].in_trouble", i) != 0);
    if (in_trouble_now.back()) ++in_trouble;
  }
  absl::StrAppend(out, "<h2>Keyspaces in trouble</h2>\n");
  if (in_trouble > 0) {
    absl::StrAppendFormat(
        out,
        "<p class=\"warn\">%d keyspace(s) in trouble: their rows from peers "
        "are left out (the other keyspaces flow on); sessions retry them and "
        "repair them once the cause is gone.</p>\n",
        in_trouble);
  }
  absl::StrAppend(out,
                  "<table id=\"keyspace-trouble\"><tr><th>Keyspace</th>"
                  "<th>State</th><th>Reason</th><th>Rows left out</th>"
                  "<th>Peer</th><th>Last key</th><th>Last</th><th>Error</th>"
                  "</tr>\n");
  for (int i = 0; i < status.keyspace_trouble_size(); ++i) {
    const v1::KeyspaceTroubleStatus& t = status.keyspace_trouble(i);
    // Read before the state decides whether the row names it.
    const int64_t since_unix_ms = static_cast<int64_t>(
        numbers.Count("keyspace_trouble[].since_unix_ms", i));
    const int64_t last_unix_ms = static_cast<int64_t>(
        numbers.Count("keyspace_trouble[].last_unix_ms", i));
    absl::StrAppend(
        out, "<tr data-keyspace=\"", EscapeHtml(t.keyspace()), "\"><td>",
        EscapeHtml(t.keyspace()), "</td><td",
        in_trouble_now[i] ? " class=\"warn\">in trouble since "
                          : ">flowing again",
        in_trouble_now[i] ? EscapeHtml(When(since_unix_ms, now)) : "",
        "</td><td>", EscapeHtml(t.reason()), "</td><td class=\"n\">",
        FormatCount(numbers.Count("keyspace_trouble[].rows_rejected", i)),
        "</td><td>", EscapeHtml(t.peer()), "</td><td><code>",
        EscapeHtml(t.last_key()), "</code></td><td>",
        EscapeHtml(When(last_unix_ms, now)), "</td><td>",
        EscapeHtml(t.last_error()), "</td></tr>\n");
  }
  absl::StrAppend(out, "</table>\n");
}

// The running session, or the last one: phase, keyspace, progress. A
// paused peer says so first: its last session's "done" would read as a
// peer in sync. `peer` is item `i` of the status's peers.
void AppendSession(StatusNumberReader& numbers, int i, std::string* out) {
  const v1::PeerStatus& peer = numbers.status().peers(i);
  const v1::SessionProgress& s = peer.session();
  // Read before the phase decides whether the line names it.
  const double phase_seconds = numbers.Real("peers[].session.phase_seconds", i);
  const int64_t paused_since_unix_ms =
      static_cast<int64_t>(numbers.Count("peers[].paused_since_unix_ms", i));
  if (numbers.Count("peers[].paused", i) != 0) {
    absl::StrAppend(out, "<span class=\"phase phase-paused\">paused</span>");
    if (paused_since_unix_ms > 0) {
      absl::StrAppend(out, " since ", FormatUtc(paused_since_unix_ms));
    }
    absl::StrAppend(out, " (tally peer resume)<br>last session: ");
  }
  const std::string phase = s.phase().empty() ? "idle" : s.phase();
  absl::StrAppend(out, "<span class=\"phase phase-", EscapeHtml(phase), "\">",
                  EscapeHtml(phase), "</span>");
  if (s.phase() == "failed" && !s.failed_in().empty()) {
    absl::StrAppend(out, " in ", EscapeHtml(s.failed_in()));
  }
  if (!s.keyspace().empty()) {
    absl::StrAppend(out, " &middot; keyspace ", EscapeHtml(s.keyspace()));
  }
  if (s.phase_since_unix_ms() != 0) {
    absl::StrAppend(out, " &middot; for ", FormatSeconds(phase_seconds));
  }
  if (s.keyspaces() > 0) {
    const double share =
        std::min(1.0, static_cast<double>(s.keyspaces_done()) / s.keyspaces());
    absl::StrAppendFormat(
        out,
        "<br><span class=\"bar\" title=\"keyspaces synced\"><span "
        "style=\"width:%.0f%%\"></span></span> %d/%d keyspaces",
        share * 100, s.keyspaces_done(), s.keyspaces());
  }
  if (s.phase() != "idle" && !s.phase().empty()) {
    absl::StrAppendFormat(out, "<br>%d differences, %d rows in, %d rows out",
                          s.differences(), s.rows_received(), s.rows_sent());
  }
  // A session that knows the rows it will move (a bootstrap): how far, how
  // fast, how long still.
  const bool running =
      s.phase() == "handshake" || s.phase() == "diff" || s.phase() == "repair";
  if (running && s.has_rows_expected()) {
    const uint64_t moved = s.rows_received() + s.rows_sent();
    const double share =
        s.rows_expected() == 0
            ? 1.0
            : std::min(1.0, static_cast<double>(moved) / s.rows_expected());
    absl::StrAppendFormat(
        out,
        "<br><span class=\"bar\" title=\"rows moved of the rows expected\">"
        "<span style=\"width:%.0f%%\"></span></span> %d of %d rows, %.0f "
        "rows/s, ETA %s",
        share * 100, moved, s.rows_expected(), s.rows_per_second(),
        s.has_eta_seconds()
            ? tree::FormatRemaining(absl::Seconds(s.eta_seconds()))
            : std::string("unknown"));
  }
}

void AppendPeers(StatusNumberReader& numbers, absl::Time now,
                 std::string* out) {
  const v1::StatusResponse& status = numbers.status();
  absl::StrAppend(out, "<h2>Peers</h2>\n");
  if (status.peers().empty()) {
    absl::StrAppend(out, "<p class=\"dim\">no peers (--peer)</p>\n");
    return;
  }
  absl::StrAppend(
      out,
      "<table id=\"peers\"><tr><th>Peer</th><th>Session (running or "
      "last)</th><th>Last session</th><th>Sessions ok / failed</th><th>Rows "
      "in / out (all sessions)</th><th>Feed</th></tr>\n");
  for (int i = 0; i < status.peers_size(); ++i) {
    const v1::PeerStatus& peer = status.peers(i);
    auto n = [&numbers, i](absl::string_view key) {
      return numbers.Text(key, i);
    };
    absl::StrAppend(
        out, "<tr class=\"peer\" data-peer=\"", EscapeHtml(peer.address()),
        "\"><td>", EscapeHtml(peer.address()), "<br><span class=\"dim\">",
        EscapeHtml(peer.name().empty() ? "(name not yet known)" : peer.name()),
        " &middot; ", EscapeHtml(peer.role()), "</span></td><td>");
    AppendSession(numbers, i, out);
    absl::StrAppend(out, "</td><td>started ",
                    When(static_cast<int64_t>(
                             numbers.Count("peers[].last_session_unix_ms", i)),
                         now));
    if (!peer.last_outcome().empty()) {
      const bool ok = peer.last_outcome() == "ok";
      absl::StrAppend(out, "<br><span class=\"", ok ? "ok" : "bad", "\">",
                      EscapeHtml(peer.last_outcome()), "</span>");
    }
    absl::StrAppend(out, "<br><span class=\"dim\">last success ",
                    When(static_cast<int64_t>(
                             numbers.Count("peers[].last_success_unix_ms", i)),
                         now),
                    "</span></td>");
    absl::StrAppend(out, "<td class=\"n\">", n("peers[].sessions_ok"), " / ",
                    n("peers[].sessions_failed"), "</td><td class=\"n\">",
                    n("peers[].rows_received"), " / ", n("peers[].rows_sent"),
                    "</td><td>");
    absl::StrAppend(out, numbers.Count("peers[].feed.connected", i) != 0
                             ? "<span class=\"ok\">connected</span>"
                             : "<span class=\"bad\">not connected</span>");
    absl::StrAppend(
        out, "<br>lag ", n("peers[].feed.lag_entries"), " entries, ",
        FormatSeconds(numbers.Real("peers[].feed.lag_seconds", i)),
        "<br><span class=\"dim\">", n("peers[].feed.applied"), " applied of ",
        n("peers[].feed.received"), " received</span></td></tr>\n");
  }
  absl::StrAppend(out, "</table>\n");
}

void AppendHeatMaps(const v1::StatusResponse& status, std::string* out) {
  absl::StrAppend(out, "<h2>Where the sessions found differences</h2>\n");
  absl::StrAppend(
      out,
      "<p class=\"meta\">Each strip is a keyspace's token space, first token "
      "at the left, cut into equal segments; a segment's colour is the "
      "number of differing keys the sessions with the peer found there "
      "(point at it for its token range and counts). <span "
      "class=\"legend\"><span style=\"background:#e4e7eb\"></span>none "
      "<span style=\"background:",
      HeatColor(1, 1000),
      "\"></span>few <span style=\"background:", HeatColor(1000, 1000),
      "\"></span>most</span></p>\n");
  if (status.peers().empty()) {
    absl::StrAppend(out, "<p class=\"dim\">no peers</p>\n");
    return;
  }
  for (const v1::PeerStatus& peer : status.peers()) {
    absl::StrAppend(out, "<section class=\"heat\" data-peer=\"",
                    EscapeHtml(peer.address()), "\"><h3>with ",
                    EscapeHtml(peer.address()));
    if (!peer.name().empty()) {
      absl::StrAppend(out, " (", EscapeHtml(peer.name()), ")");
    }
    absl::StrAppend(out, "</h3>\n");
    // Every keyspace this node has, and any other the sessions found
    // differences in.
    std::set<std::string> keyspaces;
    // When some were left out, one without a count here may have had one:
    // only the keyspaces sent are drawn.
    if (peer.heat_keyspaces_left_out() == 0) {
      for (const v1::KeyspaceSummary& ks : status.keyspaces()) {
        keyspaces.insert(ks.name());
      }
    }
    for (const v1::KeyspaceHeat& heat : peer.heat()) {
      keyspaces.insert(heat.keyspace());
    }
    if (keyspaces.empty()) {
      absl::StrAppend(out, "<p class=\"dim\">no keyspaces</p>\n");
    }
    // The two strips are the same after the first session; the labels say
    // why.
    const std::string recent_label =
        peer.heat_sessions() == 1
            ? std::string("all sessions (1)")
            : absl::StrCat("last ", peer.heat_sessions(), " sessions");
    for (const std::string& keyspace : keyspaces) {
      const v1::KeyspaceHeat* found = nullptr;
      for (const v1::KeyspaceHeat& heat : peer.heat()) {
        if (heat.keyspace() == keyspace) found = &heat;
      }
      const v1::KeyspaceHeat none;
      const v1::KeyspaceHeat& heat = found != nullptr ? *found : none;
      const uint32_t segments =
          found != nullptr ? heat.segments() : uint32_t{64};
      absl::StrAppend(out, "<div class=\"keyspace\" data-keyspace=\"",
                      EscapeHtml(keyspace), "\"><h4>", EscapeHtml(keyspace),
                      "</h4>\n");
      if (segments == 0 || segments > kMaxSegments) {
        absl::StrAppendFormat(out,
                              "<p class=\"bad\">the heat has %d segments; "
                              "expected 1..%d</p></div>\n",
                              segments, kMaxSegments);
        continue;
      }
      AppendStrip(peer.address(), keyspace, "last", "last session", segments,
                  heat.last(), out);
      AppendStrip(peer.address(), keyspace, "recent", recent_label, segments,
                  heat.recent(), out);
      absl::StrAppend(out, "</div>\n");
    }
    if (peer.heat_keyspaces_left_out() > 0) {
      absl::StrAppendFormat(out,
                            "<p class=\"dim\">%d more keyspaces with "
                            "differences are not listed (only the %d hottest "
                            "are sent)</p>\n",
                            peer.heat_keyspaces_left_out(), peer.heat_size());
    }
    absl::StrAppend(out, "</section>\n");
  }
}

}  // namespace

std::string EscapeHtml(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

uint64_t SegmentFirstToken(uint64_t segment, uint64_t segments) {
  const unsigned __int128 first =
      (static_cast<unsigned __int128>(segment) << 64) / segments;
  return static_cast<uint64_t>(first);  // 2^64 (the end) wraps to 0
}

std::string RenderOtherNumbers(const StatusNumberReader& numbers) {
  const v1::StatusResponse& status = numbers.status();
  std::string rows;
  for (const StatusNumberRef& number : numbers.Unplaced()) {
    const StatusField& field = *number.field;
    const int items = StatusScopeSize(status, field.scope);
    for (int item = 0; item < items; ++item) {
      const auto [label, value] = StatusScopeLabel(status, field.scope, item);
      absl::StrAppend(
          &rows, "<tr data-key=\"", EscapeHtml(number.series->json_key),
          "\"><td>", EscapeHtml(StatusNumberCaption(number.series->json_key)),
          "</td><td>",
          label.empty() ? std::string("")
                        : EscapeHtml(absl::StrCat(label, " ", value)),
          "</td><td class=\"n\">",
          EscapeHtml(StatusValueForPeople(number.series->value(status, item),
                                          field.unit)),
          "</td></tr>\n");
    }
  }
  for (const std::string& key : numbers.unknown_keys()) {
    absl::StrAppend(&rows, "<tr><td>",
                    EscapeHtml(absl::StrCat("<no status number ", key, ">")),
                    "</td><td></td><td></td></tr>\n");
  }
  if (rows.empty()) return "";
  return absl::StrCat(
      "<h2>Other numbers</h2>\n<table id=\"other-numbers\"><tr><th>Number"
      "</th><th>Of</th><th>Value</th></tr>\n",
      rows, "</table>\n");
}

std::string RenderStatusPage(const v1::StatusResponse& status, absl::Time now) {
  StatusNumberReader numbers(status);
  for (absl::string_view key : kNumbersLeftToTallyStatus) numbers.Place(key);
  std::string out;
  absl::StrAppend(&out,
                  "<!DOCTYPE html>\n<html lang=\"en\"><head><meta "
                  "charset=\"utf-8\">\n<meta http-equiv=\"refresh\" content=\"",
                  kStatusPageRefreshSeconds,
                  "\">\n<title>tally: ", EscapeHtml(status.node_name()),
                  "</title>\n<style>", kStyle, "</style></head>\n<body>\n");
  AppendHeader(numbers, now, &out);
  AppendTrouble(numbers, now, &out);
  AppendKeyspaces(numbers, &out);
  AppendPeers(numbers, now, &out);
  AppendHeatMaps(status, &out);
  absl::StrAppend(&out, RenderOtherNumbers(numbers));
  absl::StrAppend(&out,
                  "<p class=\"meta\">Metrics for Prometheus: <a "
                  "href=\"/metrics\">/metrics</a></p>\n</body></html>\n");
  return out;
}

}  // namespace node
}  // namespace tally
