// Scenario "pg-build": rows/s of the sidecar's index build from the
// exported snapshot (pg::BuildIndex, goal >= 300,000 rows/s),
// in process, against the scans it is made of, in the same run.
//
// One throwaway PostgreSQL 15 server (support/pg_cluster.h) with
// t(id bigint primary key, a int, b text, c timestamptz) of --pg_build_rows
// rows. In turns, --pg_build_runs times each:
//  - floor: the bare binary COPY of the canonical columns through
//    Connection::CopyOut, every chunk dropped;
//  - scan: pg::ScanTable, the build's own COPY (with each row's CAS token
//    from pg_xact_commit_timestamp_origin(xmin)), decoded, encoded and
//    digested as the build digests it, nothing stored;
//  - build: pg::BuildIndex into a fresh store (LevelDB in a temp dir,
//    sync writes as tallyd's default): slot with exported snapshot, the
//    scan, the store writes, the position.
// Each build must index every row, with the root the scan's digests give,
// or the scenario fails.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "pg/schema/names.h"
#include "pg/schema/table_schema.h"
#include "pg/sidecar/apply/pg_backend.h"
#include "pg/sidecar/bootstrap.h"
#include "pg/wire/connection.h"
#include "storage/store.h"
#include "support/pg_cluster.h"
#include "support/temp_dir.h"
#include "tools/bench/scenario.h"
#include "tree/digest.h"
#include "tree/status_macros.h"

ABSL_FLAG(uint64_t, pg_build_rows, 1000000, "pg-build: rows in the table");
ABSL_FLAG(int, pg_build_runs, 3, "pg-build: runs of each contender");
ABSL_FLAG(bool, pg_build_sync, true,
          "pg-build: the store syncs its writes (tallyd's default)");
ABSL_FLAG(bool, pg_build_only_build, false,
          "pg-build: skip the scans (for profiling the build)");

namespace tally {
namespace bench {
namespace {

using pg::Connection;
using testing::PgCluster;

struct Figures {
  std::vector<double> rates;
  std::string Text() const {
    if (rates.empty()) return "-";
    std::vector<double> v = rates;
    std::sort(v.begin(), v.end());
    return absl::StrFormat("%.0f / %.0f / %.0f", v.front(), v[v.size() / 2],
                           v.back());
  }
  double Median() const {
    std::vector<double> v = rates;
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
  }
};

class BuildBench {
 public:
  absl::Status Setup(std::ostream& out) {
    TALLY_ASSIGN_OR_RETURN(pg_, PgCluster::Start());
    rows_ = absl::GetFlag(FLAGS_pg_build_rows);
    const absl::Time start = absl::Now();
    TALLY_RETURN_IF_ERROR(
        pg_->Execute(absl::StrCat(
                         "CREATE TABLE t (id bigint PRIMARY KEY, a int, b "
                         "text, c timestamptz); INSERT INTO t SELECT g, g, "
                         "md5(g::text), timestamptz '2026-01-01 00:00:00+00' "
                         "+ g * interval '1 s' FROM generate_series(1, ",
                         rows_, ") g"))
            .status());
    TALLY_RETURN_IF_ERROR(pg_->Execute("VACUUM (FREEZE, ANALYZE) t").status());
    TALLY_RETURN_IF_ERROR(pg_->Execute("CHECKPOINT").status());
    out << absl::StrFormat("pg-build: a table of %d rows ready in %.1f s\n",
                           rows_, absl::ToDoubleSeconds(absl::Now() - start));
    TALLY_ASSIGN_OR_RETURN(conn_, Connection::Open(pg_->Uri(), {}));
    TALLY_ASSIGN_OR_RETURN(pg::TableSchema schema,
                           pg::TableSchema::Read(*conn_, "public.t"));
    schema_.push_back(std::move(schema));
    pg::PgBackendOptions o;
    o.conninfo = pg_->Uri();
    o.tables = {"public.t"};
    o.origin_name = "tally_bench";
    TALLY_ASSIGN_OR_RETURN(std::unique_ptr<pg::PgBackend> backend,
                           pg::PgBackend::Open(o));
    backend_ = std::move(backend);
    return absl::OkStatus();
  }

  absl::StatusOr<double> Floor() {
    const pg::TableSchema& t = schema_[0];
    uint64_t bytes = 0;
    const absl::Time start = absl::Now();
    TALLY_RETURN_IF_ERROR(conn_->CopyOut(
        absl::StrCat("COPY (SELECT ", t.select_list(), " FROM ",
                     t.quoted_name(), ") TO STDOUT (FORMAT binary)"),
        [&](absl::string_view chunk) {
          bytes += chunk.size();
          return absl::OkStatus();
        }));
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    if (bytes < rows_ * 20) {
      return absl::InternalError(
          absl::StrCat("the COPY sent only ", bytes, " bytes"));
    }
    return seconds;
  }

