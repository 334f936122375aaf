#include "pg/table_diff/table_diff.h"

#include <algorithm>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pg/schema/row_codec.h"
#include "pg/table_diff/table_scan.h"
#include "pg/wire/connection.h"
#include "support/pg_cluster.h"
#include "support/pg_test_macros.h"
#include "tree/memory_tree_view.h"

namespace tally {
namespace pg {
namespace {

using ::tally::testing::PgCluster;
using ::tally::testing::PgClusterOptions;
using ::testing::HasSubstr;

std::unique_ptr<PgCluster> StartCluster(PgClusterOptions options = {}) {
  absl::StatusOr<std::unique_ptr<PgCluster>> pg = PgCluster::Start(options);
  EXPECT_TRUE(pg.ok()) << pg.status();
  return pg.ok() ? *std::move(pg) : nullptr;
}

std::unique_ptr<Connection> Connect(PgCluster& pg) {
  absl::StatusOr<std::unique_ptr<Connection>> c =
      Connection::Open(pg.Uri(), ConnectOptions{});
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

void Sql(PgCluster& pg, const std::string& sql) {
  absl::StatusOr<std::string> r = pg.Execute(sql);
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << sql;
}

// The benchmark's table, n rows: every column type whose text form
// depends on session settings.
constexpr char kCreate[] =
    "CREATE TABLE t (id bigint PRIMARY KEY, a int, b text, c timestamptz, "
    "d float8)";
std::string Fill(int n) {
  return absl::StrCat(
      "INSERT INTO t SELECT g, g % 1000, md5(g::text), "
      "timestamptz '2026-01-01 00:00:00+00' + g * interval '1 second', "
      "g / 7.0 FROM generate_series(1, ",
      n, ") g");
}

// The id of a canonical one-column bigint key.
int64_t IdOf(const std::string& key) {
  EXPECT_EQ(key.size(), 12u);
  int64_t id = 0;
  for (size_t i = 4; i < 12; ++i) {
    id = (id << 8) | static_cast<uint8_t>(key[i]);
  }
  return id;
}

TEST(BootstrapRowDigester, DigestsAsRowDigestOverTheCodecsBytes) {
  constexpr uint32_t kSeed = 20261201;
  std::mt19937 rng(kSeed);
  SCOPED_TRACE(absl::StrCat("seed ", kSeed));
  for (size_t key_columns : {1, 2}) {
    for (size_t value_columns : {0, 1, 3}) {
      const RowCodec codec(key_columns, value_columns);
      BootstrapRowDigester digester("public.t", codec);
      for (int row = 0; row < 200; ++row) {
        std::vector<std::string> bytes(codec.columns());
        std::vector<Field> fields(codec.columns());
        for (size_t i = 0; i < codec.columns(); ++i) {
          bytes[i] = std::string(rng() % 40, static_cast<char>(rng()));
          // NULL and empty are different values, in keys too.
          fields[i] = rng() % 5 == 0 ? Field::Null() : Field::Of(bytes[i]);
        }
        std::string key, value;
        ASSERT_TRUE(codec.Encode(fields, &key, &value).ok());
        ASSERT_TRUE(digester.Digest(fields).ok());
        EXPECT_EQ(digester.key(), key);
        EXPECT_EQ(digester.token(), tree::TokenOf(key));
        EXPECT_EQ(
            digester.digest(),
            tree::RowDigest("public.t", key, BootstrapVersion(), false, value));
      }
      EXPECT_FALSE(digester.Digest({}).ok());
    }
  }
}

TEST(TableDiff, EqualTablesAreEqualAndTheRootIsTheTreesRoot) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pa = StartCluster();
  std::unique_ptr<PgCluster> pb = StartCluster();
  ASSERT_TRUE(pa && pb);
  Sql(*pa, kCreate);
  Sql(*pa, Fill(2000));
  // Other physical column order and insertion order on b: the canonical
  // order and the digest ignore both.
  Sql(*pb,
      "CREATE TABLE t (d float8, c timestamptz, b text, id bigint PRIMARY "
      "KEY, a int)");
  Sql(*pb,
      "INSERT INTO t (id, a, b, c, d) SELECT g, g % 1000, md5(g::text), "
      "timestamptz '2026-01-01 00:00:00+00' + g * interval '1 second', "
      "g / 7.0 FROM generate_series(2000, 1, -1) g");
  auto a = Connect(*pa);
  auto b = Connect(*pb);
  ASSERT_TRUE(a && b);
  absl::StatusOr<TableDiff> d = DiffTables(*a, *b, "public.t", "public.t");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->keyspace, "public.t");
  EXPECT_EQ(d->rows_a, 2000u);
  EXPECT_EQ(d->rows_b, 2000u);
  EXPECT_EQ(d->root_a, d->root_b);
  EXPECT_FALSE(d->root_a.IsZero());
  EXPECT_TRUE(d->differences.empty());

