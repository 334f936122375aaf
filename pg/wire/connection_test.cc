#include "pg/wire/connection.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/pg_cluster.h"
#include "support/pg_test_macros.h"
#include "support/process.h"

namespace tally {
namespace pg {
namespace {

using ::tally::testing::PgCluster;
using ::tally::testing::PgClusterOptions;

class ConnectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TALLY_SKIP_UNLESS_POSTGRES();
    absl::StatusOr<std::unique_ptr<PgCluster>> pg = PgCluster::Start();
    ASSERT_TRUE(pg.ok()) << pg.status();
    pg_ = std::move(*pg);
  }

  std::unique_ptr<Connection> Connect(ConnectOptions options = {}) {
    absl::StatusOr<std::unique_ptr<Connection>> c =
        Connection::Open(pg_->Uri(), options);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  std::unique_ptr<PgCluster> pg_;
};

TEST_F(ConnectionTest, RunsQueriesWithTextAndBinaryResults) {
  std::unique_ptr<Connection> c = Connect();
  ASSERT_NE(c, nullptr);
  absl::StatusOr<Result> r = c->Exec("SELECT 1, NULL::text");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->rows(), 1);
  EXPECT_EQ(r->Value(0, 0), "1");
  EXPECT_TRUE(r->IsNull(0, 1));
  EXPECT_FALSE(r->NullableValue(0, 1).has_value());

  // Binary: int8 42 is its eight big-endian bytes.
  r = c->ExecParams("SELECT $1::int8", {Param::Text("42")},
                    /*binary_results=*/true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->Value(0, 0), std::string("\0\0\0\0\0\0\0\x2a", 8));

  // A binary parameter with its type, and a NULL.
  r = c->ExecParams(
      "SELECT $1::int4 + 1, $2::text IS NULL",
      {Param::Binary(std::string("\0\0\0\x07", 4), 23), Param::Null()});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->Value(0, 0), "8");
  EXPECT_EQ(r->Value(0, 1), "t");
}

// The same text runs one prepared statement (the server lists it once);
// a DDL that changes what it returns fails one call, and the next prepares
// it anew; a statement prepared in a transaction that rolls back stays;
// past kMaxPrepared texts they are deallocated, not piled up.
TEST_F(ConnectionTest, PreparesAStatementOnceAndAgainAfterItsTableChanged) {
  std::unique_ptr<Connection> c = Connect();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->Exec("CREATE TABLE p (k int PRIMARY KEY, v int)").ok());
  ASSERT_TRUE(c->Exec("INSERT INTO p VALUES (1, 10), (2, 20)").ok());
  const std::string select = "SELECT * FROM p WHERE k = $1";
  auto prepared_count = [&]() {
    absl::StatusOr<Result> r =
        c->Exec("SELECT count(*) FROM pg_prepared_statements");
    return r.ok() ? std::string(r->Value(0, 0)) : r.status().ToString();
  };
  for (int k : {1, 2, 1}) {
    absl::StatusOr<Result> r = c->ExecPrepared(
        select, {Param::Binary(std::string("\0\0\0", 3) + char(k), 23)});
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->rows(), 1);
    EXPECT_EQ(r->Value(0, 1), absl::StrCat(k * 10));
  }
  EXPECT_EQ(prepared_count(), "1");

  // Another column in the result: one failure, then the new shape.
  ASSERT_TRUE(c->Exec("ALTER TABLE p ADD COLUMN w text DEFAULT 'x'").ok());
  const std::string one = std::string("\0\0\0\1", 4);
  absl::StatusOr<Result> r = c->ExecPrepared(select, {Param::Binary(one, 23)});
  if (!r.ok()) {
    EXPECT_THAT(std::string(r.status().message()),
                ::testing::HasSubstr("cached plan"));
    r = c->ExecPrepared(select, {Param::Binary(one, 23)});
  }
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->columns(), 3);
  EXPECT_EQ(r->Value(0, 2), "x");

  // Prepared inside a transaction that rolls back: still there.
  ASSERT_TRUE(c->Exec("BEGIN").ok());
  ASSERT_TRUE(c->ExecPrepared("SELECT count(*) FROM p", {}).ok());
  ASSERT_TRUE(c->Exec("ROLLBACK").ok());
  r = c->ExecPrepared("SELECT count(*) FROM p", {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->Value(0, 0), "2");

  // Many texts: bounded.
  for (size_t i = 0; i < Connection::kMaxPrepared + 10; ++i) {
    ASSERT_TRUE(c->ExecPrepared(absl::StrCat("SELECT ", i), {}).ok());
  }
  absl::StatusOr<Result> n =
      c->Exec("SELECT count(*) FROM pg_prepared_statements");
  ASSERT_TRUE(n.ok());
  int count = 0;
  ASSERT_TRUE(absl::SimpleAtoi(n->Value(0, 0), &count));
  EXPECT_LE(count, static_cast<int>(Connection::kMaxPrepared));
  EXPECT_GT(count, 0);
}

