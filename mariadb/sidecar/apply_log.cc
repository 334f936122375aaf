#include "mariadb/sidecar/apply_log.h"

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "tree/hlc.h"

namespace tally {
namespace mariadb {
namespace {

constexpr uint8_t kFormat = 1;

void PutU64(uint64_t v, std::string* out) {
  for (int shift = 56; shift >= 0; shift -= 8) {
    out->push_back(static_cast<char>((v >> shift) & 0xff));
  }
}

// LEB128: 7 bits a byte, low bits first; most counts and indexes take one.
void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void PutString(absl::string_view s, std::string* out) {
  PutVarint(s.size(), out);
  out->append(s.data(), s.size());
}

// Reads what the Put functions wrote; every Get fails once the input is
// short, so a caller checks `ok` once at the end of a record.
class Reader {
 public:
  explicit Reader(absl::string_view in) : in_(in) {}
  bool ok() const { return ok_; }
  bool done() const { return in_.empty(); }
  uint64_t Get(int bytes) {
    if (!ok_ || in_.size() < static_cast<size_t>(bytes)) {
      ok_ = false;
      return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) {
      v = (v << 8) | static_cast<unsigned char>(in_[i]);
    }
    in_.remove_prefix(bytes);
    return v;
  }
  uint64_t GetVarint() {
    uint64_t v = 0;
    for (int shift = 0; ok_ && shift < 64; shift += 7) {
      const uint64_t byte = Get(1);
      v |= (byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return v;
    }
    ok_ = false;
    return 0;
  }
  absl::string_view GetString() {
    const uint64_t n = GetVarint();
    if (!ok_ || in_.size() < n) {
      ok_ = false;
      return {};
    }
    absl::string_view s = in_.substr(0, n);
    in_.remove_prefix(n);
    return s;
  }

 private:
  absl::string_view in_;
  bool ok_ = true;
};

}  // namespace

std::string EncodeApplyLog(const ApplyLog& log) {
  std::vector<absl::string_view> keyspaces;
  std::vector<absl::string_view> origins;
  absl::flat_hash_map<absl::string_view, uint32_t> keyspace_index;
  absl::flat_hash_map<absl::string_view, uint32_t> origin_index;
  for (const AppliedRow& r : log.rows) {
    if (keyspace_index.emplace(r.keyspace, keyspaces.size()).second) {
      keyspaces.push_back(r.keyspace);
    }
    if (origin_index.emplace(r.version.origin, origins.size()).second) {
      origins.push_back(r.version.origin);
    }
  }
  std::string out;
  out.push_back(static_cast<char>(kFormat));
  PutU64(log.sequence, &out);
  PutVarint(keyspaces.size(), &out);
  for (absl::string_view k : keyspaces) PutString(k, &out);
  PutVarint(origins.size(), &out);
  for (absl::string_view o : origins) PutString(o, &out);
  PutVarint(log.rows.size(), &out);
  for (const AppliedRow& r : log.rows) {
    PutVarint(keyspace_index[r.keyspace], &out);
    PutString(r.key, &out);
    PutU64(r.version.timestamp.raw(), &out);
    PutVarint(origin_index[r.version.origin], &out);
    out.push_back(static_cast<char>((r.deleted || r.erased ? 1 : 0) |
                                    (r.erased ? 2 : 0)));
  }
  return out;
}

absl::StatusOr<ApplyLog> DecodeApplyLog(absl::string_view bytes) {
  Reader in(bytes);
  if (in.Get(1) != kFormat) {
    return absl::DataLossError("not a tally apply log record (format)");
  }
  ApplyLog log;
  log.sequence = in.Get(8);
  // Every entry takes at least one byte: a larger count is not ours (and
  // must not size an allocation).
  const uint64_t keyspace_count = in.GetVarint();
  if (keyspace_count > bytes.size()) {
    return absl::DataLossError("malformed tally apply log record (count)");
  }
  std::vector<std::string> keyspaces(keyspace_count);
  for (std::string& k : keyspaces) {
    if (!in.ok()) break;
    k = std::string(in.GetString());
  }
  const uint64_t origin_count = in.ok() ? in.GetVarint() : 0;
  if (origin_count > bytes.size()) {
    return absl::DataLossError("malformed tally apply log record (count)");
  }
  std::vector<std::string> origins(origin_count);
  for (std::string& o : origins) {
    if (!in.ok()) break;
    o = std::string(in.GetString());
  }
  const uint64_t count = in.ok() ? in.GetVarint() : 0;
  for (uint64_t i = 0; i < count && in.ok(); ++i) {
    AppliedRow r;
    const uint64_t k = in.GetVarint();
    r.key = std::string(in.GetString());
    r.version.timestamp = tree::HlcTimestamp::FromRaw(in.Get(8));
    const uint64_t o = in.GetVarint();
    const uint64_t flags = in.Get(1);
    if (!in.ok() || k >= keyspaces.size() || o >= origins.size() || flags > 3) {
      return absl::DataLossError("malformed tally apply log record (row)");
    }
    r.keyspace = keyspaces[k];
    r.version.origin = origins[o];
    r.deleted = (flags & 1) != 0;
    r.erased = (flags & 2) != 0;
    log.rows.push_back(std::move(r));
  }
  if (!in.ok() || !in.done()) {
    return absl::DataLossError("malformed tally apply log record (length)");
  }
  return log;
}

}  // namespace mariadb
}  // namespace tally
