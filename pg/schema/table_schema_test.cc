#include "pg/schema/table_schema.h"

#include <xxhash.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pg/schema/schema_difference.h"
#include "pg/wire/binary_copy.h"
#include "support/pg_cluster.h"
#include "support/pg_test_macros.h"

namespace tally {
namespace pg {
namespace {

using ::tally::testing::PgCluster;

// One server for the suite: each test works in databases of its own.
class TableSchemaTest : public ::testing::Test {
 protected:
  static void TearDownTestSuite() { cluster_.reset(); }

  void SetUp() override {
    TALLY_SKIP_UNLESS_POSTGRES();
    if (cluster_ == nullptr) {
      absl::StatusOr<std::unique_ptr<PgCluster>> pg = PgCluster::Start();
      ASSERT_TRUE(pg.ok()) << pg.status();
      cluster_ = std::move(*pg);
    }
  }

  // A fresh database named after the test plus `suffix`, set up with `sql`,
  // and a connection to it.
  std::unique_ptr<Connection> Database(absl::string_view suffix,
                                       absl::string_view sql) {
    const std::string name = absl::StrCat(
        ::testing::UnitTest::GetInstance()->current_test_info()->name(),
        suffix);
    std::string lower;
    for (char c : name) lower.push_back(absl::ascii_tolower(c));
    EXPECT_TRUE(cluster_->CreateDatabase(lower).ok());
    absl::StatusOr<std::string> r = cluster_->Execute(sql, lower);
    EXPECT_TRUE(r.ok()) << r.status();
    absl::StatusOr<std::unique_ptr<Connection>> c =
        Connection::Open(cluster_->Uri(lower), {});
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  static std::unique_ptr<PgCluster> cluster_;
};

std::unique_ptr<PgCluster> TableSchemaTest::cluster_;

std::vector<std::string> Names(const TableSchema& t) {
  std::vector<std::string> names;
  for (const TableColumn& c : t.columns()) names.push_back(c.name);
  return names;
}

TEST_F(TableSchemaTest, ReadsColumnsInCanonicalOrderWithTheKeyFirst) {
  auto c = Database("", R"sql(
      CREATE TABLE public.t (z text COLLATE "C", b int NOT NULL, a bigint,
                             m numeric(10,2), PRIMARY KEY (b, a));)sql");
  ASSERT_NE(c, nullptr);
  absl::StatusOr<TableSchema> t = TableSchema::Read(*c, "public.t");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->name(), "public.t");
  EXPECT_EQ(t->quoted_name(), "\"public\".\"t\"");
  EXPECT_NE(t->relid(), 0u);
  EXPECT_EQ(Names(*t), (std::vector<std::string>{"b", "a", "m", "z"}));
  EXPECT_EQ(t->key_columns(), 2u);
  EXPECT_EQ(t->select_list(), "\"b\", \"a\", \"m\", \"z\"");
  EXPECT_EQ(t->key_list(), "\"b\", \"a\"");
  EXPECT_EQ(t->columns()[0].type, "integer");
  EXPECT_EQ(t->columns()[0].type_oid, 23u);
  EXPECT_EQ(t->columns()[2].type, "numeric(10,2)");
  EXPECT_EQ(t->columns()[3].collation, "C");
  EXPECT_EQ(t->description(),
            "key 1 \"b\" integer\n"
            "key 2 \"a\" bigint\n"
            "column \"m\" numeric(10,2)\n"
            "column \"z\" text collate \"C\"\n");
  EXPECT_TRUE(absl::StartsWith(t->fingerprint(), kFingerprintPrefix));
  EXPECT_EQ(t->fingerprint().size(), kFingerprintPrefix.size() + 32);
}

TEST_F(TableSchemaTest, SameFingerprintAcrossColumnOrderAndDatabases) {
  auto one = Database("_one", R"sql(
      CREATE TABLE public.t (id bigint PRIMARY KEY, a int, b text,
                             c timestamptz);)sql");
  // Another physical order, and a dropped column left behind.
  auto two = Database("_two", R"sql(
      CREATE TABLE public.t (c timestamptz, gone int, b text,
                             id bigint PRIMARY KEY, a int);
      ALTER TABLE public.t DROP COLUMN gone;)sql");
  ASSERT_NE(one, nullptr);
  ASSERT_NE(two, nullptr);
  auto a = TableSchema::Read(*one, "public.t");
  auto b = TableSchema::Read(*two, "public.t");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->fingerprint(), b->fingerprint());
  EXPECT_EQ(a->select_list(), b->select_list());
  EXPECT_EQ(DescribeSchemaDifference(a->description(), b->description()), "");
}

TEST_F(TableSchemaTest, Int4AndInt8KeysDifferAndTheDifferenceIsNamed) {
  auto narrow = Database("_narrow", R"sql(
      CREATE TABLE public.t (id int PRIMARY KEY, b text);)sql");
  auto wide = Database("_wide", R"sql(
      CREATE TABLE public.t (id bigint PRIMARY KEY, b text, extra int);)sql");
  ASSERT_NE(narrow, nullptr);
  ASSERT_NE(wide, nullptr);
  auto a = TableSchema::Read(*narrow, "public.t");
  auto b = TableSchema::Read(*wide, "public.t");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->fingerprint(), b->fingerprint());
  EXPECT_EQ(DescribeSchemaDifference(a->description(), b->description()),
            "column id: integer here, bigint there; "
            "column extra: absent here, integer there");
}

TEST_F(TableSchemaTest, UserTypesAreQualifiedWhateverTheSearchPath) {
  auto c = Database("", R"sql(
      CREATE SCHEMA app;
      CREATE TYPE app.mood AS ENUM ('sad', 'ok');
      CREATE TABLE app.t (id int PRIMARY KEY, m app.mood, ms app.mood[]);)sql");
  ASSERT_NE(c, nullptr);
  auto plain = TableSchema::Read(*c, "app.t");
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_TRUE(c->Exec("SET search_path = app, public").ok());
  auto with_path = TableSchema::Read(*c, "app.t");
  ASSERT_TRUE(with_path.ok()) << with_path.status();
  EXPECT_EQ(plain->columns()[1].type, "app.mood");
  EXPECT_EQ(plain->columns()[2].type, "app.mood[]");
  EXPECT_EQ(plain->fingerprint(), with_path->fingerprint());
  // The session's own path is restored.
  auto path = c->Exec("SHOW search_path");
  ASSERT_TRUE(path.ok());
  EXPECT_EQ(path->Value(0, 0), "app, public");
}

TEST_F(TableSchemaTest, ShapesOfUserTypesComeFromTheCatalog) {
  auto c = Database("", R"sql(
      CREATE TYPE mood AS ENUM ('sad', 'ok');
      CREATE DOMAIN posint AS int CHECK (VALUE > 0);
      CREATE TYPE pair AS (x int, y mood, z varchar(3));
      CREATE DOMAIN pairs AS pair[];
      CREATE TYPE plain AS (a int, b text);
      CREATE TABLE t (id posint PRIMARY KEY, m mood, ms mood[], p pair,
                      ps pairs, q plain, n int[]);)sql");
  ASSERT_NE(c, nullptr);
  auto t = TableSchema::Read(*c, "public.t");
  ASSERT_TRUE(t.ok()) << t.status();
  // Builtin types, an enum and a domain over a builtin type keep the lines
  // (and fingerprints) they always had; the others add their shape.
  EXPECT_EQ(t->description(),
            "key 1 \"id\" public.posint\n"
            "column \"m\" public.mood\n"
            "column \"ms\" public.mood[] as public.mood[]\n"
            "column \"n\" integer[]\n"
            "column \"p\" public.pair as public.pair(x integer, y "
            "public.mood, z character varying(3))\n"
            "column \"ps\" public.pairs as public.pair(x integer, y "
            "public.mood, z character varying(3))[]\n"
            "column \"q\" public.plain as public.plain(a integer, b text)\n");
  EXPECT_TRUE(t->codec().rewrites());
  auto oid = [&](const char* type) {
    auto r = c->Exec(absl::StrCat("SELECT '", type, "'::regtype::oid"));
    EXPECT_TRUE(r.ok());
    Oid v = 0;
    EXPECT_TRUE(absl::SimpleAtoi(r->Value(0, 0), &v));
    return v;
  };
  const TableColumn& ps = t->columns()[5];
  ASSERT_NE(ps.shape, nullptr);
  ASSERT_EQ(ps.shape->kind, TypeShape::Kind::kArray);
  EXPECT_EQ(ps.shape->children[0].oid, oid("pair"));
  const TypeShape& pair = *ps.shape->children[0].shape;
  ASSERT_EQ(pair.kind, TypeShape::Kind::kComposite);
  ASSERT_EQ(pair.children.size(), 3u);
  EXPECT_EQ(pair.children[1].oid, oid("mood"));
  EXPECT_TRUE(pair.rewrites);
  // A composite of builtin fields needs no rewrite; an int[] has no shape.
  EXPECT_FALSE(t->columns()[6].shape->rewrites);
  EXPECT_EQ(t->columns()[3].shape, nullptr);

  auto builtin = Database("_builtin", R"sql(
      CREATE TABLE t (id int PRIMARY KEY, n int[], s text);)sql");
  ASSERT_NE(builtin, nullptr);
  auto b = TableSchema::Read(*builtin, "public.t");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_FALSE(b->codec().rewrites());
}

TEST_F(TableSchemaTest, RefusesWhatItCannotKeep) {
  auto c = Database("", R"sql(
      CREATE TABLE public.nokey (a int, b text);
      CREATE VIEW public.v AS SELECT 1 AS x;
      CREATE TABLE public.gen (id int PRIMARY KEY, a int,
                               twice int GENERATED ALWAYS AS (a * 2) STORED);)sql");
  ASSERT_NE(c, nullptr);
  absl::StatusOr<TableSchema> t = TableSchema::Read(*c, "public.nokey");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(t.status().message().find("public.nokey has no primary key"),
            std::string::npos)
      << t.status();
  EXPECT_NE(t.status().message().find("ADD PRIMARY KEY"), std::string::npos);
  t = TableSchema::Read(*c, "public.missing");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound) << t.status();
  EXPECT_NE(t.status().message().find("public.missing"), std::string::npos);
  t = TableSchema::Read(*c, "nokey");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  t = TableSchema::Read(*c, "public.v");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition);
  // Names are the catalog's: no case folding.
  t = TableSchema::Read(*c, "public.NOKEY");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  // Generated columns are not part of the row.
  t = TableSchema::Read(*c, "public.gen");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Names(*t), (std::vector<std::string>{"id", "a"}));
}

