// Scenario "mariadb-sidecar": the MariaDB sidecar's three row paths, in
// process, each beside a baseline measured in the same run.
//
// One throwaway MariaDB server (support/mariadb_server.h; a 1 GB buffer
// pool and a 256 MB redo log, so that the table stays in memory and a
// 1M-row UPDATE is not held up by checkpoints) with the `mariadb`
// scenario's db1.t(id bigint primary key, a int, b varchar(40), c
// datetime(6)) of --mariadb_sidecar_rows rows. --mariadb_sidecar_runs runs
// of each contender:
//
//  1. build: mariadb::Sidecar's first build into a fresh store (LevelDB in
//     a temp dir, sync writes as tallyd's default), timed from Start until
//     AwaitCaughtUp returns (snapshot, read, index, the binary log
//     followed), against the baseline `mariadb --quick -e 'SELECT * FROM
//     db1.t' > /dev/null` (the client's own process, text protocol) and
//     the floor: the same SELECT streamed through Connector/C in process
//     (mariadb::Connection::Stream, binary protocol), every row dropped.
//     The three take turns, who goes first rotating. Each build must index
//     every row.
//  2. capture: a sidecar following (built once, untimed); per run, the
//     binary log rotated (FLUSH BINARY LOGS, so that the UPDATE is alone
//     in a file), one `UPDATE db1.t SET a = a + 1` (autocommit: every row
//     in one transaction), timed from the UPDATE's commit (the statement
//     returned) until AwaitCaughtUp returns. MariaDB writes a transaction
//     to the binary log at its commit, so the sidecar reads none of it
//     before. Then the baseline, once the machine is idle:
//     `mysqlbinlog --read-from-remote-server --start-position=S
//     --stop-position=E FILE > /dev/null`, S and E the file's positions
//     before and after the UPDATE: exactly the UPDATE's events (GTID,
//     annotation, table map, the row events with both images, XID),
//     fetched over the replication protocol and printed as mysqlbinlog
//     prints them by default (base64 BINLOG statements, rows not decoded);
//     and the same with --verbose, which also decodes every row image into
//     commented pseudo-SQL (the two alternate who goes first).
//     The sidecar does more: it decodes every row image, converts it to
//     the canonical form, digests it and writes it into its index. The
//     sidecar's rows_captured must grow by the table's rows each run, and
//     at the end Sidecar::Verify must find the index equal to the table.
//  3. apply: MariaDbBackend::ApplyRows of --mariadb_sidecar_batches
//     batches of 10,000 puts per run over existing rows (distinct keys
//     within a run, spread over the table), each under the compare-and-
//     swap with the digest of what the table holds (one transaction each,
//     with its apply log row), against the same batches written blind into
//     a copy of the table by MariaDbTable::WriteRows (INSERT ... ON
//     DUPLICATE KEY UPDATE, 1,000 rows per statement as the apply, one
//     transaction) on a Connector/C connection of the same kind. Batch by
//     batch in turns. Every CAS row must be applied (nothing else writes)
//     and the two tables must be equal at the end. Goal: ≥ 40,000 rows/s.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "mariadb/connection.h"
#include "mariadb/sidecar/mariadb_backend.h"
#include "mariadb/sidecar/sidecar.h"
#include "mariadb/table.h"
#include "mariadb/url.h"
#include "pg/schema/row_codec.h"
#include "pg/schema/table_schema.h"
#include "pg/table_diff/table_scan.h"
#include "pg/wire/field.h"
#include "storage/row_backend.h"
#include "storage/store.h"
#include "support/mariadb_server.h"
#include "support/process.h"
#include "support/temp_dir.h"
#include "tools/bench/mariadb_fixture.h"
#include "tools/bench/pg_sidecar_fixture.h"
#include "tools/bench/scenario.h"
#include "tree/digest.h"
#include "tree/hlc.h"
#include "tree/status_macros.h"
#include "tree/token.h"
#include "tree/version.h"

