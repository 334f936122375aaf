#include "tools/cli/status.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "node/observe/status_fields.h"
#include "tools/cli/heat_strip.h"
#include "tools/cli/histogram_quantile.h"
#include "tools/cli/progress_report.h"
#include "tree/progress_meter.h"

namespace tally {
namespace cli {
namespace {

// The JSON's layout names where each number of the status table
// (node/observe/status_fields.h) goes, in the order `--json` prints it;
// SetTableNumbers fills each such place through the accessor /metrics uses.
// A place left unfilled is a layout key the table lacks (a unit test walks
// the JSON for them).
Json FromTable() { return Json(Json::value_t::discarded); }

std::string SessionTime(int64_t unix_ms, absl::Time now) {
  if (unix_ms <= 0) return "never";
  const absl::Time t = absl::FromUnixMillis(unix_ms);
  const int64_t ago = absl::ToInt64Seconds(now - t);
  return absl::StrFormat(
      "%s (%ds ago)",
      absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone()), ago);
}

std::string Listen(const v1::StatusResponse& status, absl::string_view dialed) {
  return status.listen().empty() ? std::string(dialed) : status.listen();
}

// The phases of a session that is running.
bool SessionRuns(const v1::SessionProgress& s) {
  return s.phase() == "handshake" || s.phase() == "diff" ||
         s.phase() == "repair";
}

// A table with its header row, or `none` when it has no other rows.
std::string Section(const std::vector<std::vector<std::string>>& rows,
                    absl::string_view none) {
  if (rows.size() <= 1) return absl::StrCat("  ", none, "\n");
  return Table(rows);
}

// A cell of a table is at most this wide: a longer value (a failed
// session's whole gRPC error) is cut there and written whole below the
// table, wrapped, so that no row runs to hundreds of columns.
constexpr size_t kMaxCellWidth = 40;
constexpr size_t kNoteWidth = 100;

// `text` cut to kMaxCellWidth ("...": the whole is below the table).
std::string CutCell(const std::string& text) {
  if (text.size() <= kMaxCellWidth) return text;
  return absl::StrCat(text.substr(0, kMaxCellWidth - 3), "...");
}

// "  LABEL: TEXT", wrapped at kNoteWidth columns at spaces, the lines after
// the first indented by four.
std::string WrappedNote(absl::string_view label, absl::string_view text) {
  std::string out = absl::StrCat("  ", label, ":");
  size_t column = out.size();
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (column + 1 + word.size() > kNoteWidth && column > 4) {
      absl::StrAppend(&out, "\n    ", word);
      column = 4 + word.size();
    } else {
      absl::StrAppend(&out, " ", word);
      column += 1 + word.size();
    }
  }
  out.push_back('\n');
  return out;
}

// The keyspaces in trouble now (StatusResponse.keyspace_trouble).
std::vector<std::string> KeyspacesInTrouble(const v1::StatusResponse& status) {
  std::vector<std::string> names;
  for (const v1::KeyspaceTroubleStatus& t : status.keyspace_trouble()) {
    if (t.in_trouble()) names.push_back(t.keyspace());
  }
  return names;
}

// The keyspaces whose rows from peers were left out: a line each while in
// trouble (and the ones recovered since the node started, with their
// counts); empty when none ever was.
std::string TroubleText(node::StatusNumberReader& numbers, absl::Time now) {
  const v1::StatusResponse& status = numbers.status();
  if (status.keyspace_trouble_size() == 0) return "";
  std::vector<std::vector<std::string>> rows = {
      {"KEYSPACE IN TROUBLE", "STATE", "REASON", "ROWS LEFT OUT", "PEER",
       "LAST KEY", "LAST", "ERROR"}};
  for (int i = 0; i < status.keyspace_trouble_size(); ++i) {
    const v1::KeyspaceTroubleStatus& t = status.keyspace_trouble(i);
    // Read before the state decides whether the line names it.
    const int64_t since_unix_ms = static_cast<int64_t>(
        numbers.Count("keyspace_trouble[].since_unix_ms", i));
    rows.push_back(
        {t.keyspace(),
         numbers.Count("keyspace_trouble[].in_trouble", i) != 0
             ? absl::StrCat("TROUBLE since ", SessionTime(since_unix_ms, now))
             : "flowing again",
         t.reason(), numbers.Text("keyspace_trouble[].rows_rejected", i),
         t.peer().empty() ? "-" : t.peer(),
         t.last_key().empty() ? "-" : absl::StrCat("'", t.last_key(), "'"),
         SessionTime(static_cast<int64_t>(
                         numbers.Count("keyspace_trouble[].last_unix_ms", i)),
                     now),
         t.last_error().empty() ? "-" : t.last_error()});
  }
  return Table(rows);
}

// A sidecar to PostgreSQL: its database, slot and capture, then a line per
// table.
std::string PostgresText(node::StatusNumberReader& numbers,
                         const std::vector<std::string>& in_trouble) {
  const v1::PostgresStatus& pg = numbers.status().postgres();
  // Read before the phase decides whether the line names them.
  const uint64_t build_rows_done = numbers.Count("postgres.build_rows_done");
  const uint64_t build_rows_estimated =
      numbers.Count("postgres.build_rows_estimated");
  const double build_rows_per_second =
      numbers.Real("postgres.build_rows_per_second");
  const node::StatusValue build_eta =
      numbers.Value("postgres.build_eta_seconds");
  // The JSON's and /metrics': the line says the rate and the time left.
  numbers.Place("postgres.build_seconds");
  std::string phase = pg.phase().empty() ? std::string("-") : pg.phase();
  if (!in_trouble.empty()) {
    // Capture may follow while a keyspace's rows from peers are left out:
    // never a plain "following" then.
    absl::StrAppend(
        &phase,
        absl::StrFormat(", but %d keyspace(s) in trouble: %s (their "
                        "rows from peers are left out; see KEYSPACE "
                        "IN TROUBLE)",
                        in_trouble.size(), absl::StrJoin(in_trouble, ", ")));
  }
  if (pg.phase() == "building" && build_rows_estimated > 0) {
    absl::StrAppend(
        &phase, absl::StrFormat(
                    " (%d of ~%d rows, %.0f rows/s, %s)", build_rows_done,
                    build_rows_estimated, build_rows_per_second,
                    EtaText(build_eta.kind() == node::StatusValue::Kind::kReal
                                ? std::optional<absl::Duration>(
                                      absl::Seconds(build_eta.real()))
                                : std::nullopt)));
  }
  const uint64_t builds = numbers.Count("postgres.builds");
  std::vector<std::vector<std::string>> rows;
  if (pg.engine() == "mariadb") {
    // A MariaDB sidecar: a binary log read from a GTID state, no slot
    // (so no slot lag to show).
    (void)numbers.Count("postgres.slot_lag_bytes");
    rows = {
        {"mariadb", pg.database()},
        {"phase", phase},
        {"last error", pg.last_error().empty() ? "-" : pg.last_error()},
        {"server id", absl::StrCat(pg.server_id(), " (its binlog reader: ",
                                   pg.server_id() + 1, ")")},
        {"position",
         absl::StrFormat("indexed GTID %s, server at %s",
                         pg.indexed_gtid().empty() ? "-" : pg.indexed_gtid(),
                         pg.server_gtid().empty() ? "-" : pg.server_gtid())},
        {"builds",
         builds == 0
             ? std::string("0 (resumed from the stored position)")
             : absl::StrCat(builds, " (last: ", pg.last_rebuild_reason(), ")")},
    };
  } else {
    rows = {
        {"postgres", pg.database()},
        {"phase", phase},
        {"last error", pg.last_error().empty() ? "-" : pg.last_error()},
        {"slot", absl::StrCat(pg.slot(), " (publication ", pg.publication(),
                              ", origin ", pg.origin(), ")")},
        {"system id",
         pg.system_identifier().empty() ? "-" : pg.system_identifier()},
        {"position",
         absl::StrFormat(
             "received %s, confirmed %s",
             pg.received_lsn().empty() ? "-" : pg.received_lsn(),
             pg.confirmed_lsn().empty() ? "-" : pg.confirmed_lsn())},
        {"slot lag",
         absl::StrCat(
             HumanBytes(numbers.Count("postgres.slot_lag_bytes")),
             pg.slot_wal_status().empty()
                 ? std::string()
                 : absl::StrCat(" (wal_status ", pg.slot_wal_status(), ")"))},
    };
  }
  const std::vector<std::vector<std::string>> common = {
      {"capture lag",
       absl::StrFormat("%.1f s", numbers.Real("postgres.capture_lag_seconds"))},
      {"captured",
       absl::StrFormat("%d transactions, %d rows (own applies replayed: %d)",
                       numbers.Count("postgres.transactions_captured"),
                       numbers.Count("postgres.rows_captured"),
                       numbers.Count("postgres.own_transactions_replayed"))},
      {"applied", absl::StrFormat("%d rows (refused, changed by the "
                                  "application since indexed: %d)",
                                  numbers.Count("postgres.rows_applied"),
                                  numbers.Count("postgres.rows_refused"))},
  };
  rows.insert(rows.end(), common.begin(), common.end());
  const uint64_t index_loss_fresh_rows =
      numbers.Count("postgres.index_loss_fresh_rows");
  if (numbers.Count("postgres.index_lost") != 0) {
    // Worth a line only when it happened: the build after a lost index.
    rows.push_back(
        {"index lost", absl::StrFormat("rebuilt; %d rows last written here got "
                                       "fresh versions",
                                       index_loss_fresh_rows)});
  }
  std::string text = Table(rows);
  std::vector<std::vector<std::string>> tables = {
      {"TABLE", "STATE", "ROWS", "SCHEMA FINGERPRINT"}};
  for (int i = 0; i < pg.tables_size(); ++i) {
    const v1::PostgresTable& t = pg.tables(i);
    tables.push_back(
        {t.keyspace(),
         // The reason is in KEYSPACE IN TROUBLE below; the JSON has it
         // here too (tables[].trouble).
         t.trouble().empty()
             ? t.state()
             : absl::StrCat(t.state(),
                            ", IN TROUBLE (rows from peers left out)"),
         numbers.Text("postgres.tables[].rows", i),
         t.schema_fingerprint().empty() ? "-" : t.schema_fingerprint()});
  }
  absl::StrAppend(&text, "\n", Section(tables, "no tables"));
  return text;
}

// A sidecar's database source: its sessions. The total of differences is
// left to the JSON and /metrics (the last session's is here).
std::string DatabaseSourceText(node::StatusNumberReader& numbers,
                               absl::Time now) {
  const v1::DatabaseSourceStatus& src = numbers.status().database_source();
  numbers.Place("database_source.differences");
  // Read before the last session decides whether its line names them.
  const double last_session_seconds =
      numbers.Real("database_source.last_session_seconds");
  const uint64_t last_bytes_from_source =
      numbers.Count("database_source.last_bytes_from_source");
  const uint64_t last_differences =
      numbers.Count("database_source.last_differences");
  const int64_t last_session_start_unix_ms = static_cast<int64_t>(
      numbers.Count("database_source.last_session_start_unix_ms"));
  return Table({
      {"source", src.source()},
      {"state", src.state()},
      {"last session",
       last_session_start_unix_ms <= 0
           ? std::string("none yet")
           : absl::StrFormat(
                 "%s, %.1f s, %d differences, %s read from the source",
                 SessionTime(last_session_start_unix_ms, now),
                 last_session_seconds, last_differences,
                 HumanBytes(last_bytes_from_source))},
      {"last success", SessionTime(static_cast<int64_t>(numbers.Count(
                                       "database_source.last_success_unix_ms")),
                                   now)},
      {"last error", src.last_error().empty() ? "-" : src.last_error()},
      {"sessions",
       absl::StrFormat("%d ok, %d failed",
                       numbers.Count("database_source.sessions_ok"),
                       numbers.Count("database_source.sessions_failed"))},
      {"rows",
       absl::StrFormat("%d copied, %d deleted, %d refused (changed here "
                       "first; taken next session), %d rejected",
                       numbers.Count("database_source.rows_copied"),
                       numbers.Count("database_source.rows_deleted"),
                       numbers.Count("database_source.rows_refused"),
                       numbers.Count("database_source.rows_rejected"))},
      {"read from source",
       HumanBytes(numbers.Count("database_source.bytes_from_source"))},
  });
}

// Whether clients may write, and on a copy what they wrote anyway.
std::string ClientWrites(node::StatusNumberReader& numbers) {
  // Both read in either case: each is this line's.
  const bool read_only = numbers.Count("read_only") != 0;
  const std::string writes_refused = numbers.Text("writes_refused");
  numbers.Place("copy_writes.<origin>");
  if (read_only) {
    return absl::StrCat("refused (--read-only): ", writes_refused,
                        " rows refused");
  }
  uint64_t copy_writes = 0;
  for (int i = 0; i < numbers.status().copy_writes_size(); ++i) {
    copy_writes += numbers.Count("copy_writes.<origin>", i);
  }
  if (copy_writes == 0) return "accepted";
  return absl::StrCat("WARNING: ", copy_writes,
                      " rows written directly to this copy of its source "
                      "(its next session undoes them; see --read-only)");
}

// The peers table's RUNNING column: whether a session runs, and a pause.
std::string Running(const v1::PeerStatus& p, bool paused) {
  if (!paused) return p.session_running() ? "yes" : "no";
  return p.session_running() ? "paused, stopping" : "paused";
}

// A peer's last sessions (PeerStatus.history), newest first.
std::string HistoryTable(const v1::PeerStatus& p) {
  std::vector<std::vector<std::string>> rows = {
      {"STARTED", "TOOK", "TRIGGER", "OUTCOME", "KEYSPACES", "DIFFERENCES",
       "ROWS IN/OUT", "ERASED", "CONFLICTS", "MOVED"}};
  for (const v1::SessionRecord& r : p.history()) {
    rows.push_back(
        {r.started_unix_ms() > 0
             ? absl::FormatTime("%Y-%m-%dT%H:%M:%SZ",
                                absl::FromUnixMillis(r.started_unix_ms()),
                                absl::UTCTimeZone())
             : std::string("-"),
         absl::StrFormat("%.1f s", r.seconds()), r.trigger(), r.outcome(),
         absl::StrCat(r.keyspaces()), absl::StrCat(r.differences()),
         absl::StrCat(r.rows_received(), "/", r.rows_sent()),
         absl::StrCat(r.rows_erased()), absl::StrCat(r.conflicts()),
         HumanBytes(r.bytes_repaired())});
  }
  return Table(rows);
}

// "850 ms", "12.5 s", "3.2 min", "5.0 h", "2.1 d".
std::string HumanSeconds(double seconds) {
  if (seconds < 1) return absl::StrFormat("%.0f ms", seconds * 1000);
  if (seconds < 60) return absl::StrFormat("%.1f s", seconds);
  if (seconds < 3600) return absl::StrFormat("%.1f min", seconds / 60);
  if (seconds < 48 * 3600) return absl::StrFormat("%.1f h", seconds / 3600);
  return absl::StrFormat("%.1f d", seconds / 86400);
}

// The process (StatusResponse.process) and the node's repair limit: rows of
// their own table under the summary.
std::string ResourcesText(node::StatusNumberReader& numbers, absl::Time now) {
  const v1::StatusResponse& status = numbers.status();
  std::vector<std::vector<std::string>> rows;
  if (!status.has_process()) {
    rows.push_back({"process", "unknown (the node did not report it)"});
  } else {
    std::string up = "-";
    const int64_t start_unix_ms =
        static_cast<int64_t>(numbers.Count("process.start_unix_ms"));
    if (start_unix_ms > 0) {
      const absl::Time start = absl::FromUnixMillis(start_unix_ms);
      up = absl::StrCat(
          HumanSeconds(std::max(0.0, absl::ToDoubleSeconds(now - start))),
          " (since ",
          absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", start, absl::UTCTimeZone()),
          ")");
    }
    rows.push_back({"up", up});
    rows.push_back({"cpu", absl::StrFormat("%.1f s (user + system), %d threads",
                                           numbers.Real("process.cpu_seconds"),
                                           numbers.Count("process.threads"))});
    rows.push_back(
        {"memory",
         absl::StrCat("resident ",
                      HumanBytes(numbers.Count("process.resident_anon_bytes")),
                      " anon (heap), ",
                      HumanBytes(numbers.Count("process.resident_file_bytes")),
                      " file (mapped tables), ",
                      HumanBytes(numbers.Count("process.resident_shmem_bytes")),
                      " shared; virtual ",
                      HumanBytes(numbers.Count("process.virtual_bytes")))});
    const uint64_t open_fds = numbers.Count("process.open_fds");
    const uint64_t max_fds = numbers.Count("process.max_fds");
    std::string fds = absl::StrCat(open_fds, " open");
    if (max_fds > 0) {
      absl::StrAppend(&fds, " of ", max_fds);
      if (open_fds * 10 >= max_fds * 8) {
        absl::StrAppend(&fds,
                        " (WARNING: near the limit; raise LimitNOFILE "
                        "or ulimit -n)");
      }
    }
    rows.push_back({"open files", fds});
  }
  const double bandwidth = numbers.Real("node_bandwidth_bytes_per_second");
  rows.push_back(
      {"node bandwidth",
       bandwidth > 0
           ? absl::StrFormat("%.1f MB/s over all repairs (node-bandwidth)",
                             bandwidth / 1e6)
           : std::string("unlimited (node-bandwidth 0)")});
  return Table(rows);
}

// "~1.2 s", or ">30.0 min" when past the histogram's last bound; "-" when
// the histogram has nothing (or is malformed).
std::string QuantileText(double q, const v1::DurationHistogram& histogram) {
  absl::StatusOr<Quantile> quantile = HistogramQuantile(q, histogram);
  if (!quantile.ok()) return "-";
  if (quantile->above_last_bound) {
    return absl::StrCat(">", HumanSeconds(quantile->seconds));
  }
  return absl::StrCat("~", HumanSeconds(quantile->seconds));
}

// How long the sessions with each peer took (PeerStatus.session_seconds):
// a table with a row per peer.
std::string SessionTimesText(const v1::StatusResponse& status) {
  std::vector<std::vector<std::string>> rows = {
      {"SESSION TIMES WITH", "SESSIONS", "MEAN", "P50", "P90"}};
  for (const v1::PeerStatus& p : status.peers()) {
    const v1::DurationHistogram& h = p.session_seconds();
    rows.push_back(
        {p.address(), absl::StrCat(h.count()),
         h.count() > 0 ? HumanSeconds(h.sum_seconds() / h.count()) : "-",
         QuantileText(0.5, h), QuantileText(0.9, h)});
  }
  return Table(rows);
}

// The heat map (PeerStatus.heat): for each peer and keyspace with
// differences, the token space as two strips — the last session and the
// last heat_sessions — shaded on one scale for the whole map, and the
// legend.
std::string HeatMapText(const v1::StatusResponse& status) {
  struct Row {
    std::string peer, keyspace, window;
    std::vector<uint64_t> columns;
    uint64_t differences = 0, repaired = 0;
    std::string error;  // a heat that cannot be drawn
  };
  std::vector<Row> rows;
  std::vector<std::string> notes;
  uint64_t max = 0;
  for (const v1::PeerStatus& p : status.peers()) {
    if (p.heat_sessions() == 0) {
      notes.push_back(absl::StrCat(p.address(), ": no session ended yet"));
      continue;
    }
    const std::string recent =
        p.heat_sessions() == 1
            ? std::string("all sessions (1)")
            : absl::StrCat("last ", p.heat_sessions(), " sessions");
    if (p.heat_size() == 0) {
      notes.push_back(
          absl::StrCat(p.address(), ": no differences in the ", recent));
    }
    for (const v1::KeyspaceHeat& heat : p.heat()) {
      bool first = true;
      for (const auto* window : {&heat.last(), &heat.recent()}) {
        Row row;
        row.peer = first ? p.address() : "";
        row.keyspace = first ? heat.keyspace() : "";
        row.window = first ? "last session" : recent;
        first = false;
        for (const v1::HeatSegment& s : *window) {
          row.differences += s.differences();
          row.repaired += s.rows_repaired();
        }
        absl::StatusOr<std::vector<uint64_t>> columns =
            HeatColumns(heat.segments(), *window);
        if (columns.ok()) {
          row.columns = *std::move(columns);
          for (uint64_t c : row.columns) max = std::max(max, c);
        } else {
          row.error = std::string(columns.status().message());
        }
        rows.push_back(std::move(row));
      }
    }
    if (p.heat_keyspaces_left_out() > 0) {
      notes.push_back(
          absl::StrCat(p.address(), ": ", p.heat_keyspaces_left_out(),
                       " more keyspaces with differences not listed (only the ",
                       p.heat_size(), " hottest are sent)"));
    }
  }
  std::string text = absl::StrCat(
      "  WHERE THE SESSIONS FOUND DIFFERENCES: each strip is a keyspace's "
      "token space, first token at the left, in ",
      kHeatStripWidth, " columns\n");
  if (!rows.empty()) {
    // The strip's header spans it: "|first token ... last token|".
    constexpr absl::string_view kFirst = "first token";
    constexpr absl::string_view kLast = "last token";
    std::vector<std::vector<std::string>> table = {
        {"PEER", "KEYSPACE", "SESSIONS",
         absl::StrCat(
             "|", kFirst,
             std::string(kHeatStripWidth - kFirst.size() - kLast.size(), ' '),
             kLast, "|"),
         "DIFFERENCES", "REPAIRED"}};
    for (const Row& row : rows) {
      table.push_back({row.peer, row.keyspace, row.window,
                       row.error.empty()
                           ? absl::StrCat("|", HeatStrip(row.columns, max), "|")
                           : absl::StrCat("(", row.error, ")"),
                       absl::StrCat(row.differences),
                       absl::StrCat(row.repaired)});
    }
    absl::StrAppend(&text, Table(table), "  ", HeatLegend(max));
  }
  for (const std::string& note : notes)
    absl::StrAppend(&text, "  ", note, "\n");
  return text;
}

// StatusResponse.process, or null from a node that did not report it.
Json ProcessJson(const v1::StatusResponse& status) {
  if (!status.has_process()) return Json();
  return {{"cpu_seconds", FromTable()},
          {"resident_anon_bytes", FromTable()},
          {"resident_file_bytes", FromTable()},
          {"resident_shmem_bytes", FromTable()},
          {"virtual_bytes", FromTable()},
          {"open_fds", FromTable()},
          {"max_fds", FromTable()},
          {"threads", FromTable()},
          {"start_unix_ms", FromTable()}};
}

// A quantile's estimate in seconds, or null when the histogram has none.
Json QuantileJson(double q, const v1::DurationHistogram& histogram) {
  absl::StatusOr<Quantile> quantile = HistogramQuantile(q, histogram);
  return quantile.ok() ? Json(quantile->seconds) : Json();
}

// PeerStatus.session_seconds: the buckets as sent (not cumulative; the last
// count is +Inf), and the summary the text shows.
Json SessionSecondsJson(const v1::DurationHistogram& h) {
  Json bounds = Json::array();
  for (double b : h.upper_bounds()) bounds.push_back(b);
  Json counts = Json::array();
  for (uint64_t c : h.counts()) counts.push_back(c);
  return {{"count", h.count()},
          {"sum_seconds", h.sum_seconds()},
          {"mean_seconds",
           h.count() > 0 ? Json(h.sum_seconds() / h.count()) : Json()},
          {"p50_seconds", QuantileJson(0.5, h)},
          {"p90_seconds", QuantileJson(0.9, h)},
          {"upper_bounds", std::move(bounds)},
          {"counts", std::move(counts)}};
}

Json HeatSegmentsJson(
    const google::protobuf::RepeatedPtrField<v1::HeatSegment>& segments) {
  Json out = Json::array();
  for (const v1::HeatSegment& s : segments) {
    out.push_back({{"segment", s.segment()},
                   {"differences", s.differences()},
                   {"rows_repaired", s.rows_repaired()}});
  }
  return out;
}

// PeerStatus.heat: per keyspace, the segments with a count.
Json HeatJson(const v1::PeerStatus& p) {
  Json out = Json::array();
  for (const v1::KeyspaceHeat& heat : p.heat()) {
    out.push_back({{"keyspace", heat.keyspace()},
                   {"segments", heat.segments()},
                   {"last", HeatSegmentsJson(heat.last())},
                   {"recent", HeatSegmentsJson(heat.recent())}});
  }
  return out;
}
}  // namespace

