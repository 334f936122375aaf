// The binary COPY format: a streaming reader of `COPY ... TO STDOUT (FORMAT
// binary)` output and a writer of the input of `COPY ... FROM STDIN (FORMAT
// binary)`.
//
// A binary COPY stream is a header (the 11-byte signature "PGCOPY\n\377\r\n\0",
// an int32 flags word, an int32 header-extension length and that many bytes),
// then one tuple per row (an int16 field count, then per field an int32
// length, -1 for NULL, followed by that many bytes of the type's send()
// form), then the trailer (an int16 -1). Integers are big-endian. This is
// the format pgoutput's binary mode shares (both carry each value's send()
// form), so a row read here and the same row decoded from the WAL give the same
// bytes.
//
// The reader is fed the stream in whatever pieces libpq returns them
// (PQgetCopyData: one CopyData message each, which need not align with
// tuples) and calls back once per complete row. It never reads past what it
// was given, and reports malformed or truncated input as kDataLoss, naming
// the row and the byte offset.
//
//   CopyBinaryReader reader([&](absl::Span<const Field> fields) {
//     return index.Add(fields);  // an error stops the reader
//   });
//   while ((n = PQgetCopyData(conn, &buf, 0)) > 0) {
//     absl::Status s = reader.Feed(absl::string_view(buf, n));
//     PQfreemem(buf);
//     if (!s.ok()) return s;
//   }
//   TALLY_RETURN_IF_ERROR(reader.Finish());  // the trailer arrived
//
//   CopyBinaryWriter writer;               // starts with the header
//   TALLY_RETURN_IF_ERROR(writer.AddRow(fields));
//   if (writer.buffered_bytes() > kFlush) Send(writer.TakeBuffered());
//   writer.Finish();                        // the trailer
//   Send(writer.TakeBuffered());
//
// Thread-safety: none; one reader or writer belongs to one stream.
#ifndef TALLY_PG_WIRE_BINARY_COPY_H_
#define TALLY_PG_WIRE_BINARY_COPY_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "pg/wire/field.h"

namespace tally {
namespace pg {

// The 11 bytes every binary COPY stream starts with.
inline constexpr absl::string_view kCopyBinarySignature("PGCOPY\n\377\r\n\0",
                                                        11);

class CopyBinaryReader {
 public:
  // Called once per row, in stream order. The fields point into the
  // reader's or the caller's buffer and are valid only during the call. A
  // non-OK return stops the reader: Feed returns that status, and so does
  // every later Feed and Finish.
  using RowCallback = std::function<absl::Status(absl::Span<const Field>)>;

  // Any field count is accepted (rows of one COPY all have the same one).
  static constexpr int kAnyFieldCount = -1;

  // `expected_fields`: the number of fields every row must have (the
  // length of the SELECT list), or kAnyFieldCount.
  explicit CopyBinaryReader(RowCallback on_row,
                            int expected_fields = kAnyFieldCount);

  CopyBinaryReader(const CopyBinaryReader&) = delete;
  CopyBinaryReader& operator=(const CopyBinaryReader&) = delete;

  // Takes the next piece of the stream, of any size (empty is fine), and
  // calls back for every row it completes. A row may span any number of
  // pieces; the reader keeps only the bytes of the row not yet complete.
  // Returns kDataLoss for malformed input (bad signature, a critical flag
  // it does not know, a negative length other than -1, a row with another
  // field count than expected, bytes after the trailer), or the callback's
  // error. Errors are sticky.
  absl::Status Feed(absl::string_view piece);

  // Declares the end of the stream. Returns OK when the trailer was read;
  // kDataLoss naming where the stream stopped when it was not (a truncated
  // header, row or missing trailer); or the error that stopped the reader.
  absl::Status Finish();

  // Rows delivered to the callback so far.
  int64_t rows() const { return rows_; }
  // True once the trailer was read.
  bool done() const { return state_ == State::kDone; }

 private:
  enum class State { kHeader, kRows, kDone };

  // Parses as many whole units (the header, a row, the trailer) of `data`
  // as it can, starting at a unit boundary. Sets `*used` to the bytes of
  // the units it consumed; when it stops for lack of bytes, sets `need_` to
  // the bytes the unit at `*used` needs at least (counted from its start).
  absl::Status Parse(absl::string_view data, size_t* used);
  absl::Status Corrupt(absl::string_view what, uint64_t at) const;

  // Constant after construction.
  const RowCallback on_row_;
  const int expected_fields_;

  State state_ = State::kHeader;
  absl::Status error_;
  // The bytes of the unit not yet complete (empty when the last piece
  // ended on a boundary).
  std::string pending_;
  // pending_ cannot parse before it holds this many bytes.
  size_t need_ = 0;
  // Stream offset of the first byte of pending_.
  uint64_t offset_ = 0;
  int64_t rows_ = 0;
  // Reused for every row.
  std::vector<Field> fields_;
};

class CopyBinaryWriter {
 public:
  // The largest field count of a tuple (its int16 count field).
  static constexpr size_t kMaxFields = 32767;

  // Starts the buffer with the header (no flags, no extension).
  CopyBinaryWriter();

  CopyBinaryWriter(const CopyBinaryWriter&) = delete;
  CopyBinaryWriter& operator=(const CopyBinaryWriter&) = delete;

  // Appends one row. Returns kInvalidArgument, appending nothing, when it
  // has more than kMaxFields fields or a field of 2^31 bytes or more;
  // kFailedPrecondition after Finish().
  absl::Status AddRow(absl::Span<const Field> fields);

  // Appends the trailer. REQUIRES: not called before.
  void Finish();

  size_t buffered_bytes() const { return buffer_.size(); }
  // Returns the bytes written since the last call and forgets them: the
  // stream is the concatenation of what successive calls return.
  std::string TakeBuffered();

  int64_t rows() const { return rows_; }

 private:
  std::string buffer_;
  int64_t rows_ = 0;
  bool finished_ = false;
};

}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_WIRE_BINARY_COPY_H_
