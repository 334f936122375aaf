#include "tools/cli/commands/command.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "mariadb/url.h"
#include "node/sync/schema_check.h"
#include "storage/names.h"
#include "tools/cli/pg_url.h"
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

absl::Status RequireKeyspace(const Context& ctx, node::NodeClient& client) {
  if (ctx.create_keyspace || ctx.keyspace == "default") {
    return absl::OkStatus();
  }
  // Status, not a handshake: a sidecar's table is a keyspace to write to
  // before its first row is indexed.
  absl::StatusOr<v1::StatusResponse> r = client.Status();
  if (!r.ok()) return CallFailed(ctx, r.status());
  std::vector<std::string> names;
  for (const v1::KeyspaceSummary& ks : r->keyspaces()) {
    if (ks.name() == ctx.keyspace) return absl::OkStatus();
    names.push_back(ks.name());
  }
  for (const v1::PostgresTable& table : r->postgres().tables()) {
    if (table.keyspace() == ctx.keyspace) return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrFormat(
      "keyspace '%s' is not on node %s (its keyspaces: %s); a write would "
      "create it there, and sessions would carry it to every node of the "
      "mesh, for good. Check the name, or give --create-keyspace to create "
      "it",
      ctx.keyspace, client.address(),
      names.empty() ? "none" : absl::StrJoin(names, ", ")));
}

absl::Status ListKeyspacesInError(const Context& ctx,
                                  const absl::Status& absent) {
  if (!absl::IsNotFound(absent) || ctx.args.size() < 2) return absent;
  std::string lists;
  for (const std::string& address : {ctx.args[0], ctx.args[1]}) {
    absl::StatusOr<std::unique_ptr<node::NodeClient>> client =
        Connect(ctx, address);
    if (!client.ok()) continue;
    absl::StatusOr<v1::HandshakeResponse> r = (*client)->Handshake({}, 0);
    if (!r.ok()) continue;
    std::string names;
    for (const v1::KeyspaceSummary& ks : r->keyspaces()) {
      absl::StrAppend(&names, names.empty() ? "" : ", ", ks.name());
    }
    absl::StrAppend(&lists, "; ", address, " has ",
                    names.empty() ? "no keyspaces" : names);
  }
  if (lists.empty()) return absent;
  return absl::NotFoundError(
      absl::StrCat(absent.message(), lists, " (choose one with --keyspace)"));
}

CommandResult ForEachKeyspace(const Context& ctx,
                              CommandResult (*command)(const Context&)) {
  if (ctx.given.count("keyspace") > 0) {
    return absl::InvalidArgumentError(
        "--all-keyspaces and --keyspace exclude each other; give one");
  }
  for (const std::string& arg : ctx.args) {
    if (IsPostgresUrl(arg) || mariadb::IsMariaDbUrl(arg)) {
      return absl::InvalidArgumentError(
          "--all-keyspaces is for two nodes; between databases every table "
          "with a primary key is compared by default (--table chooses)");
    }
  }
  std::set<std::string> keyspaces;
  for (const std::string& address : ctx.args) {
    TALLY_ASSIGN_OR_RETURN(auto client, Connect(ctx, address));
    absl::StatusOr<v1::HandshakeResponse> r = client->Handshake({}, 0);
    if (!r.ok()) return CallFailed(ctx, r.status());
    for (const v1::KeyspaceSummary& ks : r->keyspaces()) {
      keyspaces.insert(ks.name());
    }
  }
  if (keyspaces.empty()) {
    return absl::NotFoundError(absl::StrFormat(
        "neither %s nor %s has any keyspace", ctx.args[0], ctx.args[1]));
  }
  int code = 0;
  std::vector<std::string> failed;
  for (const std::string& keyspace : keyspaces) {
    Context one = ctx;
    one.keyspace = keyspace;
    one.all_keyspaces = false;
    const CommandResult result = command(one);
    std::cout.flush();
    if (!result.ok()) {
      failed.push_back(absl::StrCat(keyspace, ": ", result.status().message()));
    } else {
      code = std::max(code, *result);
    }
  }
  if (!failed.empty()) {
    return absl::AbortedError(absl::StrFormat("%d of %d keyspaces failed: %s",
                                              failed.size(), keyspaces.size(),
                                              absl::StrJoin(failed, "; ")));
  }
  return code;
}

// FAILED_PRECONDITION when the backends of nodes `a` and `b` give
// ctx.keyspace different schema fingerprints (node/sync/schema_check.h): its
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

absl::StatusOr<std::string> ArgBytes(const Context& ctx, size_t i,
                                     absl::string_view what) {
  if (!ctx.escaped) return ctx.args[i];
  std::string out;
  std::string error;
  if (!absl::CUnescape(ctx.args[i], &out, &error)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--escaped: %s '%s' is not a valid C-escaped string: %s", what,
        ctx.args[i], error));
  }
  return out;
}

}  // namespace cli
}  // namespace tally
