// Scenario "pg-apply": rows/s that PgBackend::ApplyRows writes into
// PostgreSQL in 10,000-row batches under the compare-and-swap (goal
// >= 100,000 rows/s), in process, against two baselines in the same run.
//
// One throwaway PostgreSQL 15 server (support/pg_cluster.h) holds three
// tables of t(id bigint primary key, a int, b text, c timestamptz):
//  - t, --pg_apply_rows rows, written by tally: PgBackend::ApplyRows of
//    batches of 8,000 updates and 1,000 deletes of rows spread over the
//    table (each with the row's CAS token, read once by a scan) and 1,000
//    inserts of new keys; one transaction each under the backend's
//    replication origin, with its 'tally.apply' message;
//  - t_blind, the same rows, written with the same batches by an upsert
//    without the CAS: binary COPY into a temp table, INSERT ... ON CONFLICT
//    DO UPDATE, DELETE ... USING, one transaction;
//  - t_floor, empty at the start of each run: a plain binary COPY of the
//    batch's rows (the floor any apply pays to move the bytes in).
// The three take turns batch by batch (the machine is shared). Every row
// tally applies must be applied (nothing else writes), and t must equal
// t_blind at the end, or the scenario fails.
#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "pg/schema/row_codec.h"
#include "pg/sidecar/apply/pg_backend.h"
#include "pg/sidecar/bootstrap.h"
#include "pg/wire/binary_copy.h"
#include "pg/wire/connection.h"
#include "pg/wire/internal/big_endian.h"
#include "support/pg_cluster.h"
#include "tools/bench/scenario.h"
#include "tree/status_macros.h"
#include "tree/token.h"

ABSL_FLAG(uint64_t, pg_apply_rows, 1000000, "pg-apply: rows in the table");
ABSL_FLAG(int, pg_apply_batches, 10,
          "pg-apply: 10,000-row batches per run and contender");
ABSL_FLAG(int, pg_apply_runs, 3, "pg-apply: runs of each contender");
ABSL_FLAG(std::string, pg_apply_shared_buffers, "",
          "pg-apply: the server's shared_buffers (e.g. 1GB); empty keeps "
          "the throwaway clusters' 64MB, which holds less than the three "
          "1M-row tables the contenders write");
ABSL_FLAG(bool, pg_apply_only_tally, false,
          "pg-apply: skip the baselines (for profiling ApplyRows)");

