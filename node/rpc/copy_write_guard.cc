#include "node/rpc/copy_write_guard.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "node/observe/log.h"

namespace tally {
namespace node {

CopyWriteGuard::CopyWriteGuard(std::string node_name, std::string source,
                               bool read_only)
    : node_name_(std::move(node_name)),
      source_(std::move(source)),
      read_only_(read_only) {}

absl::Status CopyWriteGuard::Admit(uint64_t rows) {
  if (read_only_) {
    {
      absl::MutexLock lock(&mu_);
      rows_refused_ += rows;
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "node '", node_name_,
        "' is read-only (--read-only): it takes rows only from its peers",
        source_.empty()
            ? ""
            : absl::StrCat("; write to its source ", source_, " instead")));
  }
  if (source_.empty()) return absl::OkStatus();
  bool first = false;
  {
    absl::MutexLock lock(&mu_);
    first = rows_written_ == 0;
    rows_written_ += rows;
  }
  if (first) {
    LogWarning(
        "a client wrote to a copy: the next session with its source undoes "
        "it; write to the source, or start this node with --read-only",
        {{"source", source_}, {"rows", rows}});
  }
  return absl::OkStatus();
}

void CopyWriteGuard::FillStatus(::tally::v1::StatusResponse* response) {
  absl::MutexLock lock(&mu_);
  response->set_read_only(read_only_);
  response->set_writes_refused(rows_refused_);
  if (rows_written_ > 0) {
    ::tally::v1::OriginRows* writes = response->add_copy_writes();
    writes->set_origin(node_name_);
    writes->set_rows(rows_written_);
  }
}

}  // namespace node
}  // namespace tally
