#include "mariadb/binlog/row_events.h"

#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "tree/status_macros.h"

namespace tally {
namespace mariadb {
namespace binlog {
namespace {

// MySQL's JSON type code; MariaDB logs JSON as a LONGTEXT blob, but the
// metadata layout is the blob's either way.
constexpr uint8_t kMysqlJson = 245;
// The collation id of the binary character set (BINARY, VARBINARY, BLOB).
constexpr uint32_t kBinaryCollation = 63;

// Optional TABLE_MAP metadata field codes (binlog_row_metadata=FULL).
enum OptionalField : uint8_t {
  kSignedness = 1,
  kDefaultCharset = 2,
  kColumnCharset = 3,
  kColumnName = 4,
  kSetStrValue = 5,
  kEnumStrValue = 6,
  kSimplePrimaryKey = 8,
  kPrimaryKeyWithPrefix = 9,
};

// Reads little-endian integers and byte runs from a body, every read
// bounds-checked; errors name the absolute offset in the event body.
class Reader {
 public:
  Reader(absl::string_view bytes, size_t base = 0)
      : bytes_(bytes), base_(base) {}

  size_t offset() const { return base_ + pos_; }
  size_t remaining() const { return bytes_.size() - pos_; }
  bool done() const { return pos_ == bytes_.size(); }

  absl::Status Truncated(absl::string_view what, size_t need) const {
    return absl::DataLossError(absl::StrCat(
        "truncated binlog event: ", what, " needs ", need, " bytes at offset ",
        offset(), ", ", remaining(), " left"));
  }

