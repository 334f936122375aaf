#include "pg/sidecar/apply/pg_backend.h"

#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "pg/schema/row_codec.h"
#include "pg/sidecar/apply/apply_message.h"
#include "pg/wire/binary_copy.h"
#include "pg/wire/internal/big_endian.h"
#include "pg/wire/lsn.h"
#include "support/pg_cluster.h"
#include "support/pg_test_macros.h"
#include "tree/token.h"

namespace tally {
namespace pg {
namespace {

using storage::IndexedRow;
using storage::RowChange;
using storage::RowLocation;
using storage::RowOutcome;
using ::tally::testing::PgCluster;

constexpr absl::string_view kTable = R"sql(
    CREATE TABLE public.t (id bigint PRIMARY KEY, a int, b text, n numeric,
                           ts timestamptz, by bytea, j jsonb);)sql";

std::string Int8(int64_t v) {
  std::string s;
  internal::PutBigEndian64(&s, static_cast<uint64_t>(v));
  return s;
}
std::string Int4(int32_t v) {
  std::string s;
  internal::PutBigEndian32(&s, static_cast<uint32_t>(v));
  return s;
}

// A row the test applies, kept alive with the strings its views point to.
struct TestRow {
  std::string keyspace = "public.t";
  std::string key;
  std::string value;
  tree::Version version;
  RowChange::Kind kind = RowChange::Kind::kPut;
  // What the index holds.
  bool exists = false;
  bool deleted = false;
  std::string payload;
  tree::Version expected_version;
};

class PgBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TALLY_SKIP_UNLESS_POSTGRES();
    absl::StatusOr<std::unique_ptr<PgCluster>> pg = PgCluster::Start();
    ASSERT_TRUE(pg.ok()) << pg.status();
    pg_ = std::move(*pg);
    ASSERT_TRUE(pg_->Execute(kTable).ok());
    OpenBackend();
  }

  void OpenBackend() {
    backend_.reset();
    PgBackendOptions options;
    options.conninfo = pg_->Uri();
    options.tables = {"public.t"};
    options.origin_name = "tally_test";
    absl::StatusOr<std::unique_ptr<PgBackend>> b = PgBackend::Open(options);
    ASSERT_TRUE(b.ok()) << b.status();
    backend_ = std::move(*b);
  }

  std::unique_ptr<Connection> Connect() {
    absl::StatusOr<std::unique_ptr<Connection>> c =
        Connection::Open(pg_->Uri(), {});
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  // The canonical key and value of (id, a, b) with the other columns NULL.
  static std::string Key(int64_t id) {
    std::string key;
    const std::string b = Int8(id);
    AppendFields({Field::Of(b)}, &key);
    return key;
  }
  static std::string Value(int32_t a, absl::string_view b) {
    // Canonical order of the non-key columns: a, b, by, j, n, ts.
    std::string value;
    const std::string a_bytes = Int4(a);
    AppendFields({Field::Of(a_bytes), Field::Of(b), Field::Null(),
                  Field::Null(), Field::Null(), Field::Null()},
                 &value);
    return value;
  }

  static TestRow Put(int64_t id, int32_t a, absl::string_view b,
                     uint64_t millis) {
    TestRow r;
    r.key = Key(id);
    r.value = Value(a, b);
    r.version = tree::Version{tree::HlcTimestamp::FromParts(millis, 0), "peer"};
    return r;
  }

  // Marks `r` as changing a row the index holds with `payload`.
  static TestRow& Over(TestRow& r, const std::string& payload) {
    r.exists = true;
    r.payload = payload;
    r.expected_version =
        tree::Version{tree::HlcTimestamp::FromParts(1, 0), "x"};
    return r;
  }

  absl::Status Apply(std::vector<TestRow>& rows,
                     std::vector<RowOutcome>* outcomes) {
    std::vector<RowChange> changes;
    for (TestRow& r : rows) {
      RowChange c;
      c.row = RowLocation{r.keyspace, tree::TokenOf(r.key), r.key};
      c.kind = r.kind;
      c.value = r.value;
      c.version = &r.version;
      c.expected.exists = r.exists;
      c.expected.deleted = r.deleted;
      c.expected.version = &r.expected_version;
      c.expected.payload = r.payload;
      changes.push_back(c);
    }
    return backend_->ApplyRows(changes, outcomes);
  }

  // The table as canonical (key, value) pairs, by a binary COPY of the
  // canonical SELECT list.
  std::vector<std::pair<std::string, std::string>> TableRows() {
    auto c = Connect();
    const TableSchema& t = *backend_->schema("public.t");
    std::vector<std::pair<std::string, std::string>> out;
    const RowCodec codec = t.codec();
    CopyBinaryReader reader([&](absl::Span<const Field> fields) {
      std::string k, v;
      absl::Status s = codec.Encode(fields, &k, &v);
      out.emplace_back(k, v);
      return s;
    });
    EXPECT_TRUE(
        c->CopyOut(absl::StrCat("COPY (SELECT ", t.select_list(), " FROM ",
                                t.quoted_name(), " ORDER BY ", t.key_list(),
                                ") TO STDOUT (FORMAT binary)"),
                   [&](absl::string_view chunk) { return reader.Feed(chunk); })
            .ok());
    EXPECT_TRUE(reader.Finish().ok());
    return out;
  }

  // The token PostgreSQL reports for row `id` now, encoded.
  std::string TokenOfRow(int64_t id) {
    auto c = Connect();
    auto r = c->ExecParams(
        "SELECT x.timestamp, x.roident FROM public.t, LATERAL "
        "pg_xact_commit_timestamp_origin(xmin) x WHERE id = $1",
        {Param::Text(std::to_string(id))}, /*binary_results=*/true);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok() || r->rows() != 1) return "";
    auto f = [&](int col) {
      return r->IsNull(0, col) ? Field::Null() : Field::Of(r->Value(0, col));
    };
    auto token = RowToken::FromBinary(f(0), f(1));
    EXPECT_TRUE(token.ok());
    return token.ok() ? token->Encode() : "";
  }

