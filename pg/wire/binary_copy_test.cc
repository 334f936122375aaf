#include "pg/wire/binary_copy.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tally {
namespace pg {
namespace {

// A row as the tests compare them: nullopt for NULL.
using Row = std::vector<std::optional<std::string>>;

std::vector<Field> FieldsOf(const Row& row) {
  std::vector<Field> fields;
  for (const auto& v : row) {
    fields.push_back(v ? Field::Of(*v) : Field::Null());
  }
  return fields;
}

Row RowOf(absl::Span<const Field> fields) {
  Row row;
  for (const Field& f : fields) {
    if (f.is_null()) {
      row.push_back(std::nullopt);
    } else {
      row.push_back(std::string(f.bytes()));
    }
  }
  return row;
}

std::string Stream(const std::vector<Row>& rows) {
  CopyBinaryWriter writer;
  for (const Row& row : rows) {
    EXPECT_TRUE(writer.AddRow(FieldsOf(row)).ok());
  }
  writer.Finish();
  return writer.TakeBuffered();
}

// Feeds `stream` in pieces of the given sizes (the last piece takes the
// rest) and collects the rows; returns Finish()'s status, or the first
// Feed error.
absl::Status Read(absl::string_view stream, const std::vector<size_t>& sizes,
                  std::vector<Row>* rows,
                  int expected = CopyBinaryReader::kAnyFieldCount) {
  CopyBinaryReader reader(
      [rows](absl::Span<const Field> fields) {
        rows->push_back(RowOf(fields));
        return absl::OkStatus();
      },
      expected);
  size_t pos = 0;
  for (size_t n : sizes) {
    n = std::min(n, stream.size() - pos);
    absl::Status s = reader.Feed(stream.substr(pos, n));
    if (!s.ok()) return s;
    pos += n;
  }
  absl::Status s = reader.Feed(stream.substr(pos));
  if (!s.ok()) return s;
  return reader.Finish();
}

const std::vector<Row>& SampleRows() {
  static const auto* rows = new std::vector<Row>{
      {std::string("\x00\x00\x00\x01", 4), std::string("alpha"), std::nullopt},
      {std::string("\x00\x00\x00\x02", 4), std::string(""), std::string("x")},
      {std::string("\x00\x00\x00\x03", 4), std::nullopt, std::string(300, 'z')},
  };
  return *rows;
}

// The bytes PostgreSQL sends for a two-row, two-column COPY, written out by
// hand so that reader and writer are checked against the format, not only
// against each other.
std::string HandWrittenStream() {
  std::string s("PGCOPY\n\377\r\n\0", 11);
  s += std::string("\0\0\0\0", 4);            // flags
  s += std::string("\0\0\0\0", 4);            // no header extension
  s += std::string("\0\2", 2);                // 2 fields
  s += std::string("\0\0\0\4\0\0\0\x2a", 8);  // int4 42
  s += std::string("\0\0\0\2hi", 6);          // text 'hi'
  s += std::string("\0\2", 2);
  s += std::string("\0\0\0\4\xff\xff\xff\xff", 8);  // int4 -1
  s += std::string("\xff\xff\xff\xff", 4);          // NULL
  s += std::string("\xff\xff", 2);                  // trailer
  return s;
}

TEST(CopyBinaryWriter, WritesTheFormatByteForByte) {
  CopyBinaryWriter writer;
  ASSERT_TRUE(
      writer.AddRow({Field::Of(std::string("\0\0\0\x2a", 4)), Field::Of("hi")})
          .ok());
  ASSERT_TRUE(writer
                  .AddRow({Field::Of(std::string("\xff\xff\xff\xff", 4)),
                           Field::Null()})
                  .ok());
  writer.Finish();
  EXPECT_EQ(writer.rows(), 2);
  EXPECT_EQ(writer.TakeBuffered(), HandWrittenStream());
  EXPECT_EQ(writer.buffered_bytes(), 0u);
}

TEST(CopyBinaryReader, ReadsTheFormatByteForByte) {
  std::vector<Row> rows;
  ASSERT_TRUE(Read(HandWrittenStream(), {}, &rows).ok());
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0], (Row{std::string("\0\0\0\x2a", 4), std::string("hi")}));
  EXPECT_EQ(rows[1], (Row{std::string("\xff\xff\xff\xff", 4), std::nullopt}));
}

