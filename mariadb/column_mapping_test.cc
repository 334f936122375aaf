#include "mariadb/column_mapping.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tally {
namespace mariadb {
namespace {

using ::testing::HasSubstr;

MariaDbColumn Column(std::string data_type, std::string column_type) {
  MariaDbColumn c;
  c.name = "c";
  c.data_type = std::move(data_type);
  c.column_type = std::move(column_type);
  return c;
}

ColumnMapping Map(MariaDbColumn c) {
  absl::StatusOr<ColumnMapping> m = MapColumn(c);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : ColumnMapping{};
}

std::string Hex(const Value& v, const ColumnMapping& m) {
  std::string out;
  absl::Status s = AppendCanonical(m, v, &out);
  EXPECT_TRUE(s.ok()) << s;
  return absl::BytesToHexString(out);
}

Value Bytes(absl::string_view b) {
  Value v;
  v.kind = Value::Kind::kBytes;
  v.bytes = b;
  return v;
}

Value Int(int64_t i) {
  Value v;
  v.kind = Value::Kind::kInt;
  v.i = i;
  return v;
}

Value Time(uint32_t y, uint32_t mo, uint32_t d, uint32_t h = 0, uint32_t mi = 0,
           uint32_t s = 0, uint32_t us = 0) {
  Value v;
  v.kind = Value::Kind::kTime;
  v.time = TimeValue{false, y, mo, d, h, mi, s, us};
  return v;
}

TEST(ColumnMapping, NamesTypesAsPostgresFormatTypeDoes) {
  MariaDbColumn dec = Column("decimal", "decimal(20,6)");
  dec.numeric_precision = 20;
  dec.numeric_scale = 6;
  EXPECT_EQ(Map(dec).pg_type, "numeric(20,6)");
  EXPECT_EQ(Map(Column("int", "int(11)")).pg_type, "integer");
  EXPECT_EQ(Map(Column("int", "int(10) unsigned")).pg_type, "bigint");
  EXPECT_EQ(Map(Column("tinyint", "tinyint(1)")).pg_type, "smallint");
  EXPECT_EQ(Map(Column("double", "double")).pg_type, "double precision");
  MariaDbColumn dt = Column("datetime", "datetime(6)");
  dt.datetime_precision = 6;
  EXPECT_EQ(Map(dt).pg_type, "timestamp without time zone");
  dt.datetime_precision = 0;
  EXPECT_EQ(Map(dt).pg_type, "timestamp(0) without time zone");
  MariaDbColumn ts = Column("timestamp", "timestamp(3)");
  ts.datetime_precision = 3;
  EXPECT_EQ(Map(ts).pg_type, "timestamp(3) with time zone");
  MariaDbColumn vc = Column("varchar", "varchar(40)");
  vc.character_maximum_length = 40;
  vc.collation = "utf8mb4_general_ci";
  EXPECT_EQ(Map(vc).pg_type, "character varying(40)");
  EXPECT_EQ(Map(vc).pg_collation, "default");
  MariaDbColumn json = Column("longtext", "longtext");
  json.json = true;
  EXPECT_EQ(Map(json).pg_type, "json");
  EXPECT_EQ(Map(json).pg_collation, "");
  EXPECT_EQ(Map(Column("mediumblob", "mediumblob")).pg_type, "bytea");
}

TEST(ColumnMapping, RefusesWhatHasNoCounterpartNamingTheFix) {
  for (const auto& [type, column_type, fix] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"bigint", "bigint(20) unsigned", "decimal(20,0)"},
           {"enum", "enum('a','b')", "varchar"},
           {"set", "set('a','b')", "varchar"},
           {"year", "year(4)", "smallint"},
           {"bit", "bit(10)", "binary"},
           {"geometry", "geometry", "no PostgreSQL mapping"}}) {
    absl::StatusOr<ColumnMapping> m = MapColumn(Column(type, column_type));
    ASSERT_FALSE(m.ok()) << type;
    EXPECT_EQ(m.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(m.status().message(), HasSubstr("column `c`"));
    EXPECT_THAT(m.status().message(), HasSubstr(column_type));
    EXPECT_THAT(m.status().message(), HasSubstr(fix));
  }
}

TEST(ColumnMapping, KeyColumnsNeedANoPadBinaryCollation) {
  MariaDbColumn k = Column("varchar", "varchar(10)");
  k.key = true;
  for (const char* refused : {"utf8mb4_general_ci", "utf8mb4_bin"}) {
    k.collation = refused;
    absl::StatusOr<ColumnMapping> m = MapColumn(k);
    ASSERT_FALSE(m.ok()) << refused;
    EXPECT_THAT(m.status().message(), HasSubstr("utf8mb4_nopad_bin"));
  }
  k.collation = "utf8mb4_nopad_bin";
  EXPECT_TRUE(MapColumn(k).ok());
  k.key = false;
  k.collation = "utf8mb4_general_ci";
  EXPECT_TRUE(MapColumn(k).ok());
}

TEST(ColumnMapping, IntegersAreBigEndianAndChecked) {
  EXPECT_EQ(Hex(Int(-2), Map(Column("smallint", "smallint"))), "fffe");
  EXPECT_EQ(Hex(Int(1), Map(Column("int", "int"))), "00000001");
  Value u;
  u.kind = Value::Kind::kUint;
  u.u = 4294967295u;
  EXPECT_EQ(Hex(u, Map(Column("int", "int(10) unsigned"))), "00000000ffffffff");
  std::string out;
  EXPECT_EQ(
      AppendCanonical(Map(Column("smallint", "smallint")), Int(70000), &out)
          .code(),
      absl::StatusCode::kOutOfRange);
  // bigint's ends (the range check there must not overflow itself).
  EXPECT_EQ(Hex(Int(std::numeric_limits<int64_t>::min()),
                Map(Column("bigint", "bigint"))),
            "8000000000000000");
  EXPECT_EQ(Hex(Int(std::numeric_limits<int64_t>::max()),
                Map(Column("bigint", "bigint"))),
            "7fffffffffffffff");
}

TEST(ColumnMapping, DecimalsAreNumericsInBase10000WithTheColumnsScale) {
  MariaDbColumn dec = Column("decimal", "decimal(20,6)");
  dec.numeric_precision = 20;
  dec.numeric_scale = 6;
  const ColumnMapping m = Map(dec);
  // ndigits, weight, sign, dscale, digits.
  EXPECT_EQ(Hex(Bytes("12.500000"), m), "0002000000000006000c1388");
  EXPECT_EQ(Hex(Bytes("0.000000"), m), "0000000000000006");
  EXPECT_EQ(Hex(Bytes("-0.000000"), m), "0000000000000006");
  EXPECT_EQ(Hex(Bytes("-0.050000"), m), "0001ffff4000000601f4");
  EXPECT_EQ(Hex(Bytes("10000.000000"), m), "00010001000000060001");
  for (const char* text : {"12.500000", "0.000000", "-0.050000", "10000.000000",
                           "-99999999999999.999999", "123456789.000001"}) {
    std::string bytes;
    ASSERT_TRUE(AppendCanonical(m, Bytes(text), &bytes).ok());
    absl::StatusOr<std::string> back = CanonicalText(m, bytes);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, text);
  }
  std::string bytes;
  EXPECT_FALSE(AppendCanonical(m, Bytes("1e5"), &bytes).ok());
}