namespace tally {
namespace bench {
namespace {

using pg::Connection;
using pg::Field;
using storage::RowChange;
using testing::PgCluster;
using testing::PgClusterOptions;

constexpr int kUpdates = 8000;
constexpr int kDeletes = 1000;
constexpr int kInserts = 1000;
constexpr int kBatchRows = kUpdates + kDeletes + kInserts;

constexpr char kColumns[] =
    "(id bigint PRIMARY KEY, a int, b text, c "
    "timestamptz)";

std::string Int8(int64_t v) {
  std::string s;
  pg::internal::PutBigEndian64(&s, static_cast<uint64_t>(v));
  return s;
}
std::string Int4(int32_t v) {
  std::string s;
  pg::internal::PutBigEndian32(&s, static_cast<uint32_t>(v));
  return s;
}

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

// One row of a batch: its canonical key, and for a put its canonical value
// (the columns a, b, c, in canonical order) and fields.
struct BatchRow {
  int64_t id = 0;
  RowChange::Kind kind = RowChange::Kind::kPut;
  bool exists = false;  // updates and deletes: the row is in the table
  std::string key;
  std::string value;
  std::string id_bytes, a_bytes, c_bytes, b_text;
};

struct Batch {
  std::vector<BatchRow> rows;
};

// The blind upsert's statements for `table`, staged through `stage`.
struct BlindSql {
  std::string create, copy, upsert, remove;
};

BlindSql MakeBlindSql(const std::string& table) {
  const std::string stage = absl::StrCat("pg_temp.", table, "_stage");
  return BlindSql{
      absl::StrCat("CREATE TEMP TABLE IF NOT EXISTS ", table,
                   "_stage (op \"char\", id bigint, a int, b text, c "
                   "timestamptz) ON COMMIT DELETE ROWS"),
      absl::StrCat("COPY ", stage, " FROM STDIN (FORMAT binary)"),
      absl::StrCat("INSERT INTO ", table,
                   " (id, a, b, c) SELECT id, a, b, c "
                   "FROM ",
                   stage,
                   " WHERE op = 'p' ON CONFLICT (id) DO UPDATE SET a = "
                   "EXCLUDED.a, b = EXCLUDED.b, c = EXCLUDED.c"),
      absl::StrCat("DELETE FROM ", table, " AS t USING ", stage,
                   " AS s WHERE s.op = 'd' AND t.id = s.id")};
}

class ApplyBench {
 public:
  absl::Status Setup(std::ostream& out) {
    PgClusterOptions server;
    if (const std::string sb = absl::GetFlag(FLAGS_pg_apply_shared_buffers);
        !sb.empty()) {
      server.settings.push_back(absl::StrCat("shared_buffers = '", sb, "'"));
    }
    TALLY_ASSIGN_OR_RETURN(pg_, PgCluster::Start(server));
    rows_ = absl::GetFlag(FLAGS_pg_apply_rows);
    const absl::Time start = absl::Now();
    TALLY_RETURN_IF_ERROR(
        pg_->Execute(
               absl::StrCat("CREATE TABLE t ", kColumns,
                            "; INSERT INTO t SELECT g, g, md5(g::text), "
                            "timestamptz '2026-01-01 00:00:00+00' + g * "
                            "interval '1 s' FROM generate_series(1, ",
                            rows_, ") g; CREATE TABLE t_blind ", kColumns,
                            "; INSERT INTO t_blind SELECT * FROM t; CREATE "
                            "TABLE t_floor ",
                            kColumns))
            .status());
    TALLY_RETURN_IF_ERROR(pg_->Execute("VACUUM (FREEZE, ANALYZE)").status());
    TALLY_RETURN_IF_ERROR(pg_->Execute("CHECKPOINT").status());
    out << absl::StrFormat("pg-apply: tables of %d rows ready in %.1f s\n",
                           rows_, absl::ToDoubleSeconds(absl::Now() - start));

    pg::PgBackendOptions o;
    o.conninfo = pg_->Uri();
    o.tables = {"public.t"};
    o.origin_name = "tally_bench";
    TALLY_ASSIGN_OR_RETURN(backend_, pg::PgBackend::Open(o));
    TALLY_ASSIGN_OR_RETURN(conn_, Connection::Open(pg_->Uri(), {}));
    blind_ = MakeBlindSql("t_blind");
    TALLY_RETURN_IF_ERROR(conn_->Exec(blind_.create).status());

    // Every row's CAS token, as the index would hold it.
    const pg::TableSchema& schema = *backend_->schema("public.t");
    TALLY_RETURN_IF_ERROR(pg::ScanTable(
        *conn_, schema, "", [&](const pg::ScannedRow& row) -> absl::Status {
          payloads_.emplace(std::string(row.key), row.token.Encode());
          return absl::OkStatus();
        }));
    if (payloads_.size() != rows_) {
      return absl::InternalError(
          absl::StrCat("the scan read ", payloads_.size(), " rows of ", rows_));
    }
    for (int64_t id = 1; id <= static_cast<int64_t>(rows_); ++id) {
      live_.push_back(id);
    }
    next_id_ = static_cast<int64_t>(rows_) + 1;
    return absl::OkStatus();
  }

  // The batches of run `run`: distinct keys over the whole run.
  std::vector<Batch> MakeBatches(int run, int batches) {
    std::mt19937_64 rng(absl::GetFlag(FLAGS_seed) + run);
    std::shuffle(live_.begin(), live_.end(), rng);
    std::vector<Batch> out(batches);
    size_t at = 0;
    for (int b = 0; b < batches; ++b) {
      for (int i = 0; i < kBatchRows; ++i) {
        BatchRow r;
        if (i < kUpdates + kDeletes) {
          r.id = live_[at++];
          r.exists = true;
          r.kind =
              i < kUpdates ? RowChange::Kind::kPut : RowChange::Kind::kDelete;
        } else {
          r.id = next_id_++;
        }
        r.id_bytes = Int8(r.id);
        pg::AppendFields({Field::Of(r.id_bytes)}, &r.key);
        if (r.kind == RowChange::Kind::kPut) {
          r.a_bytes = Int4(-static_cast<int32_t>(r.id % 1000000) - run);
          r.b_text = absl::StrCat("run ", run, " batch ", b);
          r.c_bytes = Int8(int64_t{852076800} * 1000000 + r.id);
          pg::AppendFields(
              {Field::Of(r.a_bytes), Field::Of(r.b_text), Field::Of(r.c_bytes)},
              &r.value);
        }
        out[b].rows.push_back(std::move(r));
      }
    }
    // The deleted keys leave the live set; the inserted ones join it.
    absl::flat_hash_set<int64_t> deleted;
    for (const Batch& b : out) {
      for (const BatchRow& r : b.rows) {
        if (r.kind == RowChange::Kind::kDelete) deleted.insert(r.id);
      }
    }
    std::vector<int64_t> live;
    live.reserve(live_.size());
    for (int64_t id : live_) {
      if (!deleted.contains(id)) live.push_back(id);
    }
    for (const Batch& b : out) {
      for (const BatchRow& r : b.rows) {
        if (!r.exists) live.push_back(r.id);
      }
    }
    live_ = std::move(live);
    return out;
  }