  // The root is what a tree over the same rows with the bootstrap version
  // has: the root of a freshly built sidecar's keyspace.
  absl::StatusOr<TableSchema> schema = TableSchema::Read(*a, "public.t");
  ASSERT_TRUE(schema.ok()) << schema.status();
  std::vector<std::string> keys;
  for (int id = 1; id <= 2000; ++id) {
    std::string key;
    std::string id_bytes(8, '\0');
    for (int i = 0; i < 8; ++i) {
      id_bytes[7 - i] = static_cast<char>((uint64_t(id) >> (8 * i)) & 0xff);
    }
    const Field field = Field::Of(id_bytes);
    ASSERT_TRUE(schema->codec().EncodeKey({&field, 1}, &key).ok());
    keys.push_back(key);
  }
  absl::StatusOr<std::vector<CanonicalRow>> rows =
      ReadRowsByKey(*a, *schema, keys);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 2000u);
  std::vector<tree::RowEntry> entries;
  for (const CanonicalRow& row : *rows) {
    tree::RowEntry e;
    e.token = tree::TokenOf(row.key);
    e.key = row.key;
    e.version = BootstrapVersion();
    e.digest =
        tree::RowDigest("public.t", row.key, e.version, false, row.value);
    entries.push_back(std::move(e));
  }
  absl::StatusOr<std::unique_ptr<tree::MemoryTreeView>> view =
      tree::MemoryTreeView::Create(tree::kDefaultDepth, std::move(entries));
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ((*view)->tree().root().digest, d->root_a);
}

TEST(TableDiff, ListsExactlyTheUpdatedDeletedAndInsertedKeys) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pa = StartCluster();
  std::unique_ptr<PgCluster> pb = StartCluster();
  ASSERT_TRUE(pa && pb);
  for (PgCluster* pg : {pa.get(), pb.get()}) {
    Sql(*pg, kCreate);
    Sql(*pg, Fill(10000));
  }
  // On b: 40 updates (ids 100, 300, ...), 30 deletes, 30 inserts.
  Sql(*pb,
      "UPDATE t SET a = -1 WHERE id IN (SELECT 100 + 200 * g FROM "
      "generate_series(0, 39) g)");
  Sql(*pb,
      "DELETE FROM t WHERE id IN (SELECT 9000 + 3 * g FROM "
      "generate_series(0, 29) g)");
  Sql(*pb,
      "INSERT INTO t SELECT g, 0, 'new', now(), 0 FROM "
      "generate_series(20001, 20030) g");
  // An update that changes nothing is no difference.
  Sql(*pb, "UPDATE t SET a = a WHERE id = 5");
  auto a = Connect(*pa);
  auto b = Connect(*pb);
  ASSERT_TRUE(a && b);
  absl::StatusOr<TableDiff> d = DiffTables(*a, *b, "public.t", "public.t");
  ASSERT_TRUE(d.ok()) << d.status();
  std::set<int64_t> updated, deleted, inserted;
  for (const RowDifference& r : d->differences) {
    const int64_t id = IdOf(r.key);
    if (r.in_a && r.in_b) updated.insert(id);
    if (r.in_a && !r.in_b) deleted.insert(id);
    if (!r.in_a && r.in_b) inserted.insert(id);
  }
  std::set<int64_t> want_updated, want_deleted, want_inserted;
  for (int g = 0; g < 40; ++g) want_updated.insert(100 + 200 * g);
  for (int g = 0; g < 30; ++g) want_deleted.insert(9000 + 3 * g);
  for (int g = 0; g < 30; ++g) want_inserted.insert(20001 + g);
  EXPECT_EQ(updated, want_updated);
  EXPECT_EQ(deleted, want_deleted);
  EXPECT_EQ(inserted, want_inserted);
  EXPECT_EQ(d->differences.size(), 100u);
  EXPECT_EQ(d->rows_b, 10000u);
  EXPECT_NE(d->root_a, d->root_b);