ABSL_FLAG(uint64_t, mariadb_sidecar_rows, 1000000,
          "mariadb-sidecar: rows in the table (a smaller one for a quick run)");
ABSL_FLAG(int, mariadb_sidecar_runs, 3,
          "mariadb-sidecar: runs of each contender in each part");
ABSL_FLAG(int, mariadb_sidecar_batches, 10,
          "mariadb-sidecar: 10,000-row apply batches per run and contender");
ABSL_FLAG(std::string, mariadb_sidecar_parts, "build,capture,apply",
          "mariadb-sidecar: the parts to run, comma separated");
ABSL_FLAG(std::string, mariadb_client, "/usr/bin/mariadb",
          "mariadb-sidecar: the build's baseline program");
ABSL_FLAG(std::string, mysqlbinlog, "/usr/bin/mysqlbinlog",
          "mariadb-sidecar: the capture's baseline program");

namespace tally {
namespace bench {
namespace {

using mariadb::Connection;
using mariadb::MariaDbBackend;
using mariadb::MariaDbTable;
using storage::RowChange;
using testing::CommandResult;
using testing::MariaDbServer;

constexpr char kKeyspace[] = "db1.t";
constexpr size_t kBatchRows = 10000;
constexpr double kApplyGoal = 40000;
// Session server_ids of the sidecars (each also registers id + 1 as a
// binlog reader) and of the apply; the server itself is 1.
constexpr uint32_t kCaptureServerId = 7100;
constexpr uint32_t kApplyServerId = 7200;
// + 2 * run: above the others whatever --mariadb_sidecar_runs.
constexpr uint32_t kBuildServerId = 8000;

// "min / median / max" of rows/s for timings in seconds.
std::string Rates(double rows, const Samples& seconds) {
  if (seconds.empty()) return "-";
  return absl::StrFormat("%.0f / %.0f / %.0f", rows / seconds.Max(),
                         rows / seconds.Median(), rows / seconds.Min());
}

double MedianRate(double rows, const Samples& seconds) {
  return seconds.empty() ? 0 : rows / seconds.Median();
}

std::string BigEndian(uint64_t v, int bytes) {
  std::string out;
  for (int shift = (bytes - 1) * 8; shift >= 0; shift -= 8) {
    out.push_back(static_cast<char>((v >> shift) & 0xff));
  }
  return out;
}

// A sidecar following db1.t into a store of its own (a temp dir), as
// tallyd runs one. Members are destroyed in reverse: the sidecar stops
// before its store closes.
struct RunningSidecar {
  testing::TempDir dir;
  std::unique_ptr<storage::Store> store;
  std::unique_ptr<mariadb::Sidecar> sidecar;

  ~RunningSidecar() {
    if (sidecar != nullptr) sidecar->Stop();
  }
};

// A binary log position, as SHOW MASTER STATUS gives it.
struct BinlogPosition {
  std::string file;
  uint64_t position = 0;
};

class SidecarBench {
 public:
  absl::Status Setup(std::ostream& out) {
    rows_ = absl::GetFlag(FLAGS_mariadb_sidecar_rows);
    runs_ = std::max(1, absl::GetFlag(FLAGS_mariadb_sidecar_runs));
    if (rows_ < kBatchRows) {
      return absl::InvalidArgumentError(
          absl::StrCat("--mariadb_sidecar_rows: at least ", kBatchRows));
    }
    testing::MariaDbServerOptions options;
    options.options = {"--innodb-buffer-pool-size=1G",
                       "--innodb-log-file-size=256M"};
    TALLY_ASSIGN_OR_RETURN(server_, MariaDbServer::Start(options));
    const absl::Time start = absl::Now();
    TALLY_RETURN_IF_ERROR(FillMariaTable(*server_, rows_));
    out << absl::StrFormat(
        "mariadb-sidecar: a table of %d rows ready in %.1f s\n", rows_,
        absl::ToDoubleSeconds(absl::Now() - start));
    TALLY_ASSIGN_OR_RETURN(mariadb::MariaDbTarget target,
                           mariadb::ParseMariaDbUrl(server_->Url("db1")));
    // Long enough for a 1M-row UPDATE on a busy machine.
    TALLY_ASSIGN_OR_RETURN(conn_, Connection::Open(target, absl::Minutes(30)));
    TALLY_ASSIGN_OR_RETURN(MariaDbTable table,
                           MariaDbTable::Read(*conn_, kKeyspace));
    table_.push_back(std::move(table));
    out << "mariadb-sidecar: db1.t(id bigint pk, a int, b varchar(40), c "
           "datetime(6)) on "
        << conn_->server_version() << "\n";
    return absl::OkStatus();
  }

