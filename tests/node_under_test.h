// A tallyd under test: started as the multi-process tests start it (no
// fsync per commit: the tests kill no machine), and asked for its status
// and row counts. Failures are reported as test failures, and an empty
// value returned, so that a test reads straight on:
//
//   auto a = StartNode("node-a", dir.path(), {"--sync-interval", "1s"});
//   ASSERT_TRUE(a);
//   EXPECT_EQ(Rows(a->address()), 3u);
//   EXPECT_EQ(Status(a->address()).peers_size(), 0);
#ifndef TALLY_TESTS_NODE_UNDER_TEST_H_
#define TALLY_TESTS_NODE_UNDER_TEST_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "support/process.h"
#include "tally/v1/tally.pb.h"
#include "tests/node_connect.h"

namespace tally {
namespace testing {

// A node named `name` with its data in `dir`, listening on `listen`, with
// `--sync-writes false` and then `extra`; nullptr (and a test failure)
// when it did not start.
inline std::unique_ptr<NodeProcess> StartNode(
    const std::string& name, const std::string& dir,
    std::vector<std::string> extra = {},
    const std::string& listen = "127.0.0.1:0") {
  extra.insert(extra.begin(), {"--sync-writes", "false"});
  auto node = NodeProcess::Start(name, dir, extra, listen);
  EXPECT_TRUE(node.ok()) << node.status();
  return node.ok() ? std::move(*node) : nullptr;
}

// Admin.Status of the node at `address`; empty when it did not answer.
inline v1::StatusResponse Status(const std::string& address) {
  absl::StatusOr<v1::StatusResponse> status = Connect(address)->Status();
  EXPECT_TRUE(status.ok()) << status.status();
  return status.ok() ? *status : v1::StatusResponse{};
}

// The rows (tombstones included) of `keyspace` on the node at `address`;
// 0 when it has no such keyspace.
inline uint64_t Rows(const std::string& address,
                     const std::string& keyspace = "default") {
  const v1::StatusResponse status = Status(address);
  for (const v1::KeyspaceSummary& ks : status.keyspaces()) {
    if (ks.name() == keyspace) return ks.row_count();
  }
  return 0;
}

}  // namespace testing
}  // namespace tally

#endif  // TALLY_TESTS_NODE_UNDER_TEST_H_