TEST(CopyBinaryReader, NullAndEmptyStayDistinct) {
  std::vector<Row> rows;
  ASSERT_TRUE(Read(Stream(SampleRows()), {}, &rows).ok());
  EXPECT_EQ(rows, SampleRows());
  EXPECT_EQ(rows[1][1], std::string(""));
  EXPECT_EQ(rows[2][1], std::nullopt);
}

TEST(CopyBinaryReader, ZeroRowsAndZeroColumns) {
  std::vector<Row> rows;
  ASSERT_TRUE(Read(Stream({}), {}, &rows).ok());
  EXPECT_TRUE(rows.empty());
  ASSERT_TRUE(Read(Stream({Row{}, Row{}}), {}, &rows).ok());
  EXPECT_EQ(rows, (std::vector<Row>{Row{}, Row{}}));
}

TEST(CopyBinaryReader, AnySplitIntoPiecesGivesTheSameRows) {
  const std::string stream = Stream(SampleRows());
  // Byte by byte.
  std::vector<Row> rows;
  ASSERT_TRUE(Read(stream, std::vector<size_t>(stream.size(), 1), &rows).ok());
  EXPECT_EQ(rows, SampleRows());
  // Every split in two.
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    rows.clear();
    ASSERT_TRUE(Read(stream, {cut}, &rows).ok()) << "cut at " << cut;
    EXPECT_EQ(rows, SampleRows()) << "cut at " << cut;
  }
  // Random pieces, with empty ones among them.
  const uint32_t seed = 20261201;
  std::mt19937 rng(seed);
  for (int round = 0; round < 200; ++round) {
    std::vector<size_t> sizes;
    for (size_t total = 0; total < stream.size();) {
      sizes.push_back(rng() % 40);
      total += sizes.back();
    }
    rows.clear();
    ASSERT_TRUE(Read(stream, sizes, &rows).ok()) << "seed " << seed;
    EXPECT_EQ(rows, SampleRows()) << "seed " << seed << " round " << round;
  }
}

TEST(CopyBinaryReader, EveryTruncationIsDataLossAndDeliversOnlyWholeRows) {
  const std::string stream = Stream(SampleRows());
  for (size_t len = 0; len < stream.size(); ++len) {
    for (size_t piece : {size_t{1}, stream.size()}) {
      std::vector<Row> rows;
      absl::Status s =
          Read(stream.substr(0, len),
               std::vector<size_t>(piece == 1 ? len : 1, piece), &rows);
      EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss)
          << "length " << len << ": " << s;
      ASSERT_LE(rows.size(), SampleRows().size());
      for (size_t i = 0; i < rows.size(); ++i) {
        EXPECT_EQ(rows[i], SampleRows()[i]) << "length " << len;
      }
    }
  }
}

TEST(CopyBinaryReader, TruncationMessagesSayWhereTheStreamStopped) {
  const std::string stream = Stream(SampleRows());
  std::vector<Row> rows;
  absl::Status s = Read(stream.substr(0, 5), {}, &rows);
  EXPECT_NE(s.message().find("inside its header"), std::string::npos) << s;
  s = Read(stream.substr(0, stream.size() - 2), {}, &rows);
  EXPECT_NE(s.message().find("without its trailer"), std::string::npos) << s;
  s = Read(stream.substr(0, stream.size() - 10), {}, &rows);
  EXPECT_NE(s.message().find("inside row 3"), std::string::npos) << s;
}

TEST(CopyBinaryReader, RefusesAStreamThatIsNotBinaryCopy) {
  std::vector<Row> rows;
  // Text COPY output: refused on its first bytes, before a header's worth.
  absl::Status s = Read("1\talpha\n", {}, &rows);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("signature"), std::string::npos) << s;
  std::string stream = Stream(SampleRows());
  stream[6] = '\r';
  EXPECT_EQ(Read(stream, {}, &rows).code(), absl::StatusCode::kDataLoss);
}