  // Prepares a sidecar of db1.t with `server_id` and opens its store;
  // does not start it.
  absl::StatusOr<std::unique_ptr<RunningSidecar>> PrepareSidecar(
      uint32_t server_id) {
    auto running = std::make_unique<RunningSidecar>();
    mariadb::SidecarOptions o;
    o.url = server_->Url("db1");
    o.tables = {kKeyspace};
    o.node_name = "bench";
    o.server_id = server_id;
    // Its log lines (build done, following from ...) would interleave
    // with the tables; errors reach the bench through the calls.
    o.log = [](absl::string_view) {};
    TALLY_ASSIGN_OR_RETURN(running->sidecar, mariadb::Sidecar::Prepare(o));
    storage::StoreOptions so;
    so.node_name = "bench";
    so.backend = running->sidecar->backend();
    TALLY_ASSIGN_OR_RETURN(running->store,
                           storage::Store::Open(running->dir.path(), so));
    return running;
  }

  absl::Status CheckIndexed(storage::Store& store) {
    TALLY_ASSIGN_OR_RETURN(storage::KeyspaceInfo info,
                           store.GetKeyspace(kKeyspace));
    if (info.row_count != rows_) {
      return absl::InternalError(absl::StrCat(
          "the sidecar indexed ", info.row_count, " rows of ", rows_));
    }
    return absl::OkStatus();
  }

  // --- 1. build ---

  absl::StatusOr<double> Build(int run) {
    TALLY_ASSIGN_OR_RETURN(std::unique_ptr<RunningSidecar> s,
                           PrepareSidecar(kBuildServerId + 2 * run));
    const absl::Time start = absl::Now();
    TALLY_RETURN_IF_ERROR(s->sidecar->Start(s->store.get()));
    TALLY_RETURN_IF_ERROR(s->sidecar->AwaitCaughtUp(absl::Minutes(30)));
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    if (s->sidecar->status().phase != "following") {
      return absl::InternalError(
          absl::StrCat("caught up in phase ", s->sidecar->status().phase));
    }
    TALLY_RETURN_IF_ERROR(CheckIndexed(*s->store));
    build_elapsed_.Add(
        absl::ToDoubleSeconds(s->sidecar->status().build_elapsed));
    return seconds;
  }

  absl::StatusOr<double> ClientRead() {
    const std::string command =
        absl::StrCat(absl::GetFlag(FLAGS_mariadb_client),
                     " --no-defaults -h 127.0.0.1 -P ", server_->port(),
                     " -u root --quick -e 'SELECT * FROM db1.t' > /dev/null");
    const absl::Time start = absl::Now();
    const CommandResult r =
        testing::RunCommand({"/bin/sh", "-c", command}, absl::Minutes(30));
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    if (r.exit_code != 0) {
      return absl::InternalError(
          absl::StrCat(command, " exited ", r.exit_code, ": ", r.err));
    }
    return seconds;
  }