std::string StatusText(const v1::StatusResponse& status,
                       absl::string_view dialed, absl::Time now) {
  // The numbers the status table holds, by their JSON key
  // (node::StatusNumberReader): the node's, and item i's of a list. The
  // ones the layout below does not name end the text (OtherNumbersText).
  node::StatusNumberReader numbers(status);
  auto n = [&numbers](absl::string_view key, int item = 0) {
    return numbers.Text(key, item);
  };
  // Left to the JSON and /metrics: the diffs tools run against this node,
  // and of each peer the last success, the rows applications changed during
  // its sessions, how far this clock is behind its and the changes of its
  // feed left out (the node's total is here), and since when it is paused.
  for (absl::string_view key :
       {"diffs_running", "peers[].last_success_unix_ms",
        "peers[].rows_changed_during_session", "peers[].clock_behind_seconds",
        "peers[].feed.rejected", "peers[].paused_since_unix_ms"}) {
    numbers.Place(key);
  }
  const double clock_behind_seconds = numbers.Real("clock_behind_seconds");
  std::string log = n("last_sequence");
  if (numbers.Count("first_sequence") > 0 ||
      numbers.Count("log_entries_trimmed") > 0) {
    absl::StrAppend(&log, " (oldest kept ", n("first_sequence"), ", ",
                    n("log_entries_trimmed"), " trimmed)");
  }
  std::string text = Table({
      {"node", status.node_name()},
      {"listen", Listen(status, dialed)},
      {"epoch", Hex64(status.epoch())},
      {"store", status.store_write_error().empty()
                    ? std::string("writable")
                    : absl::StrCat("REFUSING WRITES until restarted: ",
                                   status.store_write_error())},
      {"client writes", ClientWrites(numbers)},
      {"last sequence", log},
      {"sessions",
       absl::StrCat(n("sessions_running"), " running, ", n("sessions_ok"),
                    " ok, ", n("sessions_failed"), " failed (",
                    n("rows_erased"), " rows erased, ", n("conflicts"),
                    " conflicts",
                    numbers.Count("rows_changed_during_session") == 0
                        ? std::string(")")
                        : absl::StrCat(", ", n("rows_changed_during_session"),
                                       " rows changed by applications during "
                                       "them, left to the capture)"))},
      {"feed sent",
       absl::StrCat(n("feed.sent"), " (skipped: ", n("feed.skipped_own"),
                    " own, ", n("feed.skipped_superseded"), " superseded)")},
      {"feed received",
       absl::StrCat(n("feed.received"), " (applied ", n("feed.applied"),
                    ", not newer ", n("feed.not_newer"),
                    ", refused timestamps ", n("feed.refused_skew"),
                    numbers.Count("feed.rejected") == 0
                        ? std::string(")")
                        : absl::StrCat(", left out ", n("feed.rejected"),
                                       ": keyspaces in trouble)"))},
      {"tombstones purged", n("tombstones_purged")},
      {"ties resolved", n("ties_resolved")},
      {"row filter",
       absl::StrFormat(
           "%d of %d keyspaces built, %.2f MB; writes: %d read their row, "
           "%d skipped the read",
           numbers.Count("row_filter.built"),
           numbers.Count("row_filter.keyspaces"),
           numbers.Count("row_filter.memory_bytes") / 1e6,
           numbers.Count("row_filter.rows_read"),
           numbers.Count("row_filter.reads_skipped"))},
      {"clock behind",
       absl::StrFormat("%.1f s%s", clock_behind_seconds,
                       clock_behind_seconds > 5
                           ? " (far behind: fix its time source)"
                           : "")},
      {"scrub",
       absl::StrCat(
           n("scrub.passes"), " passes, ", n("scrub.rows_checked"),
           " rows checked, ", n("scrub.damaged_rows_found"), " damaged found, ",
           n("scrub.leaves_repaired"),
           " leaves repaired; damaged now: ", n("scrub.damaged_rows"))},
  });
  absl::StrAppend(&text, "\n", ResourcesText(numbers, now));
  if (status.has_postgres()) {
    absl::StrAppend(&text, "\n",
                    PostgresText(numbers, KeyspacesInTrouble(status)));
  }
  if (status.has_database_source()) {
    absl::StrAppend(&text, "\n", DatabaseSourceText(numbers, now));
  }
  if (const std::string trouble = TroubleText(numbers, now); !trouble.empty()) {
    absl::StrAppend(&text, "\n", trouble);
  }
  for (const v1::UnlistedCaller& caller : status.unlisted_callers()) {
    absl::StrAppend(
        &text,
        absl::StrFormat(
            "\nWARNING: node '%s' (from %s, %d sessions, last %s) runs "
            "sessions with this node but is not among its peers: the link is "
            "one-sided, this node does not follow its change feed, and its "
            "writes arrive only with its sessions. Name it as a peer here "
            "too.\n",
            caller.name(), caller.address(), caller.handshakes(),
            SessionTime(caller.last_unix_ms(), now)));
  }

  std::vector<std::vector<std::string>> keyspaces = {
      {"KEYSPACE", "ROWS", "DEPTH", "ROOT", "ROOT CHANGES"}};
  for (int i = 0; i < status.keyspaces_size(); ++i) {
    const v1::KeyspaceSummary& ks = status.keyspaces(i);
    keyspaces.push_back({ks.name(), n("keyspaces[].rows", i),
                         n("keyspaces[].depth", i), RootHex(ks.root()),
                         n("keyspaces[].root_changes", i)});
  }
  absl::StrAppend(&text, "\n", Section(keyspaces, "no keyspaces"));

  std::vector<std::vector<std::string>> origins = {{"ORIGIN", "ROWS"}};
  for (int i = 0; i < status.origins_size(); ++i) {
    origins.push_back({status.origins(i).origin(), n("origins[].rows", i)});
  }
  absl::StrAppend(&text, "\n", Section(origins, "no rows from any origin"));

  std::vector<std::vector<std::string>> peers = {
      {"PEER", "ROLE", "NAME", "LAST SESSION", "OUTCOME", "RUNNING",
       "OK/FAILED", "ROWS IN/OUT", "ERASED", "CONFLICTS", "REPAIRED"}};
  std::string outcomes;  // the outcomes cut in the table, whole
  for (int i = 0; i < status.peers_size(); ++i) {
    const v1::PeerStatus& p = status.peers(i);
    if (p.last_outcome().size() > kMaxCellWidth) {
      absl::StrAppend(&outcomes, WrappedNote(p.address(), p.last_outcome()));
    }
    peers.push_back({p.address(), p.role(), p.name().empty() ? "-" : p.name(),
                     SessionTime(static_cast<int64_t>(numbers.Count(
                                     "peers[].last_session_unix_ms", i)),
                                 now),
                     p.last_outcome().empty() ? "-" : CutCell(p.last_outcome()),
                     Running(p, numbers.Count("peers[].paused", i) != 0),
                     absl::StrCat(n("peers[].sessions_ok", i), "/",
                                  n("peers[].sessions_failed", i)),
                     absl::StrCat(n("peers[].rows_received", i), "/",
                                  n("peers[].rows_sent", i)),
                     n("peers[].rows_erased", i), n("peers[].conflicts", i),
                     HumanBytes(numbers.Count("peers[].bytes_repaired", i))});
  }
  absl::StrAppend(&text, "\n", Section(peers, "no peers"));
  if (!outcomes.empty()) {
    absl::StrAppend(&text, "  last outcomes in full:\n", outcomes);
  }

  if (status.peers_size() > 0) {
    std::vector<std::vector<std::string>> sessions = {
        {"SESSION WITH", "PHASE", "KEYSPACE", "FOR", "KEYSPACES", "DIFFERENCES",
         "ROWS IN/OUT"}};
    for (int i = 0; i < status.peers_size(); ++i) {
      const v1::PeerStatus& p = status.peers(i);
      const v1::SessionProgress& s = p.session();
      std::string phase = s.phase().empty() ? "idle" : s.phase();
      if (!s.failed_in().empty())
        absl::StrAppend(&phase, " in ", s.failed_in());
      const double phase_seconds =
          numbers.Real("peers[].session.phase_seconds", i);
      sessions.push_back({p.address(), phase,
                          s.keyspace().empty() ? "-" : s.keyspace(),
                          s.phase_since_unix_ms() > 0
                              ? absl::StrFormat("%.1f s", phase_seconds)
                              : std::string("-"),
                          absl::StrCat(s.keyspaces_done(), "/", s.keyspaces()),
                          absl::StrCat(s.differences()),
                          absl::StrCat(s.rows_received(), "/", s.rows_sent())});
    }
    absl::StrAppend(&text, "\n", Table(sessions));
    // A running session's rows against its total and time left.
    for (const v1::PeerStatus& p : status.peers()) {
      if (!SessionRuns(p.session())) continue;
      absl::StrAppend(&text, "  session with ", p.address(), ": ",
                      ProgressText(SessionEstimate(p.session(), now), "rows"),
                      "\n");
    }
  }

  // The last sessions with each peer, newest first: one small table each,
  // for the peers that had one since the node started.
  for (const v1::PeerStatus& p : status.peers()) {
    if (p.history_size() == 0) continue;
    absl::StrAppend(&text, "\n  LAST SESSIONS WITH ", p.address(),
                    p.name().empty() ? "" : absl::StrCat(" (", p.name(), ")"),
                    ", newest first\n", HistoryTable(p));
  }

  if (status.peers_size() > 0) {
    absl::StrAppend(&text, "\n", SessionTimesText(status));
    absl::StrAppend(&text, "\n", HeatMapText(status));
  }

  if (status.peers_size() > 0) {
    std::vector<std::vector<std::string>> feeds = {
        {"FEED FROM", "CONNECTED", "POSITION", "LAG", "RECEIVED", "APPLIED",
         "NOT NEWER", "SKIPPED OWN/SUPERSEDED", "REFUSED", "RECONNECTS"}};
    for (int i = 0; i < status.peers_size(); ++i) {
      feeds.push_back(
          {status.peers(i).address(),
           numbers.Count("peers[].feed.connected", i) != 0 ? "yes" : "no",
           n("peers[].feed.position", i),
           absl::StrFormat("%s entries, %.1f s",
                           n("peers[].feed.lag_entries", i),
                           numbers.Real("peers[].feed.lag_seconds", i)),
           n("peers[].feed.received", i), n("peers[].feed.applied", i),
           n("peers[].feed.not_newer", i),
           absl::StrCat(n("peers[].feed.skipped_own", i), "/",
                        n("peers[].feed.skipped_superseded", i)),
           n("peers[].feed.refused_skew", i), n("peers[].feed.reconnects", i)});
    }
    absl::StrAppend(&text, "\n", Table(feeds));
  }

  std::vector<std::vector<std::string>> subscribers = {
      {"SUBSCRIBER", "POSITION", "SENT", "SKIPPED OWN/SUPERSEDED"}};
  for (int i = 0; i < status.subscriptions_size(); ++i) {
    const v1::FeedSubscriptionStatus& s = status.subscriptions(i);
    subscribers.push_back(
        {s.subscriber(), n("subscriptions[].position", i),
         n("subscriptions[].sent", i),
         absl::StrCat(n("subscriptions[].skipped_own", i), "/",
                      n("subscriptions[].skipped_superseded", i))});
  }
  absl::StrAppend(&text, "\n", Section(subscribers, "no subscribers"));
  if (const std::string other = OtherNumbersText(numbers); !other.empty()) {
    absl::StrAppend(&text, "\n", other);
  }
  return text;
}