TEST(CopyBinaryReader, HeaderFlagsAndExtension) {
  const std::string rows_and_trailer = Stream(SampleRows()).substr(19);
  auto with_header = [&](uint32_t flags, const std::string& ext) {
    std::string s(kCopyBinarySignature);
    for (uint32_t v : {flags, static_cast<uint32_t>(ext.size())}) {
      for (int shift = 24; shift >= 0; shift -= 8) {
        s.push_back(static_cast<char>(v >> shift));
      }
    }
    return s + ext + rows_and_trailer;
  };
  std::vector<Row> rows;
  // A header extension is skipped, however it is split.
  const std::string extended = with_header(0, "some extension");
  ASSERT_TRUE(
      Read(extended, std::vector<size_t>(extended.size(), 1), &rows).ok());
  EXPECT_EQ(rows, SampleRows());
  // Non-critical flags (bits 17-31) are ignored.
  rows.clear();
  ASSERT_TRUE(Read(with_header(0x80020000u, ""), {}, &rows).ok());
  EXPECT_EQ(rows, SampleRows());
  // OIDs (bit 16) and unknown critical flags (bits 0-15) are refused.
  EXPECT_EQ(Read(with_header(1u << 16, ""), {}, &rows).code(),
            absl::StatusCode::kDataLoss);
  absl::Status s = Read(with_header(1u << 3, ""), {}, &rows);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("critical"), std::string::npos) << s;
  // A negative extension length.
  EXPECT_EQ(
      Read(with_header(0, "").replace(15, 4, "\xff\xff\xff\xfe"), {}, &rows)
          .code(),
      absl::StatusCode::kDataLoss);
}

TEST(CopyBinaryReader, RefusesBadLengthsAndCounts) {
  std::vector<Row> rows;
  const std::string good = HandWrittenStream();
  // Field length -2 (the first field's length is at byte 21).
  std::string bad = good;
  bad.replace(21, 4, "\xff\xff\xff\xfe");
  absl::Status s = Read(bad, {}, &rows);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("length -2"), std::string::npos) << s;
  // Field count -2.
  bad = good;
  bad.replace(19, 2, "\xff\xfe");
  EXPECT_EQ(Read(bad, {}, &rows).code(), absl::StatusCode::kDataLoss);
  // A huge length is a truncation, never a read past the input.
  bad = good;
  bad.replace(21, 4, "\x7f\xff\xff\xff");
  EXPECT_EQ(Read(bad, {}, &rows).code(), absl::StatusCode::kDataLoss);
  // Another field count than the SELECT list has.
  rows.clear();
  s = Read(good, {}, &rows, 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("expected 3"), std::string::npos) << s;
  EXPECT_TRUE(rows.empty());
  EXPECT_TRUE(Read(good, {}, &rows, 2).ok());
}

TEST(CopyBinaryReader, RefusesBytesAfterTheTrailer) {
  std::vector<Row> rows;
  const std::string good = HandWrittenStream();
  EXPECT_EQ(Read(good + "x", {}, &rows).code(), absl::StatusCode::kDataLoss);
  rows.clear();
  // Also when they arrive in a later piece.
  EXPECT_EQ(Read(good + std::string("\0\1", 2), {good.size()}, &rows).code(),
            absl::StatusCode::kDataLoss);
}

TEST(CopyBinaryReader, ACallbackErrorStopsTheReaderForGood) {
  int calls = 0;
  CopyBinaryReader reader([&calls](absl::Span<const Field>) {
    ++calls;
    return calls == 2 ? absl::ResourceExhaustedError("full") : absl::OkStatus();
  });
  const std::string stream = Stream(SampleRows());
  EXPECT_EQ(reader.Feed(stream).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(reader.rows(), 1);
  EXPECT_EQ(reader.Feed("more").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(reader.Finish().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(calls, 2);
}

TEST(CopyBinaryReader, ALargeRowAcrossManyPieces) {
  const Row big{std::string(1 << 20, 'b'), std::nullopt};
  const std::string stream = Stream({big, big});
  std::vector<Row> rows;
  ASSERT_TRUE(
      Read(stream, std::vector<size_t>(stream.size() / 997 + 1, 997), &rows)
          .ok());
  EXPECT_EQ(rows, (std::vector<Row>{big, big}));
}

TEST(CopyBinaryWriter, RefusesRowsTheFormatCannotCarry) {
  CopyBinaryWriter writer;
  const size_t before = writer.buffered_bytes();
  std::vector<Field> wide(CopyBinaryWriter::kMaxFields + 1, Field::Null());
  EXPECT_EQ(writer.AddRow(wide).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(writer.buffered_bytes(), before);
  wide.pop_back();
  EXPECT_TRUE(writer.AddRow(wide).ok());
  writer.Finish();
  EXPECT_EQ(writer.AddRow({}).code(), absl::StatusCode::kFailedPrecondition);
  std::vector<Row> rows;
  ASSERT_TRUE(Read(writer.TakeBuffered(), {}, &rows).ok());
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].size(), CopyBinaryWriter::kMaxFields);
}

}  // namespace
}  // namespace pg
}  // namespace tally