  // Keys print as PostgreSQL prints the key column.
  std::vector<std::string> keys = {d->differences[0].key};
  absl::StatusOr<std::vector<std::string>> texts =
      KeyTexts(*a, d->schema, keys);
  ASSERT_TRUE(texts.ok()) << texts.status();
  EXPECT_EQ((*texts)[0], absl::StrCat(IdOf(keys[0])));

  // Repair from a, then the same diff finds nothing.
  std::vector<std::string> all;
  for (const RowDifference& r : d->differences) all.push_back(r.key);
  absl::StatusOr<RepairCounts> counts =
      RepairTable(*a, d->schema, *b, d->schema_b, all);
  ASSERT_TRUE(counts.ok()) << counts.status();
  EXPECT_EQ(counts->upserted, 70u);  // 40 updated back, 30 re-inserted
  EXPECT_EQ(counts->deleted, 30u);
  absl::StatusOr<std::vector<std::string>> left =
      StillDifferent(*a, d->schema, *b, d->schema_b, all);
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_TRUE(left->empty());
  absl::StatusOr<TableDiff> again = DiffTables(*a, *b, "public.t", "public.t");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->differences.empty());
  EXPECT_EQ(again->root_a, again->root_b);
}

TEST(TableDiff, SessionSettingsOfTheServersDoNotMatter) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pa = StartCluster();
  PgClusterOptions other;
  other.settings = {"timezone=America/New_York", "datestyle='SQL, DMY'",
                    "extra_float_digits=0", "bytea_output=escape"};
  std::unique_ptr<PgCluster> pb = StartCluster(other);
  ASSERT_TRUE(pa && pb);
  for (PgCluster* pg : {pa.get(), pb.get()}) {
    Sql(*pg, kCreate);
    Sql(*pg, Fill(1000));
  }
  auto a = Connect(*pa);
  auto b = Connect(*pb);
  ASSERT_TRUE(a && b);
  absl::StatusOr<std::string> tz = pb->Execute("SHOW TimeZone");
  ASSERT_TRUE(tz.ok());
  EXPECT_EQ(*tz, "America/New_York");
  absl::StatusOr<TableDiff> d = DiffTables(*a, *b, "public.t", "public.t");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->differences.empty());
  EXPECT_EQ(d->root_a, d->root_b);
}

TEST(TableDiff, DifferentColumnTypesAreRefusedNamingTheColumn) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pa = StartCluster();
  std::unique_ptr<PgCluster> pb = StartCluster();
  ASSERT_TRUE(pa && pb);
  Sql(*pa, "CREATE TABLE t (id bigint PRIMARY KEY, a int4)");
  Sql(*pb, "CREATE TABLE t (id bigint PRIMARY KEY, a int8)");
  auto a = Connect(*pa);
  auto b = Connect(*pb);
  ASSERT_TRUE(a && b);
  absl::StatusOr<TableDiff> d = DiffTables(*a, *b, "public.t", "public.t");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(d.status().message(), HasSubstr("column a"));
  EXPECT_THAT(d.status().message(), HasSubstr("integer in a"));
  EXPECT_THAT(d.status().message(), HasSubstr("bigint in b"));
  // The connections are usable afterwards (no transaction left open).
  EXPECT_TRUE(a->Exec("BEGIN").ok());
  EXPECT_TRUE(a->Exec("COMMIT").ok());
}

TEST(TableDiff, AMissingTableIsNotFoundNamingTheSide) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pa = StartCluster();
  std::unique_ptr<PgCluster> pb = StartCluster();
  ASSERT_TRUE(pa && pb);
  Sql(*pa, "CREATE TABLE t (id bigint PRIMARY KEY)");
  auto a = Connect(*pa);
  auto b = Connect(*pb);
  ASSERT_TRUE(a && b);
  absl::StatusOr<TableDiff> d = DiffTables(*a, *b, "public.t", "public.t");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(d.status().message(), HasSubstr("b: "));
  EXPECT_THAT(d.status().message(), HasSubstr("public.t"));
}