  std::unique_ptr<PgCluster> pg_;
  std::unique_ptr<PgBackend> backend_;
};

TEST_F(PgBackendTest, InsertsUpdatesAndDeletesWithTheCommitTimestampAsToken) {
  std::vector<TestRow> rows = {Put(1, 10, "one", 100), Put(2, 20, "two", 100)};
  std::vector<RowOutcome> out;
  ASSERT_TRUE(Apply(rows, &out).ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(out[0].applied && out[1].applied);
  EXPECT_EQ(TableRows(),
            (std::vector<std::pair<std::string, std::string>>{
                {Key(1), Value(10, "one")}, {Key(2), Value(20, "two")}}));
  // The payload is the token the server records for the rows: the stamp
  // xact_setup fixed before COMMIT, and the apply origin.
  auto token = RowToken::Decode(out[0].payload);
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(token->commit_time_us, backend_->last_stamp());
  EXPECT_EQ(token->origin, backend_->origin_id());
  EXPECT_NE(backend_->origin_id(), kLocalOrigin);
  EXPECT_EQ(TokenOfRow(1), out[0].payload);
  EXPECT_EQ(TokenOfRow(2), out[1].payload);

  // Update row 1 and delete row 2 against the tokens the index holds.
  std::vector<TestRow> next = {Put(1, 11, "uno", 200), Put(2, 0, "", 200)};
  Over(next[0], out[0].payload);
  Over(next[1], out[1].payload);
  next[1].kind = RowChange::Kind::kDelete;
  next[1].value.clear();
  std::vector<RowOutcome> out2;
  ASSERT_TRUE(Apply(next, &out2).ok());
  EXPECT_TRUE(out2[0].applied && out2[1].applied);
  EXPECT_EQ(out2[1].payload, "");  // a tombstone keeps no token
  EXPECT_EQ(TableRows(), (std::vector<std::pair<std::string, std::string>>{
                             {Key(1), Value(11, "uno")}}));
  EXPECT_EQ(TokenOfRow(1), out2[0].payload);
  EXPECT_GT(RowToken::Decode(out2[0].payload)->commit_time_us,
            token->commit_time_us);

  // Reads: the value while the token matches; a tombstone reads empty.
  const std::string k1 = Key(1), k2 = Key(2);
  std::vector<RowLocation> locs = {{"public.t", tree::TokenOf(k1), k1},
                                   {"public.t", tree::TokenOf(k2), k2},
                                   {"public.t", tree::TokenOf(k1), k1}};
  std::vector<absl::string_view> payloads = {out2[0].payload, "",
                                             out[0].payload};
  auto values = backend_->ReadValues(locs, payloads);
  ASSERT_TRUE(values.ok()) << values.status();
  ASSERT_EQ(values->size(), 3u);
  ASSERT_TRUE((*values)[0].ok()) << (*values)[0].status();
  EXPECT_EQ(*(*values)[0], Value(11, "uno"));
  ASSERT_TRUE((*values)[1].ok());
  EXPECT_EQ(*(*values)[1], "");
  // An older token: the row changed since; never a value that fails its
  // digest, never kDataLoss (which would mark the row damaged).
  EXPECT_EQ((*values)[2].status().code(), absl::StatusCode::kAborted);
  // A token newer than the row the read sees (its commit not visible to
  // the read yet), or a row the read does not see (a delete not indexed
  // yet, an insert not visible yet): read again shortly.
  RowToken later = *RowToken::Decode(out2[0].payload);
  *later.commit_time_us += 1000000;
  const std::string later_payload = later.Encode();
  auto pending = backend_->ReadValues({locs[0], locs[1]},
                                      {later_payload, out2[0].payload});
  ASSERT_TRUE(pending.ok()) << pending.status();
  EXPECT_EQ((*pending)[0].status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ((*pending)[1].status().code(), absl::StatusCode::kUnavailable);
  auto one = backend_->ReadValue(locs[0], out2[0].payload);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(*one, Value(11, "uno"));
}

TEST_F(PgBackendTest, AStaleTokenIsRefusedAndTheApplicationsWriteStays) {
  std::vector<TestRow> rows = {Put(1, 10, "one", 100), Put(2, 20, "two", 100)};
  std::vector<RowOutcome> out;
  ASSERT_TRUE(Apply(rows, &out).ok());
  // An application writes row 1; tallyd has not captured it.
  ASSERT_TRUE(pg_->Execute("UPDATE public.t SET b = 'app' WHERE id = 1").ok());
  std::vector<TestRow> next = {Put(1, 99, "tally", 200),
                               Put(2, 98, "tally", 200)};
  Over(next[0], out[0].payload);
  Over(next[1], out[1].payload);
  std::vector<RowOutcome> out2;
  ASSERT_TRUE(Apply(next, &out2).ok());
  EXPECT_FALSE(out2[0].applied);
  EXPECT_TRUE(out2[1].applied);
  EXPECT_EQ(out2[0].payload, "");
  EXPECT_EQ(*pg_->Execute("SELECT a || b FROM public.t ORDER BY id"),
            "10app\n98tally");
  // The same for a delete.
  std::vector<TestRow> del = {Put(1, 0, "", 300)};
  Over(del[0], out[0].payload);
  del[0].kind = RowChange::Kind::kDelete;
  std::vector<RowOutcome> out3;
  ASSERT_TRUE(Apply(del, &out3).ok());
  EXPECT_FALSE(out3[0].applied);
  EXPECT_EQ(*pg_->Execute("SELECT count(*) FROM public.t WHERE id = 1"), "1");
}

// The application first: a row an application holds locked is not waited
// for (the apply would hold its other rows meanwhile, and a lock cycle
// with the application could make PostgreSQL abort the application's
// transaction). It is tried again for a while, then left as not applied;
// the other rows are committed at once.
TEST_F(PgBackendTest, ARowAnApplicationHoldsIsSkippedNotWaitedFor) {
  std::vector<TestRow> rows = {Put(5, 1, "tally-old", 100),
                               Put(6, 1, "tally-old", 100)};
  std::vector<RowOutcome> out;
  ASSERT_TRUE(Apply(rows, &out).ok());
  // The application holds row 6's lock with its update pending...
  auto app = Connect();
  ASSERT_TRUE(app->Exec("BEGIN").ok());
  ASSERT_TRUE(
      app->Exec("UPDATE public.t SET b = 'app-write' WHERE id = 6").ok());
  // ...while tallyd applies a remote version of rows 5 and 6 (in key
  // order: it would take row 5's lock, then wait for row 6).
  std::vector<TestRow> next = {Put(5, 2, "tally-remote", 200),
                               Put(6, 2, "tally-remote", 200)};
  Over(next[0], out[0].payload);
  Over(next[1], out[1].payload);
  std::vector<RowOutcome> out2;
  const absl::Time start = absl::Now();
  ASSERT_TRUE(Apply(next, &out2).ok());
  const absl::Duration took = absl::Now() - start;
  EXPECT_LT(took, absl::Seconds(2));
  EXPECT_TRUE(out2[0].applied);
  EXPECT_FALSE(out2[1].applied);
  EXPECT_TRUE(out2[1].rejected.ok()) << "busy, not refused by the database";
  // The application's next statement, on the row the apply wrote, does not
  // wait: the apply committed and holds nothing.
  auto app_timeout = app->Exec("SET LOCAL lock_timeout = '500ms'");
  ASSERT_TRUE(app_timeout.ok());
  absl::Status own =
      app->Exec("UPDATE public.t SET a = 9 WHERE id = 5").status();
  EXPECT_TRUE(own.ok()) << own;
  ASSERT_TRUE(app->Exec("COMMIT").ok());
  EXPECT_EQ(*pg_->Execute("SELECT a || b FROM public.t ORDER BY id"),
            "9tally-remote\n1app-write");
}

// A lock held only briefly: the apply tries the row again within the call
// and applies it once the application lets it go.
TEST_F(PgBackendTest, ARowLockedBrieflyIsAppliedByALaterTry) {
  std::vector<TestRow> rows = {Put(5, 1, "tally-old", 100)};
  std::vector<RowOutcome> out;
  ASSERT_TRUE(Apply(rows, &out).ok());
  auto app = Connect();
  ASSERT_TRUE(app->Exec("BEGIN").ok());
  ASSERT_TRUE(app->Exec("SELECT * FROM public.t WHERE id = 5 FOR UPDATE").ok());
  std::thread release([&] {
    absl::SleepFor(absl::Milliseconds(150));
    (void)app->Exec("ROLLBACK");
  });
  std::vector<TestRow> next = {Put(5, 2, "tally-remote", 200)};
  Over(next[0], out[0].payload);
  std::vector<RowOutcome> out2;
  absl::Status applied = Apply(next, &out2);
  release.join();
  ASSERT_TRUE(applied.ok()) << applied;
  EXPECT_TRUE(out2[0].applied);
  EXPECT_EQ(TokenOfRow(5), out2[0].payload);
  EXPECT_EQ(*pg_->Execute("SELECT b FROM public.t"), "tally-remote");
}

// An insert whose key an application's open transaction inserted waits,
// but only for the apply's lock_timeout: the statement is rolled back, its
// rows tried again, and left as not applied; nothing fails.
TEST_F(PgBackendTest, AnInsertWaitingForAnApplicationsInsertGivesUp) {
  auto app = Connect();
  ASSERT_TRUE(app->Exec("BEGIN").ok());
  ASSERT_TRUE(
      app->Exec("INSERT INTO public.t (id, b) VALUES (7, 'app-insert')").ok());
  std::vector<TestRow> rows = {Put(7, 1, "tally", 100),
                               Put(8, 1, "tally", 100)};
  std::vector<RowOutcome> out;
  const absl::Time start = absl::Now();
  ASSERT_TRUE(Apply(rows, &out).ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_FALSE(out[0].applied);
  EXPECT_TRUE(out[0].rejected.ok()) << out[0].rejected;
  EXPECT_TRUE(out[1].applied);
  ASSERT_TRUE(app->Exec("COMMIT").ok());
  EXPECT_EQ(*pg_->Execute("SELECT b FROM public.t ORDER BY id"),
            "app-insert\ntally");
}

// Rows the database refuses are isolated: each gets its reason, the others
// are applied (in the same call, the same transaction).
TEST_F(PgBackendTest, RowsTheDatabaseRefusesAreIsolatedAndTheRestApplied) {
  ASSERT_TRUE(
      pg_->Execute("ALTER TABLE public.t ADD CONSTRAINT small CHECK (a < 100)")
          .ok());
  std::vector<TestRow> rows;
  for (int i = 0; i < 40; ++i) {
    rows.push_back(Put(i, i % 13 == 5 ? 500 + i : i, "v", 100));
  }
  std::vector<RowOutcome> out;
  ASSERT_TRUE(Apply(rows, &out).ok());
  int applied = 0;
  for (int i = 0; i < 40; ++i) {
    if (i % 13 == 5) {
      EXPECT_FALSE(out[i].applied) << i;
      EXPECT_FALSE(out[i].rejected.ok()) << i;
      EXPECT_NE(out[i].rejected.message().find("public.t"), std::string::npos)
          << out[i].rejected;
      EXPECT_NE(out[i].rejected.message().find("small"), std::string::npos)
          << out[i].rejected;
    } else {
      EXPECT_TRUE(out[i].applied) << i << " " << out[i].rejected;
      EXPECT_TRUE(out[i].rejected.ok());
      ++applied;
    }
  }
  EXPECT_EQ(*pg_->Execute("SELECT count(*) FROM public.t"),
            std::to_string(applied));
  // The same tokens as any apply's: the rows applied are committed.
  EXPECT_EQ(TokenOfRow(0), out[0].payload);
}

// A table gone from the database refuses its rows; the rows of the other
// tables of the call are applied.
TEST_F(PgBackendTest, ATableThatIsGoneRefusesItsRowsAlone) {
  ASSERT_TRUE(pg_->Execute("CREATE TABLE public.u (id bigint PRIMARY KEY, "
                           "a int, b text, by bytea, j jsonb, n numeric, "
                           "ts timestamptz)")
                  .ok());
  backend_.reset();
  PgBackendOptions options;
  options.conninfo = pg_->Uri();
  options.tables = {"public.t", "public.u"};
  options.origin_name = "tally_test";
  auto b = PgBackend::Open(options);
  ASSERT_TRUE(b.ok()) << b.status();
  backend_ = std::move(*b);
  ASSERT_TRUE(pg_->Execute("DROP TABLE public.u").ok());
  std::vector<TestRow> rows = {Put(1, 1, "t", 100), Put(2, 2, "u", 100),
                               Put(3, 3, "u", 100)};
  rows[1].keyspace = rows[2].keyspace = "public.u";
  std::vector<RowOutcome> out;
  ASSERT_TRUE(Apply(rows, &out).ok());
  EXPECT_TRUE(out[0].applied);
  for (int i : {1, 2}) {
    EXPECT_FALSE(out[i].applied);
    EXPECT_EQ(out[i].rejected.code(), absl::StatusCode::kNotFound)
        << out[i].rejected;
    EXPECT_NE(out[i].rejected.message().find("public.u"), std::string::npos)
        << out[i].rejected;
  }
  EXPECT_EQ(*pg_->Execute("SELECT count(*) FROM public.t"), "1");
}

// The apply's session: triggers do not fire on applied rows (nor do the
// foreign keys' checks), as under PostgreSQL's logical replication.
TEST_F(PgBackendTest, TriggersAndForeignKeysDoNotFireOnAppliedRows) {
  ASSERT_TRUE(pg_->Execute(R"sql(
      CREATE TABLE public.parent (id bigint PRIMARY KEY);
      ALTER TABLE public.t ADD CONSTRAINT fk FOREIGN KEY (a)
        REFERENCES public.parent (id);
      CREATE FUNCTION public.stamp() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN NEW.b := 'by trigger'; RETURN NEW; END $$;
      CREATE TRIGGER stamp BEFORE INSERT OR UPDATE ON public.t
        FOR EACH ROW EXECUTE FUNCTION public.stamp();)sql")
                  .ok());
  std::vector<TestRow> rows = {Put(1, 42, "from peer", 100)};
  std::vector<RowOutcome> out;
  ASSERT_TRUE(Apply(rows, &out).ok());
  EXPECT_TRUE(out[0].applied) << out[0].rejected;
  EXPECT_EQ(*pg_->Execute("SELECT a || b FROM public.t"), "42from peer");
}
TEST_F(PgBackendTest, AnInsertLosesToAnApplicationsInsertOfTheSameKey) {
  ASSERT_TRUE(
      pg_->Execute("INSERT INTO public.t (id, b) VALUES (7, 'app-insert')")
          .ok());
  std::vector<TestRow> rows = {Put(7, 1, "tally", 100),
                               Put(8, 1, "tally", 100)};
  std::vector<RowOutcome> out;
  ASSERT_TRUE(Apply(rows, &out).ok());
  EXPECT_FALSE(out[0].applied);
  EXPECT_TRUE(out[1].applied);
  EXPECT_EQ(*pg_->Execute("SELECT b FROM public.t ORDER BY id"),
            "app-insert\ntally");
  // A tombstone for a key the index says is absent: applied only while the
  // table has no row either.
  std::vector<TestRow> dels = {Put(7, 0, "", 200), Put(9, 0, "", 200)};
  for (TestRow& r : dels) {
    r.kind = RowChange::Kind::kDelete;
    r.value.clear();
  }
  std::vector<RowOutcome> out2;
  ASSERT_TRUE(Apply(dels, &out2).ok());
  EXPECT_FALSE(out2[0].applied);
  EXPECT_TRUE(out2[1].applied);
  EXPECT_EQ(*pg_->Execute("SELECT count(*) FROM public.t"), "2");
}

TEST_F(PgBackendTest, TypesAndNullsRoundTripExactly) {
  // Values made by the server itself, read back as canonical bytes.
  ASSERT_TRUE(pg_->Execute(R"sql(
      CREATE TABLE public.src (LIKE public.t INCLUDING ALL);
      INSERT INTO public.src VALUES
        (1, NULL, NULL, NULL, NULL, NULL, NULL),
        (2, -5, '', 123456789.000000001, '2024-01-02 03:04:05.123456+00',
         '\x00ff00'::bytea, '{"a": [1, 2.50, null], "b": "é"}'),
        (3, 2147483647, repeat('x', 100000), 'NaN', 'infinity',
         decode(repeat('ab', 5000), 'hex'), '[]');)sql")
                  .ok());
  auto c = Connect();
  auto src = TableSchema::Read(*c, "public.src");
  ASSERT_TRUE(src.ok()) << src.status();
  std::vector<TestRow> rows;
  const RowCodec codec = src->codec();
  CopyBinaryReader reader([&](absl::Span<const Field> fields) {
    TestRow r;
    r.version = tree::Version{tree::HlcTimestamp::FromParts(5, 0), "peer"};
    absl::Status s = codec.Encode(fields, &r.key, &r.value);
    rows.push_back(std::move(r));
    return s;
  });
  ASSERT_TRUE(
      c->CopyOut(absl::StrCat("COPY (SELECT ", src->select_list(),
                              " FROM public.src ORDER BY id) TO "
                              "STDOUT (FORMAT binary)"),
                 [&](absl::string_view chunk) { return reader.Feed(chunk); })
          .ok());
  ASSERT_TRUE(reader.Finish().ok());
  ASSERT_EQ(rows.size(), 3u);
  std::vector<RowOutcome> out;
  ASSERT_TRUE(Apply(rows, &out).ok());
  std::vector<std::pair<std::string, std::string>> want;
  for (const TestRow& r : rows) want.emplace_back(r.key, r.value);
  EXPECT_EQ(TableRows(), want);
  EXPECT_EQ(*pg_->Execute("SELECT count(*) FROM public.t t JOIN public.src s "
                          "ON t.id = s.id AND t IS NOT DISTINCT FROM s"),
            "3");
}

TEST_F(PgBackendTest, TenThousandRowsInOneBatch) {
  std::vector<TestRow> rows;
  for (int i = 0; i < 10000; ++i) {
    rows.push_back(Put(i, i, absl::StrCat("row ", i), 100));
  }
  std::vector<RowOutcome> out;
  absl::Time start = absl::Now();
  ASSERT_TRUE(Apply(rows, &out).ok());
  const absl::Duration inserts = absl::Now() - start;
  for (const RowOutcome& o : out) ASSERT_TRUE(o.applied);
  // Then update them all under the CAS.
  std::vector<TestRow> next;
  for (int i = 0; i < 10000; ++i) {
    next.push_back(Put(i, -i, "updated", 200));
    Over(next.back(), out[i].payload);
  }
  std::vector<RowOutcome> out2;
  start = absl::Now();
  ASSERT_TRUE(Apply(next, &out2).ok());
  const absl::Duration updates = absl::Now() - start;
  size_t applied = 0;
  for (const RowOutcome& o : out2) applied += o.applied;
  EXPECT_EQ(applied, 10000u);
  EXPECT_EQ(*pg_->Execute("SELECT count(*), sum(a) FROM public.t "
                          "WHERE b = 'updated'"),
            "10000|-49995000");
  std::cout << "10,000-row apply: inserts " << inserts << " ("
            << 10000 / absl::ToDoubleSeconds(inserts)
            << " rows/s), CAS updates " << updates << " ("
            << 10000 / absl::ToDoubleSeconds(updates) << " rows/s)\n";
}

TEST_F(PgBackendTest, EachApplyEmitsItsRowsForTheCapture) {
  ASSERT_TRUE(pg_->Execute("CREATE PUBLICATION p FOR TABLE public.t").ok());
  // (A slot cannot be created in a transaction that has written.)
  auto slot = pg_->Execute(
      "SELECT pg_create_logical_replication_slot('s', 'pgoutput')");
  ASSERT_TRUE(slot.ok()) << slot.status();
  std::vector<TestRow> rows = {Put(1, 1, "a", 100), Put(2, 2, "b", 100)};
  rows[1].version.origin = "other-peer";
  std::vector<RowOutcome> out;
  ASSERT_TRUE(Apply(rows, &out).ok());
  // pgoutput's message: 'M', flags, LSN, prefix\0, int32 length, content.
  auto c = Connect();
  auto r = c->Exec(
      "SELECT data FROM pg_logical_slot_peek_binary_changes('s', NULL, NULL, "
      "'proto_version', '1', 'publication_names', 'p', 'messages', 'true')");
  ASSERT_TRUE(r.ok()) << r.status();
  // Text results: bytea in hex ("\x4d...").
  std::string content;
  for (int i = 0; i < r->rows(); ++i) {
    std::string hex(r->Value(i, 0).substr(2));
    std::string bytes = absl::HexStringToBytes(hex);
    if (bytes.empty() || bytes[0] != 'M') continue;
    const std::string prefix =
        absl::StrCat(kApplyMessagePrefix, std::string(1, '\0'));
    const size_t at = bytes.find(prefix);
    ASSERT_NE(at, std::string::npos);
    const size_t len_at = at + prefix.size();
    const uint32_t len = internal::LoadBigEndian32(bytes.data() + len_at);
    content = bytes.substr(len_at + 4, len);
  }
  ASSERT_FALSE(content.empty()) << "no 'tally.apply' message decoded";
  auto m = DecodeApplyMessage(content);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->token.Encode(), out[0].payload);
  EXPECT_EQ(static_cast<int64_t>(m->apply_sequence), backend_->last_stamp());
  ASSERT_EQ(m->rows.size(), 2u);
  EXPECT_EQ(m->rows[0].key, rows[0].key);
  EXPECT_EQ(m->rows[1].version, rows[1].version);
  EXPECT_FALSE(m->rows[0].deleted);
  // The rows carry the apply origin (what the capture filters on).
  EXPECT_EQ(
      *pg_->Execute("SELECT count(*) FROM (SELECT "
                    "pg_xact_commit_timestamp_origin(xmin) x FROM "
                    "public.t) s, pg_replication_origin o WHERE "
                    "(x).roident = o.roident AND o.roname = 'tally_test'"),
      "2");
}

TEST_F(PgBackendTest, StampsKeepGrowingAcrossARestart) {
  std::vector<TestRow> rows = {Put(1, 1, "a", 100)};
  std::vector<RowOutcome> out;
  ASSERT_TRUE(Apply(rows, &out).ok());
  const int64_t before = backend_->last_stamp();
  // The recorded progress is the last stamp.
  EXPECT_EQ(*pg_->Execute("SELECT pg_replication_origin_progress("
                          "'tally_test', true)"),
            FormatLsn(static_cast<Lsn>(before)));
  OpenBackend();
  EXPECT_EQ(backend_->last_stamp(), before);
  std::vector<TestRow> next = {Put(2, 1, "b", 100)};
  ASSERT_TRUE(Apply(next, &out).ok());
  EXPECT_GT(backend_->last_stamp(), before);
}

TEST_F(PgBackendTest, AReloadedSchemaIsUsedByLaterApplies) {
  const std::string before = *backend_->SchemaFingerprint("public.t");
  ASSERT_TRUE(pg_->Execute("ALTER TABLE public.t ADD COLUMN aa int").ok());
  // Cached until reloaded.
  EXPECT_EQ(*backend_->SchemaFingerprint("public.t"), before);
  ASSERT_TRUE(backend_->ReloadSchema("public.t").ok());
  EXPECT_NE(*backend_->SchemaFingerprint("public.t"), before);
  EXPECT_EQ(backend_->ReloadSchema("public.other").code(),
            absl::StatusCode::kNotFound);
  // The old encoding no longer fits; the new one (aa sorts after a) does.
  std::vector<TestRow> rows = {Put(1, 1, "old", 100)};
  std::vector<RowOutcome> out;
  ASSERT_TRUE(Apply(rows, &out).ok());
  EXPECT_FALSE(out[0].applied);
  EXPECT_EQ(out[0].rejected.code(), absl::StatusCode::kInvalidArgument);
  const std::string a = Int4(1), aa = Int4(2);
  rows[0].value.clear();
  AppendFields({Field::Of(a), Field::Of(aa), Field::Of("new"), Field::Null(),
                Field::Null(), Field::Null(), Field::Null()},
               &rows[0].value);
  ASSERT_TRUE(Apply(rows, &out).ok());
  EXPECT_TRUE(out[0].applied);
  EXPECT_EQ(*pg_->Execute("SELECT a || '/' || aa || '/' || b FROM public.t"),
            "1/2/new");
}

TEST_F(PgBackendTest, TheOriginServesOneBackendAtATime) {
  PgBackendOptions options;
  options.conninfo = pg_->Uri();
  options.tables = {"public.t"};
  options.origin_name = "tally_test";
  options.origin_busy_wait = absl::Milliseconds(300);
  absl::StatusOr<std::unique_ptr<PgBackend>> second = PgBackend::Open(options);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition)
      << second.status();
  // A keyspace the node keeps no table for.
  std::vector<TestRow> rows = {Put(1, 1, "a", 100)};
  rows[0].keyspace = "public.other";
  std::vector<RowOutcome> out;
  ASSERT_TRUE(Apply(rows, &out).ok());
  EXPECT_FALSE(out[0].applied);
  EXPECT_EQ(out[0].rejected.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(*backend_->SchemaFingerprint("public.other"),
            "postgresql/1:not-kept");
  EXPECT_EQ(*backend_->SchemaFingerprint("public.t"),
            backend_->schema("public.t")->fingerprint());
  // A value of another shape is refused alone; the other row is applied.
  rows[0].keyspace = "public.t";
  rows[0].value = "not a row";
  rows.push_back(Put(2, 2, "b", 100));
  ASSERT_TRUE(Apply(rows, &out).ok());
  EXPECT_FALSE(out[0].applied);
  EXPECT_EQ(out[0].rejected.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(out[1].applied);
  EXPECT_EQ(*pg_->Execute("SELECT count(*) FROM public.t"), "1");
}

}  // namespace
}  // namespace pg
}  // namespace tally