TEST_F(ConnectionTest, CopiesOutAndIn) {
  std::unique_ptr<Connection> c = Connect();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->Exec("CREATE TABLE t (id int PRIMARY KEY, a text)").ok());
  absl::StatusOr<uint64_t> loaded =
      c->CopyIn("COPY t FROM STDIN", "1\tone\n2\ttwo\n3\t\\N\n");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, 3u);
  std::string out;
  absl::Status s = c->CopyOut("COPY (SELECT * FROM t ORDER BY id) TO STDOUT",
                              [&](absl::string_view chunk) {
                                out.append(chunk.data(), chunk.size());
                                return absl::OkStatus();
                              });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(out, "1\tone\n2\ttwo\n3\t\\N\n");

  // A consumer's error stops the copy, is returned, and leaves the
  // connection usable.
  int chunks = 0;
  s = c->CopyOut("COPY (SELECT g FROM generate_series(1, 100000) g) TO STDOUT",
                 [&](absl::string_view) {
                   return ++chunks == 3 ? absl::DataLossError("enough")
                                        : absl::OkStatus();
                 });
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  absl::StatusOr<Result> r = c->Exec("SELECT count(*) FROM t");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->Value(0, 0), "3");

  // A copy in that the server rejects names the row.
  loaded = c->CopyIn("COPY t FROM STDIN", "4\tfour\nnot-a-number\tx\n");
  ASSERT_FALSE(loaded.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(loaded.status())) << loaded.status();
  EXPECT_NE(loaded.status().message().find("22P02"), absl::string_view::npos)
      << loaded.status();
}

TEST_F(ConnectionTest, ServerErrorsBecomeStatusCodesWithTheirSqlState) {
  std::unique_ptr<Connection> c = Connect();
  ASSERT_NE(c, nullptr);
  absl::StatusOr<Result> r = c->Exec("SELEC 1");
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_NE(r.status().message().find("42601"), absl::string_view::npos);
  r = c->Exec("SELECT * FROM no_such_table");
  EXPECT_TRUE(absl::IsNotFound(r.status())) << r.status();
  ASSERT_TRUE(c->Exec("CREATE TABLE u (id int PRIMARY KEY)").ok());
  ASSERT_TRUE(c->Exec("INSERT INTO u VALUES (1)").ok());
  r = c->Exec("INSERT INTO u VALUES (1)");
  EXPECT_TRUE(absl::IsAlreadyExists(r.status())) << r.status();
  // Still usable after errors.
  r = c->Exec("SELECT 2");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->Value(0, 0), "2");
}

TEST_F(ConnectionTest, AQueryPastItsTimeoutIsCancelled) {
  ConnectOptions options;
  options.query_timeout = absl::Milliseconds(300);
  std::unique_ptr<Connection> c = Connect(options);
  ASSERT_NE(c, nullptr);
  const absl::Time start = absl::Now();
  absl::StatusOr<Result> r = c->Exec("SELECT pg_sleep(30)");
  EXPECT_TRUE(absl::IsDeadlineExceeded(r.status())) << r.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  r = c->Exec("SELECT 3");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->Value(0, 0), "3");
}

// A copy whose server stops sending is cancelled at the query timeout,
// counted from the last data it sent, not from its start; and a query
// whose copy starts only after the timeout is cancelled too.
TEST_F(ConnectionTest, ACopyThatStallsIsCancelledAtTheTimeout) {
  ConnectOptions options;
  options.query_timeout = absl::Milliseconds(800);
  std::unique_ptr<Connection> c = Connect(options);
  ASSERT_NE(c, nullptr);
  // Rows of 100 kB (each flushed at once) keep coming for longer than the
  // timeout, then nothing for 30 s.
  int rows = 0;
  const absl::Time start = absl::Now();
  absl::Status s = c->CopyOut(
      "COPY (SELECT g, repeat('x', 100000), CASE WHEN g < 13 THEN "
      "pg_sleep(0.1) ELSE pg_sleep(30) END FROM generate_series(1, 14) g) "
      "TO STDOUT",
      [&](absl::string_view) {
        ++rows;
        return absl::OkStatus();
      });
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_GE(rows, 12);
  EXPECT_LT(absl::Now() - start, absl::Seconds(15));
  absl::StatusOr<Result> r = c->Exec("SELECT 4");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->Value(0, 0), "4");

  // Small rows the server keeps in its buffer: the copy's first data
  // comes after the timeout.
  s = c->CopyOut(
      "COPY (SELECT g, pg_sleep(0.2) FROM generate_series(1, 10) g) TO STDOUT",
      [&](absl::string_view) { return absl::OkStatus(); });
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  r = c->Exec("SELECT 5");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->Value(0, 0), "5");
}