TEST(TableDiff, CompositeKeysAndNullsAndKeyOnlyTables) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pa = StartCluster();
  std::unique_ptr<PgCluster> pb = StartCluster();
  ASSERT_TRUE(pa && pb);
  for (PgCluster* pg : {pa.get(), pb.get()}) {
    Sql(*pg,
        "CREATE TABLE m (region text, id int, v text, PRIMARY KEY (region, "
        "id)); INSERT INTO m SELECT 'eu', g, NULL FROM generate_series(1, "
        "50) g; CREATE TABLE k (id int PRIMARY KEY); INSERT INTO k SELECT "
        "generate_series(1, 50)");
  }
  Sql(*pb, "UPDATE m SET v = '' WHERE id = 7; DELETE FROM k WHERE id = 3");
  auto a = Connect(*pa);
  auto b = Connect(*pb);
  ASSERT_TRUE(a && b);
  absl::StatusOr<TableDiff> m = DiffTables(*a, *b, "public.m", "public.m");
  ASSERT_TRUE(m.ok()) << m.status();
  // NULL and '' are different values.
  ASSERT_EQ(m->differences.size(), 1u);
  std::vector<std::string> keys = {m->differences[0].key};
  absl::StatusOr<std::vector<std::string>> texts =
      KeyTexts(*a, m->schema, keys);
  ASSERT_TRUE(texts.ok()) << texts.status();
  EXPECT_EQ((*texts)[0], "(eu,7)");
  ASSERT_TRUE(RepairTable(*a, m->schema, *b, m->schema_b, keys).ok());
  absl::StatusOr<TableDiff> k = DiffTables(*a, *b, "public.k", "public.k");
  ASSERT_TRUE(k.ok()) << k.status();
  ASSERT_EQ(k->differences.size(), 1u);
  keys = {k->differences[0].key};
  absl::StatusOr<RepairCounts> counts =
      RepairTable(*a, k->schema, *b, k->schema_b, keys);
  ASSERT_TRUE(counts.ok()) << counts.status();
  EXPECT_EQ(counts->upserted, 1u);
  for (const char* table : {"public.m", "public.k"}) {
    absl::StatusOr<TableDiff> d = DiffTables(*a, *b, table, table);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_TRUE(d->differences.empty()) << table;
  }
}

TEST(TableDiff, RowsOfInheritanceChildrenAreScannedAsTheTablesRows) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pa = StartCluster();
  std::unique_ptr<PgCluster> pb = StartCluster();
  ASSERT_TRUE(pa && pb);
  for (PgCluster* pg : {pa.get(), pb.get()}) {
    Sql(*pg,
        "CREATE TABLE p (id bigint PRIMARY KEY, v text); CREATE TABLE c () "
        "INHERITS (p); INSERT INTO p SELECT g, 'x' FROM generate_series(1, "
        "10) g");
  }
  // A SELECT of p shows these rows; a COPY of p alone would not.
  Sql(*pb, "INSERT INTO c SELECT g, 'child' FROM generate_series(100, 102) g");
  auto a = Connect(*pa);
  auto b = Connect(*pb);
  ASSERT_TRUE(a && b);
  absl::StatusOr<TableDiff> d = DiffTables(*a, *b, "public.p", "public.p");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->rows_a, 10u);
  EXPECT_EQ(d->rows_b, 13u);
  ASSERT_EQ(d->differences.size(), 3u);
  for (const RowDifference& r : d->differences) {
    EXPECT_FALSE(r.in_a);
    EXPECT_TRUE(r.in_b);
    EXPECT_GE(IdOf(r.key), 100);
  }
}

// The user types of the two databases, created in another order on b (a
// table first, the range before the domain) so that every OID differs.
constexpr char kTypesA[] =
    "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy'); "
    "CREATE TYPE pair AS (x int, y mood); "
    "CREATE DOMAIN moods AS mood[]; "
    "CREATE TYPE pairrange AS RANGE (subtype = pair); ";
constexpr char kTypesB[] =
    "CREATE TABLE filler (a int, b text); "
    "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy'); "
    "CREATE TABLE filler2 (a int); "
    "CREATE TYPE pair AS (x int, y mood); "
    "CREATE TYPE pairrange AS RANGE (subtype = pair); "
    "CREATE DOMAIN moods AS mood[]; ";
// Arrays (with NULLs, multidimensional), composites (with NULL fields),
// arrays of composites, a domain over an array, a range of composites, and
// a table keyed by a composite.
constexpr char kUserTables[] =
    "CREATE TABLE u (id int PRIMARY KEY, ms mood[], p pair, ps pair[], "
    "  d moods, r pairrange, grid mood[][]); "
    "CREATE TABLE uk (k pair PRIMARY KEY, v text)";
