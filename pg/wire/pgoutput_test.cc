#include "pg/wire/pgoutput.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pg/wire/internal/big_endian.h"

namespace tally {
namespace pg {
namespace {

using internal::PutBigEndian32;
using internal::PutBigEndian64;
using internal::PutBigEndian8;
using ::testing::HasSubstr;

// Builds messages byte by byte the way pgoutput's proto.c writes them, so
// that the tests state the wire format independently of the parser.
class Wire {
 public:
  explicit Wire(char type) { bytes_.push_back(type); }
  Wire& U8(uint8_t v) {
    PutBigEndian8(&bytes_, v);
    return *this;
  }
  Wire& U16(uint16_t v) {
    PutBigEndian8(&bytes_, static_cast<uint8_t>(v >> 8));
    PutBigEndian8(&bytes_, static_cast<uint8_t>(v));
    return *this;
  }
  Wire& U32(uint32_t v) {
    PutBigEndian32(&bytes_, v);
    return *this;
  }
  Wire& U64(uint64_t v) {
    PutBigEndian64(&bytes_, v);
    return *this;
  }
  Wire& Str(absl::string_view s) {
    bytes_.append(s.data(), s.size());
    bytes_.push_back('\0');
    return *this;
  }
  Wire& Raw(absl::string_view s) {
    bytes_.append(s.data(), s.size());
    return *this;
  }
  // One tuple column with a value ('t' or 'b').
  Wire& Value(char kind, absl::string_view v) {
    U8(kind);
    U32(static_cast<uint32_t>(v.size()));
    return Raw(v);
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

const std::string kBinaryValue("\x00\x00\x00\x00\x00\x00\x00\x2a", 8);

std::string BeginBytes() {
  return Wire('B')
      .U64(0x0000000100000020)
      .U64(0x0002a0b0c0d0e0f1)
      .U32(739)
      .bytes();
}
std::string CommitBytes() {
  return Wire('C')
      .U8(0)
      .U64(0x0000000100000020)
      .U64(0x0000000100000050)
      .U64(0x0002a0b0c0d0e0f1)
      .bytes();
}
std::string OriginBytes() { return Wire('O').U64(0x5000).Str("tally").bytes(); }
std::string RelationBytes() {
  return Wire('R')
      .U32(16384)
      .Str("public")
      .Str("users")
      .U8('d')
      .U16(3)
      .U8(1)
      .Str("id")
      .U32(20)
      .U32(0xffffffff)
      .U8(0)
      .Str("name")
      .U32(1043)
      .U32(68)
      .U8(0)
      .Str("bio")
      .U32(25)
      .U32(0xffffffff)
      .bytes();
}
std::string TypeBytes() {
  return Wire('Y').U32(16390).Str("public").Str("mood").bytes();
}
std::string InsertBytes() {
  return Wire('I')
      .U32(16384)
      .U8('N')
      .U16(4)
      .Value('b', kBinaryValue)
      .Value('t', "ada")
      .U8('n')
      .U8('u')
      .bytes();
}
std::string UpdateWithKeyBytes() {
  return Wire('U')
      .U32(16384)
      .U8('K')
      .U16(2)
      .Value('b', std::string("\x00\x07", 2))
      .U8('n')
      .U8('N')
      .U16(2)
      .Value('b', std::string("\x00\x08", 2))
      .Value('b', "x")
      .bytes();
}
std::string UpdateWithoutOldBytes() {
  return Wire('U')
      .U32(16384)
      .U8('N')
      .U16(2)
      .Value('b', std::string("\x00\x08", 2))
      .U8('u')
      .bytes();
}
std::string DeleteFullBytes() {
  return Wire('D')
      .U32(16384)
      .U8('O')
      .U16(2)
      .Value('b', std::string("\x00\x08", 2))
      .Value('b', std::string(3000, 'z'))
      .bytes();
}
std::string TruncateBytes() {
  return Wire('T').U32(2).U8(3).U32(16384).U32(16390).bytes();
}
std::string LogicalMessageBytes() {
  return Wire('M')
      .U8(1)
      .U64(0x0000000100000030)
      .Str("tally.ddl")
      .U32(4)
      .Raw(std::string("a\0b\xff", 4))
      .bytes();
}

std::vector<std::string> AllValidMessages() {
  return {BeginBytes(),         CommitBytes(),
          OriginBytes(),        RelationBytes(),
          TypeBytes(),          InsertBytes(),
          UpdateWithKeyBytes(), UpdateWithoutOldBytes(),
          DeleteFullBytes(),    TruncateBytes(),
          LogicalMessageBytes()};
}

template <typename T>
T ParseAs(const std::string& bytes) {
  absl::StatusOr<PgOutputMessage> m = ParsePgOutputMessage(bytes);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return T{};
  const T* t = std::get_if<T>(&*m);
  EXPECT_NE(t, nullptr) << "parsed as " << PgOutputMessageName(*m);
  return t == nullptr ? T{} : *t;
}

TEST(PgOutput, BeginCarriesFinalLsnCommitTimeAndXid) {
  const auto m = ParseAs<BeginMessage>(BeginBytes());
  EXPECT_EQ(m.final_lsn, 0x0000000100000020u);
  EXPECT_EQ(m.commit_time_us, 0x0002a0b0c0d0e0f1);
  EXPECT_EQ(m.xid, 739u);
}

TEST(PgOutput, CommitCarriesCommitAndEndLsn) {
  const auto m = ParseAs<CommitMessage>(CommitBytes());
  EXPECT_EQ(m.flags, 0);
  EXPECT_EQ(m.commit_lsn, 0x0000000100000020u);
  EXPECT_EQ(m.end_lsn, 0x0000000100000050u);
  EXPECT_EQ(m.commit_time_us, 0x0002a0b0c0d0e0f1);
}

TEST(PgOutput, OriginCarriesNameAndLsn) {
  const std::string bytes = OriginBytes();
  const auto m = ParseAs<OriginMessage>(bytes);
  EXPECT_EQ(m.origin_lsn, 0x5000u);
  EXPECT_EQ(m.name, "tally");
}

TEST(PgOutput, RelationListsColumnsWithKeyFlagTypeAndTypmod) {
  const auto m = ParseAs<RelationMessage>(RelationBytes());
  EXPECT_EQ(m.relid, 16384u);
  EXPECT_EQ(m.schema, "public");
  EXPECT_EQ(m.table, "users");
  EXPECT_EQ(m.replica_identity, ReplicaIdentity::kDefault);
  ASSERT_EQ(m.columns.size(), 3u);
  EXPECT_TRUE(m.columns[0].key);
  EXPECT_EQ(m.columns[0].name, "id");
  EXPECT_EQ(m.columns[0].type_oid, 20u);
  EXPECT_EQ(m.columns[0].type_modifier, -1);
  EXPECT_FALSE(m.columns[1].key);
  EXPECT_EQ(m.columns[1].name, "name");
  EXPECT_EQ(m.columns[1].type_oid, 1043u);
  EXPECT_EQ(m.columns[1].type_modifier, 68);
  EXPECT_EQ(m.columns[2].name, "bio");
}

TEST(PgOutput, RelationOwnsItsStringsBeyondThePayload) {
  RelationMessage m;
  {
    std::string bytes = RelationBytes();
    m = ParseAs<RelationMessage>(bytes);
    bytes.assign(bytes.size(), 'X');
  }
  EXPECT_EQ(m.table, "users");
  EXPECT_EQ(m.columns[1].name, "name");
}

TEST(PgOutput, TypeCarriesSchemaAndName) {
  const auto m = ParseAs<TypeMessage>(TypeBytes());
  EXPECT_EQ(m.oid, 16390u);
  EXPECT_EQ(m.schema, "public");
  EXPECT_EQ(m.name, "mood");
}

TEST(PgOutput, InsertTupleHasEveryColumnKind) {
  const std::string bytes = InsertBytes();
  const auto m = ParseAs<InsertMessage>(bytes);
  EXPECT_EQ(m.relid, 16384u);
  ASSERT_EQ(m.new_tuple.size(), 4u);
  EXPECT_EQ(m.new_tuple[0].kind, TupleColumnKind::kBinary);
  EXPECT_EQ(m.new_tuple[0].value, kBinaryValue);  // NUL bytes kept
  EXPECT_EQ(m.new_tuple[1].kind, TupleColumnKind::kText);
  EXPECT_EQ(m.new_tuple[1].value, "ada");
  EXPECT_EQ(m.new_tuple[2].kind, TupleColumnKind::kNull);
  EXPECT_EQ(m.new_tuple[3].kind, TupleColumnKind::kUnchangedToast);
  EXPECT_TRUE(m.new_tuple[3].value.empty());
}

TEST(PgOutput, UpdateOfTheKeyCarriesTheOldKey) {
  const std::string bytes = UpdateWithKeyBytes();
  const auto m = ParseAs<UpdateMessage>(bytes);
  EXPECT_EQ(m.old_kind, OldTuple::kKey);
  ASSERT_EQ(m.old_tuple.size(), 2u);
  EXPECT_EQ(m.old_tuple[0].value, std::string("\x00\x07", 2));
  EXPECT_EQ(m.old_tuple[1].kind, TupleColumnKind::kNull);
  ASSERT_EQ(m.new_tuple.size(), 2u);
  EXPECT_EQ(m.new_tuple[0].value, std::string("\x00\x08", 2));
  EXPECT_EQ(m.new_tuple[1].value, "x");
}

TEST(PgOutput, UpdateWithoutKeyChangeHasNoOldTuple) {
  const std::string bytes = UpdateWithoutOldBytes();
  const auto m = ParseAs<UpdateMessage>(bytes);
  EXPECT_EQ(m.old_kind, OldTuple::kNone);
  EXPECT_TRUE(m.old_tuple.empty());
  ASSERT_EQ(m.new_tuple.size(), 2u);
  EXPECT_EQ(m.new_tuple[1].kind, TupleColumnKind::kUnchangedToast);
}

TEST(PgOutput, UpdateUnderReplicaIdentityFullCarriesTheOldRow) {
  const std::string bytes = Wire('U')
                                .U32(1)
                                .U8('O')
                                .U16(1)
                                .Value('b', "old")
                                .U8('N')
                                .U16(1)
                                .Value('b', "new")
                                .bytes();
  const auto m = ParseAs<UpdateMessage>(bytes);
  EXPECT_EQ(m.old_kind, OldTuple::kFull);
  ASSERT_EQ(m.old_tuple.size(), 1u);
  EXPECT_EQ(m.old_tuple[0].value, "old");
  EXPECT_EQ(m.new_tuple[0].value, "new");
}

TEST(PgOutput, DeleteCarriesTheOldTuple) {
  const std::string bytes = DeleteFullBytes();
  const auto m = ParseAs<DeleteMessage>(bytes);
  EXPECT_EQ(m.old_kind, OldTuple::kFull);
  ASSERT_EQ(m.old_tuple.size(), 2u);
  EXPECT_EQ(m.old_tuple[1].value, std::string(3000, 'z'));

  const std::string key_only =
      Wire('D').U32(5).U8('K').U16(1).Value('b', "k").bytes();
  const auto k = ParseAs<DeleteMessage>(key_only);
  EXPECT_EQ(k.relid, 5u);
  EXPECT_EQ(k.old_kind, OldTuple::kKey);
  EXPECT_EQ(k.old_tuple[0].value, "k");
}

TEST(PgOutput, TruncateListsRelationsAndOptions) {
  const auto m = ParseAs<TruncateMessage>(TruncateBytes());
  EXPECT_THAT(m.relids, ::testing::ElementsAre(16384u, 16390u));
  EXPECT_TRUE(m.cascade());
  EXPECT_TRUE(m.restart_identity());
  const auto plain =
      ParseAs<TruncateMessage>(Wire('T').U32(1).U8(0).U32(7).bytes());
  EXPECT_FALSE(plain.cascade());
  EXPECT_FALSE(plain.restart_identity());
}

TEST(PgOutput, LogicalMessageKeepsBinaryContent) {
  const std::string bytes = LogicalMessageBytes();
  const auto m = ParseAs<LogicalMessage>(bytes);
  EXPECT_TRUE(m.transactional);
  EXPECT_EQ(m.lsn, 0x0000000100000030u);
  EXPECT_EQ(m.prefix, "tally.ddl");
  EXPECT_EQ(m.content, std::string("a\0b\xff", 4));
  const auto plain =
      ParseAs<LogicalMessage>(Wire('M').U8(0).U64(1).Str("p").U32(0).bytes());
  EXPECT_FALSE(plain.transactional);
  EXPECT_TRUE(plain.content.empty());
}

TEST(PgOutput, EveryTruncationOfAValidMessageIsDataLoss) {
  for (const std::string& full : AllValidMessages()) {
    ASSERT_TRUE(ParsePgOutputMessage(full).ok()) << full[0];
    for (size_t n = 0; n < full.size(); ++n) {
      const std::string prefix = full.substr(0, n);
      const absl::StatusOr<PgOutputMessage> m = ParsePgOutputMessage(prefix);
      ASSERT_FALSE(m.ok()) << "type " << full[0] << " cut to " << n << " of "
                           << full.size() << " bytes parsed";
      EXPECT_EQ(m.status().code(), absl::StatusCode::kDataLoss) << m.status();
    }
  }
}

TEST(PgOutput, TruncationNamesTheMessageAndField) {
  const std::string full = InsertBytes();
  // Cut inside the second column's value ("ada").
  const auto m = ParsePgOutputMessage(full.substr(0, full.size() - 4));
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("Insert"));
  EXPECT_THAT(m.status().message(), HasSubstr("column 2 of 4"));
}

TEST(PgOutput, TrailingBytesAreDataLoss) {
  for (const std::string& full : AllValidMessages()) {
    const auto m = ParsePgOutputMessage(full + "x");
    ASSERT_FALSE(m.ok()) << full[0];
    EXPECT_EQ(m.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(m.status().message(), HasSubstr("unexpected bytes"));
  }
}

TEST(PgOutput, MalformedFieldsAreDataLossNamingThem) {
  struct Case {
    std::string bytes;
    std::string names;
  };
  const std::vector<Case> cases = {
      {"", "empty"},
      {"Z", "unknown pgoutput message type 0x5a"},
      {Wire('I').U32(1).U8('N').U16(1).U8('x').bytes(), "unknown kind 0x78"},
      {Wire('I').U32(1).U8('N').U16(1).U8('b').U32(0x80000000).bytes(),
       "negative length"},
      {Wire('I').U32(1).U8('N').U16(0xffff).bytes(), "negative count"},
      {Wire('I').U32(1).U8('N').U16(30000).U8('n').bytes(),
       "count 30000 needs at least"},
      {Wire('I').U32(1).U8('K').U16(0).bytes(), "expected N"},
      {Wire('U').U32(1).U8('X').bytes(), "expected KON"},
      {Wire('U').U32(1).U8('K').U16(0).U8('K').U16(0).bytes(), "expected N"},
      {Wire('D').U32(1).U8('N').U16(0).bytes(), "expected KO"},
      {Wire('R').U32(1).Str("s").Str("t").U8('z').U16(0).bytes(),
       "replica identity"},
      {Wire('R').U32(1).Str("s").Str("t").U8('d').U16(5).bytes(),
       "column count"},
      {Wire('T').U32(0x40000000).U8(0).U32(1).bytes(), "relation count"},
      {Wire('M').U8(2).U64(1).Str("p").U32(0).bytes(), "flags"},
      {Wire('M').U8(0).U64(1).Str("p").U32(0xfffffff0).bytes(),
       "negative length"},
  };
  for (const Case& c : cases) {
    const auto m = ParsePgOutputMessage(c.bytes);
    ASSERT_FALSE(m.ok()) << c.names;
    EXPECT_EQ(m.status().code(), absl::StatusCode::kDataLoss) << m.status();
    EXPECT_THAT(m.status().message(), HasSubstr(c.names));
  }
}

TEST(PgOutput, StreamingAndTwoPhaseMessagesAreUnimplemented) {
  for (char type : std::string("SEcAbPKrp")) {
    const auto m = ParsePgOutputMessage(std::string(1, type) + "xxxxxxxx");
    ASSERT_FALSE(m.ok()) << type;
    EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented) << type;
    EXPECT_THAT(m.status().message(), HasSubstr("version 1"));
  }
}

// Random corruption of valid messages must give a status, never a crash or
// a read past the input (run under ASan/valgrind to see the latter).
TEST(PgOutput, RandomCorruptionNeverCrashes) {
  const uint32_t seed = 20261201;
  std::mt19937 rng(seed);
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  const std::vector<std::string> valid = AllValidMessages();
  int ok = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string bytes = valid[rng() % valid.size()];
    const int flips = 1 + rng() % 4;
    for (int f = 0; f < flips; ++f) {
      bytes[rng() % bytes.size()] = static_cast<char>(rng());
    }
    // Copy into an exactly sized heap buffer so that an overread is a real
    // out-of-bounds access.
    std::vector<char> exact(bytes.begin(), bytes.end());
    const auto m =
        ParsePgOutputMessage(absl::string_view(exact.data(), exact.size()));
    if (m.ok()) ++ok;
  }
  // Some corruptions hit plain values and still parse; most must not.
  EXPECT_LT(ok, 20000);
}

}  // namespace
}  // namespace pg
}  // namespace tally