  absl::StatusOr<double> StreamRead() {
    uint64_t rows = 0;
    const absl::Time start = absl::Now();
    TALLY_RETURN_IF_ERROR(
        conn_->Stream(absl::StrCat("SELECT ", table_[0].select_list(), " FROM ",
                                   table_[0].quoted_name()),
                      [&](absl::Span<const mariadb::Value>) {
                        ++rows;
                        return absl::OkStatus();
                      }));
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    if (rows != rows_) {
      return absl::InternalError(
          absl::StrCat("the stream read ", rows, " rows of ", rows_));
    }
    return seconds;
  }

  absl::Status RunBuild(std::ostream& out) {
    for (int run = 0; run < runs_; ++run) {
      // Rotate who goes first: none always meets a warm or a cold cache.
      for (int turn = 0; turn < 3; ++turn) {
        (void)WaitForIdleCpu();
        switch ((run + turn) % 3) {
          case 0: {
            TALLY_ASSIGN_OR_RETURN(double s, Build(run));
            build_.Add(s);
            break;
          }
          case 1: {
            TALLY_ASSIGN_OR_RETURN(double s, ClientRead());
            client_.Add(s);
            break;
          }
          case 2: {
            TALLY_ASSIGN_OR_RETURN(double s, StreamRead());
            stream_.Add(s);
            break;
          }
        }
      }
    }
    const double rows = static_cast<double>(rows_);
    out << absl::StrFormat(
        "\n1. index build: %d rows, a fresh store each run (sync writes), "
        "%d runs, in turns\n",
        rows_, runs_);
    out << absl::StrFormat("%-62s %-28s %s\n", "contender",
                           "rows/s (min/med/max)", "seconds (min/med/max)");
    out << absl::StrFormat("%-62s %-28s %s\n",
                           "tally Sidecar first build: Start -> AwaitCaughtUp",
                           Rates(rows, build_), build_.Text());
    out << absl::StrFormat("%-62s %-28s %s\n",
                           "  of which the build (status build_elapsed)",
                           Rates(rows, build_elapsed_), build_elapsed_.Text());
    out << absl::StrFormat(
        "%-62s %-28s %s\n",
        "baseline: mariadb --quick -e 'SELECT * FROM db1.t' >/dev/null",
        Rates(rows, client_), client_.Text());
    out << absl::StrFormat(
        "%-62s %-28s %s\n",
        "floor: Connector/C Stream of the same SELECT, rows dropped",
        Rates(rows, stream_), stream_.Text());
    out << absl::StrFormat(
        "build / mariadb client (rows/s, medians): %.2f; build / floor: "
        "%.2f\n",
        client_.Median() / build_.Median(), stream_.Median() / build_.Median());
    return absl::OkStatus();
  }

  // --- 2. capture ---

  absl::StatusOr<BinlogPosition> MasterStatus() {
    TALLY_ASSIGN_OR_RETURN(mariadb::TextRows rows,
                           conn_->Query("SHOW MASTER STATUS"));
    BinlogPosition p;
    if (rows.empty() || rows[0].size() < 2 || !rows[0][0].has_value() ||
        !rows[0][1].has_value() ||
        !absl::SimpleAtoi(*rows[0][1], &p.position)) {
      return absl::InternalError("SHOW MASTER STATUS: no binary log position");
    }
    p.file = *rows[0][0];
    return p;
  }

  // `verbose`: with --verbose, which also decodes every row image into
  // commented pseudo-SQL (### UPDATE ... WHERE ... SET ...).
  absl::StatusOr<double> MysqlBinlog(const BinlogPosition& from,
                                     const BinlogPosition& to, bool verbose) {
    const std::string command = absl::StrCat(
        absl::GetFlag(FLAGS_mysqlbinlog),
        " --no-defaults --read-from-remote-server --host=127.0.0.1 --port=",
        server_->port(), " --user=root", verbose ? " --verbose" : "",
        " --start-position=", from.position, " --stop-position=", to.position,
        " ", from.file, " > /dev/null");
    const absl::Time start = absl::Now();
    const CommandResult r =
        testing::RunCommand({"/bin/sh", "-c", command}, absl::Minutes(30));
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    if (r.exit_code != 0) {
      return absl::InternalError(
          absl::StrCat(command, " exited ", r.exit_code, ": ", r.err));
    }
    return seconds;
  }