std::string OtherNumbersText(const node::StatusNumberReader& numbers) {
  const v1::StatusResponse& status = numbers.status();
  std::vector<std::vector<std::string>> rows = {
      {"OTHER NUMBER", "OF", "VALUE"}};
  for (const node::StatusNumberRef& number : numbers.Unplaced()) {
    const node::StatusField& field = *number.field;
    const int items = node::StatusScopeSize(status, field.scope);
    for (int item = 0; item < items; ++item) {
      const auto [label, value] =
          node::StatusScopeLabel(status, field.scope, item);
      rows.push_back(
          {node::StatusNumberCaption(number.series->json_key),
           label.empty() ? std::string("-") : absl::StrCat(label, " ", value),
           node::StatusValueForPeople(number.series->value(status, item),
                                      field.unit)});
    }
  }
  for (const std::string& key : numbers.unknown_keys()) {
    rows.push_back({absl::StrCat("<no status number ", key, ">"), "-", "-"});
  }
  return rows.size() > 1 ? Table(rows) : std::string();
}

namespace {

// The JSON value at `path` of the status table ("peers[].feed.received":
// out["peers"][item]["feed"]["received"]; "copy_writes.<origin>": the key
// is the item's label value). Its place in the layout when the layout has
// one; made, at the end of its object, when not.
Json* JsonAt(Json* root, absl::string_view path, int item,
             absl::string_view item_label) {
  Json* at = root;
  for (absl::string_view key : absl::StrSplit(path, '.')) {
    const bool array = absl::ConsumeSuffix(&key, "[]");
    const std::string name =
        absl::StartsWith(key, "<") ? std::string(item_label) : std::string(key);
    at = &(*at)[name];
    if (array) {
      if (!at->is_array()) *at = Json::array();
      while (at->size() <= static_cast<size_t>(item)) {
        at->push_back(Json::object());
      }
      at = &(*at)[item];
    }
  }
  return at;
}

// Writes every number of the status table that has a JSON key into `out`,
// at that key, for every item of its scope (StatusJson's last step): a flag
// as true or false, a time as Unix milliseconds, a value /metrics leaves
// out as 0 (or null, for a series that says so).
void SetTableNumbers(const v1::StatusResponse& status, Json* out) {
  for (const node::StatusField& field : node::StatusFields()) {
    const int items = node::StatusScopeSize(status, field.scope);
    for (const node::StatusSeries& series : field.series) {
      if (series.json_key.empty()) continue;
      for (int item = 0; item < items; ++item) {
        Json* at =
            JsonAt(out, series.json_key, item,
                   node::StatusScopeLabel(status, field.scope, item).second);
        const node::StatusValue value = series.value(status, item);
        switch (value.kind()) {
          case node::StatusValue::Kind::kCount:
            *at = value.count();
            break;
          case node::StatusValue::Kind::kFlag:
            *at = value.count() != 0;
            break;
          case node::StatusValue::Kind::kReal:
            *at = value.real();
            break;
          case node::StatusValue::Kind::kUnixMs:
            *at = value.unix_ms();
            break;
          case node::StatusValue::Kind::kAbsent:
            *at = series.json_null_when_absent ? Json() : Json(0);
            break;
        }
      }
    }
  }
}

}  // namespace

