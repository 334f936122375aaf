#include "tests/health_check.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tally {
namespace testing {
namespace {

// grpc.health.v1.HealthCheckRequest{service}: field 1, a string (< 128 B).
grpc::ByteBuffer HealthRequest(const std::string& service) {
  std::string bytes;
  if (!service.empty()) {
    bytes =
        std::string(1, '\x0a') + static_cast<char>(service.size()) + service;
  }
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

std::string BufferBytes(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return "error: dump";
  std::string out;
  for (const grpc::Slice& slice : slices) {
    out.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return out;
}

}  // namespace

std::string HealthCheck(const std::string& address,
                        const std::string& service) {
  grpc::GenericStub stub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  const grpc::ByteBuffer request = HealthRequest(service);
  grpc::ByteBuffer response;
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                 &request, &response, [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  if (!status.ok()) return absl::StrCat("error: ", status.error_code());
  return BufferBytes(response);
}

HealthWatch::HealthWatch(const std::string& address, const std::string& service)
    : stub_(grpc::CreateChannel(address, grpc::InsecureChannelCredentials())),
      request_(HealthRequest(service)) {
  stub_.PrepareBidiStreamingCall(&context_, "/grpc.health.v1.Health/Watch",
                                 grpc::StubOptions(), this);
  StartWrite(&request_);
  StartRead(&response_);
  StartCall();
}

// The call must end before its context goes (a failed assertion returns
// with the watch still open).
HealthWatch::~HealthWatch() {
  context_.TryCancel();
  done_.WaitForNotification();
}

std::vector<std::string> HealthWatch::statuses() {
  absl::MutexLock lock(&mu_);
  return statuses_;
}

bool HealthWatch::WaitDone(absl::Duration timeout) {
  return done_.WaitForNotificationWithTimeout(timeout);
}

void HealthWatch::OnWriteDone(bool) { StartWritesDone(); }

void HealthWatch::OnReadDone(bool ok) {
  if (!ok) return;
  {
    absl::MutexLock lock(&mu_);
    statuses_.push_back(BufferBytes(response_));
  }
  StartRead(&response_);
}

void HealthWatch::OnDone(const grpc::Status&) { done_.Notify(); }

}  // namespace testing
}  // namespace tally