  absl::StatusOr<double> Tally(const Batch& batch) {
    static const tree::Version version{
        tree::HlcTimestamp::FromParts(1'800'000'000'000, 0), "peer"};
    static const tree::Version expected_version{
        tree::HlcTimestamp::FromParts(1, 0), "x"};
    std::vector<RowChange> changes;
    changes.reserve(batch.rows.size());
    for (const BatchRow& r : batch.rows) {
      RowChange c;
      c.row = storage::RowLocation{"public.t", tree::TokenOf(r.key), r.key};
      c.kind = r.kind;
      c.value = r.value;
      c.version = &version;
      if (r.exists) {
        auto it = payloads_.find(r.key);
        if (it == payloads_.end()) {
          return absl::InternalError("a live key without a token");
        }
        c.expected.exists = true;
        c.expected.version = &expected_version;
        c.expected.payload = it->second;
      }
      changes.push_back(c);
    }
    std::vector<storage::RowOutcome> outcomes;
    const absl::Time start = absl::Now();
    TALLY_RETURN_IF_ERROR(backend_->ApplyRows(changes, &outcomes));
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    for (size_t i = 0; i < outcomes.size(); ++i) {
      const BatchRow& r = batch.rows[i];
      if (!outcomes[i].applied) {
        return absl::InternalError(
            absl::StrCat("ApplyRows refused row ", r.id,
                         " although nothing else writes the table"));
      }
      if (r.kind == RowChange::Kind::kPut) {
        payloads_[r.key] = outcomes[i].payload;
      } else {
        payloads_.erase(r.key);
      }
    }
    return seconds;
  }

  absl::StatusOr<double> Blind(const Batch& batch) {
    pg::CopyBinaryWriter writer;
    const std::string put = "p", del = "d";
    for (const BatchRow& r : batch.rows) {
      if (r.kind == RowChange::Kind::kPut) {
        TALLY_RETURN_IF_ERROR(writer.AddRow(
            {Field::Of(put), Field::Of(r.id_bytes), Field::Of(r.a_bytes),
             Field::Of(r.b_text), Field::Of(r.c_bytes)}));
      } else {
        TALLY_RETURN_IF_ERROR(
            writer.AddRow({Field::Of(del), Field::Of(r.id_bytes), Field::Null(),
                           Field::Null(), Field::Null()}));
      }
    }
    writer.Finish();
    const absl::Time start = absl::Now();
    TALLY_RETURN_IF_ERROR(conn_->Exec("BEGIN").status());
    TALLY_RETURN_IF_ERROR(
        conn_->CopyIn(blind_.copy, writer.TakeBuffered()).status());
    TALLY_RETURN_IF_ERROR(conn_->Exec(blind_.upsert).status());
    TALLY_RETURN_IF_ERROR(conn_->Exec(blind_.remove).status());
    TALLY_RETURN_IF_ERROR(conn_->Exec("COMMIT").status());
    return absl::ToDoubleSeconds(absl::Now() - start);
  }

  absl::StatusOr<double> Floor(const Batch& batch) {
    pg::CopyBinaryWriter writer;
    for (const BatchRow& r : batch.rows) {
      if (r.kind == RowChange::Kind::kPut) {
        TALLY_RETURN_IF_ERROR(
            writer.AddRow({Field::Of(r.id_bytes), Field::Of(r.a_bytes),
                           Field::Of(r.b_text), Field::Of(r.c_bytes)}));
      } else {
        TALLY_RETURN_IF_ERROR(
            writer.AddRow({Field::Of(r.id_bytes), Field::Null(), Field::Null(),
                           Field::Null()}));
      }
    }
    writer.Finish();
    const absl::Time start = absl::Now();
    TALLY_RETURN_IF_ERROR(
        conn_
            ->CopyIn("COPY t_floor FROM STDIN (FORMAT binary)",
                     writer.TakeBuffered())
            .status());
    return absl::ToDoubleSeconds(absl::Now() - start);
  }