  absl::StatusOr<double> Scan() {
    const pg::TableSchema& t = schema_[0];
    const tree::Version bootstrap = pg::BootstrapVersion();
    tree::Digest128 root;
    uint64_t rows = 0;
    const absl::Time start = absl::Now();
    TALLY_RETURN_IF_ERROR(pg::ScanTable(
        *conn_, t, "", [&](const pg::ScannedRow& row) -> absl::Status {
          root ^=
              tree::RowDigest(t.name(), row.key, bootstrap, false, row.value);
          ++rows;
          return absl::OkStatus();
        }));
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    if (rows != rows_) {
      return absl::InternalError(
          absl::StrCat("the scan read ", rows, " rows of ", rows_));
    }
    root_ = root;
    return seconds;
  }

  absl::StatusOr<double> Build(int run) {
    testing::TempDir dir;
    storage::StoreOptions so;
    so.node_name = "bench";
    so.sync = absl::GetFlag(FLAGS_pg_build_sync);
    so.backend = backend_;
    TALLY_ASSIGN_OR_RETURN(std::unique_ptr<storage::Store> store,
                           storage::Store::Open(dir.path(), so));
    pg::BuildOptions o;
    o.conninfo = pg_->Uri();
    o.names = pg::NamesForNode(absl::StrCat("bench", run));
    o.tables = schema_;
    o.node_name = "bench";
    const absl::Time start = absl::Now();
    absl::StatusOr<pg::BuildResult> built = pg::BuildIndex(o, store.get());
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    if (!built.ok()) return built.status();
    slots_.push_back(o.names.slot);
    TALLY_ASSIGN_OR_RETURN(storage::KeyspaceInfo info,
                           store->GetKeyspace("public.t"));
    if (info.row_count != rows_ || built->progress.rows_written != rows_) {
      return absl::InternalError(
          absl::StrCat("the build indexed ", info.row_count, " rows (wrote ",
                       built->progress.rows_written, ") of ", rows_));
    }
    if (root_.has_value() && info.root != *root_) {
      return absl::InternalError(
          "the build's root differs from the scan's digests");
    }
    return seconds;
  }

  absl::Status Run(std::ostream& out) {
    const int runs = std::max(1, absl::GetFlag(FLAGS_pg_build_runs));
    const bool only_build = absl::GetFlag(FLAGS_pg_build_only_build);
    Figures floor, scan, build;
    const double rows = static_cast<double>(rows_);
    for (int run = 0; run < runs; ++run) {
      // Rotate who goes first: none always meets a warm or a cold cache.
      for (int turn = 0; turn < 3; ++turn) {
        switch ((run + turn) % 3) {
          case 0:
            if (!only_build) {
              TALLY_ASSIGN_OR_RETURN(double s, Floor());
              floor.rates.push_back(rows / s);
            }
            break;
          case 1:
            if (!only_build) {
              TALLY_ASSIGN_OR_RETURN(double s, Scan());
              scan.rates.push_back(rows / s);
            }
            break;
          case 2: {
            TALLY_ASSIGN_OR_RETURN(double s, Build(run));
            build.rates.push_back(rows / s);
            break;
          }
        }
      }
    }
    // The builds' slots, their connections closed by now.
    for (const std::string& slot : slots_) {
      (void)pg_->Execute(
          absl::StrCat("SELECT pg_drop_replication_slot(slot_name) FROM "
                       "pg_replication_slots WHERE slot_name = '",
                       slot, "' AND NOT active"));
    }
    out << absl::StrFormat(
        "pg-build: index build of t(id bigint pk, a int, b text, c "
        "timestamptz), %d rows, store sync=%s, %d runs, alternated\n",
        rows_, absl::GetFlag(FLAGS_pg_build_sync) ? "on" : "off", runs);
    out << absl::StrFormat("%-58s %s\n", "contender",
                           "rows/s (min / median / max)");
    out << absl::StrFormat("%-58s %s\n",
                           "tally BuildIndex (snapshot, scan, store writes)",
                           build.Text());
    out << absl::StrFormat(
        "%-58s %s\n", "scan: ScanTable with CAS tokens + row digests, no store",
        scan.Text());
    out << absl::StrFormat("%-58s %s\n",
                           "floor: bare binary COPY of the columns (CopyOut)",
                           floor.Text());
    out << absl::StrFormat("goal: build >= 300000 rows/s: %s\n",
                           build.Median() >= 300000 ? "met" : "NOT met");
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<PgCluster> pg_;
  uint64_t rows_ = 0;
  std::unique_ptr<Connection> conn_;
  std::vector<pg::TableSchema> schema_;
  std::shared_ptr<pg::PgBackend> backend_;
  std::optional<tree::Digest128> root_;
  std::vector<std::string> slots_;
};

absl::Status RunPgBuild(std::ostream& out) {
  BuildBench bench;
  TALLY_RETURN_IF_ERROR(bench.Setup(out));
  return bench.Run(out);
}

}  // namespace

Scenario PgBuildScenario() {
  return {"pg-build",
          "the sidecar's index build from a snapshot vs the bare binary COPY",
          &RunPgBuild};
}

}  // namespace bench
}  // namespace tally
