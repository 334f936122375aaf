// The name rules of tally: which keyspace names and node (origin) names a
// store accepts. Every layer that takes a name from outside (the services,
// the feed, the config, the CLI) checks it with these, so that a name is
// refused with the same message wherever it enters.
//
//   TALLY_RETURN_IF_ERROR(storage::ValidateKeyspaceName(request.keyspace()));
//
// Thread-safe: pure functions.
#ifndef TALLY_STORAGE_NAMES_H_
#define TALLY_STORAGE_NAMES_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tally {
namespace storage {

// Validates a keyspace name: 1..128 bytes of [A-Za-z0-9_.-].
absl::Status ValidateKeyspaceName(absl::string_view name);
// Validates a node / origin name: 1..256 printable ASCII bytes, no spaces.
absl::Status ValidateNodeName(absl::string_view name);

}  // namespace storage
}  // namespace tally

#endif  // TALLY_STORAGE_NAMES_H_
