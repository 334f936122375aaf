// NodeServer with a sidecar to PostgreSQL: the order of the sidecar's steps
// around the store, a refusal ending the start, and the sidecar in Status.
// A fake sidecar stands in for pg::Sidecar (the real one is tested against
// real servers in tests/pg/pg_*_test.cc).
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/client/client.h"
#include "node/node_server.h"
#include "node/sidecar/postgres_sidecar.h"
#include "storage/store.h"
#include "support/pg_cluster.h"
#include "support/pg_test_macros.h"
#include "support/temp_dir.h"

namespace tally {
namespace node {
namespace {

using ::tally::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// What the fake saw, in order, with the facts each step checked.
struct Events {
  absl::Mutex mu;
  std::vector<std::string> log ABSL_GUARDED_BY(mu);
  void Add(std::string event) {
    absl::MutexLock lock(&mu);
    log.push_back(std::move(event));
  }
  std::vector<std::string> Log() {
    absl::MutexLock lock(&mu);
    return log;
  }
};

class FakeSidecar final : public PostgresSidecar {
 public:
  explicit FakeSidecar(std::shared_ptr<Events> events)
      : events_(std::move(events)), backend_(storage::NewEmbeddedBackend()) {}

  std::shared_ptr<storage::RowBackend> backend() override { return backend_; }

  absl::Status Start(storage::Store* store) override {
    // The store holds the backend it opened with: ours.
    events_->Add(absl::StrCat(
        "start ", store->node_name(),
        backend_.use_count() > 1 ? " with our backend" : " WITHOUT it"));
    return absl::OkStatus();
  }

  void Stop() override {
    if (stopped_) return;
    stopped_ = true;
    // While the store is open it holds a reference to the backend.
    events_->Add(backend_.use_count() > 1 ? "stop, store open"
                                          : "stop, STORE CLOSED");
  }

  v1::PostgresStatus status() const override {
    v1::PostgresStatus s;
    s.set_database("postgresql://t:leaked-secret@h/db");  // the node masks it
    s.set_slot("tally_a_12345678");
    s.set_phase("following");
    s.set_slot_lag_bytes(176);
    v1::PostgresTable* t = s.add_tables();
    t->set_keyspace("public.users");
    t->set_state("ready");
    return s;
  }
  absl::StatusOr<v1::VerifyTablesResponse> VerifyTables(
      const v1::VerifyTablesRequest&) override {
    return absl::UnimplementedError("the fake sidecar keeps no index");
  }

