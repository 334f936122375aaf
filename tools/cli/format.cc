#include "tools/cli/format.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"

namespace tally {
namespace cli {

bool IsValidUtf8(absl::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const auto* end = p + bytes.size();
  while (p < end) {
    const unsigned char c = *p;
    if (c < 0x80) {
      ++p;
      continue;
    }
    int extra;
    uint32_t min;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
      extra = 1, min = 0x80, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2, min = 0x800, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3, min = 0x10000, cp = c & 0x07;
    } else {
      return false;  // a continuation byte or 0xF8..0xFF where a lead belongs
    }
    if (end - p <= extra) return false;
    for (int i = 1; i <= extra; ++i) {
      if ((p[i] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i] & 0x3F);
    }
    // Overlong forms and surrogates would let two byte strings read as the
    // same text; JSON parsers reject them.
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    p += extra + 1;
  }
  return true;
}

void SetBytesField(Json& obj, const std::string& field,
                   absl::string_view bytes) {
  if (IsValidUtf8(bytes)) {
    obj[field] = std::string(bytes);
    return;
  }
  obj[field] = absl::CHexEscape(bytes);
  obj[field + "_base64"] = absl::Base64Escape(bytes);
}

std::string WallTime(tree::HlcTimestamp timestamp) {
  const absl::Time t =
      absl::FromUnixMillis(static_cast<int64_t>(timestamp.physical_millis()));
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

void SetHlcFields(Json& obj, tree::HlcTimestamp timestamp) {
  // A string: as a JSON number the raw value (always above 2^53) would be
  // rounded by jq and JavaScript, which read numbers as doubles.
  obj["hlc"] = absl::StrCat(timestamp.raw());
  obj["millis"] = timestamp.physical_millis();  // 48 bits: exact as a double
  obj["counter"] = timestamp.counter();
}

Json VersionJson(const tree::Version& version) {
  Json out = Json::object();
  SetHlcFields(out, version.timestamp);
  SetBytesField(out, "origin", version.origin);
  out["time"] = WallTime(version.timestamp);
  return out;
}

std::string VersionText(const tree::Version& version) {
  return absl::StrCat(version.timestamp.DebugString(), " ",
                      absl::CHexEscape(version.origin));
}

std::string SideText(const tree::RowEntry* entry) {
  if (entry == nullptr) return "missing";
  if (entry->deleted)
    return absl::StrCat("deleted ", VersionText(entry->version));
  return VersionText(entry->version);
}

Json SideJson(const tree::RowEntry* entry) {
  if (entry == nullptr) return nullptr;
  Json out = Json::object();
  SetHlcFields(out, entry->version.timestamp);
  SetBytesField(out, "origin", entry->version.origin);
  out["time"] = WallTime(entry->version.timestamp);
  out["deleted"] = entry->deleted;
  return out;
}

const std::string& DifferenceKey(const tree::RowEntry* in_a,
                                 const tree::RowEntry* in_b) {
  return in_a != nullptr ? in_a->key : in_b->key;
}

std::string DifferenceText(const tree::RowEntry* in_a,
                           const tree::RowEntry* in_b,
                           absl::string_view label_a,
                           absl::string_view label_b) {
  std::string line =
      absl::StrCat(absl::CHexEscape(DifferenceKey(in_a, in_b)), "  ", label_a,
                   ": ", SideText(in_a), "  ", label_b, ": ", SideText(in_b));
  // Last writer wins cannot order these; say so, or the two sides would
  // look identical on the screen.
  if (in_a != nullptr && in_b != nullptr && in_a->version == in_b->version) {
    absl::StrAppend(&line, "  (same version, different content)");
  }
  return line;
}

Json DifferenceJson(const tree::RowEntry* in_a, const tree::RowEntry* in_b) {
  Json out = Json::object();
  SetBytesField(out, "key", DifferenceKey(in_a, in_b));
  out["a"] = SideJson(in_a);
  out["b"] = SideJson(in_b);
  return out;
}

std::string DumpJson(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string HumanBytes(uint64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  const char* units[] = {"KB", "MB", "GB", "TB"};
  double v = static_cast<double>(bytes) / 1024;
  int unit = 0;
  while (v >= 1024 && unit < 3) {
    v /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", v, units[unit]);
}

std::string Table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) {
      width[i] = std::max(width[i], row[i].size());
    }
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      absl::StrAppend(&line, row[i]);
      if (i + 1 < row.size()) {
        line.append(width[i] - row[i].size() + 2, ' ');
      }
    }
    absl::StrAppend(&out, "  ", line, "\n");
  }
  return out;
}

std::string Hex64(uint64_t value) { return absl::StrFormat("%016x", value); }

std::string RootHex(const std::string& root) {
  return root.empty() ? std::string(32, '0') : absl::BytesToHexString(root);
}

}  // namespace cli
}  // namespace tally