std::string FillUserTables(int from, int to) {
  return absl::StrCat(
      "INSERT INTO u SELECT g, ARRAY['ok', NULL, 'happy']::mood[], "
      "ROW(g, CASE WHEN g % 3 = 0 THEN NULL ELSE 'sad' END)::pair, "
      "ARRAY[ROW(g, 'ok')::pair, NULL, ROW(NULL, NULL)::pair], "
      "'{happy,sad}'::moods, "
      "pairrange(ROW(0, 'sad')::pair, ROW(g, 'happy')::pair), "
      "'{{sad,ok},{happy,NULL}}'::mood[] FROM generate_series(",
      from, ", ", to,
      ") g; INSERT INTO uk SELECT ROW(g, 'ok')::pair, 'v' || g FROM "
      "generate_series(",
      from, ", ", to, ") g");
}

std::string Oids(PgCluster& pg) {
  absl::StatusOr<std::string> r = pg.Execute(
      "SELECT 'mood'::regtype::oid || ',' || 'pair'::regtype::oid || ',' || "
      "'moods'::regtype::oid");
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : "";
}

TEST(TableDiff, UserTypesWithOtherOidsDiffEqualAndRepair) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pa = StartCluster();
  std::unique_ptr<PgCluster> pb = StartCluster();
  ASSERT_TRUE(pa && pb);
  Sql(*pa, kTypesA);
  Sql(*pb, kTypesB);
  for (PgCluster* pg : {pa.get(), pb.get()}) {
    Sql(*pg, kUserTables);
    Sql(*pg, FillUserTables(1, 300));
  }
  // Every user type has another OID in b.
  const std::vector<std::string> oids_a = absl::StrSplit(Oids(*pa), ',');
  const std::vector<std::string> oids_b = absl::StrSplit(Oids(*pb), ',');
  ASSERT_EQ(oids_a.size(), 3u);
  ASSERT_EQ(oids_b.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_NE(oids_a[i], oids_b[i]) << i;

  auto a = Connect(*pa);
  auto b = Connect(*pb);
  ASSERT_TRUE(a && b);

  // Checked again here: PostgreSQL 15.18 takes the other
  // database's OIDs in binary input (array_recv and record_recv compare
  // builtin OIDs only) and stores its own; the values are equal, and the
  // bytes it sends back carry b's OIDs. tally writes the local OIDs back
  // anyway (RowCodec::Decode), so that it sends what the database sends.
  auto copy_out = [](Connection& c, const std::string& sql) {
    std::string copy;
    EXPECT_TRUE(c.CopyOut(sql, [&](absl::string_view chunk) {
                   copy.append(chunk.data(), chunk.size());
                   return absl::OkStatus();
                 }).ok());
    return copy;
  };
  for (const char* column : {"ms", "p", "ps"}) {
    SCOPED_TRACE(column);
    const std::string from_a =
        copy_out(*a, absl::StrCat("COPY (SELECT ", column,
                                  " FROM u WHERE id = 1) TO STDOUT "
                                  "(FORMAT binary)"));
    ASSERT_TRUE(
        b->Exec(absl::StrCat("CREATE TEMP TABLE raw_", column, " AS SELECT ",
                             column, " FROM u WITH NO DATA"))
            .ok());
    absl::StatusOr<uint64_t> loaded = b->CopyIn(
        absl::StrCat("COPY raw_", column, " FROM STDIN (FORMAT binary)"),
        from_a);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    auto text = [&](Connection& c, const std::string& sql) {
      absl::StatusOr<Result> r = c.Exec(sql);
      EXPECT_TRUE(r.ok()) << r.status();
      return r.ok() ? std::string(r->Value(0, 0)) : "";
    };
    EXPECT_EQ(
        text(*b, absl::StrCat("SELECT ", column, "::text FROM raw_", column)),
        text(*a,
             absl::StrCat("SELECT ", column, "::text FROM u WHERE id = 1")));
    const std::string from_b = copy_out(
        *b, absl::StrCat("COPY raw_", column, " TO STDOUT (FORMAT binary)"));
    EXPECT_NE(from_b, from_a);
    EXPECT_EQ(from_b.size(), from_a.size());
  }

  for (const char* table : {"public.u", "public.uk"}) {
    absl::StatusOr<TableDiff> d = DiffTables(*a, *b, table, table);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->rows_a, 300u);
    EXPECT_TRUE(d->differences.empty()) << table;
    EXPECT_EQ(d->root_a, d->root_b) << table;
    EXPECT_EQ(d->schema.fingerprint(), d->schema_b.fingerprint());
  }

  // Changes on b, then a repair from a, then the same rows in SQL.
  Sql(*pb,
      "UPDATE u SET ps = ARRAY[ROW(-1, 'happy')::pair] WHERE id = 10; "
      "UPDATE u SET ms = NULL, p = ROW(NULL, 'ok') WHERE id = 11; "
      "DELETE FROM u WHERE id = 12; "
      "UPDATE uk SET v = 'changed' WHERE k = ROW(13, 'ok')::pair; "
      "DELETE FROM uk WHERE k = ROW(14, 'ok')::pair");
  Sql(*pa, FillUserTables(301, 302));
  for (const char* table : {"public.u", "public.uk"}) {
    absl::StatusOr<TableDiff> d = DiffTables(*a, *b, table, table);
    ASSERT_TRUE(d.ok()) << d.status();
    std::vector<std::string> keys;
    for (const RowDifference& r : d->differences) keys.push_back(r.key);
    EXPECT_EQ(keys.size(), std::string(table) == "public.u" ? 5u : 4u) << table;
    absl::StatusOr<std::vector<std::string>> texts =
        KeyTexts(*a, d->schema, keys);
    ASSERT_TRUE(texts.ok()) << texts.status();
    absl::StatusOr<RepairCounts> counts =
        RepairTable(*a, d->schema, *b, d->schema_b, keys);
    ASSERT_TRUE(counts.ok()) << counts.status();
    EXPECT_EQ(counts->deleted, 0u);
    absl::StatusOr<std::vector<std::string>> left =
        StillDifferent(*a, d->schema, *b, d->schema_b, keys);
    ASSERT_TRUE(left.ok()) << left.status();
    EXPECT_TRUE(left->empty());
    absl::StatusOr<TableDiff> again = DiffTables(*a, *b, table, table);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_TRUE(again->differences.empty()) << table;
  }
  // The rows read back identical: their text forms name no OID.
  const std::string all_u =
      "SELECT md5(string_agg(u::text, ';' ORDER BY id)) FROM u";
  const std::string all_uk =
      "SELECT md5(string_agg(uk::text, ';' ORDER BY k)) FROM uk";
  EXPECT_EQ(*pa->Execute(all_u), *pb->Execute(all_u));
  EXPECT_EQ(*pa->Execute(all_uk), *pb->Execute(all_uk));
  absl::StatusOr<std::string> same = pb->Execute(
      "SELECT ps = ARRAY[ROW(10, 'ok')::pair, NULL, ROW(NULL, NULL)::pair] "
      "AND r = pairrange(ROW(0, 'sad')::pair, ROW(10, 'happy')::pair) FROM u "
      "WHERE id = 10");
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(*same, "t");
}