  absl::Status Run(std::ostream& out) {
    const int runs = std::max(1, absl::GetFlag(FLAGS_pg_apply_runs));
    const int batches = std::max(1, absl::GetFlag(FLAGS_pg_apply_batches));
    const bool only_tally = absl::GetFlag(FLAGS_pg_apply_only_tally);
    if (static_cast<uint64_t>(batches) * (kUpdates + kDeletes) > rows_) {
      return absl::InvalidArgumentError(
          "--pg_apply_batches: more rows to change than the table holds");
    }
    Figures tally, blind, floor;
    for (int run = 0; run < runs; ++run) {
      TALLY_RETURN_IF_ERROR(conn_->Exec("TRUNCATE t_floor").status());
      const std::vector<Batch> work = MakeBatches(run, batches);
      double t = 0, b = 0, f = 0;
      for (int i = 0; i < batches; ++i) {
        // Rotate who goes first: none always meets a warm or a cold cache.
        for (int turn = 0; turn < 3; ++turn) {
          switch ((i + turn) % 3) {
            case 0: {
              TALLY_ASSIGN_OR_RETURN(double s, Tally(work[i]));
              t += s;
              break;
            }
            case 1:
              if (!only_tally) {
                TALLY_ASSIGN_OR_RETURN(double s, Blind(work[i]));
                b += s;
              }
              break;
            case 2:
              if (!only_tally) {
                TALLY_ASSIGN_OR_RETURN(double s, Floor(work[i]));
                f += s;
              }
              break;
          }
        }
      }
      const double rows = static_cast<double>(batches) * kBatchRows;
      tally.rates.push_back(rows / t);
      if (!only_tally) {
        blind.rates.push_back(rows / b);
        floor.rates.push_back(rows / f);
      }
    }
    if (!only_tally) {
      TALLY_ASSIGN_OR_RETURN(
          std::string differ,
          pg_->Execute("SELECT count(*) FROM t FULL JOIN t_blind b USING (id) "
                       "WHERE t.id IS NULL OR b.id IS NULL OR (t.a, t.b, t.c) "
                       "IS DISTINCT FROM (b.a, b.b, b.c)"));
      if (differ != "0") {
        return absl::InternalError(absl::StrCat(
            differ, " rows differ between tally's table and the upsert's"));
      }
    }
    TALLY_ASSIGN_OR_RETURN(std::string count,
                           pg_->Execute("SELECT count(*) FROM t"));
    out << absl::StrFormat(
        "pg-apply: %d-row batches (%d CAS updates, %d CAS deletes, %d "
        "inserts) into t(id bigint pk, a int, b text, c timestamptz) of %d "
        "rows (%s now), %d batches per run, %d runs, alternated\n",
        kBatchRows, kUpdates, kDeletes, kInserts, rows_, count, batches, runs);
    out << absl::StrFormat("%-52s %s\n", "contender",
                           "rows/s (min / median / max)");
    out << absl::StrFormat("%-52s %s\n",
                           "tally PgBackend::ApplyRows (CAS, origin, message)",
                           tally.Text());
    out << absl::StrFormat("%-52s %s\n",
                           "baseline: upsert from a temp table, no CAS",
                           blind.Text());
    out << absl::StrFormat(
        "%-52s %s\n", "floor: binary COPY into an empty table", floor.Text());
    out << absl::StrFormat("goal: tally >= 100000 rows/s: %s\n",
                           tally.Median() >= 100000 ? "met" : "NOT met");
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<PgCluster> pg_;
  uint64_t rows_ = 0;
  std::unique_ptr<pg::PgBackend> backend_;
  std::unique_ptr<Connection> conn_;
  BlindSql blind_;
  // Canonical key -> the CAS token the index would hold.
  absl::flat_hash_map<std::string, std::string> payloads_;
  std::vector<int64_t> live_;
  int64_t next_id_ = 0;
};

absl::Status RunPgApply(std::ostream& out) {
  ApplyBench bench;
  TALLY_RETURN_IF_ERROR(bench.Setup(out));
  return bench.Run(out);
}

}  // namespace

Scenario PgApplyScenario() {
  return {"pg-apply",
          "PgBackend::ApplyRows into PostgreSQL (CAS, 10k-row batches) vs a "
          "blind upsert and binary COPY",
          &RunPgApply};
}

}  // namespace bench
}  // namespace tally
