#include "tools/cli/command.h"

#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "node/schema_check.h"
#include "storage/names.h"
#include "tree/status_macros.h"

namespace tally {
namespace cli {

void PrintJson(const Json& value) { std::cout << DumpJson(value) << "\n"; }

void ProgressLine::Update(const std::string& text) {
  if (!enabled_) return;
  const absl::Time now = absl::Now();
  if (now - last_ < absl::Milliseconds(100)) return;
  last_ = now;
  std::fprintf(stderr, "\r%s\033[K", text.c_str());
  std::fflush(stderr);
  shown_ = true;
}

void ProgressLine::Clear() {
  if (!shown_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  shown_ = false;
}

absl::Status CheckKeyspace(const Context& ctx) {
  absl::Status s = storage::ValidateKeyspaceName(ctx.keyspace);
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad --keyspace: ", s.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<node::NodeClient>> Connect(
    const Context& ctx, const std::string& address) {
  absl::Status valid = node::ValidateAddress(address);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("bad node address '%s': %s", absl::CHexEscape(address),
                        valid.message()));
  }
  return node::NodeClient::Connect(address, ctx.client_options);
}

// The client's errors already name the node and the call; a deadline
// additionally says which knob sets it, and a refused TLS handshake which
// --tls-* setting is the likely cause.
absl::Status CallFailed(const Context& ctx, const absl::Status& s) {
  if (s.code() == absl::StatusCode::kUnavailable) {
    return node::ExplainTlsFailure(s, ctx.tls);
  }
  if (s.code() != absl::StatusCode::kDeadlineExceeded) return s;
  return absl::Status(
      s.code(),
      absl::StrFormat("%s (--timeout=%s)", s.message(),
                      absl::FormatDuration(ctx.client_options.rpc_timeout)));
}

tree::Version VersionOf(const v1::Version& proto) {
  return tree::Version{tree::HlcTimestamp::FromRaw(proto.hlc()),
                       proto.origin()};
}

// The summary of `keyspace` on a node, or nullopt when the node lacks it.
absl::StatusOr<std::optional<v1::KeyspaceSummary>> FindKeyspace(
    const Context& ctx, node::NodeClient& client, const std::string& keyspace) {
  absl::StatusOr<v1::HandshakeResponse> r = client.Handshake({keyspace}, 0);
  if (absl::IsNotFound(r.status())) return std::nullopt;
  if (!r.ok()) return CallFailed(ctx, r.status());
  for (const v1::KeyspaceSummary& ks : r->keyspaces()) {
    if (ks.name() == keyspace) return ks;
  }
  return std::nullopt;
}

// FAILED_PRECONDITION when the backends of nodes `a` and `b` give
// ctx.keyspace different schema fingerprints (node/schema_check.h): its
// rows are then neither compared nor copied. OK when either lacks it.
absl::Status CheckSchemas(const Context& ctx, node::NodeClient& a,
                          node::NodeClient& b) {
  TALLY_ASSIGN_OR_RETURN(std::optional<v1::KeyspaceSummary> in_a,
                         FindKeyspace(ctx, a, ctx.keyspace));
  TALLY_ASSIGN_OR_RETURN(std::optional<v1::KeyspaceSummary> in_b,
                         FindKeyspace(ctx, b, ctx.keyspace));
  if (!in_a.has_value() || !in_b.has_value()) return absl::OkStatus();
  return node::CheckSchema(
      ctx.keyspace,
      node::SchemaOf{a.address(), in_a->schema_fingerprint(),
                     in_a->schema_description()},
      node::SchemaOf{b.address(), in_b->schema_fingerprint(),
                     in_b->schema_description()});
}

}  // namespace cli
}  // namespace tally