  absl::Status RunCapture(std::ostream& out) {
    TALLY_ASSIGN_OR_RETURN(std::unique_ptr<RunningSidecar> s,
                           PrepareSidecar(kCaptureServerId));
    mariadb::Sidecar& side = *s->sidecar;
    TALLY_RETURN_IF_ERROR(side.Start(s->store.get()));
    TALLY_RETURN_IF_ERROR(side.AwaitCaughtUp(absl::Minutes(30)));
    Samples update, capture, baseline, decoded;
    uint64_t binlog_bytes = 0;
    for (int run = 0; run < runs_; ++run) {
      TALLY_RETURN_IF_ERROR(conn_->Exec("FLUSH BINARY LOGS"));
      TALLY_RETURN_IF_ERROR(side.AwaitCaughtUp(absl::Minutes(1)));
      TALLY_ASSIGN_OR_RETURN(BinlogPosition before, MasterStatus());
      const uint64_t captured = side.status().rows_captured;
      (void)WaitForIdleCpu();
      const absl::Time start = absl::Now();
      TALLY_RETURN_IF_ERROR(conn_->Exec("UPDATE db1.t SET a = a + 1"));
      const absl::Time committed = absl::Now();
      TALLY_RETURN_IF_ERROR(side.AwaitCaughtUp(absl::Minutes(30)));
      capture.Add(absl::ToDoubleSeconds(absl::Now() - committed));
      update.Add(absl::ToDoubleSeconds(committed - start));
      const uint64_t now = side.status().rows_captured;
      if (now < captured + rows_) {
        return absl::InternalError(
            absl::StrCat("the sidecar caught up having captured ",
                         now - captured, " rows; the UPDATE changed ", rows_));
      }
      TALLY_ASSIGN_OR_RETURN(BinlogPosition after, MasterStatus());
      if (after.file != before.file || after.position <= before.position) {
        return absl::InternalError(absl::StrCat(
            "the UPDATE's events are not in one binary log: ", before.file, ":",
            before.position, " to ", after.file, ":", after.position));
      }
      binlog_bytes = after.position - before.position;
      // The sidecar's store compacts for a while after a big write. The
      // two baselines alternate who goes first.
      for (int turn = 0; turn < 2; ++turn) {
        (void)WaitForIdleCpu();
        const bool verbose = (run + turn) % 2 == 1;
        TALLY_ASSIGN_OR_RETURN(double b, MysqlBinlog(before, after, verbose));
        (verbose ? decoded : baseline).Add(b);
      }
    }
    // The index must describe the table, row by row.
    TALLY_ASSIGN_OR_RETURN(mariadb::VerifyResult v, side.Verify(kKeyspace));
    if (!v.mismatched_keys.empty() || !v.missing_from_index.empty() ||
        !v.missing_from_table.empty() || v.table_rows != v.index_rows) {
      return absl::InternalError(
          absl::StrCat("after the capture the index differs from the table: ",
                       v.mismatched_keys.size(), " mismatched, ",
                       v.missing_from_index.size(), " missing from the index, ",
                       v.missing_from_table.size(), " missing from the table"));
    }
    side.Stop();

    const double rows = static_cast<double>(rows_);
    out << absl::StrFormat(
        "\n2. capture: one UPDATE of all %d rows in one transaction (%d "
        "binary log bytes), %d runs\n",
        rows_, binlog_bytes, runs_);
    out << absl::StrFormat("%-62s %-28s %s\n", "contender",
                           "rows/s (min/med/max)", "seconds (min/med/max)");
    out << absl::StrFormat("%-62s %-28s %s\n",
                           "the UPDATE itself (Connector/C, to its commit)",
                           Rates(rows, update), update.Text());
    out << absl::StrFormat("%-62s %-28s %s\n",
                           "tally: the UPDATE's commit -> AwaitCaughtUp",
                           Rates(rows, capture), capture.Text());
    out << absl::StrFormat(
        "%-62s %-28s %s\n",
        "baseline: mysqlbinlog -R, the UPDATE's events >/dev/null",
        Rates(rows, baseline), baseline.Text());
    out << absl::StrFormat("%-62s %-28s %s\n",
                           "  the same with --verbose (rows decoded to text)",
                           Rates(rows, decoded), decoded.Text());
    out << absl::StrFormat(
        "capture / mysqlbinlog (rows/s, medians): %.2f; / mysqlbinlog "
        "--verbose: %.2f\n",
        baseline.Median() / capture.Median(),
        decoded.Median() / capture.Median());
    return absl::OkStatus();
  }