TEST(ColumnMapping, DatesAndTimesCountFrom2000) {
  EXPECT_EQ(Hex(Time(2000, 1, 1), Map(Column("date", "date"))), "00000000");
  EXPECT_EQ(Hex(Time(1970, 1, 1), Map(Column("date", "date"))), "ffffd533");
  MariaDbColumn dt = Column("datetime", "datetime(6)");
  dt.datetime_precision = 6;
  const ColumnMapping m = Map(dt);
  EXPECT_EQ(Hex(Time(2000, 1, 1, 0, 0, 0, 1), m), "0000000000000001");
  for (const Value& v : {Time(1999, 12, 31, 23, 59, 59, 999999),
                         Time(2024, 2, 29, 12, 34, 56, 789012),
                         Time(1000, 1, 1), Time(9999, 12, 31, 23, 59, 59)}) {
    std::string bytes;
    ASSERT_TRUE(AppendCanonical(m, v, &bytes).ok());
    absl::StatusOr<std::string> text = CanonicalText(m, bytes);
    ASSERT_TRUE(text.ok());
    EXPECT_EQ(*text, absl::StrFormat("%04d-%02d-%02d %02d:%02d:%02d.%06d",
                                     v.time.year, v.time.month, v.time.day,
                                     v.time.hour, v.time.minute, v.time.second,
                                     v.time.microsecond));
  }
  std::string out;
  EXPECT_EQ(AppendCanonical(m, Time(0, 0, 0), &out).code(),
            absl::StatusCode::kOutOfRange);
  Value negative = Time(0, 0, 0, 1);
  negative.time.negative = true;
  EXPECT_EQ(AppendCanonical(Map(Column("time", "time")), negative, &out).code(),
            absl::StatusCode::kOutOfRange);
}

TEST(ColumnMapping, FloatsKeepTheirBitsAndPrintToRoundTrip) {
  Value d;
  d.kind = Value::Kind::kDouble;
  d.d = 1e23;
  const ColumnMapping m = Map(Column("double", "double"));
  std::string bytes;
  ASSERT_TRUE(AppendCanonical(m, d, &bytes).ok());
  uint64_t bits = 0;
  std::memcpy(&bits, &d.d, 8);
  EXPECT_EQ(absl::BytesToHexString(bytes), absl::StrFormat("%016x", bits));
  absl::StatusOr<std::string> text = CanonicalText(m, bytes);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(std::strtod(text->c_str(), nullptr), 1e23);
}

TEST(ColumnMapping, CharIsPaddedToItsLengthInCharacters) {
  MariaDbColumn c = Column("char", "char(4)");
  c.character_maximum_length = 4;
  c.collation = "utf8mb4_general_ci";
  EXPECT_EQ(Hex(Bytes("\xc3\xa9"), Map(c)), "c3a9202020");
  EXPECT_EQ(Hex(Bytes("abcd"), Map(c)), "61626364");
}

}  // namespace
}  // namespace mariadb
}  // namespace tally
