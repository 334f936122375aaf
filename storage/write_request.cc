#include "storage/write_request.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"

namespace tally {
namespace storage {

int CompareRows(const tree::Version& a, const tree::Digest128& a_digest,
                const tree::Version& b, const tree::Digest128& b_digest) {
  const int c = tree::CompareVersions(a, b);
  if (c != 0) return c;
  if (a_digest.high != b_digest.high) {
    return a_digest.high < b_digest.high ? -1 : 1;
  }
  if (a_digest.low != b_digest.low) return a_digest.low < b_digest.low ? -1 : 1;
  return 0;
}

absl::Status RejectionError(const WriteResult& result) {
  if (result.rejected.empty()) return absl::OkStatus();
  const RejectedMutation& first = result.rejected.front();
  return absl::Status(
      first.status.code(),
      absl::StrFormat("%d row(s) not taken by the backend; the first, key "
                      "'%s' of keyspace '%s': %s",
                      result.rejected.size(),
                      absl::CHexEscape(first.key.substr(0, 64)), first.keyspace,
                      first.status.message()));
}

Mutation Mutation::Put(std::string keyspace, std::string key,
                       std::string value) {
  Mutation m;
  m.keyspace = std::move(keyspace);
  m.key = std::move(key);
  m.value = std::move(value);
  return m;
}

Mutation Mutation::Erase(std::string keyspace, std::string key) {
  Mutation m;
  m.keyspace = std::move(keyspace);
  m.key = std::move(key);
  m.erase = true;
  return m;
}

Mutation Mutation::Delete(std::string keyspace, std::string key) {
  Mutation m;
  m.keyspace = std::move(keyspace);
  m.key = std::move(key);
  m.deleted = true;
  return m;
}

}  // namespace storage
}  // namespace tally