  // --- 3. apply ---

  // One batch: the canonical rows to put, their keys.
  struct Batch {
    std::vector<std::string> keys;
    std::vector<pg::CanonicalRow> rows;
  };

  absl::StatusOr<std::vector<Batch>> MakeBatches(int run, int batches) {
    const pg::RowCodec codec = table_[0].schema().codec();
    std::mt19937_64 rng(absl::GetFlag(FLAGS_seed) + run);
    std::vector<int64_t> ids(rows_);
    for (uint64_t i = 0; i < rows_; ++i) ids[i] = static_cast<int64_t>(i + 1);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<Batch> out(batches);
    size_t at = 0;
    for (int b = 0; b < batches; ++b) {
      for (size_t i = 0; i < kBatchRows; ++i) {
        const int64_t id = ids[at++];
        const std::string id_bytes = BigEndian(static_cast<uint64_t>(id), 8);
        const std::string a_bytes =
            BigEndian(static_cast<uint32_t>(-(run * 1000 + b)), 4);
        const std::string b_text = absl::StrCat("run ", run, " batch ", b);
        // 2027-01-01 plus id milliseconds, in microseconds since 2000-01-01
        // (PostgreSQL's timestamp).
        const std::string c_bytes = BigEndian(
            static_cast<uint64_t>(int64_t{852076800} * 1000000 + id * 1000), 8);
        pg::CanonicalRow row;
        TALLY_RETURN_IF_ERROR(
            codec.Encode({pg::Field::Of(id_bytes), pg::Field::Of(a_bytes),
                          pg::Field::Of(b_text), pg::Field::Of(c_bytes)},
                         &row.key, &row.value));
        out[b].keys.push_back(row.key);
        out[b].rows.push_back(std::move(row));
      }
    }
    return out;
  }

  absl::StatusOr<double> Cas(const Batch& batch) {
    static const tree::Version version{
        tree::HlcTimestamp::FromParts(1'800'000'000'000, 0), "peer"};
    std::vector<RowChange> changes;
    changes.reserve(batch.rows.size());
    for (const pg::CanonicalRow& r : batch.rows) {
      auto it = digests_.find(r.key);
      if (it == digests_.end()) {
        return absl::InternalError("a key of the table without a digest");
      }
      RowChange c;
      c.row = storage::RowLocation{kKeyspace, tree::TokenOf(r.key), r.key};
      c.kind = RowChange::Kind::kPut;
      c.value = r.value;
      c.version = &version;
      c.expected.exists = true;
      c.expected.version = &expected_version_;
      c.expected.digest = it->second;
      changes.push_back(c);
    }
    std::vector<storage::RowOutcome> outcomes;
    const absl::Time start = absl::Now();
    TALLY_RETURN_IF_ERROR(backend_->ApplyRows(changes, &outcomes));
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    for (size_t i = 0; i < outcomes.size(); ++i) {
      if (!outcomes[i].applied) {
        return absl::InternalError(absl::StrCat(
            "ApplyRows refused a row although nothing else writes the table",
            outcomes[i].rejected.ok()
                ? ""
                : absl::StrCat(": ", outcomes[i].rejected.ToString())));
      }
      const pg::CanonicalRow& r = batch.rows[i];
      digests_[r.key] =
          tree::RowDigest(kKeyspace, r.key, expected_version_, false, r.value);
    }
    return seconds;
  }

