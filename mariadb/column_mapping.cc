#include "mariadb/column_mapping.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tally {
namespace mariadb {
namespace {

// PostgreSQL's builtin type OIDs (pg_type.dat; the same in every
// database) and those of their arrays.
struct PgType {
  uint32_t oid;
  uint32_t array_oid;
};
constexpr PgType kInt2{21, 1005};
constexpr PgType kInt4{23, 1007};
constexpr PgType kInt8{20, 1016};
constexpr PgType kFloat4{700, 1021};
constexpr PgType kFloat8{701, 1022};
constexpr PgType kNumeric{1700, 1231};
constexpr PgType kBpchar{1042, 1014};
constexpr PgType kVarchar{1043, 1015};
constexpr PgType kText{25, 1009};
constexpr PgType kJson{114, 199};
constexpr PgType kBytea{17, 1001};
constexpr PgType kDate{1082, 1182};
constexpr PgType kTimestamp{1114, 1115};
constexpr PgType kTimestampTz{1184, 1185};
constexpr PgType kTime{1083, 1183};

// Days from 1970-01-01 to y-m-d in the proleptic Gregorian calendar.
int64_t DaysFromCivil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

void CivilFromDays(int64_t z, int64_t* y, unsigned* m, unsigned* d) {
  z += 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const unsigned doe = static_cast<unsigned>(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  *d = doy - (153 * mp + 2) / 5 + 1;
  *m = mp < 10 ? mp + 3 : mp - 9;
  *y = static_cast<int64_t>(yoe) + era * 400 + (*m <= 2);
}

// PostgreSQL counts dates and timestamps from 2000-01-01.
constexpr int64_t kPgEpochDays = 10957;
constexpr int64_t kMicrosPerDay = int64_t{86400} * 1000000;

void PutBig(std::string* out, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) {
    out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
}

uint64_t GetBig(absl::string_view in) {
  uint64_t v = 0;
  for (char c : in) v = (v << 8) | static_cast<unsigned char>(c);
  return v;
}

std::string PgTimeType(absl::string_view base, int precision,
                       absl::string_view zone) {
  return precision == 6 ? absl::StrCat(base, " ", zone)
                        : absl::StrCat(base, "(", precision, ") ", zone);
}

absl::Status Refuse(const MariaDbColumn& c, absl::string_view why) {
  return absl::FailedPreconditionError(
      absl::StrCat("column `", c.name, "` (", c.column_type, "): ", why));
}

bool IsText(absl::string_view t) {
  return t == "char" || t == "varchar" || t == "tinytext" || t == "text" ||
         t == "mediumtext" || t == "longtext";
}

bool IsBinary(absl::string_view t) {
  return t == "binary" || t == "varbinary" || t == "tinyblob" || t == "blob" ||
         t == "mediumblob" || t == "longblob";
}

absl::Status OutOfRange(const Value& v, absl::string_view type) {
  return absl::OutOfRangeError(absl::StrCat(
      "the value ",
      v.kind == Value::Kind::kUint ? absl::StrCat(v.u) : absl::StrCat(v.i),
      " does not fit PostgreSQL's ", type));
}

absl::Status AppendInteger(const Value& v, int bytes, absl::string_view type,
                           std::string* out) {
  // The signed range of `bytes` bytes, computed in unsigned arithmetic
  // (shifting into, or negating, int64's sign bit is undefined).
  const uint64_t half = uint64_t{1} << (8 * bytes - 1);
  const int64_t max = static_cast<int64_t>(half - 1);
  const int64_t min = -max - 1;
  int64_t x = 0;
  if (v.kind == Value::Kind::kInt) {
    x = v.i;
  } else if (v.kind == Value::Kind::kUint) {
    if (v.u > static_cast<uint64_t>(max)) return OutOfRange(v, type);
    x = static_cast<int64_t>(v.u);
  } else {
    return absl::InvalidArgumentError("an integer column sent another type");
  }
  if (bytes < 8 && (x < min || x > max)) return OutOfRange(v, type);
  PutBig(out, static_cast<uint64_t>(x), bytes);
  return absl::OkStatus();
}

// PostgreSQL's numeric send() form of the decimal text `text` ("-12.5000")
// with display scale `scale`: base-10000 digits without leading or
// trailing zero digits (PostgreSQL stores numerics so), the weight of the
// first, the sign, the scale.
absl::Status AppendNumeric(absl::string_view text, int scale,
                           std::string* out) {
  bool negative = false;
  if (!text.empty() && (text[0] == '-' || text[0] == '+')) {
    negative = text[0] == '-';
    text.remove_prefix(1);
  }
  const size_t dot = text.find('.');
  std::string integer(text.substr(0, dot));
  std::string fraction(dot == absl::string_view::npos ? ""
                                                      : text.substr(dot + 1));
  for (const std::string* part : {&integer, &fraction}) {
    for (char c : *part) {
      if (!absl::ascii_isdigit(c)) {
        return absl::InvalidArgumentError(
            absl::StrCat("a DECIMAL value that is not a number: '", text, "'"));
      }
    }
  }
  if (integer.empty() && fraction.empty()) {
    return absl::InvalidArgumentError("an empty DECIMAL value");
  }
  integer.insert(0, (4 - integer.size() % 4) % 4, '0');
  fraction.append((4 - fraction.size() % 4) % 4, '0');
  std::vector<uint16_t> digits;
  auto group = [](const std::string& s, size_t at) {
    return static_cast<uint16_t>((s[at] - '0') * 1000 +
                                 (s[at + 1] - '0') * 100 +
                                 (s[at + 2] - '0') * 10 + (s[at + 3] - '0'));
  };
  for (size_t i = 0; i < integer.size(); i += 4) {
    digits.push_back(group(integer, i));
  }
  for (size_t i = 0; i < fraction.size(); i += 4) {
    digits.push_back(group(fraction, i));
  }
  int weight = static_cast<int>(integer.size() / 4) - 1;
  size_t first = 0;
  while (first < digits.size() && digits[first] == 0) {
    ++first;
    --weight;
  }
  size_t last = digits.size();
  while (last > first && digits[last - 1] == 0) --last;
  if (first == last) {  // zero: no digits, weight 0, positive
    weight = 0;
    negative = false;
  }
  PutBig(out, last - first, 2);
  PutBig(out, static_cast<uint16_t>(static_cast<int16_t>(weight)), 2);
  PutBig(out, negative ? 0x4000 : 0x0000, 2);
  PutBig(out, static_cast<uint16_t>(scale), 2);
  for (size_t i = first; i < last; ++i) PutBig(out, digits[i], 2);
  return absl::OkStatus();
}

absl::StatusOr<std::string> NumericText(absl::string_view b) {
  if (b.size() < 8) return absl::DataLossError("a numeric of under 8 bytes");
  const size_t ndigits = GetBig(b.substr(0, 2));
  const int weight = static_cast<int16_t>(GetBig(b.substr(2, 2)));
  const uint16_t sign = static_cast<uint16_t>(GetBig(b.substr(4, 2)));
  const int dscale = static_cast<int>(GetBig(b.substr(6, 2)));
  if (b.size() != 8 + 2 * ndigits) {
    return absl::DataLossError("a numeric whose length is not its digits'");
  }
  if (sign != 0 && sign != 0x4000) {
    return absl::OutOfRangeError(
        "NaN and infinity have no MariaDB DECIMAL value");
  }
  std::vector<int> digits(ndigits);
  for (size_t i = 0; i < ndigits; ++i) {
    digits[i] = static_cast<int>(GetBig(b.substr(8 + 2 * i, 2)));
  }
  auto digit_at = [&](int w) {  // the base-10000 digit of weight w
    const int index = weight - w;
    return index >= 0 && index < static_cast<int>(ndigits) ? digits[index] : 0;
  };
  std::string out = sign == 0x4000 && ndigits > 0 ? "-" : "";
  std::string integer;
  for (int w = std::max(weight, 0); w >= 0; --w) {
    absl::StrAppend(&integer, absl::StrFormat("%04d", digit_at(w)));
  }
  const size_t nonzero = integer.find_first_not_of('0');
  out += nonzero == std::string::npos ? "0" : integer.substr(nonzero);
  if (dscale > 0) {
    std::string fraction;
    for (int w = -1; static_cast<int>(fraction.size()) < dscale; --w) {
      absl::StrAppend(&fraction, absl::StrFormat("%04d", digit_at(w)));
    }
    absl::StrAppend(&out, ".", fraction.substr(0, dscale));
  }
  return out;
}

size_t Utf8Characters(absl::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xc0) != 0x80;
  return n;
}

std::string TimeText(int64_t micros) {
  const int64_t seconds = micros / 1000000;
  return absl::StrFormat("%02d:%02d:%02d.%06d", seconds / 3600,
                         seconds / 60 % 60, seconds % 60, micros % 1000000);
}

}  // namespace

absl::StatusOr<ColumnMapping> MapColumn(const MariaDbColumn& c) {
  ColumnMapping m;
  const std::string t = absl::AsciiStrToLower(c.data_type);
  const bool is_unsigned = absl::StrContains(c.column_type, "unsigned");
  auto set = [&m](CanonicalType type, std::string pg_type, PgType oids) {
    m.type = type;
    m.pg_type = std::move(pg_type);
    m.pg_oid = oids.oid;
    m.pg_array_oid = oids.array_oid;
  };
  if (t == "tinyint" || (t == "smallint" && !is_unsigned)) {
    set(CanonicalType::kInt2, "smallint", kInt2);
  } else if (t == "smallint" || t == "mediumint" ||
             (t == "int" && !is_unsigned)) {
    set(CanonicalType::kInt4, "integer", kInt4);
  } else if (t == "int" || (t == "bigint" && !is_unsigned)) {
    set(CanonicalType::kInt8, "bigint", kInt8);
  } else if (t == "bigint") {
    return Refuse(c,
                  "no PostgreSQL type holds bigint unsigned's range (up to "
                  "18446744073709551615); use bigint, or decimal(20,0) "
                  "beside a PostgreSQL numeric(20,0)");
  } else if (t == "float") {
    set(CanonicalType::kFloat4, "real", kFloat4);
  } else if (t == "double") {
    set(CanonicalType::kFloat8, "double precision", kFloat8);
  } else if (t == "decimal") {
    set(CanonicalType::kNumeric,
        absl::StrCat("numeric(", c.numeric_precision, ",", c.numeric_scale,
                     ")"),
        kNumeric);
    m.scale = c.numeric_scale;
  } else if (t == "char") {
    set(CanonicalType::kBpchar,
        absl::StrCat("character(", c.character_maximum_length, ")"), kBpchar);
    m.length = static_cast<int>(c.character_maximum_length);
  } else if (t == "varchar") {
    set(CanonicalType::kText,
        absl::StrCat("character varying(", c.character_maximum_length, ")"),
        kVarchar);
  } else if (t == "longtext" && c.json) {
    set(CanonicalType::kJson, "json", kJson);
  } else if (IsText(t)) {
    set(CanonicalType::kText, "text", kText);
  } else if (IsBinary(t)) {
    set(CanonicalType::kBytea, "bytea", kBytea);
  } else if (t == "date") {
    set(CanonicalType::kDate, "date", kDate);
  } else if (t == "datetime") {
    m.precision = c.datetime_precision;
    set(CanonicalType::kTimestamp,
        PgTimeType("timestamp", m.precision, "without time zone"), kTimestamp);
  } else if (t == "timestamp") {
    m.precision = c.datetime_precision;
    set(CanonicalType::kTimestampTz,
        PgTimeType("timestamp", m.precision, "with time zone"), kTimestampTz);
  } else if (t == "time") {
    m.precision = c.datetime_precision;
    set(CanonicalType::kTime,
        PgTimeType("time", m.precision, "without time zone"), kTime);
  } else if (t == "enum" || t == "set") {
    return Refuse(c,
                  "tally does not map MariaDB's enum and set types yet; use "
                  "varchar (and a CHECK constraint) to compare it with "
                  "PostgreSQL");
  } else if (t == "year") {
    return Refuse(c, "year has no PostgreSQL counterpart; use smallint");
  } else if (t == "bit") {
    return Refuse(c,
                  "tally does not map bit(n); use an integer type or "
                  "binary(n)");
  } else {
    return Refuse(
        c, absl::StrCat("tally has no PostgreSQL mapping for ", c.data_type));
  }
  if (IsText(t) && m.type != CanonicalType::kJson) {
    m.pg_collation = "default";
    if (c.key && !absl::EndsWith(c.collation, "_nopad_bin") &&
        c.collation != "binary") {
      return Refuse(
          c, absl::StrCat("a key column with collation ", c.collation,
                          " holds as one key strings PostgreSQL holds "
                          "apart ('a' and 'A' when case-insensitive, 'a' "
                          "and 'a ' under PAD SPACE); use a NO PAD binary "
                          "collation such as utf8mb4_nopad_bin"));
    }
  }
  return m;
}

absl::Status AppendCanonical(const ColumnMapping& m, const Value& v,
                             std::string* out) {
  switch (m.type) {
    case CanonicalType::kInt2:
      return AppendInteger(v, 2, "smallint", out);
    case CanonicalType::kInt4:
      return AppendInteger(v, 4, "integer", out);
    case CanonicalType::kInt8:
      return AppendInteger(v, 8, "bigint", out);
    case CanonicalType::kFloat4: {
      if (v.kind != Value::Kind::kFloat) break;
      uint32_t bits = 0;
      std::memcpy(&bits, &v.f, 4);
      PutBig(out, bits, 4);
      return absl::OkStatus();
    }
    case CanonicalType::kFloat8: {
      if (v.kind != Value::Kind::kDouble) break;
      uint64_t bits = 0;
      std::memcpy(&bits, &v.d, 8);
      PutBig(out, bits, 8);
      return absl::OkStatus();
    }
    case CanonicalType::kNumeric:
      if (v.kind != Value::Kind::kBytes) break;
      return AppendNumeric(v.bytes, m.scale, out);
    case CanonicalType::kBpchar: {
      if (v.kind != Value::Kind::kBytes) break;
      out->append(v.bytes.data(), v.bytes.size());
      const size_t chars = Utf8Characters(v.bytes);
      if (chars < static_cast<size_t>(m.length)) {
        out->append(m.length - chars, ' ');
      }
      return absl::OkStatus();
    }
    case CanonicalType::kText:
    case CanonicalType::kJson:
    case CanonicalType::kBytea:
      if (v.kind != Value::Kind::kBytes) break;
      out->append(v.bytes.data(), v.bytes.size());
      return absl::OkStatus();
    case CanonicalType::kDate:
    case CanonicalType::kTimestamp:
    case CanonicalType::kTimestampTz: {
      if (v.kind != Value::Kind::kTime) break;
      const TimeValue& t = v.time;
      if (t.year == 0 || t.month == 0 || t.day == 0) {
        return absl::OutOfRangeError(absl::StrFormat(
            "the zero date %04d-%02d-%02d has no PostgreSQL value", t.year,
            t.month, t.day));
      }
      const int64_t days = DaysFromCivil(t.year, t.month, t.day) - kPgEpochDays;
      if (m.type == CanonicalType::kDate) {
        PutBig(out, static_cast<uint32_t>(static_cast<int32_t>(days)), 4);
        return absl::OkStatus();
      }
      const int64_t micros =
          days * kMicrosPerDay +
          ((int64_t{t.hour} * 60 + t.minute) * 60 + t.second) * 1000000 +
          t.microsecond;
      PutBig(out, static_cast<uint64_t>(micros), 8);
      return absl::OkStatus();
    }
    case CanonicalType::kTime: {
      if (v.kind != Value::Kind::kTime) break;
      const TimeValue& t = v.time;
      if (t.negative || t.hour >= 24) {
        return absl::OutOfRangeError(absl::StrFormat(
            "the TIME %s%02d:%02d:%02d is outside one day, PostgreSQL's "
            "time range",
            t.negative ? "-" : "", t.hour, t.minute, t.second));
      }
      PutBig(out,
             static_cast<uint64_t>(
                 ((int64_t{t.hour} * 60 + t.minute) * 60 + t.second) * 1000000 +
                 t.microsecond),
             8);
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("a value of another kind than a ", m.pg_type, " column's"));
}

absl::StatusOr<std::string> CanonicalText(const ColumnMapping& m,
                                          absl::string_view b) {
  auto need = [&](size_t n) -> absl::Status {
    if (b.size() == n) return absl::OkStatus();
    return absl::DataLossError(absl::StrCat("a ", m.pg_type, " value of ",
                                            b.size(), " bytes, not ", n));
  };
  switch (m.type) {
    case CanonicalType::kInt2:
      if (absl::Status s = need(2); !s.ok()) return s;
      return absl::StrCat(static_cast<int16_t>(GetBig(b)));
    case CanonicalType::kInt4:
      if (absl::Status s = need(4); !s.ok()) return s;
      return absl::StrCat(static_cast<int32_t>(GetBig(b)));
    case CanonicalType::kInt8:
      if (absl::Status s = need(8); !s.ok()) return s;
      return absl::StrCat(static_cast<int64_t>(GetBig(b)));
    case CanonicalType::kFloat4: {
      if (absl::Status s = need(4); !s.ok()) return s;
      const uint32_t bits = static_cast<uint32_t>(GetBig(b));
      float f = 0;
      std::memcpy(&f, &bits, 4);
      if (!std::isfinite(f)) {
        return absl::OutOfRangeError("NaN and infinity have no MariaDB value");
      }
      return absl::StrFormat("%.9g", f);
    }
    case CanonicalType::kFloat8: {
      if (absl::Status s = need(8); !s.ok()) return s;
      const uint64_t bits = GetBig(b);
      double d = 0;
      std::memcpy(&d, &bits, 8);
      if (!std::isfinite(d)) {
        return absl::OutOfRangeError("NaN and infinity have no MariaDB value");
      }
      return absl::StrFormat("%.17g", d);
    }
    case CanonicalType::kNumeric:
      return NumericText(b);
    case CanonicalType::kBpchar:
    case CanonicalType::kText:
    case CanonicalType::kJson:
    case CanonicalType::kBytea:
      return std::string(b);
    case CanonicalType::kDate: {
      if (absl::Status s = need(4); !s.ok()) return s;
      const int32_t days = static_cast<int32_t>(GetBig(b));
      if (days == std::numeric_limits<int32_t>::max() ||
          days == std::numeric_limits<int32_t>::min()) {
        return absl::OutOfRangeError("infinity has no MariaDB date");
      }
      int64_t y = 0;
      unsigned mo = 0;
      unsigned d = 0;
      CivilFromDays(days + kPgEpochDays, &y, &mo, &d);
      return absl::StrFormat("%04d-%02d-%02d", y, mo, d);
    }
    case CanonicalType::kTimestamp:
    case CanonicalType::kTimestampTz: {
      if (absl::Status s = need(8); !s.ok()) return s;
      const int64_t micros = static_cast<int64_t>(GetBig(b));
      if (micros == std::numeric_limits<int64_t>::max() ||
          micros == std::numeric_limits<int64_t>::min()) {
        return absl::OutOfRangeError("infinity has no MariaDB time");
      }
      int64_t days = micros / kMicrosPerDay;
      int64_t rest = micros % kMicrosPerDay;
      if (rest < 0) {
        rest += kMicrosPerDay;
        --days;
      }
      int64_t y = 0;
      unsigned mo = 0;
      unsigned d = 0;
      CivilFromDays(days + kPgEpochDays, &y, &mo, &d);
      return absl::StrFormat("%04d-%02d-%02d %s", y, mo, d, TimeText(rest));
    }
    case CanonicalType::kTime: {
      if (absl::Status s = need(8); !s.ok()) return s;
      const int64_t micros = static_cast<int64_t>(GetBig(b));
      if (micros < 0 || micros > kMicrosPerDay) {
        return absl::DataLossError("a time outside one day");
      }
      return TimeText(micros);
    }
  }
  return absl::InternalError("unknown canonical type");
}

}  // namespace mariadb
}  // namespace tally