Json StatusJson(const v1::StatusResponse& status, absl::string_view dialed) {
  Json out = Json::object();
  out["name"] = status.node_name();
  out["listen"] = Listen(status, dialed);
  // Hex, as in the text and the metrics: a random 64-bit value is no JSON
  // number (jq and JavaScript would round it).
  out["epoch"] = Hex64(status.epoch());
  // null while writable.
  out["store_write_error"] = status.store_write_error().empty()
                                 ? Json()
                                 : Json(status.store_write_error());
  out["read_only"] = FromTable();
  out["writes_refused"] = FromTable();
  Json copy_writes = Json::object();
  for (const v1::OriginRows& o : status.copy_writes()) {
    copy_writes[o.origin()] = FromTable();
  }
  out["copy_writes"] = copy_writes;
  out["last_sequence"] = FromTable();
  out["first_sequence"] = FromTable();
  out["log_entries_trimmed"] = FromTable();
  out["tombstones_purged"] = FromTable();
  out["clock_behind_seconds"] = FromTable();
  out["scrub"] = Json{{"passes", FromTable()},
                      {"rows_checked", FromTable()},
                      {"damaged_rows_found", FromTable()},
                      {"leaves_repaired", FromTable()},
                      {"damaged_rows", FromTable()}};
  out["process"] = ProcessJson(status);
  out["node_bandwidth_bytes_per_second"] = FromTable();
  out["sessions_running"] = FromTable();
  out["diffs_running"] = FromTable();
  out["sessions_ok"] = FromTable();
  out["sessions_failed"] = FromTable();
  out["rows_erased"] = FromTable();
  out["conflicts"] = FromTable();
  out["rows_changed_during_session"] = FromTable();
  out["ties_resolved"] = FromTable();
  out["row_filter"] = {{"keyspaces", FromTable()},
                       {"built", FromTable()},
                       {"memory_bytes", FromTable()},
                       {"rows_read", FromTable()},
                       {"reads_skipped", FromTable()}};
  out["feed"] = {{"sent", FromTable()},
                 {"skipped_own", FromTable()},
                 {"skipped_superseded", FromTable()},
                 {"received", FromTable()},
                 {"applied", FromTable()},
                 {"not_newer", FromTable()},
                 {"refused_skew", FromTable()},
                 {"rejected", FromTable()}};
  out["keyspace_trouble"] = Json::array();
  for (const v1::KeyspaceTroubleStatus& t : status.keyspace_trouble()) {
    Json by_reason = Json::object();
    for (const v1::ReasonCount& c : t.rejected())
      by_reason[c.reason()] = c.rows();
    out["keyspace_trouble"].push_back({{"keyspace", t.keyspace()},
                                       {"in_trouble", FromTable()},
                                       {"reason", t.reason()},
                                       {"last_error", t.last_error()},
                                       {"last_key", t.last_key()},
                                       {"peer", t.peer()},
                                       {"last_unix_ms", FromTable()},
                                       {"since_unix_ms", FromTable()},
                                       {"rows_rejected", FromTable()},
                                       {"rejected", std::move(by_reason)}});
  }
  out["unlisted_callers"] = Json::array();
  for (const v1::UnlistedCaller& caller : status.unlisted_callers()) {
    out["unlisted_callers"].push_back(
        {{"name", caller.name()},
         {"address", caller.address()},
         {"handshakes", caller.handshakes()},
         {"last_unix_ms", caller.last_unix_ms()}});
  }
  out["keyspaces"] = Json::array();
  for (const v1::KeyspaceSummary& ks : status.keyspaces()) {
    out["keyspaces"].push_back({{"name", ks.name()},
                                {"rows", FromTable()},
                                {"depth", FromTable()},
                                {"root", RootHex(ks.root())},
                                {"root_changes", FromTable()}});
  }
  out["origins"] = Json::array();
  for (const v1::OriginRows& o : status.origins()) {
    out["origins"].push_back({{"origin", o.origin()}, {"rows", FromTable()}});
  }
  out["peers"] = Json::array();
  for (const v1::PeerStatus& p : status.peers()) {
    Json peer = {{"address", p.address()},
                 {"role", p.role()},
                 {"name", p.name()},
                 {"last_session_unix_ms", FromTable()},
                 {"last_success_unix_ms", FromTable()},
                 {"last_outcome", p.last_outcome()},
                 {"session_running", p.session_running()},
                 {"sessions_ok", FromTable()},
                 {"sessions_failed", FromTable()},
                 {"rows_received", FromTable()},
                 {"rows_sent", FromTable()},
                 {"rows_erased", FromTable()},
                 {"conflicts", FromTable()},
                 {"rows_changed_during_session", FromTable()},
                 {"bytes_repaired", FromTable()},
                 {"clock_behind_seconds", FromTable()},
                 {"paused", FromTable()},
                 {"paused_since_unix_ms", FromTable()}};
    peer["feed"] = {
        {"connected", FromTable()},          {"position", FromTable()},
        {"lag_entries", FromTable()},        {"lag_seconds", FromTable()},
        {"received", FromTable()},           {"applied", FromTable()},
        {"not_newer", FromTable()},          {"skipped_own", FromTable()},
        {"skipped_superseded", FromTable()}, {"refused_skew", FromTable()},
        {"rejected", FromTable()},           {"reconnects", FromTable()}};
    const v1::SessionProgress& s = p.session();
    peer["session"] = {{"phase", s.phase().empty() ? "idle" : s.phase()},
                       {"failed_in", s.failed_in()},
                       {"keyspace", s.keyspace()},
                       {"phase_since_unix_ms", s.phase_since_unix_ms()},
                       {"phase_seconds", FromTable()},
                       {"started_unix_ms", s.started_unix_ms()},
                       {"keyspaces", s.keyspaces()},
                       {"keyspaces_done", s.keyspaces_done()},
                       {"differences", s.differences()},
                       {"rows_received", s.rows_received()},
                       {"rows_sent", s.rows_sent()},
                       {"trigger", s.trigger()}};
    peer["session_seconds"] = SessionSecondsJson(p.session_seconds());
    peer["heat_sessions"] = p.heat_sessions();
    peer["heat_keyspaces_left_out"] = p.heat_keyspaces_left_out();
    peer["heat"] = HeatJson(p);
    peer["session"]["rows_expected"] =
        s.has_rows_expected() ? Json(s.rows_expected()) : Json();
    peer["session"]["rows_per_second"] = s.rows_per_second();
    peer["session"]["eta_seconds"] =
        s.has_eta_seconds() ? Json(s.eta_seconds()) : Json();
    // Newest first.
    peer["history"] = Json::array();
    for (const v1::SessionRecord& r : p.history()) {
      peer["history"].push_back(
          {{"started_unix_ms", r.started_unix_ms()},
           {"seconds", r.seconds()},
           {"trigger", r.trigger()},
           {"outcome", r.outcome()},
           {"keyspaces", r.keyspaces()},
           {"differences", r.differences()},
           {"rows_received", r.rows_received()},
           {"rows_sent", r.rows_sent()},
           {"rows_erased", r.rows_erased()},
           {"conflicts", r.conflicts()},
           {"bytes_repaired", r.bytes_repaired()},
           {"rows_changed_during_session", r.rows_changed_during_session()}});
    }
    out["peers"].push_back(std::move(peer));
  }
  out["subscriptions"] = Json::array();
  for (const v1::FeedSubscriptionStatus& s : status.subscriptions()) {
    out["subscriptions"].push_back({{"subscriber", s.subscriber()},
                                    {"position", FromTable()},
                                    {"sent", FromTable()},
                                    {"skipped_own", FromTable()},
                                    {"skipped_superseded", FromTable()}});
  }
  if (status.has_postgres()) {
    const v1::PostgresStatus& pg = status.postgres();
    Json tables = Json::array();
    for (const v1::PostgresTable& t : pg.tables()) {
      tables.push_back({{"keyspace", t.keyspace()},
                        {"state", t.state()},
                        {"rows", FromTable()},
                        {"schema_fingerprint", t.schema_fingerprint()},
                        {"trouble", t.trouble()}});
    }
    out["postgres"] = {
        {"database", pg.database()},
        {"phase", pg.phase()},
        {"keyspaces_in_trouble", KeyspacesInTrouble(status)},
        {"last_error",
         pg.last_error().empty() ? Json() : Json(pg.last_error())},
        {"slot", pg.slot()},
        {"publication", pg.publication()},
        {"origin", pg.origin()},
        {"system_identifier", pg.system_identifier()},
        {"received_lsn", pg.received_lsn()},
        {"confirmed_lsn", pg.confirmed_lsn()},
        {"slot_lag_bytes", FromTable()},
        {"slot_wal_status", pg.slot_wal_status()},
        {"capture_lag_seconds", FromTable()},
        {"build_rows_done", FromTable()},
        {"build_rows_estimated", FromTable()},
        {"transactions_captured", FromTable()},
        {"rows_captured", FromTable()},
        {"own_transactions_replayed", FromTable()},
        {"rows_applied", FromTable()},
        {"rows_refused", FromTable()},
        {"index_lost", FromTable()},
        {"index_loss_fresh_rows", FromTable()},
        {"tables", std::move(tables)}};
    out["postgres"]["engine"] = pg.engine();
    out["postgres"]["server_id"] = pg.server_id();
    out["postgres"]["indexed_gtid"] = pg.indexed_gtid();
    out["postgres"]["server_gtid"] = pg.server_gtid();
    out["postgres"]["builds"] = FromTable();
    out["postgres"]["last_rebuild_reason"] = pg.last_rebuild_reason();
    out["postgres"]["build_rows_per_second"] = FromTable();
    out["postgres"]["build_eta_seconds"] = FromTable();
    out["postgres"]["build_seconds"] = FromTable();
  } else {
    out["postgres"] = Json();  // null: the node keeps its own rows
  }
  if (status.has_database_source()) {
    const v1::DatabaseSourceStatus& src = status.database_source();
    out["database_source"] = {
        {"source", src.source()},
        {"state", src.state()},
        {"last_error",
         src.last_error().empty() ? Json() : Json(src.last_error())},
        {"last_session_start_unix_ms", FromTable()},
        {"last_success_unix_ms", FromTable()},
        {"last_session_seconds", FromTable()},
        {"sessions_ok", FromTable()},
        {"sessions_failed", FromTable()},
        {"differences", FromTable()},
        {"last_differences", FromTable()},
        {"rows_copied", FromTable()},
        {"rows_deleted", FromTable()},
        {"rows_refused", FromTable()},
        {"rows_rejected", FromTable()},
        {"bytes_from_source", FromTable()},
        {"last_bytes_from_source", FromTable()}};
  } else {
    out["database_source"] = Json();  // null: no database source
  }
  SetTableNumbers(status, &out);
  return out;
}

}  // namespace cli
}  // namespace tally
