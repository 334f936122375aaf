#include "pg/sidecar/lost_deletes.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "pg/schema/row_codec.h"
#include "pg/wire/connection.h"
#include "support/pg_cluster.h"
#include "support/pg_test_macros.h"

namespace tally {
namespace pg {
namespace {

using ::tally::testing::PgCluster;

// The canonical key of an int4 id.
std::string IntKey(int32_t id) {
  const uint32_t v = static_cast<uint32_t>(id);
  const char bytes[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                         static_cast<char>(v >> 8), static_cast<char>(v)};
  std::string key;
  AppendFields({Field::Of(absl::string_view(bytes, 4))}, &key);
  return key;
}

class LocalDeletesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TALLY_SKIP_UNLESS_POSTGRES();
    absl::StatusOr<std::unique_ptr<PgCluster>> pg = PgCluster::Start();
    ASSERT_TRUE(pg.ok()) << pg.status();
    pg_ = *std::move(pg);
    absl::StatusOr<std::unique_ptr<Connection>> conn =
        Connection::Open(pg_->Uri(), {});
    ASSERT_TRUE(conn.ok()) << conn.status();
    conn_ = *std::move(conn);
    names_.slot = "tally_n_slot";
    names_.publication = "tally_n_pub";
    names_.origin = "tally_n_origin";
    for (const char* sql :
         {"CREATE TABLE t (id int PRIMARY KEY, b text)",
          "CREATE TABLE u (id int PRIMARY KEY, b text)",
          "CREATE TABLE other (id int PRIMARY KEY)",
          "INSERT INTO t SELECT g, 'seed' FROM generate_series(1, 20) g",
          "INSERT INTO u SELECT g, 'seed' FROM generate_series(1, 5) g",
          "INSERT INTO other SELECT g FROM generate_series(1, 5) g",
          "CREATE PUBLICATION tally_n_pub FOR TABLE t, u",
          "SELECT pg_create_logical_replication_slot('tally_n_slot', "
          "'pgoutput')",
          "SELECT pg_replication_origin_create('tally_n_origin')"}) {
      ASSERT_TRUE(conn_->Exec(sql).ok()) << sql;
    }
    for (const char* table : {"public.t", "public.u"}) {
      absl::StatusOr<TableSchema> s = TableSchema::Read(*conn_, table);
      ASSERT_TRUE(s.ok()) << s.status();
      tables_.push_back(*std::move(s));
    }
  }

  void Exec(const std::string& sql) {
    absl::StatusOr<Result> r = conn_->Exec(sql);
    ASSERT_TRUE(r.ok()) << sql << ": " << r.status();
  }

  std::unique_ptr<PgCluster> pg_;
  std::unique_ptr<Connection> conn_;
  ReplicationNames names_;
  std::vector<TableSchema> tables_;
};

TEST_F(LocalDeletesTest, FindsTheKeysWhoseLastChangeIsALocalDelete) {
  ASSERT_NO_FATAL_FAILURE(Exec("DELETE FROM t WHERE id IN (1, 2)"));
  // A key update deletes the old key.
  ASSERT_NO_FATAL_FAILURE(Exec("UPDATE t SET id = 103 WHERE id = 3"));
  // Deleted, then written again: in the table, not a delete.
  ASSERT_NO_FATAL_FAILURE(Exec("DELETE FROM t WHERE id = 4"));
  ASSERT_NO_FATAL_FAILURE(Exec("INSERT INTO t VALUES (4, 'again')"));
  // Deleted by tally's own apply (its origin): a peer's delete.
  ASSERT_NO_FATAL_FAILURE(
      Exec("SELECT pg_replication_origin_session_setup('tally_n_origin')"));
  ASSERT_NO_FATAL_FAILURE(Exec("DELETE FROM t WHERE id = 5"));
  ASSERT_NO_FATAL_FAILURE(Exec("SELECT pg_replication_origin_session_reset()"));
  // Tables not kept, and a TRUNCATE of a kept one.
  ASSERT_NO_FATAL_FAILURE(Exec("DELETE FROM other WHERE id = 1"));
  ASSERT_NO_FATAL_FAILURE(Exec("TRUNCATE u"));
  ASSERT_NO_FATAL_FAILURE(Exec("DELETE FROM t WHERE id = 6"));

  absl::StatusOr<LocalDeletes> d = ReadLocalDeletes(*conn_, names_, tables_);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->slot_found);
  ASSERT_EQ(d->keys.size(), 1u);
  const auto& t = d->keys.at("public.t");
  EXPECT_EQ(t.size(), 4u);
  for (int id : {1, 2, 3, 6}) {
    EXPECT_TRUE(t.contains(IntKey(id))) << id;
  }
  for (int id : {4, 5, 103}) {
    EXPECT_FALSE(t.contains(IntKey(id))) << id;
  }
  // Later deletes carry later commit times.
  EXPECT_LT(t.at(IntKey(1)), t.at(IntKey(6)));
  EXPECT_EQ(t.at(IntKey(1)), t.at(IntKey(2)));  // one transaction
  EXPECT_TRUE(d->truncated.contains("public.u"));
  EXPECT_EQ(d->own_transactions, 1u);

  // A peek consumes nothing: read again, the same.
  absl::StatusOr<LocalDeletes> again =
      ReadLocalDeletes(*conn_, names_, tables_);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->keys, d->keys);
}

TEST_F(LocalDeletesTest, WithoutTheSlotNothingIsKnown) {
  ASSERT_NO_FATAL_FAILURE(Exec("DELETE FROM t WHERE id = 1"));
  ASSERT_NO_FATAL_FAILURE(
      Exec("SELECT pg_drop_replication_slot('tally_n_slot')"));
  absl::StatusOr<LocalDeletes> d = ReadLocalDeletes(*conn_, names_, tables_);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(d->slot_found);
  EXPECT_TRUE(d->keys.empty());
}

TEST(LocalDeleteCollector, RefusesAKeyThatIsNotBinary) {
  TableColumn id, b;
  id.name = "id";
  id.type_oid = 23;
  id.type = "integer";
  b.name = "b";
  b.type_oid = 25;
  b.type = "text";
  absl::StatusOr<TableSchema> t =
      TableSchema::FromColumns("public.t", {id, b}, {"id"});
  ASSERT_TRUE(t.ok()) << t.status();
  LocalDeleteCollector c({*t}, "own");
  RelationMessage r;
  r.relid = 7;
  r.schema = "public";
  r.table = "t";
  r.columns = {RelationColumn{true, "id", 23, -1},
               RelationColumn{false, "b", 25, -1}};
  ASSERT_TRUE(c.Add(r).ok());
  ASSERT_TRUE(c.Add(BeginMessage{1, 2, 3}).ok());
  DeleteMessage del;
  del.relid = 7;
  del.old_tuple = {TupleColumn{TupleColumnKind::kText, "1"},
                   TupleColumn{TupleColumnKind::kNull, ""}};
  const absl::Status s = c.Add(del);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  // A tuple of the wrong width too.
  del.old_tuple.pop_back();
  EXPECT_TRUE(absl::IsDataLoss(c.Add(del)));
}

}  // namespace
}  // namespace pg
}  // namespace tally
