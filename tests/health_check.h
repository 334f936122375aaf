// The standard gRPC health service as a probe or a load balancer asks it,
// for the multi-process tests: grpc.health.v1.Health/Check and /Watch over
// a generic stub (the health proto is not installed by Debian's gRPC), the
// messages encoded by hand. A status is the response's bytes: kServing
// (08 01), kNotServing (08 02), 08 03 SERVICE_UNKNOWN (Watch only).
//
//   EXPECT_EQ(HealthCheck(node->address(), "tally.v1.Admin"), kServing);
//   HealthWatch watch(node->address(), "");
//   ... watch.statuses() ...
#ifndef TALLY_TESTS_HEALTH_CHECK_H_
#define TALLY_TESTS_HEALTH_CHECK_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace tally {
namespace testing {

inline const std::string kServing("\x08\x01", 2);
inline const std::string kNotServing("\x08\x02", 2);

// Check of `service` ("" is the whole server): the response's bytes, or
// "error: CODE" (grpc::StatusCode) when the call fails.
std::string HealthCheck(const std::string& address, const std::string& service);

// Watch of one service: records every status sent until the stream ends.
// The destructor cancels the call and waits for its end.
class HealthWatch
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  HealthWatch(const std::string& address, const std::string& service);
  ~HealthWatch() override;

  // The statuses sent so far.
  std::vector<std::string> statuses() ABSL_LOCKS_EXCLUDED(mu_);
  // Whether the stream ended within `timeout`.
  bool WaitDone(absl::Duration timeout);
  void Cancel() { context_.TryCancel(); }

  void OnWriteDone(bool ok) override;
  void OnReadDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnDone(const grpc::Status& status) override;

 private:
  grpc::GenericStub stub_;
  grpc::ClientContext context_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
  absl::Mutex mu_;
  std::vector<std::string> statuses_ ABSL_GUARDED_BY(mu_);
  absl::Notification done_;
};

}  // namespace testing
}  // namespace tally

#endif  // TALLY_TESTS_HEALTH_CHECK_H_