TEST_F(TableSchemaTest, APartitionedTableIsKeptWithItsParentsKey) {
  auto c = Database("", R"sql(
      CREATE TABLE public.ev (id bigint, d date, v text, PRIMARY KEY (id, d))
        PARTITION BY RANGE (d);
      CREATE TABLE public.ev_1 PARTITION OF public.ev
        FOR VALUES FROM ('2026-01-01') TO ('2026-02-01');
      CREATE TABLE public.ev_2 PARTITION OF public.ev
        FOR VALUES FROM ('2026-02-01') TO ('2026-03-01');
      CREATE TABLE public.plain (id bigint, d date, v text,
                                 PRIMARY KEY (id, d));
      CREATE TABLE public.nokey (id bigint, d date) PARTITION BY RANGE (d);)sql");
  ASSERT_NE(c, nullptr);
  absl::StatusOr<TableSchema> ev = TableSchema::Read(*c, "public.ev");
  ASSERT_TRUE(ev.ok()) << ev.status();
  EXPECT_TRUE(ev->partitioned());
  EXPECT_EQ(Names(*ev), (std::vector<std::string>{"id", "d", "v"}));
  EXPECT_EQ(ev->key_columns(), 2u);
  // The parent's columns and key alone: a plain table of the same columns
  // has the same fingerprint (peers may partition otherwise, or not).
  absl::StatusOr<TableSchema> plain = TableSchema::Read(*c, "public.plain");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->partitioned());
  EXPECT_EQ(ev->fingerprint(), plain->fingerprint());
  EXPECT_TRUE(plain->partition_layout().empty());
  EXPECT_EQ(plain->stored_fingerprint(),
            absl::StrCat(plain->fingerprint(), " oid:", plain->relid()));
  EXPECT_TRUE(absl::StartsWith(ev->partition_layout(), kPartitionsPrefix));
  EXPECT_EQ(ev->stored_fingerprint(),
            absl::StrCat(ev->fingerprint(), " ", ev->partition_layout(),
                         " oid:", ev->relid()));
  EXPECT_EQ(TableSchema::FingerprintOfStored(ev->stored_fingerprint()),
            ev->fingerprint());
  EXPECT_EQ(TableSchema::RelidOfStored(ev->stored_fingerprint()), ev->relid());
  EXPECT_TRUE(ev->MatchesStored(ev->stored_fingerprint()));
  // Recorded before OIDs were: matches on the fingerprints alone.
  EXPECT_TRUE(plain->MatchesStored(plain->fingerprint()));
  EXPECT_FALSE(ev->MatchesStored(ev->fingerprint()));  // the layout lacks
  // The same name and columns, another table (dropped, created again).
  EXPECT_FALSE(plain->MatchesStored(
      absl::StrCat(plain->fingerprint(), " oid:", plain->relid() + 1)));
  EXPECT_NE(ev->partitions().find(" public.ev_1\n"), std::string::npos)
      << ev->partitions();
  // A leaf reads as a plain table with the parent's key.
  absl::StatusOr<TableSchema> leaf = TableSchema::Read(*c, "public.ev_1");
  ASSERT_TRUE(leaf.ok()) << leaf.status();
  EXPECT_FALSE(leaf->partitioned());
  EXPECT_EQ(leaf->fingerprint(), ev->fingerprint());

  // What decoding does not send changes the layout, and the change is
  // named: a leaf's TRUNCATE, a new partition, a detached one.
  auto layout_after = [&](const std::string& sql) {
    EXPECT_TRUE(c->Exec(sql).ok()) << sql;
    absl::StatusOr<TableSchema> now = TableSchema::Read(*c, "public.ev");
    EXPECT_TRUE(now.ok()) << now.status();
    EXPECT_EQ(now->fingerprint(), ev->fingerprint());
    return now.ok() ? *std::move(now) : *ev;
  };
  TableSchema truncated = layout_after("TRUNCATE public.ev_1");
  EXPECT_NE(truncated.partition_layout(), ev->partition_layout());
  EXPECT_EQ(DescribePartitionChange(truncated.partitions(), ev->partitions()),
            "partitions truncated or rewritten here: public.ev_1");
  TableSchema created = layout_after(
      "CREATE TABLE public.ev_3 PARTITION OF public.ev FOR VALUES FROM "
      "('2026-03-01') TO ('2026-04-01')");
  EXPECT_EQ(
      DescribePartitionChange(created.partitions(), truncated.partitions()),
      "partitions new here: public.ev_3");
  TableSchema detached =
      layout_after("ALTER TABLE public.ev DETACH PARTITION public.ev_2");
  EXPECT_EQ(
      DescribePartitionChange(detached.partitions(), created.partitions()),
      "partitions gone here: public.ev_2");
  EXPECT_EQ(
      DescribePartitionChange(detached.partitions(), detached.partitions()),
      "");
  // Inserting rows changes nothing.
  TableSchema written =
      layout_after("INSERT INTO public.ev VALUES (1, '2026-01-05', 'x')");
  EXPECT_EQ(written.partition_layout(), detached.partition_layout());

  // Without a primary key, the refusal names the partition key.
  absl::StatusOr<TableSchema> nokey = TableSchema::Read(*c, "public.nokey");
  EXPECT_EQ(nokey.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(nokey.status().message().find("must include the columns of its "
                                          "partition key, RANGE (d)"),
            std::string::npos)
      << nokey.status();
}