  absl::StatusOr<absl::string_view> Bytes(size_t n, absl::string_view what) {
    if (n > remaining()) return Truncated(what, n);
    absl::string_view out = bytes_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  // Little-endian unsigned integer of `n` bytes (1..8).
  absl::StatusOr<uint64_t> Uint(size_t n, absl::string_view what) {
    TALLY_ASSIGN_OR_RETURN(absl::string_view b, Bytes(n, what));
    uint64_t v = 0;
    for (size_t i = n; i-- > 0;) {
      v = (v << 8) | static_cast<uint8_t>(b[i]);
    }
    return v;
  }
  // The protocol's length-encoded integer (1, 3, 4 or 9 bytes).
  absl::StatusOr<uint64_t> PackedInt(absl::string_view what) {
    const size_t at = offset();
    TALLY_ASSIGN_OR_RETURN(uint64_t first, Uint(1, what));
    if (first < 251) return first;
    if (first == 252) return Uint(2, what);
    if (first == 253) return Uint(3, what);
    if (first == 254) return Uint(8, what);
    return absl::DataLossError(absl::StrCat("malformed binlog event: ", what,
                                            " has the length byte ", first,
                                            " at offset ", at));
  }
  // A length-encoded count that must fit in what is left (each counted
  // item is at least `min_item_bytes` long): guards against allocating
  // for a garbage count.
  absl::StatusOr<size_t> Count(absl::string_view what, size_t min_item_bytes) {
    const size_t at = offset();
    TALLY_ASSIGN_OR_RETURN(uint64_t n, PackedInt(what));
    if (min_item_bytes > 0 && n > remaining() / min_item_bytes) {
      return absl::DataLossError(absl::StrCat(
          "malformed binlog event: ", what, " of ", n, " at offset ", at,
          " exceeds the ", remaining(), " bytes left"));
    }
    return static_cast<size_t>(n);
  }

 private:
  absl::string_view bytes_;
  size_t base_;
  size_t pos_ = 0;
};

uint64_t BigEndian(absl::string_view b) {
  uint64_t v = 0;
  for (char c : b) v = (v << 8) | static_cast<uint8_t>(c);
  return v;
}

bool BitSet(absl::string_view bitmap, size_t i) {
  return (static_cast<uint8_t>(bitmap[i / 8]) >> (i % 8)) & 1;
}

// The columns the server lists signedness bits for: its numeric fields,
// YEAR among them (a YEAR is stored as a TINYINT).
bool IsNumeric(uint8_t type) {
  switch (type) {
    case kYear:
    case kDecimal:
    case kTiny:
    case kShort:
    case kLong:
    case kFloat:
    case kDouble:
    case kLongLong:
    case kInt24:
    case kNewDecimal:
      return true;
    default:
      return false;
  }
}

bool IsBlob(uint8_t type) {
  return type == kTinyBlob || type == kMediumBlob || type == kLongBlob ||
         type == kBlob || type == kMysqlJson;
}

// The columns the server lists charsets for: text and blob columns, not
// ENUM or SET (they have their own list).
bool IsCharacter(const TableMapColumn& c) {
  return c.type == kString || c.type == kVarchar || c.type == kVarString ||
         IsBlob(c.type);
}

// Reads the per-type metadata of `c` (its logged type already set).
absl::Status ReadColumnMetadata(Reader& r, TableMapColumn& c) {
  c.type = c.logged_type;
  switch (c.logged_type) {
    case kFloat:
    case kDouble:
    case kTinyBlob:
    case kMediumBlob:
    case kLongBlob:
    case kBlob:
    case kGeometry:
    case kMysqlJson: {
      TALLY_ASSIGN_OR_RETURN(uint64_t v, r.Uint(1, "column metadata"));
      c.length = static_cast<uint32_t>(v);
      break;
    }
    case kTimestamp2:
    case kDatetime2:
    case kTime2: {
      TALLY_ASSIGN_OR_RETURN(uint64_t v, r.Uint(1, "column metadata"));
      if (v > 6) {
        return absl::DataLossError(absl::StrCat("malformed binlog event: ", v,
                                                " fractional digits at offset ",
                                                r.offset() - 1));
      }
      c.length = static_cast<uint32_t>(v);
      break;
    }
    case kVarchar:
    case kVarString: {
      TALLY_ASSIGN_OR_RETURN(uint64_t v, r.Uint(2, "column metadata"));
      c.length = static_cast<uint32_t>(v);
      break;
    }
    case kBit: {
      TALLY_ASSIGN_OR_RETURN(absl::string_view b,
                             r.Bytes(2, "column metadata"));
      const int odd_bits = static_cast<uint8_t>(b[0]);
      const int whole_bytes = static_cast<uint8_t>(b[1]);
      c.bits = whole_bytes * 8 + odd_bits;
      c.length = whole_bytes + (odd_bits != 0 ? 1 : 0);
      break;
    }
    case kNewDecimal: {
      TALLY_ASSIGN_OR_RETURN(absl::string_view b,
                             r.Bytes(2, "column metadata"));
      c.precision = static_cast<uint8_t>(b[0]);
      c.scale = static_cast<uint8_t>(b[1]);
      break;
    }
    case kString:
    case kEnum:
    case kSet: {
      // Two bytes, the real type first; a length above 255 keeps its two
      // high bits inverted in bits 4-5 of the real type byte.
      TALLY_ASSIGN_OR_RETURN(absl::string_view b,
                             r.Bytes(2, "column metadata"));
      uint8_t real_type = static_cast<uint8_t>(b[0]);
      uint32_t length = static_cast<uint8_t>(b[1]);
      if ((real_type & 0x30) != 0x30) {
        length |= static_cast<uint32_t>((real_type & 0x30) ^ 0x30) << 4;
        real_type |= 0x30;
      }
      if (real_type != kString && real_type != kEnum && real_type != kSet) {
        return absl::DataLossError(
            absl::StrCat("malformed binlog event: a string column's real type ",
                         real_type, " before offset ", r.offset()));
      }
      c.type = real_type;
      c.length = length;
      break;
    }
    case kTiny:
    case kShort:
    case kLong:
    case kLongLong:
    case kInt24:
    case kDate:
    case kNewDate:
    case kTime:
    case kTimestamp:
    case kDatetime:
    case kYear:
    case kNullType:
      break;
    default:
      return absl::UnimplementedError(
          absl::StrCat("binlog column type ", c.logged_type,
                       " is not decoded (its row bytes cannot be skipped)"));
  }
  return absl::OkStatus();
}

// Reads the optional metadata fields binlog_row_metadata=FULL appends.
absl::Status ReadOptionalMetadata(Reader& r, TableMap& map) {
  std::vector<TableMapColumn*> numeric, character, enums, sets;
  for (TableMapColumn& c : map.columns) {
    if (IsNumeric(c.type)) numeric.push_back(&c);
    if (IsCharacter(c)) character.push_back(&c);
    if (c.type == kEnum) enums.push_back(&c);
    if (c.type == kSet) sets.push_back(&c);
  }
  while (!r.done()) {
    TALLY_ASSIGN_OR_RETURN(uint64_t field, r.Uint(1, "metadata field type"));
    TALLY_ASSIGN_OR_RETURN(size_t length, r.Count("metadata field length", 1));
    const size_t field_offset = r.offset();
    TALLY_ASSIGN_OR_RETURN(absl::string_view bytes,
                           r.Bytes(length, "metadata field"));
    Reader f(bytes, field_offset);
    switch (field) {
      case kSignedness:
        // One bit per numeric column, most significant bit first.
        for (size_t i = 0; i < numeric.size(); ++i) {
          if (i / 8 >= bytes.size()) return f.Truncated("signedness bits", 1);
          numeric[i]->is_unsigned =
              (static_cast<uint8_t>(bytes[i / 8]) >> (7 - i % 8)) & 1;
        }
        break;
      case kDefaultCharset: {
        TALLY_ASSIGN_OR_RETURN(uint64_t fallback, f.PackedInt("charset"));
        for (TableMapColumn* c : character) {
          c->charset = static_cast<uint32_t>(fallback);
        }
        while (!f.done()) {
          TALLY_ASSIGN_OR_RETURN(uint64_t index, f.PackedInt("charset column"));
          TALLY_ASSIGN_OR_RETURN(uint64_t charset, f.PackedInt("charset"));
          if (index >= character.size()) {
            return absl::DataLossError(absl::StrCat(
                "malformed binlog event: charset of text column ", index,
                " of ", character.size(), " at offset ", f.offset()));
          }
          character[index]->charset = static_cast<uint32_t>(charset);
        }
        break;
      }
      case kColumnCharset:
        for (TableMapColumn* c : character) {
          TALLY_ASSIGN_OR_RETURN(uint64_t charset, f.PackedInt("charset"));
          c->charset = static_cast<uint32_t>(charset);
        }
        break;
      case kColumnName:
        for (TableMapColumn& c : map.columns) {
          TALLY_ASSIGN_OR_RETURN(size_t n, f.Count("column name length", 0));
          TALLY_ASSIGN_OR_RETURN(absl::string_view name,
                                 f.Bytes(n, "column name"));
          c.name = std::string(name);
        }
        map.has_names = true;
        break;
      case kSetStrValue:
      case kEnumStrValue:
        for (TableMapColumn* c : field == kSetStrValue ? sets : enums) {
          TALLY_ASSIGN_OR_RETURN(size_t count, f.Count("label count", 1));
          c->labels.clear();
          for (size_t i = 0; i < count; ++i) {
            TALLY_ASSIGN_OR_RETURN(size_t n, f.Count("label length", 0));
            TALLY_ASSIGN_OR_RETURN(absl::string_view label,
                                   f.Bytes(n, "label"));
            c->labels.emplace_back(label);
          }
        }
        break;
      case kSimplePrimaryKey:
      case kPrimaryKeyWithPrefix:
        map.primary_key.clear();
        while (!f.done()) {
          TALLY_ASSIGN_OR_RETURN(uint64_t index, f.PackedInt("key column"));
          if (index >= map.columns.size()) {
            return absl::DataLossError(absl::StrCat(
                "malformed binlog event: key column ", index, " of ",
                map.columns.size(), " at offset ", f.offset()));
          }
          map.primary_key.push_back(static_cast<int>(index));
          if (field == kPrimaryKeyWithPrefix) {
            TALLY_RETURN_IF_ERROR(f.PackedInt("key prefix").status());
          }
        }
        break;
      default:
        break;  // geometry types, enum/set charsets: not needed
    }
  }
  return absl::OkStatus();
}

// Bytes per count of leftover decimal digits (a 9-digit group takes 4).
constexpr int kDigitBytes[10] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 4};

// The stored size of a DECIMAL(precision, scale).
size_t DecimalSize(int precision, int scale) {
  const int integer = precision - scale;
  return (integer / 9) * 4 + kDigitBytes[integer % 9] + (scale / 9) * 4 +
         kDigitBytes[scale % 9];
}

// The text of a stored DECIMAL: groups of 9 digits in big-endian words,
// the leading and trailing partial groups in fewer bytes; the first bit is
// set for non-negative numbers, and a negative number has every bit
// inverted. kDataLoss for a group holding more digits than it may.
absl::StatusOr<std::string> DecimalText(absl::string_view stored, int precision,
                                        int scale, size_t offset) {
  const int integer = precision - scale;
  std::string b(stored);
  const bool negative = (static_cast<uint8_t>(b[0]) & 0x80) == 0;
  b[0] = static_cast<char>(static_cast<uint8_t>(b[0]) ^ 0x80);
  if (negative) {
    for (char& c : b) c = static_cast<char>(~static_cast<uint8_t>(c));
  }
  size_t pos = 0;
  // Appends the `digits` digits of the next group, zero-padded when
  // `pad`.
  auto group = [&](int digits, bool pad, std::string* out) -> absl::Status {
    const int n = kDigitBytes[digits];
    const uint64_t v = BigEndian(absl::string_view(b).substr(pos, n));
    pos += n;
    const std::string text = absl::StrCat(v);
    if (text.size() > static_cast<size_t>(digits)) {
      return absl::DataLossError(
          absl::StrCat("malformed binlog event: a DECIMAL group of ", digits,
                       " digits holds ", v, " at offset ", offset + pos - n));
    }
    if (pad) out->append(digits - text.size(), '0');
    *out += text;
    return absl::OkStatus();
  };
  std::string integer_digits;
  if (integer % 9 != 0) {
    TALLY_RETURN_IF_ERROR(group(integer % 9, false, &integer_digits));
  }
  for (int i = 0; i < integer / 9; ++i) {
    TALLY_RETURN_IF_ERROR(group(9, true, &integer_digits));
  }
  const size_t first = integer_digits.find_first_not_of('0');
  std::string out = negative ? "-" : "";
  out += first == std::string::npos ? "0" : integer_digits.substr(first);
  if (scale > 0) {
    out.push_back('.');
    for (int i = 0; i < scale / 9; ++i) {
      TALLY_RETURN_IF_ERROR(group(9, true, &out));
    }
    if (scale % 9 != 0) TALLY_RETURN_IF_ERROR(group(scale % 9, true, &out));
  }
  return out;
}

// The bytes of the fraction of a TIMESTAMP2/DATETIME2/TIME2 with `fsp`
// fractional digits.
size_t FractionBytes(uint32_t fsp) { return (fsp + 1) / 2; }

TimeValue TimeOfEpoch(int64_t seconds, uint32_t micros) {
  TimeValue t;
  if (seconds == 0 && micros == 0) return t;  // the zero TIMESTAMP
  const absl::CivilSecond c =
      absl::ToCivilSecond(absl::FromUnixSeconds(seconds), absl::UTCTimeZone());
  t.year = static_cast<uint32_t>(c.year());
  t.month = static_cast<uint32_t>(c.month());
  t.day = static_cast<uint32_t>(c.day());
  t.hour = static_cast<uint32_t>(c.hour());
  t.minute = static_cast<uint32_t>(c.minute());
  t.second = static_cast<uint32_t>(c.second());
  t.microsecond = micros;
  return t;
}

// Decodes one non-NULL value of column `c`.
absl::Status ReadValue(Reader& r, const TableMapColumn& c, RowsEvent& event,
                       Value& v) {
  auto integer = [&](size_t n) -> absl::Status {
    TALLY_ASSIGN_OR_RETURN(uint64_t raw, r.Uint(n, "integer"));
    if (c.is_unsigned) {
      v.kind = Value::Kind::kUint;
      v.u = raw;
    } else {
      const int shift = static_cast<int>(64 - 8 * n);
      v.kind = Value::Kind::kInt;
      v.i = static_cast<int64_t>(raw << shift) >> shift;
    }
    return absl::OkStatus();
  };
  auto prefixed = [&](size_t prefix_bytes) -> absl::Status {
    TALLY_ASSIGN_OR_RETURN(uint64_t n, r.Uint(prefix_bytes, "value length"));
    TALLY_ASSIGN_OR_RETURN(v.bytes, r.Bytes(n, "value"));
    v.kind = Value::Kind::kBytes;
    return absl::OkStatus();
  };
  switch (c.type) {
    case kTiny:
      return integer(1);
    case kShort:
      return integer(2);
    case kInt24:
      return integer(3);
    case kLong:
      return integer(4);
    case kLongLong:
      return integer(8);
    case kFloat: {
      TALLY_ASSIGN_OR_RETURN(uint64_t bits, r.Uint(4, "float"));
      const uint32_t bits32 = static_cast<uint32_t>(bits);
      std::memcpy(&v.f, &bits32, 4);
      v.kind = Value::Kind::kFloat;
      return absl::OkStatus();
    }
    case kDouble: {
      TALLY_ASSIGN_OR_RETURN(uint64_t bits, r.Uint(8, "double"));
      std::memcpy(&v.d, &bits, 8);
      v.kind = Value::Kind::kDouble;
      return absl::OkStatus();
    }
    case kYear: {
      TALLY_ASSIGN_OR_RETURN(uint64_t y, r.Uint(1, "year"));
      v.kind = Value::Kind::kUint;
      v.u = y == 0 ? 0 : 1900 + y;
      return absl::OkStatus();
    }
    case kDate:
    case kNewDate: {
      TALLY_ASSIGN_OR_RETURN(uint64_t d, r.Uint(3, "date"));
      v.kind = Value::Kind::kTime;
      v.time.day = d & 31;
      v.time.month = (d >> 5) & 15;
      v.time.year = static_cast<uint32_t>(d >> 9);
      return absl::OkStatus();
    }
    case kTime: {
      // HHMMSS as a signed 3-byte integer.
      TALLY_ASSIGN_OR_RETURN(uint64_t raw, r.Uint(3, "time"));
      int64_t hms = static_cast<int64_t>(raw << 40) >> 40;
      v.kind = Value::Kind::kTime;
      v.time.negative = hms < 0;
      if (hms < 0) hms = -hms;
      v.time.hour = static_cast<uint32_t>(hms / 10000);
      v.time.minute = static_cast<uint32_t>(hms / 100 % 100);
      v.time.second = static_cast<uint32_t>(hms % 100);
      return absl::OkStatus();
    }
    case kTimestamp: {
      TALLY_ASSIGN_OR_RETURN(uint64_t s, r.Uint(4, "timestamp"));
      v.kind = Value::Kind::kTime;
      v.time = TimeOfEpoch(static_cast<int64_t>(s), 0);
      return absl::OkStatus();
    }
    case kDatetime: {
      // YYYYMMDDhhmmss as an 8-byte integer.
      TALLY_ASSIGN_OR_RETURN(uint64_t n, r.Uint(8, "datetime"));
      v.kind = Value::Kind::kTime;
      const uint64_t date = n / 1000000, time = n % 1000000;
      v.time.year = static_cast<uint32_t>(date / 10000);
      v.time.month = static_cast<uint32_t>(date / 100 % 100);
      v.time.day = static_cast<uint32_t>(date % 100);
      v.time.hour = static_cast<uint32_t>(time / 10000);
      v.time.minute = static_cast<uint32_t>(time / 100 % 100);
      v.time.second = static_cast<uint32_t>(time % 100);
      return absl::OkStatus();
    }
    case kTimestamp2: {
      // Big-endian epoch seconds, then the fraction (big-endian, in units
      // of 10^(6 - 2 * bytes) microseconds).
      TALLY_ASSIGN_OR_RETURN(absl::string_view b,
                             r.Bytes(4 + FractionBytes(c.length), "timestamp"));
      const uint64_t seconds = BigEndian(b.substr(0, 4));
      uint64_t fraction = BigEndian(b.substr(4));
      if (b.size() == 5) fraction *= 10000;
      if (b.size() == 6) fraction *= 100;
      v.kind = Value::Kind::kTime;
      v.time = TimeOfEpoch(static_cast<int64_t>(seconds),
                           static_cast<uint32_t>(fraction));
      return absl::OkStatus();
    }
    case kDatetime2: {
      // 40 bits big-endian, offset by 2^39: sign, 17 bits year*13+month,
      // 5 day, 5 hour, 6 minute, 6 second; then the signed fraction.
      TALLY_ASSIGN_OR_RETURN(absl::string_view b,
                             r.Bytes(5 + FractionBytes(c.length), "datetime"));
      const int64_t packed =
          static_cast<int64_t>(BigEndian(b.substr(0, 5))) - (int64_t{1} << 39);
      const uint64_t whole = packed < 0 ? -packed : packed;
      const uint64_t ymd = whole >> 17, hms = whole & ((1 << 17) - 1);
      const uint64_t year_month = ymd >> 5;
      uint64_t fraction = BigEndian(b.substr(5));
      if (b.size() == 6) fraction *= 10000;
      if (b.size() == 7) fraction *= 100;
      v.kind = Value::Kind::kTime;
      v.time.year = static_cast<uint32_t>(year_month / 13);
      v.time.month = static_cast<uint32_t>(year_month % 13);
      v.time.day = static_cast<uint32_t>(ymd & 31);
      v.time.hour = static_cast<uint32_t>(hms >> 12);
      v.time.minute = static_cast<uint32_t>((hms >> 6) & 63);
      v.time.second = static_cast<uint32_t>(hms & 63);
      v.time.microsecond = static_cast<uint32_t>(fraction);
      return absl::OkStatus();
    }
    case kTime2: {
      // 24 bits big-endian, offset by 2^23: sign, 1 unused bit, 10 bits
      // hour, 6 minute, 6 second; then the fraction. A negative time is
      // stored as the two's complement of the whole (integer and fraction)
      // so a negative fraction borrows from the integer part.
      TALLY_ASSIGN_OR_RETURN(absl::string_view b,
                             r.Bytes(3 + FractionBytes(c.length), "time"));
      const size_t fraction_bytes = b.size() - 3;
      // Scaled to microseconds: the whole value in units of 2^-24 of the
      // integer part, as the server keeps it in memory.
      int64_t integer =
          static_cast<int64_t>(BigEndian(b.substr(0, 3))) - (int64_t{1} << 23);
      int64_t fraction = static_cast<int64_t>(BigEndian(b.substr(3)));
      int64_t packed = 0;
      if (fraction_bytes == 3) {
        // Integer and fraction together as one 48-bit two's complement.
        packed = static_cast<int64_t>(BigEndian(b)) - (int64_t{1} << 47);
      } else {
        const int64_t modulus = int64_t{1} << (8 * fraction_bytes);
        if (integer < 0 && fraction != 0) {
          ++integer;
          fraction -= modulus;
        }
        if (fraction_bytes == 1) fraction *= 10000;
        if (fraction_bytes == 2) fraction *= 100;
        packed = integer * (int64_t{1} << 24) + fraction;
      }
      v.kind = Value::Kind::kTime;
      v.time.negative = packed < 0;
      const uint64_t magnitude =
          packed < 0 ? static_cast<uint64_t>(-packed) : packed;
      const uint64_t hms = magnitude >> 24;
      v.time.hour = static_cast<uint32_t>((hms >> 12) & 1023);
      v.time.minute = static_cast<uint32_t>((hms >> 6) & 63);
      v.time.second = static_cast<uint32_t>(hms & 63);
      v.time.microsecond = static_cast<uint32_t>(magnitude & ((1 << 24) - 1));
      return absl::OkStatus();
    }
    case kNewDecimal: {
      if (c.precision < 1 || c.scale > c.precision) {
        return absl::DataLossError(
            absl::StrCat("malformed binlog event: DECIMAL(", c.precision, ",",
                         c.scale, ") before offset ", r.offset()));
      }
      const size_t at = r.offset();
      TALLY_ASSIGN_OR_RETURN(
          absl::string_view b,
          r.Bytes(DecimalSize(c.precision, c.scale), "decimal"));
      TALLY_ASSIGN_OR_RETURN(std::string text,
                             DecimalText(b, c.precision, c.scale, at));
      event.text.push_back(std::move(text));
      v.kind = Value::Kind::kBytes;
      v.bytes = event.text.back();
      return absl::OkStatus();
    }
    case kVarchar:
    case kVarString:
      return prefixed(c.length > 255 ? 2 : 1);
    case kString: {
      TALLY_RETURN_IF_ERROR(prefixed(c.length > 255 ? 2 : 1));
      // The server logs CHAR and BINARY without their padding; BINARY(n)
      // reads back padded with zero bytes to n.
      if (c.charset == kBinaryCollation && v.bytes.size() < c.length) {
        std::string padded(v.bytes);
        padded.resize(c.length, '\0');
        event.text.push_back(std::move(padded));
        v.bytes = event.text.back();
      }
      return absl::OkStatus();
    }
    case kEnum:
    case kSet: {
      if (c.length < 1 || c.length > 8) {
        return absl::DataLossError(
            absl::StrCat("malformed binlog event: an ENUM or SET of ", c.length,
                         " bytes before offset ", r.offset()));
      }
      TALLY_ASSIGN_OR_RETURN(uint64_t n, r.Uint(c.length, "enum or set"));
      if (c.labels.empty()) {
        v.kind = Value::Kind::kUint;
        v.u = n;
        return absl::OkStatus();
      }
      std::string text;
      if (c.type == kEnum) {
        // Index 0 is the empty string an invalid value becomes.
        if (n > 0 && n <= c.labels.size()) text = c.labels[n - 1];
      } else {
        for (size_t i = 0; i < c.labels.size() && i < 64; ++i) {
          if ((n >> i) & 1) {
            if (!text.empty()) text.push_back(',');
            text += c.labels[i];
          }
        }
      }
      event.text.push_back(std::move(text));
      v.kind = Value::Kind::kBytes;
      v.bytes = event.text.back();
      return absl::OkStatus();
    }
    case kBit: {
      TALLY_ASSIGN_OR_RETURN(v.bytes, r.Bytes(c.length, "bit"));
      v.kind = Value::Kind::kBytes;
      return absl::OkStatus();
    }
    case kTinyBlob:
    case kMediumBlob:
    case kLongBlob:
    case kBlob:
    case kGeometry:
    case kMysqlJson:
      if (c.length < 1 || c.length > 4) {
        return absl::DataLossError(
            absl::StrCat("malformed binlog event: a blob length of ", c.length,
                         " bytes before offset ", r.offset()));
      }
      return prefixed(c.length);
    case kNullType:
      return absl::OkStatus();
    default:
      return absl::UnimplementedError(
          absl::StrCat("binlog column type ", c.type, " is not decoded"));
  }
}

// Reads one row image: the NULL bitmap, then each non-NULL value.
absl::StatusOr<std::vector<Value>> ReadImage(Reader& r, const TableMap& map,
                                             RowsEvent& event) {
  const size_t n = map.columns.size();
  TALLY_ASSIGN_OR_RETURN(absl::string_view nulls,
                         r.Bytes((n + 7) / 8, "null bitmap"));
  std::vector<Value> row(n);
  for (size_t i = 0; i < n; ++i) {
    if (BitSet(nulls, i)) continue;
    const size_t at = r.offset();
    absl::Status s = ReadValue(r, map.columns[i], event, row[i]);
    if (!s.ok()) {
      return absl::Status(
          s.code(),
          absl::StrCat("column ", i, map.columns[i].name.empty() ? "" : " `",
                       map.columns[i].name,
                       map.columns[i].name.empty() ? "" : "`", " at offset ",
                       at, ": ", s.message()));
    }
  }
  return row;
}

absl::Status RequireEveryColumn(absl::string_view present, size_t n,
                                absl::string_view image) {
  for (size_t i = 0; i < n; ++i) {
    if (!BitSet(present, i)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the ", image, " image lacks column ", i,
          ": the server logs partial row images (binlog_row_image is not "
          "FULL), from which a row cannot be rebuilt"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool IsRowsEvent(int event_type) {
  return (event_type >= kWriteRowsV1 && event_type <= kDeleteRowsV1) ||
         (event_type >= kWriteRowsV2 && event_type <= kDeleteRowsV2);
}

absl::StatusOr<TableMap> DecodeTableMap(absl::string_view event_body) {
  Reader r(event_body);
  TableMap map;
  TALLY_ASSIGN_OR_RETURN(map.table_id, r.Uint(6, "table id"));
  TALLY_RETURN_IF_ERROR(r.Uint(2, "flags").status());
  TALLY_ASSIGN_OR_RETURN(uint64_t db_length, r.Uint(1, "database length"));
  TALLY_ASSIGN_OR_RETURN(absl::string_view db,
                         r.Bytes(db_length + 1, "database"));
  map.database = std::string(db.substr(0, db_length));
  TALLY_ASSIGN_OR_RETURN(uint64_t table_length, r.Uint(1, "table length"));
  TALLY_ASSIGN_OR_RETURN(absl::string_view table,
                         r.Bytes(table_length + 1, "table"));
  map.table = std::string(table.substr(0, table_length));
  TALLY_ASSIGN_OR_RETURN(size_t columns, r.Count("column count", 1));
  TALLY_ASSIGN_OR_RETURN(absl::string_view types,
                         r.Bytes(columns, "column types"));
  map.columns.resize(columns);
  TALLY_ASSIGN_OR_RETURN(size_t metadata_length, r.Count("metadata length", 1));
  const size_t metadata_offset = r.offset();
  TALLY_ASSIGN_OR_RETURN(absl::string_view metadata,
                         r.Bytes(metadata_length, "metadata"));
  Reader m(metadata, metadata_offset);
  for (size_t i = 0; i < columns; ++i) {
    map.columns[i].logged_type = static_cast<uint8_t>(types[i]);
    TALLY_RETURN_IF_ERROR(ReadColumnMetadata(m, map.columns[i]));
  }
  if (!m.done()) {
    return absl::DataLossError(
        absl::StrCat("malformed binlog event: ", m.remaining(),
                     " metadata bytes left over at offset ", m.offset()));
  }
  TALLY_ASSIGN_OR_RETURN(absl::string_view nullable,
                         r.Bytes((columns + 7) / 8, "nullable bitmap"));
  for (size_t i = 0; i < columns; ++i) {
    map.columns[i].nullable = BitSet(nullable, i);
  }
  TALLY_RETURN_IF_ERROR(ReadOptionalMetadata(r, map));
  return map;
}

absl::StatusOr<RowsEvent> DecodeRowsEvent(int event_type,
                                          absl::string_view event_body,
                                          const TableMap& map) {
  if (!IsRowsEvent(event_type)) {
    return absl::InvalidArgumentError(
        absl::StrCat("binlog event type ", event_type, " is not a rows event"));
  }
  const bool v2 = event_type >= kWriteRowsV2;
  const int kind = v2 ? event_type - kWriteRowsV2 : event_type - kWriteRowsV1;
  const bool has_before = kind != 0;  // UPDATE, DELETE
  const bool has_after = kind != 2;   // WRITE, UPDATE
  RowsEvent event;
  event.event_type = event_type;
  Reader r(event_body);
  TALLY_ASSIGN_OR_RETURN(event.table_id, r.Uint(6, "table id"));
  TALLY_ASSIGN_OR_RETURN(uint64_t flags, r.Uint(2, "flags"));
  event.flags = static_cast<uint16_t>(flags);
  if (v2) {
    // Extra data, its length counting the two length bytes.
    TALLY_ASSIGN_OR_RETURN(uint64_t extra, r.Uint(2, "extra data length"));
    if (extra < 2) {
      return absl::DataLossError(
          absl::StrCat("malformed binlog event: extra data length ", extra,
                       " at offset ", r.offset() - 2));
    }
    TALLY_RETURN_IF_ERROR(r.Bytes(extra - 2, "extra data").status());
  }
  if (event.table_id != map.table_id) {
    return absl::InvalidArgumentError(
        absl::StrCat("rows event of table id ", event.table_id,
                     " decoded with the map of table id ", map.table_id, " (",
                     map.database, ".", map.table, ")"));
  }
  TALLY_ASSIGN_OR_RETURN(size_t columns, r.Count("column count", 0));
  if (columns != map.columns.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rows event of ", columns, " columns for table ", map.database, ".",
        map.table, " whose map has ", map.columns.size()));
  }
  const size_t bitmap_bytes = (columns + 7) / 8;
  TALLY_ASSIGN_OR_RETURN(absl::string_view present,
                         r.Bytes(bitmap_bytes, "columns-present bitmap"));
  TALLY_RETURN_IF_ERROR(
      RequireEveryColumn(present, columns, has_before ? "before" : "after"));
  if (has_before && has_after) {
    TALLY_ASSIGN_OR_RETURN(absl::string_view present_after,
                           r.Bytes(bitmap_bytes, "columns-present bitmap"));
    TALLY_RETURN_IF_ERROR(RequireEveryColumn(present_after, columns, "after"));
  }
  while (!r.done()) {
    RowChange& change = event.changes.emplace_back();
    if (has_before) {
      TALLY_ASSIGN_OR_RETURN(change.before, ReadImage(r, map, event));
    }
    if (has_after) {
      TALLY_ASSIGN_OR_RETURN(change.after, ReadImage(r, map, event));
    }
  }
  return event;
}

}  // namespace binlog
}  // namespace mariadb
}  // namespace tally