TEST_F(ConnectionTest, QuotesIdentifiersAndLiterals) {
  std::unique_ptr<Connection> c = Connect();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->QuoteIdentifier("we\"ird"), "\"we\"\"ird\"");
  EXPECT_EQ(c->QuoteLiteral("it's"), "'it''s'");
  EXPECT_GE(c->server_version(), 150000);
}

TEST_F(ConnectionTest, ConnectFailuresSayWhy) {
  // Nobody listens: unavailable.
  const std::string closed = ::tally::testing::FreeLoopbackAddress();
  absl::StatusOr<std::unique_ptr<Connection>> c = Connection::Open(
      absl::StrCat("postgresql://postgres@", closed, "/postgres"), {});
  EXPECT_TRUE(absl::IsUnavailable(c.status())) << c.status();
  // No such database.
  c = Connection::Open(pg_->Uri("nope"), {});
  EXPECT_TRUE(absl::IsNotFound(c.status())) << c.status();
  EXPECT_NE(c.status().message().find("nope"), absl::string_view::npos);
  // Not a connection string libpq accepts: retrying cannot help.
  c = Connection::Open("host=127.0.0.1 bogus_option=1", {});
  EXPECT_TRUE(absl::IsInvalidArgument(c.status())) << c.status();
  c = Connection::Open("postgresql://127.0.0.1:notaport/x", {});
  EXPECT_TRUE(absl::IsInvalidArgument(c.status())) << c.status();
}

TEST(ConnectionPasswordTest, AWrongPasswordIsUnauthenticated) {
  TALLY_SKIP_UNLESS_POSTGRES();
  PgClusterOptions options;
  options.hba_lines = {"local all all trust",
                       "host all postgres 127.0.0.1/32 trust",
                       "host all all 127.0.0.1/32 scram-sha-256"};
  absl::StatusOr<std::unique_ptr<PgCluster>> pg = PgCluster::Start(options);
  ASSERT_TRUE(pg.ok()) << pg.status();
  ASSERT_TRUE((*pg)->Execute("CREATE ROLE app LOGIN PASSWORD 'right'").ok());
  const std::string base =
      absl::StrCat("127.0.0.1:", (*pg)->port(), "/postgres");
  absl::StatusOr<std::unique_ptr<Connection>> c =
      Connection::Open(absl::StrCat("postgresql://app:wrong@", base), {});
  EXPECT_TRUE(absl::IsUnauthenticated(c.status())) << c.status();
  EXPECT_EQ(c.status().message().find("wrong"), absl::string_view::npos)
      << "the password must not be printed: " << c.status();
  c = Connection::Open(absl::StrCat("postgresql://app:right@", base), {});
  EXPECT_TRUE(c.ok()) << c.status();
}

TEST(StatusCodeForSqlState, FollowsTheClass) {
  EXPECT_EQ(StatusCodeForSqlState("42501"),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(StatusCodeForSqlState("42P01"), absl::StatusCode::kNotFound);
  EXPECT_EQ(StatusCodeForSqlState("08006"), absl::StatusCode::kUnavailable);
  EXPECT_EQ(StatusCodeForSqlState("57P01"), absl::StatusCode::kUnavailable);
  EXPECT_EQ(StatusCodeForSqlState("53400"),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(StatusCodeForSqlState("55006"),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(StatusCodeForSqlState("55000"),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(StatusCodeForSqlState("40P01"), absl::StatusCode::kAborted);
  EXPECT_EQ(StatusCodeForSqlState("XX000"), absl::StatusCode::kUnknown);
  EXPECT_EQ(StatusCodeForSqlState(""), absl::StatusCode::kUnknown);
}

// A process killed while it owns a server (SIGKILL, a test timeout) never
// runs ~PgCluster; the next PgCluster::Start of any process stops that
// server and removes its directory.
TEST(PgClusterReaping, AKilledOwnersServerIsStoppedAtTheNextStart) {
  TALLY_SKIP_UNLESS_POSTGRES();
  // Close-on-exec: the server the child starts must not hold the pipe open.
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    auto pg = PgCluster::Start();
    const std::string dir = (pg.ok() ? (*pg)->data_dir() : "") + "\n";
    (void)!write(fds[1], dir.data(), dir.size());
    close(fds[1]);
    pause();  // killed here, its cluster still running
    _exit(0);
  }
  close(fds[1]);
  std::string data_dir;
  char buf[512];
  for (ssize_t n; !absl::EndsWith(data_dir, "\n") &&
                  (n = read(fds[0], buf, sizeof(buf))) > 0;) {
    data_dir.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  data_dir = std::string(absl::StripSuffix(data_dir, "\n"));
  ASSERT_FALSE(data_dir.empty());
  ASSERT_TRUE(std::filesystem::exists(data_dir + "/postmaster.pid"));
  kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);

  auto next = PgCluster::Start();
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_FALSE(std::filesystem::exists(data_dir));
}

}  // namespace
}  // namespace pg
}  // namespace tally