// XXH3-128 over the canonical key and value of every row of a binary COPY
// of `t`'s SELECT list, in key order, as hex.
std::string DigestOfTable(Connection& c, const TableSchema& t) {
  const RowCodec codec = t.codec();
  XXH3_state_t* state = XXH3_createState();
  XXH3_128bits_reset(state);
  std::string key, value;
  CopyBinaryReader reader(
      [&](absl::Span<const Field> fields) {
        absl::Status s = codec.Encode(fields, &key, &value);
        if (!s.ok()) return s;
        XXH3_128bits_update(state, key.data(), key.size());
        XXH3_128bits_update(state, value.data(), value.size());
        return absl::OkStatus();
      },
      static_cast<int>(codec.columns()));
  absl::Status s = c.CopyOut(
      absl::StrCat("COPY (SELECT ", t.select_list(), " FROM ", t.quoted_name(),
                   " ORDER BY ", t.key_list(), ") TO STDOUT (FORMAT binary)"),
      [&](absl::string_view chunk) { return reader.Feed(chunk); });
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE(reader.Finish().ok());
  EXPECT_EQ(reader.rows(), 1000);
  const XXH128_hash_t h = XXH3_128bits_digest(state);
  XXH3_freeState(state);
  return absl::StrCat(absl::Hex(h.high64, absl::kZeroPad16),
                      absl::Hex(h.low64, absl::kZeroPad16));
}