  absl::StatusOr<double> Blind(const Batch& batch) {
    const absl::Time start = absl::Now();
    TALLY_ASSIGN_OR_RETURN(MariaDbTable::WriteCounts counts,
                           table_[1].WriteRows(*conn_, batch.keys, batch.rows));
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    if (counts.upserted != batch.rows.size()) {
      return absl::InternalError(absl::StrCat("the upsert wrote ",
                                              counts.upserted, " rows of ",
                                              batch.rows.size()));
    }
    return seconds;
  }

  absl::Status RunApply(std::ostream& out) {
    const int batches =
        std::max(1, absl::GetFlag(FLAGS_mariadb_sidecar_batches));
    if (static_cast<uint64_t>(batches) * kBatchRows > rows_) {
      return absl::InvalidArgumentError(
          "--mariadb_sidecar_batches: more rows per run than the table holds");
    }
    TALLY_RETURN_IF_ERROR(conn_->Exec("DROP TABLE IF EXISTS db1.t_blind"));
    TALLY_RETURN_IF_ERROR(conn_->Exec("CREATE TABLE db1.t_blind LIKE db1.t"));
    TALLY_RETURN_IF_ERROR(
        conn_->Exec("INSERT INTO db1.t_blind SELECT * FROM db1.t"));
    TALLY_ASSIGN_OR_RETURN(MariaDbTable blind,
                           MariaDbTable::Read(*conn_, "db1.t_blind"));
    table_.push_back(std::move(blind));
    std::vector<std::string> names;
    for (const pg::TableColumn& c : table_[0].schema().columns()) {
      names.push_back(c.name);
    }
    if (absl::StrJoin(names, ",") != "id,a,b,c") {
      return absl::FailedPreconditionError(
          absl::StrCat("db1.t's canonical columns are ",
                       absl::StrJoin(names, ","), ", not id,a,b,c"));
    }

    mariadb::MariaDbBackendOptions o;
    o.url = server_->Url("db1");
    o.tables = {kKeyspace};
    o.apply_server_id = kApplyServerId;
    o.node = "bench";
    TALLY_ASSIGN_OR_RETURN(backend_, MariaDbBackend::Open(o));

    // What the index would hold for every row: its digest.
    const pg::RowCodec codec = table_[0].schema().codec();
    std::string key, value;
    TALLY_RETURN_IF_ERROR(table_[0].ForEachRow(
        *conn_, "", [&](absl::Span<const pg::Field> fields) -> absl::Status {
          key.clear();
          value.clear();
          TALLY_RETURN_IF_ERROR(codec.Encode(fields, &key, &value));
          digests_[key] =
              tree::RowDigest(kKeyspace, key, expected_version_, false, value);
          return absl::OkStatus();
        }));
    if (digests_.size() != rows_) {
      return absl::InternalError(
          absl::StrCat("the scan read ", digests_.size(), " rows of ", rows_));
    }

    Samples cas, blind_seconds;
    for (int run = 0; run < runs_; ++run) {
      TALLY_ASSIGN_OR_RETURN(std::vector<Batch> work,
                             MakeBatches(run, batches));
      (void)WaitForIdleCpu();
      double t = 0, b = 0;
      for (int i = 0; i < batches; ++i) {
        // Alternate who goes first: neither always meets the other's
        // leftover work (purge, page flushing).
        for (int turn = 0; turn < 2; ++turn) {
          if ((i + turn) % 2 == 0) {
            TALLY_ASSIGN_OR_RETURN(double s, Cas(work[i]));
            t += s;
          } else {
            TALLY_ASSIGN_OR_RETURN(double s, Blind(work[i]));
            b += s;
          }
        }
      }
      cas.Add(t);
      blind_seconds.Add(b);
    }
    TALLY_ASSIGN_OR_RETURN(
        mariadb::TextRows differ,
        conn_->Query("SELECT (SELECT COUNT(*) FROM db1.t) - (SELECT COUNT(*) "
                     "FROM db1.t_blind), COUNT(*) FROM db1.t x JOIN "
                     "db1.t_blind y USING (id) WHERE NOT (x.a <=> y.a AND "
                     "x.b <=> y.b AND x.c <=> y.c)"));
    if (differ.empty() || differ[0].size() != 2 || differ[0][0] != "0" ||
        differ[0][1] != "0") {
      return absl::InternalError(
          "the CAS's table and the blind upsert's differ");
    }

    const double rows = static_cast<double>(batches) * kBatchRows;
    out << absl::StrFormat(
        "\n3. apply: %d batches of %d puts over existing rows per run and "
        "contender, %d runs, batch by batch in turns\n",
        batches, kBatchRows, runs_);
    out << absl::StrFormat("%-62s %-28s %s\n", "contender",
                           "rows/s (min/med/max)", "seconds (min/med/max)");
    out << absl::StrFormat("%-62s %-28s %s\n",
                           "tally MariaDbBackend::ApplyRows (CAS, apply log)",
                           Rates(rows, cas), cas.Text());
    out << absl::StrFormat(
        "%-62s %-28s %s\n",
        "baseline: blind INSERT .. ON DUPLICATE KEY UPDATE (WriteRows)",
        Rates(rows, blind_seconds), blind_seconds.Text());
    out << absl::StrFormat(
        "CAS / blind (rows/s, medians): %.2f; goal: CAS >= %.0f rows/s: %s\n",
        blind_seconds.Median() / cas.Median(), kApplyGoal,
        MedianRate(rows, cas) >= kApplyGoal ? "met" : "NOT met");
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<MariaDbServer> server_;
  uint64_t rows_ = 0;
  int runs_ = 0;
  std::unique_ptr<Connection> conn_;
  // db1.t, then (in the apply) db1.t_blind.
  std::vector<MariaDbTable> table_;
  Samples build_, build_elapsed_, client_, stream_;
  std::unique_ptr<MariaDbBackend> backend_;
  // The version the apply's expected digests are made with: the CAS
  // recomputes a row's digest from the table with it.
  const tree::Version expected_version_{tree::HlcTimestamp::FromParts(1, 0),
                                        "x"};
  // Canonical key -> the digest the index would hold (expected_version_).
  absl::flat_hash_map<std::string, tree::Digest128> digests_;
};

absl::Status RunMariaDbSidecar(std::ostream& out) {
  absl::flat_hash_set<std::string> parts;
  for (absl::string_view p :
       absl::StrSplit(absl::GetFlag(FLAGS_mariadb_sidecar_parts), ',',
                      absl::SkipEmpty())) {
    if (p != "build" && p != "capture" && p != "apply") {
      return absl::InvalidArgumentError(
          absl::StrCat("--mariadb_sidecar_parts: '", p,
                       "' is none of build, capture, apply"));
    }
    parts.insert(std::string(p));
  }
  SidecarBench bench;
  TALLY_RETURN_IF_ERROR(bench.Setup(out));
  if (parts.contains("build")) TALLY_RETURN_IF_ERROR(bench.RunBuild(out));
  if (parts.contains("capture")) TALLY_RETURN_IF_ERROR(bench.RunCapture(out));
  if (parts.contains("apply")) TALLY_RETURN_IF_ERROR(bench.RunApply(out));
  return absl::OkStatus();
}

}  // namespace

Scenario MariaDbSidecarScenario() {
  return {"mariadb-sidecar",
          "the MariaDB sidecar's build, capture and CAS apply vs the mariadb "
          "client, mysqlbinlog and a blind upsert",
          &RunMariaDbSidecar};
}

}  // namespace bench
}  // namespace tally