TEST(TableDiff, CompositesThatDifferInAFieldAreRefusedByName) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pa = StartCluster();
  std::unique_ptr<PgCluster> pb = StartCluster();
  ASSERT_TRUE(pa && pb);
  Sql(*pa,
      "CREATE TYPE pair AS (x int, y text); "
      "CREATE TABLE t (id int PRIMARY KEY, p pair)");
  Sql(*pb,
      "CREATE TYPE pair AS (x int, y text, z int); "
      "CREATE TABLE t (id int PRIMARY KEY, p pair)");
  auto a = Connect(*pa);
  auto b = Connect(*pb);
  ASSERT_TRUE(a && b);
  absl::StatusOr<TableDiff> d = DiffTables(*a, *b, "public.t", "public.t");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(d.status().message(),
              HasSubstr("column p: public.pair as public.pair(x integer, y "
                        "text) in a, public.pair as public.pair(x integer, y "
                        "text, z integer) in b"));
}

// A partitioned table (which PostgreSQL will not COPY itself) against a
// plain table of the same columns: the partitions' rows, sub-partitions
// included, are the table's; and one with no partition yet is empty.
TEST(TableDiff, APartitionedTableIsScannedThroughItsPartitions) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pa = StartCluster();
  std::unique_ptr<PgCluster> pb = StartCluster();
  ASSERT_TRUE(pa && pb);
  Sql(*pa,
      "CREATE TABLE p (id bigint PRIMARY KEY, v text) PARTITION BY RANGE "
      "(id); CREATE TABLE p1 PARTITION OF p FOR VALUES FROM (0) TO (50);"
      "CREATE TABLE p2 PARTITION OF p FOR VALUES FROM (50) TO (1000) "
      "PARTITION BY HASH (id);"
      "CREATE TABLE p2a PARTITION OF p2 FOR VALUES WITH (MODULUS 2, "
      "REMAINDER 0);"
      "CREATE TABLE p2b PARTITION OF p2 FOR VALUES WITH (MODULUS 2, "
      "REMAINDER 1);"
      "INSERT INTO p SELECT g, 'x' FROM generate_series(1, 100) g;"
      "CREATE TABLE e (id bigint PRIMARY KEY, v text) PARTITION BY HASH "
      "(id)");
  Sql(*pb,
      "CREATE TABLE p (id bigint PRIMARY KEY, v text);"
      "INSERT INTO p SELECT g, 'x' FROM generate_series(1, 100) g;"
      "UPDATE p SET v = 'y' WHERE id IN (7, 77);"
      "CREATE TABLE e (id bigint PRIMARY KEY, v text);"
      "INSERT INTO e VALUES (1, 'only in b')");
  auto a = Connect(*pa);
  auto b = Connect(*pb);
  ASSERT_TRUE(a && b);
  absl::StatusOr<TableDiff> d = DiffTables(*a, *b, "public.p", "public.p");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->rows_a, 100u);
  EXPECT_EQ(d->rows_b, 100u);
  ASSERT_EQ(d->differences.size(), 2u);
  std::vector<int64_t> ids;
  for (const RowDifference& r : d->differences) ids.push_back(IdOf(r.key));
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<int64_t>{7, 77}));

  d = DiffTables(*a, *b, "public.e", "public.e");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->rows_a, 0u);
  EXPECT_EQ(d->rows_b, 1u);
  EXPECT_EQ(d->differences.size(), 1u);
}

}  // namespace
}  // namespace pg
}  // namespace tally

