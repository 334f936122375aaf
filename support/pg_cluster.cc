#include "support/pg_cluster.h"

#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "support/process.h"

namespace tally {
namespace testing {
namespace {

namespace fs = std::filesystem;

// The settings every test cluster starts with: logical decoding, commit
// timestamps, room for the slots and origins a test makes, and no fsync.
constexpr const char* kDefaultSettings[] = {
    "listen_addresses = '127.0.0.1'", "wal_level = logical",
    "track_commit_timestamp = on",    "max_replication_slots = 20",
    "max_wal_senders = 20",           "fsync = off",
    "full_page_writes = off",         "shared_buffers = '64MB'",
    "max_connections = 60",
};

std::string TempBase() {
  const char* base = std::getenv("TMPDIR");
  return base != nullptr && *base != '\0' ? base : "/tmp";
}

bool RunningAsRoot() { return geteuid() == 0; }

// Runs a server binary, as the postgres user when we are root.
CommandResult RunAsServerUser(std::vector<std::string> argv,
                              absl::Duration timeout = absl::Seconds(120)) {
  if (RunningAsRoot()) {
    argv.insert(argv.begin(), {"/usr/sbin/runuser", "-u", "postgres", "--"});
  }
  return RunCommand(argv, timeout);
}

absl::Status GiveToServerUser(const std::string& path) {
  if (!RunningAsRoot()) return absl::OkStatus();
  const passwd* pw = getpwnam("postgres");
  if (pw == nullptr) {
    return absl::NotFoundError(
        "no postgres user (install postgresql-15: scripts/install-deps.sh)");
  }
  if (chown(path.c_str(), pw->pw_uid, pw->pw_gid) != 0) {
    return absl::InternalError(absl::StrCat("chown ", path, " failed"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> MakeTempDir(const std::string& label) {
  std::string tmpl = TempBase() + "/tally-" + label + "-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", tmpl, " failed"));
  }
  absl::Status owned = GiveToServerUser(tmpl);
  if (!owned.ok()) return owned;
  return tmpl;
}

std::string Failure(absl::string_view what, const CommandResult& r) {
  return absl::StrCat(what, " exited ", r.exit_code, ": ", r.out, r.err);
}

// The file in a cluster's root naming the process that owns it.
constexpr char kOwnerFile[] = "owner.pid";

// A test or benchmark killed (SIGKILL, a timeout) never runs ~PgCluster,
// and its server, started by pg_ctl, outlives it. Each start therefore
// stops and removes the clusters whose owner process is gone. A root
// without an owner file is left alone (it may be one being made now).
void ReapOrphanedClusters() {
  std::error_code ec;
  for (const fs::directory_entry& entry :
       fs::directory_iterator(TempBase(), ec)) {
    const std::string name = entry.path().filename().string();
    if (!absl::StartsWith(name, "tally-pg-") ||
        absl::StartsWith(name, "tally-pg-template-")) {
      continue;
    }
    std::ifstream owner_file(entry.path() / kOwnerFile);
    pid_t owner = 0;
    if (!(owner_file >> owner) || owner <= 0) continue;
    if (kill(owner, 0) == 0 || errno != ESRCH) continue;  // still alive
    const std::string data_dir = (entry.path() / "data").string();
    if (fs::exists(data_dir + "/postmaster.pid", ec)) {
      (void)RunAsServerUser({PostgresBinDir() + "/pg_ctl", "-D", data_dir, "-w",
                             "-t", "60", "-m", "immediate", "stop"});
    }
    fs::remove_all(entry.path(), ec);
  }
}

// Makes (once per machine and user; shared by parallel test processes
// through a file lock) the initdb output every cluster copies. Returns its
// data directory.
absl::StatusOr<std::string> TemplateDataDir() {
  const std::string root =
      absl::StrCat(TempBase(), "/tally-pg-template-15-", geteuid());
  const std::string data = root + "/data";
  const std::string lock_path = root + ".lock";
  const int lock = open(lock_path.c_str(), O_CREAT | O_RDWR, 0644);
  if (lock < 0) {
    return absl::InternalError(absl::StrCat("cannot open ", lock_path));
  }
  flock(lock, LOCK_EX);
  absl::Status status;
  if (!fs::exists(data + "/PG_VERSION")) {
    std::error_code ec;
    fs::remove_all(root, ec);
    absl::StatusOr<std::string> staging = MakeTempDir("pg-template");
    if (!staging.ok()) {
      status = staging.status();
    } else {
      CommandResult r = RunAsServerUser(
          {PostgresBinDir() + "/initdb", "-D", *staging + "/data", "-U",
           "postgres", "--auth=trust", "-N", "--locale=C", "-E", "UTF8"});
      if (r.exit_code != 0) {
        status = absl::InternalError(Failure("initdb", r));
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

std::string PostgresBinDir() {
  const char* dir = std::getenv("TALLY_PG_BIN_DIR");
  return dir != nullptr && *dir != '\0' ? dir : "/usr/lib/postgresql/15/bin";
}

absl::Status PostgresInstalled() {
  for (const char* binary : {"initdb", "pg_ctl", "postgres", "psql"}) {
    const std::string path = PostgresBinDir() + "/" + binary;
    if (access(path.c_str(), X_OK) != 0) {
      return absl::NotFoundError(
          absl::StrCat(path,
                       " is missing: install PostgreSQL 15 "
                       "(scripts/install-deps.sh installs "
                       "postgresql-15)"));
    }
  }
  return absl::OkStatus();
}

bool PostgresRequired() {
  const char* v = std::getenv("TALLY_REQUIRE_POSTGRES");
  return v != nullptr && std::string(v) == "1";
}

absl::StatusOr<std::unique_ptr<PgCluster>> PgCluster::Start(
    const PgClusterOptions& options) {
  absl::Status installed = PostgresInstalled();
  if (!installed.ok()) return installed;
  absl::StatusOr<std::string> template_data = TemplateDataDir();
  if (!template_data.ok()) return template_data.status();
  ReapOrphanedClusters();
  absl::StatusOr<std::string> root = MakeTempDir("pg");
  if (!root.ok()) return root.status();
  std::ofstream(*root + "/" + kOwnerFile) << getpid() << "\n";

  std::unique_ptr<PgCluster> cluster(new PgCluster());
  cluster->root_ = *root;
  cluster->data_dir_ = *root + "/data";
  cluster->log_path_ = *root + "/server.log";
  CommandResult copied =
      RunCommand({"/bin/cp", "-a", *template_data, cluster->data_dir_});
  if (copied.exit_code != 0) {
    return absl::InternalError(Failure("cp -a of the template", copied));
  }
  {
    std::ofstream conf(cluster->data_dir_ + "/postgresql.conf", std::ios::app);
    conf << "\n# tally test cluster\n";
    for (const char* s : kDefaultSettings) conf << s << "\n";
    conf << "unix_socket_directories = '" << *root << "'\n";
    for (const std::string& s : options.settings) conf << s << "\n";
  }
  if (!options.hba_lines.empty()) {
    std::ofstream hba(cluster->data_dir_ + "/pg_hba.conf", std::ios::trunc);
    hba << absl::StrJoin(options.hba_lines, "\n") << "\n";
  }
  absl::Status started = cluster->StartServer();
  if (!started.ok()) return started;
  return cluster;
}

absl::Status PgCluster::StartServer() {
  // A free port at the first start; Restart keeps it (tallyd and the test
  // were told it).
  const bool first_start = port_ == 0;
  for (int attempt = 0;; ++attempt) {
    if (first_start) {
      port_ = PortOf(FreeLoopbackAddress());
      if (port_ == 0) return absl::InternalError("no free port");
    }
    CommandResult r = RunAsServerUser(
        {PostgresBinDir() + "/pg_ctl", "-D", data_dir_, "-l", log_path_, "-w",
         "-t", "60", "-o", absl::StrCat("-p ", port_), "start"});
    if (r.exit_code == 0) {
      running_ = true;
      return absl::OkStatus();
    }
    // Another process may take the port between asking and binding: a
    // first start tries another.
    if (!first_start || attempt == 2 ||
        Log().find("could not bind") == std::string::npos) {
      return absl::InternalError(
          absl::StrCat(Failure("pg_ctl start", r), "\n", Log()));
    }
  }
}

PgCluster::~PgCluster() {
  if (running_) (void)Stop(StopMode::kImmediate);
  std::error_code ec;
  fs::remove_all(root_, ec);
}

std::string PgCluster::Uri(absl::string_view database,
                           absl::string_view user) const {
  return absl::StrCat("postgresql://", user, "@127.0.0.1:", port_, "/",
                      database);
}

absl::Status PgCluster::Stop(StopMode mode) {
  if (!running_) return absl::OkStatus();
  CommandResult r = RunAsServerUser(
      {PostgresBinDir() + "/pg_ctl", "-D", data_dir_, "-w", "-t", "60", "-m",
       mode == StopMode::kFast ? "fast" : "immediate", "stop"});
  if (r.exit_code != 0) {
    return absl::InternalError(Failure("pg_ctl stop", r));
  }
  running_ = false;
  return absl::OkStatus();
}

absl::Status PgCluster::Restart() {
  absl::Status stopped = Stop(StopMode::kFast);
  if (!stopped.ok()) return stopped;
  return StartServer();
}

absl::StatusOr<std::string> PgCluster::Execute(absl::string_view sql,
                                               absl::string_view database) {
  CommandResult r = RunCommand(
      {PostgresBinDir() + "/psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1",
       "-h", "127.0.0.1", "-p", absl::StrCat(port_), "-U", "postgres", "-d",
       std::string(database), "-c", std::string(sql)});
  if (r.exit_code != 0) {
    return absl::InternalError(absl::StrCat("psql: ", r.err, r.out));
  }
  return std::string(absl::StripSuffix(r.out, "\n"));
}

absl::Status PgCluster::CreateDatabase(absl::string_view name) {
  absl::StatusOr<std::string> r =
      Execute(absl::StrCat("CREATE DATABASE \"", name, "\""));
  return r.status();
}

std::string PgCluster::Log() const {
  std::ifstream in(log_path_);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace testing
}  // namespace tally
