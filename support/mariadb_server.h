// MariaDbServer: a throwaway MariaDB server for one test (or benchmark
// run), on a free loopback port, in a temp dir, stopped and removed by the
// destructor.
//
//   absl::StatusOr<std::unique_ptr<MariaDbServer>> db = MariaDbServer::Start();
//   (*db)->Execute("CREATE DATABASE db1");
//   RunTally({"diff", (*db)->Url("db1") + "?table=db1.t", ...});
//
// The server runs with what tally's MariaDB backend needs (binary log on,
// binlog_format=ROW, binlog_row_image=FULL, binlog_row_metadata=FULL, a
// server_id) plus durability off (innodb_flush_log_at_trx_commit=2,
// sync_binlog=0: a test's data need not survive a power cut) and a small
// buffer pool. `root` connects over TCP from 127.0.0.1 without a
// password. Settings can be added per server, to test refusals.
//
// mariadbd refuses to run as root: as root it runs as the `mysql` user,
// which owns the server's directory. mariadb-install-db runs once per
// machine into a template (`$TMPDIR/tally-mariadb-template-<uid>`, made
// under a file lock so that parallel test processes share it) that each
// server copies.
//
// A process killed while it owns a server never runs the destructor, and
// the server outlives it: each server's root holds `owner.pid`, and every
// Start first kills and removes the servers whose owner is gone.
//
// Thread-compatible.
#ifndef TALLY_SUPPORT_MARIADB_SERVER_H_
#define TALLY_SUPPORT_MARIADB_SERVER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tally {
namespace testing {

// OK when mariadbd and mariadb-install-db are installed; kNotFound naming
// the missing file and the fix otherwise.
absl::Status MariaDbInstalled();

// True when the environment says a missing MariaDB must fail the tests
// rather than skip them (TALLY_REQUIRE_MARIADB=1, set by scripts/test.sh,
// which CI runs).
bool MariaDbRequired();

struct MariaDbServerOptions {
  // Extra mariadbd options, after the defaults (so they override them),
  // e.g. "--binlog-format=STATEMENT".
  std::vector<std::string> options;
};

class MariaDbServer {
 public:
  static absl::StatusOr<std::unique_ptr<MariaDbServer>> Start(
      const MariaDbServerOptions& options = {});
  // Kills the server if it runs and removes its directory.
  ~MariaDbServer();
  MariaDbServer(const MariaDbServer&) = delete;
  MariaDbServer& operator=(const MariaDbServer&) = delete;

  int port() const { return port_; }
  // "mariadb://USER[:PASSWORD]@127.0.0.1:PORT/DB".
  std::string Url(absl::string_view database = "",
                  absl::string_view user = "root",
                  absl::string_view password = "") const;

  // Runs `sql` (one or more statements) with the mariadb client as root;
  // returns its output (tab-separated rows, no column names, no trailing
  // newline), or kInternal with the client's error.
  absl::StatusOr<std::string> Execute(absl::string_view sql,
                                      absl::string_view database = "");

  // SIGKILLs the server (a crash); Restart starts it again on its port.
  absl::Status Kill();
  absl::Status Restart();
  std::string Log() const;

 private:
  MariaDbServer() = default;
  absl::Status StartServer();

  std::string root_;
  std::string data_dir_;
  std::vector<std::string> options_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace testing
}  // namespace tally

#endif  // TALLY_SUPPORT_MARIADB_SERVER_H_