namespace tally {
namespace pg {
namespace {

// The keys of a diff's differences with their kinds, for comparing two
// diffs' findings.
std::set<std::pair<std::string, int>> Found(const TableDiff& d) {
  std::set<std::pair<std::string, int>> found;
  for (const RowDifference& r : d.differences) {
    found.insert({r.key, (r.in_a ? 1 : 0) + (r.in_b ? 2 : 0)});
  }
  return found;
}

// Block hashes find exactly what reading every row finds, over values
// whose differences are subtle (NULL against '', -0 against 0, 1.0 against
// 1.00, one byte in the middle of a TOASTed value, an enum's label, an
// array's element), with a composite text key; and read only the rows of
// the buckets that differ.
TEST(TableDiff, BlockHashesFindExactlyWhatReadingEveryRowFinds) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pa = StartCluster();
  std::unique_ptr<PgCluster> pb = StartCluster();
  ASSERT_TRUE(pa && pb);
  for (PgCluster* pg : {pa.get(), pb.get()}) {
    Sql(*pg,
        "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy'); "
        "CREATE TABLE w (region text, id int, s text, f float8, n numeric, "
        "ts timestamptz, b bytea, m mood, arr int[], big text, "
        "PRIMARY KEY (region, id)); "
        "INSERT INTO w SELECT CASE WHEN g % 2 = 0 THEN 'eu' ELSE 'us' END, "
        "g, CASE WHEN g % 5 = 0 THEN NULL ELSE 'x' || g END, g / 3.0, "
        "g * 1.0, timestamptz '2026-01-01 00:00:00+00' + g * interval "
        "'1 ms', decode(md5(g::text), 'hex'), 'ok', ARRAY[g, g + 1], "
        "CASE WHEN g % 1000 = 1 THEN repeat(md5(g::text), 4000) END "
        "FROM generate_series(1, 60000) g");
  }
  // On b: one subtle change of each kind, a delete and an insert.
  Sql(*pb,
      "UPDATE w SET s = '' WHERE id = 10; "     // NULL -> ''
      "UPDATE w SET f = '-0' WHERE id = 12; "   // -0 on b, 0 on a (below)
      "UPDATE w SET n = 13.00 WHERE id = 13; "  // 13.0 -> 13.00
      "UPDATE w SET ts = ts + interval '1 microsecond' WHERE id = 14; "
      "UPDATE w SET b = b || '\\x00'::bytea WHERE id = 15; "
      "UPDATE w SET m = 'happy' WHERE id = 16; "
      "UPDATE w SET arr = ARRAY[17, 19] WHERE id = 17; "
      "UPDATE w SET big = overlay(big placing 'Z' from 50000 for 1) "
      "WHERE id = 2001; "
      "DELETE FROM w WHERE id = 30000; "
      "INSERT INTO w (region, id) VALUES ('eu', 0)");
  Sql(*pa, "UPDATE w SET f = 0 WHERE id = 12");
  auto a = Connect(*pa);
  auto b = Connect(*pb);
  ASSERT_TRUE(a && b);
  absl::StatusOr<TableDiff> rows = DiffTables(*a, *b, "public.w", "public.w");
  ASSERT_TRUE(rows.ok()) << rows.status();
  absl::StatusOr<TableDiff> blocks = DiffTables(
      *a, *b, "public.w", "public.w", RowScope{}, Transfer::kBlockHashes);
  ASSERT_TRUE(blocks.ok()) << blocks.status();
  EXPECT_EQ(rows->differences.size(), 10u);
  EXPECT_EQ(Found(*blocks), Found(*rows));
  EXPECT_EQ(blocks->rows_a, 60000u);
  EXPECT_EQ(blocks->rows_b, 60000u);
  EXPECT_EQ(blocks->buckets, 16384u);
  EXPECT_EQ(blocks->buckets_differing, 10u);
  // ~4 rows a bucket: a few dozen rows read, not 60,000.
  EXPECT_LT(blocks->rows_read_a, 200u);
  EXPECT_LT(blocks->bytes_read_a * 20, rows->bytes_read_a);