constexpr absl::string_view kRowsSql = R"sql(
    INSERT INTO public.t (id, f, ts, n, by, j, arr, tx)
    SELECT i, i / 7.0, timestamptz '2024-01-02 03:04:05+00' + i * interval '1 h',
           i * 1.0001, decode(md5(i::text), 'hex'),
           jsonb_build_object('i', i, 'f', i / 3.0), ARRAY[i, -i],
           'row ' || i
    FROM generate_series(1, 1000) i;)sql";

TEST_F(TableSchemaTest, BinaryCopyDigestIgnoresSessionSettings) {
  auto c = Database("_one", absl::StrCat(R"sql(
      CREATE TABLE public.t (id bigint PRIMARY KEY, f float8, ts timestamptz,
                             n numeric, by bytea, j jsonb, arr int[], tx text);
      )sql",
                                         kRowsSql));
  // The same rows in another database, columns in another physical order.
  auto other = Database("_other", absl::StrCat(R"sql(
      CREATE TABLE public.t (tx text, arr int[], j jsonb, by bytea, n numeric,
                             ts timestamptz, f float8, id bigint PRIMARY KEY);
      )sql",
                                               kRowsSql));
  ASSERT_NE(c, nullptr);
  ASSERT_NE(other, nullptr);
  auto t = TableSchema::Read(*c, "public.t");
  ASSERT_TRUE(t.ok()) << t.status();
  const std::string baseline = DigestOfTable(*c, *t);
  for (const char* setting :
       {"SET TimeZone = 'America/New_York'", "SET DateStyle = 'SQL, DMY'",
        "SET extra_float_digits = 0", "SET bytea_output = 'escape'"}) {
    ASSERT_TRUE(c->Exec(setting).ok()) << setting;
    EXPECT_EQ(DigestOfTable(*c, *t), baseline) << "after " << setting;
  }
  auto t_other = TableSchema::Read(*other, "public.t");
  ASSERT_TRUE(t_other.ok()) << t_other.status();
  EXPECT_EQ(t_other->fingerprint(), t->fingerprint());
  EXPECT_EQ(DigestOfTable(*other, *t_other), baseline);
  // The digest sees the content: one changed value changes it.
  ASSERT_TRUE(
      other->Exec("UPDATE public.t SET f = f + 1e-9 WHERE id = 500").ok());
  EXPECT_NE(DigestOfTable(*other, *t_other), baseline);
}