 private:
  const std::shared_ptr<Events> events_;
  const std::shared_ptr<storage::RowBackend> backend_;
  bool stopped_ = false;
};

NodeConfig SidecarConfig(const TempDir& dir) {
  NodeConfig config;
  config.name = "a";
  config.data_dir = dir.path();
  config.listen = "127.0.0.1:0";
  config.sync_writes = false;
  config.postgres = "postgresql://tally:s3cret@127.0.0.1:5432/app";
  config.tables = {"public.users"};
  return config;
}

bool IsEmptyDir(const std::string& path) {
  return std::filesystem::is_empty(path);
}

TEST(NodeServerSidecar, PreparesBeforeTheStoreStartsAfterAndStopsBeforeClose) {
  TempDir dir;
  auto events = std::make_shared<Events>();
  const NodeConfig config = SidecarConfig(dir);
  auto node = NodeServer::Start(
      config,
      [&](const NodeConfig& c)
          -> absl::StatusOr<std::unique_ptr<PostgresSidecar>> {
        events->Add(absl::StrCat(
            "prepare ", c.postgres, " ", c.tables[0],
            IsEmptyDir(c.data_dir) ? ", no store yet" : ", STORE OPEN"));
        return std::make_unique<FakeSidecar>(events);
      });
  ASSERT_TRUE(node.ok()) << node.status();
  (*node)->Shutdown();
  node->reset();
  EXPECT_THAT(events->Log(),
              ElementsAre("prepare postgresql://tally:s3cret@127.0.0.1:5432/"
                          "app public.users, no store yet",
                          "start a with our backend", "stop, store open"));
}

TEST(NodeServerSidecar, ARefusalEndsTheStartWithItsMessageAndOpensNoStore) {
  TempDir dir;
  auto node = NodeServer::Start(
      SidecarConfig(dir),
      [](const NodeConfig&)
          -> absl::StatusOr<std::unique_ptr<PostgresSidecar>> {
        return absl::FailedPreconditionError(
            "wal_level is 'replica'; set wal_level = logical in "
            "postgresql.conf and restart PostgreSQL");
      });
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(node.status().message()),
              HasSubstr("set wal_level = logical"));
  EXPECT_TRUE(IsEmptyDir(dir.path()));
}

TEST(NodeServerSidecar, WithoutASidecarInTheBuildPostgresIsRefused) {
  TempDir dir;
  auto node = NodeServer::Start(SidecarConfig(dir), nullptr);
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(node.status().message()), HasSubstr("--postgres"));
}

TEST(NodeServerSidecar, StatusShowsTheSidecarWithThePasswordMasked) {
  TempDir dir;
  auto events = std::make_shared<Events>();
  auto node = NodeServer::Start(
      SidecarConfig(dir),
      [&](const NodeConfig&)
          -> absl::StatusOr<std::unique_ptr<PostgresSidecar>> {
        return std::make_unique<FakeSidecar>(events);
      });
  ASSERT_TRUE(node.ok()) << node.status();
  auto client = NodeClient::Connect((*node)->listen_address(), ClientOptions{});
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<v1::StatusResponse> status = (*client)->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_TRUE(status->has_postgres());
  EXPECT_EQ(status->postgres().database(),
            "postgresql://tally:********@127.0.0.1:5432/app");
  EXPECT_EQ(status->postgres().slot(), "tally_a_12345678");
  EXPECT_EQ(status->postgres().phase(), "following");
  EXPECT_EQ(status->postgres().tables(0).keyspace(), "public.users");
  EXPECT_THAT(status->DebugString(), Not(HasSubstr("secret")));
}

TEST(NodeServerSidecar, ANodeWithoutPostgresReportsNoSidecar) {
  TempDir dir;
  NodeConfig config;
  config.name = "plain";
  config.data_dir = dir.path();
  config.listen = "127.0.0.1:0";
  bool called = false;
  auto node = NodeServer::Start(
      config,
      [&](const NodeConfig&)
          -> absl::StatusOr<std::unique_ptr<PostgresSidecar>> {
        called = true;
        return absl::InternalError("must not be called");
      });
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_FALSE(called);
  auto client = NodeClient::Connect((*node)->listen_address(), ClientOptions{});
  ASSERT_TRUE(client.ok());
  absl::StatusOr<v1::StatusResponse> status = (*client)->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_FALSE(status->has_postgres());
}

// tally get/put/del on a PostgreSQL node: Admin calls for a configured
// table go to the table by its key values (node/sidecar/table_rows.h); others
// to the store, one key each.
TEST(NodeServerSidecar, AdminCallsForATableReadAndWriteThePostgresTable) {
  TALLY_SKIP_UNLESS_POSTGRES();
  auto pg = ::tally::testing::PgCluster::Start();
  ASSERT_TRUE(pg.ok()) << pg.status();
  ASSERT_TRUE(
      (*pg)
          ->Execute("CREATE TABLE users (id bigint PRIMARY KEY, name text)")
          .ok());
  TempDir dir;
  NodeConfig config = SidecarConfig(dir);
  config.postgres = (*pg)->Uri();
  auto events = std::make_shared<Events>();
  auto node = NodeServer::Start(
      config,
      [&](const NodeConfig&)
          -> absl::StatusOr<std::unique_ptr<PostgresSidecar>> {
        return std::make_unique<FakeSidecar>(events);
      });
  ASSERT_TRUE(node.ok()) << node.status();
  auto client = NodeClient::Connect((*node)->listen_address(), ClientOptions{});
  ASSERT_TRUE(client.ok());
  NodeClient& c = **client;

  absl::StatusOr<v1::PutResponse> put =
      c.Put("public.users", "7", R"({"name":"Ada"})", {"7"});
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_TRUE(put->postgres());
  EXPECT_FALSE(put->has_version());
  EXPECT_EQ(*(*pg)->Execute("SELECT name FROM users WHERE id = 7"), "Ada");
  absl::StatusOr<v1::GetResponse> got = c.Get("public.users", "7", {"7"});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(got->row_json(), HasSubstr(R"("name" : "Ada")"));
  EXPECT_FALSE(got->has_row());
  // Rows of a table live in PostgreSQL, not in the store.
  EXPECT_FALSE((*node)->store().Get("public.users", "7").ok());
  // A client that sends only the byte key is told how to address the row.
  absl::StatusOr<v1::GetResponse> bytes_only = c.Get("public.users", "7");
  EXPECT_EQ(bytes_only.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bytes_only.status().message()),
              HasSubstr("primary key values"));
  absl::StatusOr<v1::DeleteResponse> del = c.Delete("public.users", "7", {"7"});
  ASSERT_TRUE(del.ok()) << del.status();
  EXPECT_TRUE(del->postgres());
  EXPECT_EQ(*(*pg)->Execute("SELECT count(*) FROM users"), "0");
  EXPECT_EQ(c.Get("public.users", "7", {"7"}).status().code(),
            absl::StatusCode::kNotFound);

  // Another keyspace is the store's, addressed by one key.
  ASSERT_TRUE(c.Put("plain", "k", "v", {"k"}).ok());
  absl::StatusOr<v1::GetResponse> plain = c.Get("plain", "k", {"k"});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->row().value(), "v");
  EXPECT_THAT(std::string(c.Get("plain", "k", {"k", "2"}).status().message()),
              HasSubstr("takes one KEY, not 2"));
}

}  // namespace
}  // namespace node
}  // namespace tally