  // Within a --where, and once equal, nothing is read but the hashes.
  absl::StatusOr<TableDiff> eu =
      DiffTables(*a, *b, "public.w", "public.w",
                 RowScope{{}, {}, "region = 'eu'"}, Transfer::kBlockHashes);
  ASSERT_TRUE(eu.ok()) << eu.status();
  absl::StatusOr<TableDiff> eu_rows = DiffTables(
      *a, *b, "public.w", "public.w", RowScope{{}, {}, "region = 'eu'"});
  ASSERT_TRUE(eu_rows.ok()) << eu_rows.status();
  EXPECT_EQ(Found(*eu), Found(*eu_rows));
  std::vector<std::string> keys;
  for (const RowDifference& r : rows->differences) keys.push_back(r.key);
  ASSERT_TRUE(RepairTable(*a, rows->schema, *b, rows->schema_b, keys).ok());
  absl::StatusOr<TableDiff> equal = DiffTables(
      *a, *b, "public.w", "public.w", RowScope{}, Transfer::kBlockHashes);
  ASSERT_TRUE(equal.ok()) << equal.status();
  EXPECT_TRUE(equal->differences.empty());
  EXPECT_EQ(equal->buckets_differing, 0u);
  EXPECT_EQ(equal->rows_read_a, 0u);
  // The databases' own check: md5 over the ordered rows.
  const std::string md5 =
      "SELECT md5(string_agg(w::text, '|' ORDER BY region, id)) FROM w";
  absl::StatusOr<std::string> md5_a = pa->Execute(md5);
  absl::StatusOr<std::string> md5_b = pb->Execute(md5);
  ASSERT_TRUE(md5_a.ok() && md5_b.ok());
  EXPECT_EQ(*md5_a, *md5_b);
  // The answer is 16 bytes a non-empty bucket.
  EXPECT_EQ(equal->bytes_read_a % 16, 0u);
  EXPECT_LE(equal->bytes_read_a, 16u * 16384);

  // An empty table on one side (no bucket at all): every row of the other
  // differs, and an empty table on both is equal.
  Sql(*pb, "TRUNCATE w");
  absl::StatusOr<TableDiff> one_empty = DiffTables(
      *a, *b, "public.w", "public.w", RowScope{}, Transfer::kBlockHashes);
  ASSERT_TRUE(one_empty.ok()) << one_empty.status();
  EXPECT_EQ(one_empty->differences.size(), 60000u);
  EXPECT_EQ(one_empty->rows_b, 0u);
  Sql(*pa, "TRUNCATE w");
  absl::StatusOr<TableDiff> both_empty = DiffTables(
      *a, *b, "public.w", "public.w", RowScope{}, Transfer::kBlockHashes);
  ASSERT_TRUE(both_empty.ok()) << both_empty.status();
  EXPECT_TRUE(both_empty->differences.empty());
}

}  // namespace
}  // namespace pg
}  // namespace tally