TEST(TableSchemaWithColumns, KeepsTheKeyAndTheChosenColumnsOnly) {
  auto a =
      TableSchema::FromColumns("public.t",
                               {{"id", 20, "bigint", "", 1},
                                {"b", 25, "text", "default", 2},
                                {"updated_at", 1184, "timestamptz", "", 3}},
                               {"id"});
  // The same table where updated_at is another type: only that differs.
  auto b = TableSchema::FromColumns("public.t",
                                    {{"id", 20, "bigint", "", 1},
                                     {"b", 25, "text", "default", 2},
                                     {"updated_at", 1114, "timestamp", "", 3}},
                                    {"id"});
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_NE(a->fingerprint(), b->fingerprint());
  auto a_b = a->WithColumns({}, {"updated_at"});
  auto b_b = b->WithColumns({"b"}, {});
  ASSERT_TRUE(a_b.ok()) << a_b.status();
  ASSERT_TRUE(b_b.ok()) << b_b.status();
  EXPECT_EQ(a_b->fingerprint(), b_b->fingerprint());
  ASSERT_EQ(a_b->columns().size(), 2u);
  EXPECT_EQ(a_b->key_columns(), 1u);
  EXPECT_EQ(a_b->columns()[0].name, "id");
  EXPECT_EQ(a_b->columns()[1].name, "b");
  EXPECT_EQ(a_b->codec().columns(), 2u);
  // Only the key: a repair then inserts keys and updates nothing.
  auto key_only = a->WithColumns({"id"}, {});
  ASSERT_TRUE(key_only.ok());
  EXPECT_EQ(key_only->columns().size(), 1u);
  // Mistakes name the column.
  auto unknown = a->WithColumns({"nope"}, {});
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(unknown.status().message()),
              ::testing::HasSubstr("no column \"nope\""));
  auto key = a->WithColumns({}, {"id"});
  EXPECT_EQ(key.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(key.status().message()),
              ::testing::HasSubstr("primary key"));
}

TEST(DescribeSchemaDifference, NamesEachDifference) {
  auto a = TableSchema::FromColumns("public.t",
                                    {{"id", 20, "bigint", "", 1},
                                     {"b", 25, "text", "default", 2},
                                     {"c", 23, "integer", "", 3}},
                                    {"id"});
  auto b = TableSchema::FromColumns("public.t",
                                    {{"id", 20, "bigint", "", 1},
                                     {"b", 25, "text", "C", 2},
                                     {"d", 23, "integer", "", 3}},
                                    {"id", "b"});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->fingerprint(), b->fingerprint());
  EXPECT_EQ(DescribeSchemaDifference(a->description(), b->description()),
            "column b: collation \"default\" here, \"C\" there; "
            "column c: integer here, absent there; "
            "column d: absent here, integer there; "
            "primary key (id) here, (id, b) there");
  EXPECT_EQ(DescribeSchemaDifference(a->description(), a->description()), "");
  // Unreadable text is still reported, whole.
  EXPECT_NE(DescribeSchemaDifference("garbage", a->description()), "");
  // A key column that is no column.
  EXPECT_EQ(TableSchema::FromColumns("public.t", {{"id", 20, "bigint", "", 1}},
                                     {"nope"})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pg
}  // namespace tally
