// Connect: a client of a node under test, for the multi-process tests. A
// failure is reported as a test failure (and nullptr returned), so a test
// reads `auto client = Connect(node->address());`.
#ifndef TALLY_TESTS_NODE_CONNECT_H_
#define TALLY_TESTS_NODE_CONNECT_H_

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "node/client/client.h"

namespace tally {
namespace testing {

inline std::unique_ptr<node::NodeClient> Connect(const std::string& address) {
  auto client = node::NodeClient::Connect(address, node::ClientOptions{});
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

}  // namespace testing
}  // namespace tally

#endif  // TALLY_TESTS_NODE_CONNECT_H_