namespace tally {
namespace pg {
namespace {

// A composite key with a collated text column, and a table of key columns
// only: staging, the key match and reads by key arrays all take the key
// column by column.
TEST(PgBackendKeys, CompositeAndKeyOnlyTables) {
  TALLY_SKIP_UNLESS_POSTGRES();
  auto pg = PgCluster::Start();
  ASSERT_TRUE(pg.ok()) << pg.status();
  ASSERT_TRUE((*pg)
                  ->Execute(R"sql(
      CREATE TABLE public.c (region text COLLATE "C", id int, v text,
                             PRIMARY KEY (region, id));
      CREATE TABLE public.k (id bigint PRIMARY KEY);)sql")
                  .ok());
  PgBackendOptions options;
  options.conninfo = (*pg)->Uri();
  options.tables = {"public.c", "public.k"};
  options.origin_name = "tally_keys";
  auto backend = PgBackend::Open(options);
  ASSERT_TRUE(backend.ok()) << backend.status();

  std::string id1, id2, id9;
  internal::PutBigEndian32(&id1, 1);
  internal::PutBigEndian32(&id2, 2);
  internal::PutBigEndian64(&id9, 9);
  auto key = [](std::initializer_list<Field> fields) {
    std::string k;
    AppendFields(std::vector<Field>(fields), &k);
    return k;
  };
  auto value = [](absl::string_view v) {
    std::string out;
    AppendFields({Field::Of(v)}, &out);
    return out;
  };
  // The same id in two regions, and a key-only row.
  const std::vector<std::string> keys = {key({Field::Of("eu"), Field::Of(id1)}),
                                         key({Field::Of("us"), Field::Of(id1)}),
                                         key({Field::Of("eu"), Field::Of(id2)}),
                                         key({Field::Of(id9)})};
  const std::vector<std::string> values = {value("eu-1"), value("us-1"),
                                           value("eu-2"), ""};
  const std::vector<std::string> keyspaces = {"public.c", "public.c",
                                              "public.c", "public.k"};
  tree::Version v{tree::HlcTimestamp::FromParts(100, 0), "peer"};
  tree::Version none;
  std::vector<RowChange> changes;
  for (size_t i = 0; i < keys.size(); ++i) {
    RowChange c;
    c.row = RowLocation{keyspaces[i], tree::TokenOf(keys[i]), keys[i]};
    c.value = values[i];
    c.version = &v;
    changes.push_back(c);
  }
  std::vector<RowOutcome> out;
  ASSERT_TRUE((*backend)->ApplyRows(changes, &out).ok());
  for (const RowOutcome& o : out) EXPECT_TRUE(o.applied);
  EXPECT_EQ(*(*pg)->Execute("SELECT region || id || v FROM public.c ORDER BY "
                            "region, id"),
            "eu1eu-1\neu2eu-2\nus1us-1");

  // Update one of the two id-1 rows and touch the key-only row.
  const std::string new_value = value("us-1b");
  std::vector<RowChange> next = {changes[1], changes[3]};
  next[0].value = new_value;
  for (size_t i = 0; i < next.size(); ++i) {
    next[i].expected.exists = true;
    next[i].expected.version = &none;
    next[i].expected.payload = out[i == 0 ? 1 : 3].payload;
  }
  std::vector<RowOutcome> out2;
  ASSERT_TRUE((*backend)->ApplyRows(next, &out2).ok());
  EXPECT_TRUE(out2[0].applied && out2[1].applied);
  EXPECT_EQ(*(*pg)->Execute("SELECT string_agg(v, ',' ORDER BY region, id) "
                            "FROM public.c"),
            "eu-1,eu-2,us-1b");

  // Reads by key, both tables in one call.
  std::vector<RowLocation> locs;
  for (const RowChange& c : changes) locs.push_back(c.row);
  std::vector<absl::string_view> payloads = {out[0].payload, out2[0].payload,
                                             out[2].payload, out2[1].payload};
  auto read = (*backend)->ReadValues(locs, payloads);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 4u);
  for (const auto& r : *read) ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*(*read)[0], values[0]);
  EXPECT_EQ(*(*read)[1], new_value);
  EXPECT_EQ(*(*read)[2], values[2]);
  EXPECT_EQ(*(*read)[3], "");
}

// Identity columns GENERATED ALWAYS take the value of the row's source;
// generated stored columns are no part of the row and each database
// computes its own.
TEST(PgBackendColumns, IdentityAlwaysAndGeneratedColumnsApply) {
  TALLY_SKIP_UNLESS_POSTGRES();
  auto pg = PgCluster::Start();
  ASSERT_TRUE(pg.ok()) << pg.status();
  ASSERT_TRUE((*pg)
                  ->Execute("CREATE TABLE public.g (id bigint GENERATED "
                            "ALWAYS AS IDENTITY PRIMARY KEY, n bigint "
                            "GENERATED ALWAYS AS IDENTITY, v int, d int "
                            "GENERATED ALWAYS AS (v * 2) STORED)")
                  .ok());
  PgBackendOptions options;
  options.conninfo = (*pg)->Uri();
  options.tables = {"public.g"};
  options.origin_name = "tally_columns";
  auto backend = PgBackend::Open(options);
  ASSERT_TRUE(backend.ok()) << backend.status();
  ASSERT_EQ((*backend)->schema("public.g")->columns().size(), 3u);
  std::string id, n, v, v2;
  internal::PutBigEndian64(&id, 500);
  internal::PutBigEndian64(&n, 77);
  internal::PutBigEndian32(&v, 3);
  internal::PutBigEndian32(&v2, 4);
  std::string key, value, value2;
  AppendFields({Field::Of(id)}, &key);
  AppendFields({Field::Of(n), Field::Of(v)}, &value);
  AppendFields({Field::Of(n), Field::Of(v2)}, &value2);
  tree::Version version{tree::HlcTimestamp::FromParts(100, 0), "peer"};
  RowChange c;
  c.row = RowLocation{"public.g", tree::TokenOf(key), key};
  c.value = value;
  c.version = &version;
  std::vector<RowOutcome> out;
  ASSERT_TRUE((*backend)->ApplyRows({c}, &out).ok());
  ASSERT_TRUE(out[0].applied) << out[0].rejected;
  EXPECT_EQ(*(*pg)->Execute("SELECT id || '/' || n || '/' || v || '/' || d "
                            "FROM public.g"),
            "500/77/3/6");
  // An update: v changes, d follows; the identity keeps its value.
  tree::Version none;
  c.value = value2;
  c.expected.exists = true;
  c.expected.version = &none;
  c.expected.payload = out[0].payload;
  std::vector<RowOutcome> out2;
  ASSERT_TRUE((*backend)->ApplyRows({c}, &out2).ok());
  ASSERT_TRUE(out2[0].applied) << out2[0].rejected;
  EXPECT_EQ(*(*pg)->Execute("SELECT id || '/' || n || '/' || v || '/' || d "
                            "FROM public.g"),
            "500/77/4/8");
}

// The server ends the apply connection: that apply fails, with nothing
// applied, and the next one reconnects (setting the origin up again).
TEST(PgBackendFaults, ALostApplyConnectionIsReopened) {
  TALLY_SKIP_UNLESS_POSTGRES();
  auto pg = PgCluster::Start();
  ASSERT_TRUE(pg.ok()) << pg.status();
  ASSERT_TRUE(
      (*pg)->Execute("CREATE TABLE public.k (id bigint PRIMARY KEY)").ok());
  PgBackendOptions options;
  options.conninfo = (*pg)->Uri();
  options.tables = {"public.k"};
  options.origin_name = "tally_faults";
  auto backend = PgBackend::Open(options);
  ASSERT_TRUE(backend.ok()) << backend.status();
  ASSERT_TRUE((*pg)
                  ->Execute("SELECT pg_terminate_backend(pid) FROM "
                            "pg_stat_activity WHERE application_name = "
                            "'tally apply'")
                  .ok());
  std::string id;
  internal::PutBigEndian64(&id, 1);
  std::string k;
  AppendFields({Field::Of(id)}, &k);
  tree::Version v{tree::HlcTimestamp::FromParts(100, 0), "peer"};
  RowChange c;
  c.row = RowLocation{"public.k", tree::TokenOf(k), k};
  c.version = &v;
  std::vector<RowOutcome> out;
  absl::Status first = (*backend)->ApplyRows({c}, &out);
  EXPECT_EQ(first.code(), absl::StatusCode::kUnavailable) << first;
  EXPECT_FALSE(out[0].applied);
  EXPECT_EQ(*(*pg)->Execute("SELECT count(*) FROM public.k"), "0");
  absl::Status second = (*backend)->ApplyRows({c}, &out);
  ASSERT_TRUE(second.ok()) << second;
  EXPECT_TRUE(out[0].applied);
  EXPECT_EQ(*(*pg)->Execute("SELECT count(*) FROM public.k"), "1");
}

}  // namespace
}  // namespace pg
}  // namespace tally
