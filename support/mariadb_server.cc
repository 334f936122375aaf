#include "support/mariadb_server.h"

#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "support/process.h"

namespace tally {
namespace testing {
namespace {

namespace fs = std::filesystem;

constexpr char kServer[] = "/usr/sbin/mariadbd";
constexpr char kInstallDb[] = "/usr/bin/mariadb-install-db";
constexpr char kClient[] = "/usr/bin/mariadb";
constexpr char kOwnerFile[] = "owner.pid";
constexpr char kServerPidFile[] = "server.pid";

std::string TempBase() {
  const char* base = std::getenv("TMPDIR");
  return base != nullptr && *base != '\0' ? base : "/tmp";
}

bool RunningAsRoot() { return geteuid() == 0; }

// As root, gives `path` (recursively) to the mysql user the server runs as.
absl::Status GiveToServerUser(const std::string& path) {
  if (!RunningAsRoot()) return absl::OkStatus();
  CommandResult r = RunCommand({"/bin/chown", "-R", "mysql:mysql", path});
  if (r.exit_code != 0) {
    return absl::InternalError(
        absl::StrCat("chown mysql ", path, ": ", r.err,
                     " (install mariadb-server: scripts/install-deps.sh)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> MakeTempDir(const std::string& label) {
  std::string tmpl = TempBase() + "/tally-" + label + "-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", tmpl, " failed"));
  }
  return tmpl;
}

bool Alive(pid_t pid) {
  return pid > 0 && (kill(pid, 0) == 0 || errno != ESRCH);
}

pid_t ReadPid(const fs::path& path) {
  std::ifstream in(path);
  pid_t pid = 0;
  if (!(in >> pid)) return 0;
  return pid;
}

// Kills and removes the servers whose owner process is gone.
void ReapOrphanedServers() {
  std::error_code ec;
  for (const fs::directory_entry& entry :
       fs::directory_iterator(TempBase(), ec)) {
    const std::string name = entry.path().filename().string();
    if (!absl::StartsWith(name, "tally-mariadb-") ||
        absl::StartsWith(name, "tally-mariadb-template-")) {
      continue;
    }
    const pid_t owner = ReadPid(entry.path() / kOwnerFile);
    if (owner <= 0 || Alive(owner)) continue;
    const pid_t server = ReadPid(entry.path() / kServerPidFile);
    if (server > 0) kill(server, SIGKILL);
    fs::remove_all(entry.path(), ec);
  }
}

// The mariadb-install-db output every server copies (made once per
// machine and user, under a file lock).
absl::StatusOr<std::string> TemplateDataDir() {
  const std::string root =
      absl::StrCat(TempBase(), "/tally-mariadb-template-32m-", geteuid());
  const std::string data = root + "/data";
  const std::string lock_path = root + ".lock";
  const int lock = open(lock_path.c_str(), O_CREAT | O_RDWR, 0644);
  if (lock < 0) return absl::InternalError("cannot open " + lock_path);
  flock(lock, LOCK_EX);
  absl::Status status;
  if (!fs::exists(data + "/mysql")) {
    std::error_code ec;
    fs::remove_all(root, ec);
    absl::StatusOr<std::string> staging = MakeTempDir("mariadb-staging");
    if (!staging.ok()) {
      status = staging.status();
    } else if (status = GiveToServerUser(*staging); status.ok()) {
      std::vector<std::string> argv = {
          kInstallDb, "--no-defaults", "--datadir=" + *staging + "/data",
          "--auth-root-authentication-method=normal", "--skip-test-db",
          // The servers' redo log size (StartServer): a template with the
          // default 96 MB log cost every start a copy of it and a resize.
          "--innodb-log-file-size=32M"};
      if (RunningAsRoot()) argv.push_back("--user=mysql");
      CommandResult r = RunCommand(argv);
      if (r.exit_code != 0) {
        status = absl::InternalError(absl::StrCat(
            "mariadb-install-db exited ", r.exit_code, ": ", r.out, r.err));
        fs::remove_all(*staging, ec);
      } else {
        fs::rename(*staging, root, ec);
        if (ec) status = absl::InternalError("cannot move the template");
      }
    }
  }
  flock(lock, LOCK_UN);
  close(lock);
  if (!status.ok()) return status;
  return data;
}

int PortOf(const std::string& address) {
  int port = 0;
  const size_t colon = address.rfind(':');
  if (colon != std::string::npos) {
    (void)absl::SimpleAtoi(address.substr(colon + 1), &port);
  }
  return port;
}

}  // namespace

absl::Status MariaDbInstalled() {
  for (const char* path : {kServer, kInstallDb, kClient}) {
    if (access(path, X_OK) != 0) {
      return absl::NotFoundError(absl::StrCat(
          path,
          " is missing: install MariaDB (scripts/install-deps.sh installs "
          "mariadb-server)"));
    }
  }
  return absl::OkStatus();
}

bool MariaDbRequired() {
  const char* v = std::getenv("TALLY_REQUIRE_MARIADB");
  return v != nullptr && std::string(v) == "1";
}

absl::StatusOr<std::unique_ptr<MariaDbServer>> MariaDbServer::Start(
    const MariaDbServerOptions& options) {
  absl::Status installed = MariaDbInstalled();
  if (!installed.ok()) return installed;
  absl::StatusOr<std::string> template_data = TemplateDataDir();
  if (!template_data.ok()) return template_data.status();
  ReapOrphanedServers();
  absl::StatusOr<std::string> root = MakeTempDir("mariadb");
  if (!root.ok()) return root.status();
  std::ofstream(*root + "/" + kOwnerFile) << getpid() << "\n";
  std::unique_ptr<MariaDbServer> server(new MariaDbServer());
  server->root_ = *root;
  server->data_dir_ = *root + "/data";
  server->options_ = options.options;
  CommandResult copied =
      RunCommand({"/bin/cp", "-a", *template_data, server->data_dir_});
  if (copied.exit_code != 0) {
    return absl::InternalError(
        absl::StrCat("cp -a of the template: ", copied.err));
  }
  // A server's own temporary directory: a starting mariadbd deletes every
  // "#sql*" file in its tmpdir, which would pull the temporary tables out
  // from under the queries of the servers other tests run beside it.
  std::error_code made;
  fs::create_directory(*root + "/tmp", made);
  if (made) return absl::InternalError("cannot make " + *root + "/tmp");
  absl::Status owned = GiveToServerUser(*root);
  if (!owned.ok()) return owned;
  absl::Status started = server->StartServer();
  if (!started.ok()) return started;
  return server;
}

absl::Status MariaDbServer::StartServer() {
  const bool first_start = port_ == 0;
  for (int attempt = 0;; ++attempt) {
    if (first_start) {
      port_ = PortOf(FreeLoopbackAddress());
      if (port_ == 0) return absl::InternalError("no free port");
    }
    std::vector<std::string> argv = {
        kServer,
        "--no-defaults",
        "--datadir=" + data_dir_,
        "--socket=" + root_ + "/mysqld.sock",
        "--pid-file=" + root_ + "/mariadbd.pid",
        "--log-error=" + root_ + "/server.log",
        "--tmpdir=" + root_ + "/tmp",
        absl::StrCat("--port=", port_),
        "--bind-address=127.0.0.1",
        "--skip-name-resolve",
        "--log-bin=" + data_dir_ + "/bin",
        "--binlog-format=ROW",
        "--binlog-row-image=FULL",
        "--binlog-row-metadata=FULL",
        "--server-id=1",
        "--innodb-buffer-pool-size=64M",
        "--innodb-log-file-size=32M",
        "--innodb-flush-log-at-trx-commit=2",
        "--sync-binlog=0",
        "--max-connections=60",
    };
    if (RunningAsRoot()) argv.push_back("--user=mysql");
    for (const std::string& o : options_) argv.push_back(o);
    pid_ = SpawnCommand(argv, root_ + "/mariadbd.out");
    if (pid_ < 0) return absl::InternalError("cannot start mariadbd");
    std::ofstream(root_ + "/" + kServerPidFile) << pid_ << "\n";
    // Ready when the client connects.
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    bool ready = false;
    while (absl::Now() < deadline) {
      int wstatus = 0;
      if (waitpid(pid_, &wstatus, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      CommandResult r =
          RunCommand({kClient, "--no-defaults", "-h", "127.0.0.1", "-P",
                      absl::StrCat(port_), "-u", "root", "-e", "SELECT 1"},
                     absl::Seconds(10));
      if (r.exit_code == 0) {
        ready = true;
        break;
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
    if (ready) return absl::OkStatus();
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
    const std::string log = Log();
    if (!first_start || attempt == 2 ||
        log.find("Do you already have another") == std::string::npos) {
      return absl::InternalError(
          absl::StrCat("mariadbd did not start:\n", log));
    }
  }
}

MariaDbServer::~MariaDbServer() {
  (void)Kill();
  std::error_code ec;
  fs::remove_all(root_, ec);
}

std::string MariaDbServer::Url(absl::string_view database,
                               absl::string_view user,
                               absl::string_view password) const {
  return absl::StrCat("mariadb://", user, password.empty() ? "" : ":", password,
                      "@127.0.0.1:", port_, "/", database);
}

absl::StatusOr<std::string> MariaDbServer::Execute(absl::string_view sql,
                                                   absl::string_view database) {
  std::vector<std::string> argv = {
      kClient, "--no-defaults", "-h", "127.0.0.1", "-P", absl::StrCat(port_),
      "-u",    "root",          "-N", "-B"};
  if (!database.empty()) argv.push_back("--database=" + std::string(database));
  argv.push_back("-e");
  argv.push_back(std::string(sql));
  CommandResult r = RunCommand(argv, absl::Seconds(300));
  if (r.exit_code != 0) {
    return absl::InternalError(absl::StrCat("mariadb: ", r.err, r.out));
  }
  return std::string(absl::StripSuffix(r.out, "\n"));
}

absl::Status MariaDbServer::Kill() {
  if (pid_ <= 0) return absl::OkStatus();
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
  return absl::OkStatus();
}

absl::Status MariaDbServer::Restart() {
  absl::Status killed = Kill();
  if (!killed.ok()) return killed;
  return StartServer();
}

std::string MariaDbServer::Log() const {
  std::ifstream in(root_ + "/server.log");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace testing
}  // namespace tally
