// put, get, del: one row of a node, by key (a sidecar's table's row by
// its key values, as JSON).
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "storage/store.h"
#include "tools/cli/commands/command.h"
#include "tools/cli/commands/commands.h"
#include "tools/cli/format.h"
#include "tree/status_macros.h"

namespace tally {
namespace cli {
namespace {

// Positional arguments [first, last) as bytes (ArgBytes each): the key as
// a sidecar's table takes it, one text value per primary-key column.
absl::StatusOr<std::vector<std::string>> KeyValues(const Context& ctx,
                                                   size_t first, size_t last) {
  std::vector<std::string> values;
  for (size_t i = first; i < last; ++i) {
    TALLY_ASSIGN_OR_RETURN(std::string v, ArgBytes(ctx, i, "KEY"));
    values.push_back(std::move(v));
  }
  return values;
}

std::string KeyValuesText(const std::vector<std::string>& key) {
  std::vector<std::string> escaped;
  for (const std::string& v : key) escaped.push_back(absl::CHexEscape(v));
  return absl::StrCat("(", absl::StrJoin(escaped, ", "), ")");
}

// A sidecar's table's row (GetResponse.row_json) as JSON, or the text when
// it does not parse (it always should).
Json RowJson(const std::string& text) {
  Json row = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  return row.is_discarded() ? Json(text) : row;
}

}  // namespace

// put KEY VALUE, or for a sidecar's table put KEY... JSON: the node
// answers for the form its keyspace takes (tally.proto PutRequest).
CommandResult Put(const Context& ctx) {
  TALLY_RETURN_IF_ERROR(CheckKeyspace(ctx));
  const size_t value_arg = ctx.args.size() - 1;
  TALLY_ASSIGN_OR_RETURN(const std::string key, ArgBytes(ctx, 0, "KEY"));
  TALLY_ASSIGN_OR_RETURN(const std::vector<std::string> key_values,
                         KeyValues(ctx, 0, value_arg));
  TALLY_ASSIGN_OR_RETURN(const std::string value,
                         ArgBytes(ctx, value_arg, "VALUE"));
  TALLY_ASSIGN_OR_RETURN(auto client, Connect(ctx, ctx.node));
  TALLY_RETURN_IF_ERROR(RequireKeyspace(ctx, *client));
  absl::StatusOr<v1::PutResponse> r =
      client->Put(ctx.keyspace, key, value, key_values);
  if (!r.ok()) return CallFailed(ctx, r.status());
  if (r->postgres()) {
    if (ctx.json) {
      PrintJson({{"keyspace", ctx.keyspace},
                 {"key", key_values},
                 {"postgres", true}});
    } else {
      std::cout << absl::StrFormat(
          "put %s in table %s: written to the database (its version is "
          "stamped when the sidecar captures it)\n",
          KeyValuesText(key_values), ctx.keyspace);
    }
    return 0;
  }
  const tree::Version version = VersionOf(r->version());
  if (ctx.json) {
    Json out = Json::object();
    SetBytesField(out, "key", key);
    out["keyspace"] = ctx.keyspace;
    out["version"] = VersionJson(version);
    PrintJson(out);
  } else {
    std::cout << absl::StrFormat("put '%s' in keyspace '%s': version %s\n",
                                 absl::CHexEscape(key), ctx.keyspace,
                                 VersionText(version));
  }
  return 0;
}

CommandResult Delete(const Context& ctx) {
  TALLY_RETURN_IF_ERROR(CheckKeyspace(ctx));
  TALLY_ASSIGN_OR_RETURN(const std::string key, ArgBytes(ctx, 0, "KEY"));
  TALLY_ASSIGN_OR_RETURN(const std::vector<std::string> key_values,
                         KeyValues(ctx, 0, ctx.args.size()));
  TALLY_ASSIGN_OR_RETURN(auto client, Connect(ctx, ctx.node));
  TALLY_RETURN_IF_ERROR(RequireKeyspace(ctx, *client));
  absl::StatusOr<v1::DeleteResponse> r =
      client->Delete(ctx.keyspace, key, key_values);
  if (!r.ok()) return CallFailed(ctx, r.status());
  if (r->postgres()) {
    if (ctx.json) {
      PrintJson({{"keyspace", ctx.keyspace},
                 {"key", key_values},
                 {"postgres", true},
                 {"deleted", true}});
    } else {
      std::cout << absl::StrFormat(
          "deleted %s from table %s in the database (the sidecar captures "
          "the delete as a tombstone)\n",
          KeyValuesText(key_values), ctx.keyspace);
    }
    return 0;
  }
  const tree::Version version = VersionOf(r->version());
  if (ctx.json) {
    Json out = Json::object();
    SetBytesField(out, "key", key);
    out["keyspace"] = ctx.keyspace;
    out["version"] = VersionJson(version);
    out["deleted"] = true;
    PrintJson(out);
  } else {
    std::cout << absl::StrFormat(
        "deleted '%s' in keyspace '%s': tombstone version %s\n",
        absl::CHexEscape(key), ctx.keyspace, VersionText(version));
  }
  return 0;
}

CommandResult Get(const Context& ctx) {
  TALLY_RETURN_IF_ERROR(CheckKeyspace(ctx));
  TALLY_ASSIGN_OR_RETURN(const std::string key, ArgBytes(ctx, 0, "KEY"));
  TALLY_ASSIGN_OR_RETURN(const std::vector<std::string> key_values,
                         KeyValues(ctx, 0, ctx.args.size()));
  TALLY_ASSIGN_OR_RETURN(auto client, Connect(ctx, ctx.node));
  absl::StatusOr<v1::GetResponse> r =
      client->Get(ctx.keyspace, key, key_values);
  if (absl::IsNotFound(r.status()) &&
      absl::StrContains(r.status().message(), ": no row with key (")) {
    // A sidecar's table answers for itself (node/sidecar/table_rows.h): the
    // table exists and the row does not.
    std::fprintf(stderr, "tally: %s\n",
                 std::string(r.status().message()).c_str());
    return 1;
  }
  if (absl::IsNotFound(r.status())) {
    // kNotFound covers an absent keyspace too; that is a mistake in the
    // command line (exit 2), an absent key is an answer (exit 1).
    TALLY_ASSIGN_OR_RETURN(std::optional<v1::KeyspaceSummary> ks,
                           FindKeyspace(ctx, *client, ctx.keyspace));
    if (!ks.has_value()) {
      return absl::NotFoundError(
          absl::StrFormat("keyspace '%s' does not exist on %s", ctx.keyspace,
                          client->address()));
    }
    std::fprintf(stderr, "tally: key '%s' not found in keyspace '%s'\n",
                 absl::CHexEscape(key).c_str(), ctx.keyspace.c_str());
    return 1;
  }
  if (!r.ok()) return CallFailed(ctx, r.status());
  if (!r->has_row()) {
    // A sidecar's table's row, as the table holds it now.
    if (ctx.json) {
      PrintJson({{"keyspace", ctx.keyspace},
                 {"key", key_values},
                 {"row", RowJson(r->row_json())}});
    } else {
      std::cout << r->row_json() << "\n";
    }
    return 0;
  }
  const v1::Row& row = r->row();
  const tree::Version version = VersionOf(row.version());
  if (ctx.json) {
    Json out = Json::object();
    SetBytesField(out, "key", row.key());
    SetBytesField(out, "value", row.value());
    out["version"] = VersionJson(version);
    out["deleted"] = row.deleted();
    PrintJson(out);
  } else if (!row.deleted()) {
    // The value exactly as stored, so that $(tally get k) is the value.
    std::cout << row.value() << "\n";
  }
  if (row.deleted()) {
    std::fprintf(stderr,
                 "tally: key '%s' in keyspace '%s' was deleted (version %s)\n",
                 absl::CHexEscape(key).c_str(), ctx.keyspace.c_str(),
                 VersionText(version).c_str());
    return 1;
  }
  return 0;
}

}  // namespace cli
}  // namespace tally
