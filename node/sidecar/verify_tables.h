// VerifyKeyspaces: Admin.VerifyTables (tally/v1/tally.proto) for any
// sidecar — the keyspaces asked for, a catch-up first (changes not captured
// yet would show as differences), then each table against its index, at
// most max_keys keys listed per kind. One loop for the PostgreSQL and the
// MariaDB sidecars (node/sidecar/postgres_sidecar.h, mariadb_sidecar.h).
#ifndef TALLY_NODE_SIDECAR_VERIFY_TABLES_H_
#define TALLY_NODE_SIDECAR_VERIFY_TABLES_H_

#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "tally/v1/tally.pb.h"
#include "tree/status_macros.h"

namespace tally {
namespace node {

// `kept`: the sidecar's keyspaces. `await_caught_up(timeout)`: the
// sidecar's catch-up (kDeadlineExceeded when not in time). `verify(ks)`:
// a result with table_rows, index_rows and the key lists mismatched_keys,
// missing_from_index, missing_from_table. kNotFound for a keyspace that is
// not kept; kFailedPrecondition when not caught up in time.
template <typename AwaitFn, typename VerifyFn>
absl::StatusOr<::tally::v1::VerifyTablesResponse> VerifyKeyspaces(
    const ::tally::v1::VerifyTablesRequest& request,
    const std::vector<std::string>& kept, AwaitFn await_caught_up,
    VerifyFn verify) {
  const absl::Duration catch_up =
      request.catch_up_ms() == 0 ? absl::Seconds(60)
                                 : absl::Milliseconds(request.catch_up_ms());
  const size_t max_keys = request.max_keys() == 0 ? 100 : request.max_keys();
  std::vector<std::string> keyspaces;
  for (const std::string& name : kept) {
    if (request.keyspace().empty() || name == request.keyspace()) {
      keyspaces.push_back(name);
    }
  }
  if (keyspaces.empty()) {
    return absl::NotFoundError(absl::StrFormat(
        "verify: %s is not a table this node keeps (--table)",
        request.keyspace().empty() ? "no table" : request.keyspace()));
  }
  std::sort(keyspaces.begin(), keyspaces.end());
  const absl::Status caught = await_caught_up(catch_up);
  if (absl::IsDeadlineExceeded(caught)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "verify: the sidecar has not caught up with its database: ",
        caught.message(), "; verify again later"));
  }
  TALLY_RETURN_IF_ERROR(caught);
  ::tally::v1::VerifyTablesResponse response;
  for (const std::string& keyspace : keyspaces) {
    TALLY_ASSIGN_OR_RETURN(auto r, verify(keyspace));
    ::tally::v1::TableVerify* t = response.add_tables();
    t->set_keyspace(keyspace);
    t->set_table_rows(r.table_rows);
    t->set_index_rows(r.index_rows);
    t->set_mismatched(r.mismatched_keys.size());
    t->set_missing_from_index(r.missing_from_index.size());
    t->set_missing_from_table(r.missing_from_table.size());
    for (size_t i = 0; i < r.mismatched_keys.size() && i < max_keys; ++i) {
      t->add_mismatched_keys(r.mismatched_keys[i]);
    }
    for (size_t i = 0; i < r.missing_from_index.size() && i < max_keys; ++i) {
      t->add_missing_from_index_keys(r.missing_from_index[i]);
    }
    for (size_t i = 0; i < r.missing_from_table.size() && i < max_keys; ++i) {
      t->add_missing_from_table_keys(r.missing_from_table[i]);
    }
  }
  return response;
}

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_SIDECAR_VERIFY_TABLES_H_
