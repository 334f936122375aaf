// PgCluster: a throwaway PostgreSQL 15 server for one test (or benchmark
// run), on a free loopback port, in a temp dir, stopped and removed by the
// destructor.
//
//   absl::StatusOr<std::unique_ptr<PgCluster>> pg = PgCluster::Start({});
//   (*pg)->Execute("CREATE TABLE t (id bigint PRIMARY KEY, a text)");
//   NodeProcess::Start("a", dir, {"--postgres", (*pg)->Uri("postgres")});
//
// The server runs with what tally needs (wal_level=logical,
// track_commit_timestamp=on, 20 slots and WAL senders) plus fsync=off (a
// test's data need not survive a power cut; a crash of the server process,
// `Stop(kImmediate)`, still loses nothing committed). Settings can be
// overridden per cluster, to test tally's refusals of a wrong one.
//
// initdb and postgres refuse to run as root: as root every server command
// runs as the `postgres` user (runuser), which owns the cluster's
// directory. initdb runs once per machine into a template
// (`$TMPDIR/tally-pg-template-<version>-<uid>`, made under a file lock so
// parallel test processes share it) that each cluster copies (~0.5 s to
// start instead of ~1.5 s).
//
// A process killed while it owns a server never runs the destructor, and
// the server (started by pg_ctl) outlives it. So each cluster's root holds
// `owner.pid`, and every Start first stops and removes the clusters whose
// owner process no longer exists.
//
// Thread-compatible.
#ifndef TALLY_SUPPORT_PG_CLUSTER_H_
#define TALLY_SUPPORT_PG_CLUSTER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tally {
namespace testing {

// The server binaries' directory (/usr/lib/postgresql/15/bin, or
// $TALLY_PG_BIN_DIR when set).
std::string PostgresBinDir();

// OK when the server binaries are installed; kNotFound naming the missing
// file and the fix otherwise.
absl::Status PostgresInstalled();

// True when the environment says a missing PostgreSQL must fail the tests
// rather than skip them (TALLY_REQUIRE_POSTGRES=1, set by scripts/test.sh,
// which CI runs): a missing install must never read green.
bool PostgresRequired();

struct PgClusterOptions {
  // "name=value" server settings, applied after the defaults above (so
  // they override them), e.g. "wal_level=replica".
  std::vector<std::string> settings;
  // Replaces pg_hba.conf when not empty (e.g. to require passwords:
  // {"local all all trust", "host all postgres 127.0.0.1/32 trust",
  //  "host all all 127.0.0.1/32 scram-sha-256"}). Default: trust for all.
  std::vector<std::string> hba_lines;
};

class PgCluster {
 public:
  enum class StopMode { kFast, kImmediate };

  static absl::StatusOr<std::unique_ptr<PgCluster>> Start(
      const PgClusterOptions& options = {});
  // Stops the server (immediate) if it runs and removes its directory.
  ~PgCluster();
  PgCluster(const PgCluster&) = delete;
  PgCluster& operator=(const PgCluster&) = delete;

  int port() const { return port_; }
  const std::string& data_dir() const { return data_dir_; }
  // "postgresql://USER@127.0.0.1:PORT/DB".
  std::string Uri(absl::string_view database = "postgres",
                  absl::string_view user = "postgres") const;

  // Stops the server: kFast (clean shutdown) or kImmediate (as a crash:
  // recovery runs at the next start). The directory stays.
  absl::Status Stop(StopMode mode = StopMode::kFast);
  // Starts it again on the same port and directory.
  absl::Status Restart();
  bool running() const { return running_; }

  // Runs SQL as the superuser in `database` and returns the first column of
  // the last command's rows, one per line (psql -At). For setting up and
  // checking tests; tally's own code goes through pg/wire/connection.h.
  absl::StatusOr<std::string> Execute(absl::string_view sql,
                                      absl::string_view database = "postgres");
  // CREATE DATABASE name.
  absl::Status CreateDatabase(absl::string_view name);

  // The server log so far.
  std::string Log() const;

 private:
  PgCluster() = default;
  absl::Status StartServer();

  std::string root_;      // the temp dir (owned by postgres when root)
  std::string data_dir_;  // root_/data
  std::string log_path_;  // root_/server.log
  int port_ = 0;
  bool running_ = false;
};

}  // namespace testing
}  // namespace tally

#endif  // TALLY_SUPPORT_PG_CLUSTER_H_
