// verify: a stopped node's store checked, or a running sidecar's index
// against its tables.
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "storage/store.h"
#include "tools/cli/commands/command.h"
#include "tools/cli/commands/commands.h"
#include "tools/cli/format.h"
#include "tree/status_macros.h"

namespace tally {
namespace cli {
namespace {

// A running sidecar to PostgreSQL (no --data-dir): its index against its
// tables (Admin.VerifyTables), after it caught up; --table names some.
CommandResult VerifyTables(const Context& ctx) {
  TALLY_ASSIGN_OR_RETURN(auto client, Connect(ctx, ctx.node));
  std::vector<std::string> tables = ctx.tables;
  if (tables.empty()) tables.push_back("");  // every kept table
  const absl::Time start = absl::Now();
  std::vector<v1::TableVerify> found;
  for (const std::string& table : tables) {
    v1::VerifyTablesRequest request;
    request.set_keyspace(table);
    absl::StatusOr<v1::VerifyTablesResponse> r = client->VerifyTables(request);
    if (!r.ok()) return CallFailed(ctx, r.status());
    for (const v1::TableVerify& t : r->tables()) found.push_back(t);
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  bool sound = true;
  for (const v1::TableVerify& t : found) {
    sound = sound && t.mismatched() == 0 && t.missing_from_index() == 0 &&
            t.missing_from_table() == 0;
  }
  if (ctx.json) {
    Json out = Json::object();
    out["node"] = client->address();
    out["tables"] = Json::array();
    for (const v1::TableVerify& t : found) {
      Json j = Json::object();
      j["keyspace"] = t.keyspace();
      j["table_rows"] = t.table_rows();
      j["index_rows"] = t.index_rows();
      j["mismatched"] = t.mismatched();
      j["missing_from_index"] = t.missing_from_index();
      j["missing_from_table"] = t.missing_from_table();
      for (const auto& [field, keys] :
           {std::pair<const char*,
                      const google::protobuf::RepeatedPtrField<std::string>*>{
                "mismatched_keys", &t.mismatched_keys()},
            {"missing_from_index_keys", &t.missing_from_index_keys()},
            {"missing_from_table_keys", &t.missing_from_table_keys()}}) {
        j[field] = Json::array();
        for (const std::string& key : *keys) {
          Json k = Json::object();
          SetBytesField(k, "key", key);
          j[field].push_back(std::move(k));
        }
      }
      out["tables"].push_back(std::move(j));
    }
    out["ok"] = sound;
    out["seconds"] = seconds;
    PrintJson(out);
  } else {
    for (const v1::TableVerify& t : found) {
      const bool ok = t.mismatched() == 0 && t.missing_from_index() == 0 &&
                      t.missing_from_table() == 0;
      std::cout << absl::StrFormat(
          "%s: %s: %d rows in the table, %d in the index",
          ok ? "sound" : "different", t.keyspace(), t.table_rows(),
          t.index_rows());
      if (!ok) {
        std::cout << absl::StrFormat(
            "; %d missing from the index, %d missing from the table, %d with "
            "another value",
            t.missing_from_index(), t.missing_from_table(), t.mismatched());
      }
      std::cout << "\n";
      for (const std::string& key : t.missing_from_index_keys()) {
        std::cout << "  missing from the index: " << absl::CHexEscape(key)
                  << "\n";
      }
      for (const std::string& key : t.missing_from_table_keys()) {
        std::cout << "  missing from the table: " << absl::CHexEscape(key)
                  << "\n";
      }
      for (const std::string& key : t.mismatched_keys()) {
        std::cout << "  another value: " << absl::CHexEscape(key) << "\n";
      }
    }
    std::cout << absl::StrFormat(
        "%s: node %s, %d table%s in %.2f s\n", sound ? "sound" : "different",
        client->address(), found.size(), found.size() == 1 ? "" : "s", seconds);
  }
  return sound ? 0 : 1;
}

// Tables with unreadable blocks: the store is not opened (its rows cannot
// all be read), each table is a problem, and the way out is recover.
CommandResult ReportDamagedTables(const Context& ctx, const std::string& dir,
                                  const std::vector<std::string>& damaged,
                                  absl::Time start) {
  std::vector<std::string> problems;
  for (const std::string& table : damaged) {
    problems.push_back(absl::StrCat("damaged table ", table));
  }
  const std::string advice = absl::StrFormat(
      "the rows in the damaged blocks cannot be read: stop tallyd, run `tally "
      "recover --data-dir %s` (it keeps every readable row), then start "
      "tallyd; its peers bring back the rest",
      dir);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (ctx.json) {
    PrintJson({{"data_dir", dir},
               {"problems", problems},
               {"ok", false},
               {"advice", advice},
               {"seconds", seconds}});
  } else {
    for (const std::string& problem : problems) {
      std::cout << "problem: " << problem << "\n";
    }
    std::cout << absl::StrFormat("%d problem%s: %s\n", problems.size(),
                                 problems.size() == 1 ? "" : "s", advice);
  }
  return 1;
}

}  // namespace

CommandResult Verify(const Context& ctx) {
  const std::string dir = ctx.data_dir;
  if (dir.empty()) return VerifyTables(ctx);
  // Store::Open creates a store where there is none; verify must not.
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrFormat("%s is not a directory", dir));
  }
  if (!std::filesystem::exists(std::filesystem::path(dir) / "CURRENT", ec)) {
    return absl::NotFoundError(absl::StrFormat(
        "%s holds no tally store (no LevelDB CURRENT file); if it held one, "
        "`tally recover --data-dir %s` salvages it",
        dir, dir));
  }
  // The tables first, with checksums: opening a store whose tables have
  // damaged blocks reads them unchecked, into garbage or an abort.
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<std::string>> damaged =
      storage::CheckTableFiles(dir, storage::StoreOptions{});
  if (!damaged.ok()) {
    return absl::Status(damaged.status().code(),
                        absl::StrFormat("verify of %s could not read: %s", dir,
                                        damaged.status().message()));
  }
  if (!damaged->empty()) return ReportDamagedTables(ctx, dir, *damaged, start);
  // An empty node name adopts the stored one.
  absl::StatusOr<std::unique_ptr<storage::Store>> store =
      storage::Store::Open(dir, storage::StoreOptions{});
  if (!store.ok()) {
    if (absl::IsUnavailable(store.status()) &&
        absl::StrContains(store.status().message(), "lock")) {
      return absl::UnavailableError(absl::StrFormat(
          "%s is locked by another process, probably a running tallyd; stop "
          "it first, or verify a copy of the directory",
          dir));
    }
    return absl::Status(store.status().code(),
                        absl::StrFormat("cannot open the store in %s: %s", dir,
                                        store.status().message()));
  }
  // A sidecar's store keeps row tokens, not values: checked against the
  // values here, every row would look damaged.
  absl::StatusOr<std::optional<storage::BackendPosition>> position =
      (*store)->backend_position();
  if (position.ok() && position->has_value()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s is a PostgreSQL sidecar's index: its rows' values live in the "
        "database, so it is verified against its tables by the running "
        "node: start it and run `tally verify --node ADDRESS`",
        dir));
  }
  absl::StatusOr<storage::VerifyReport> report = (*store)->Verify();
  if (!report.ok()) {
    return absl::Status(report.status().code(),
                        absl::StrFormat("verify of %s could not read: %s", dir,
                                        report.status().message()));
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (ctx.json) {
    PrintJson({{"data_dir", dir},
               {"node", (*store)->node_name()},
               {"keyspaces", report->keyspaces},
               {"rows", report->rows},
               {"problems", report->problems},
               {"ok", report->ok()},
               {"seconds", seconds}});
  } else {
    for (const std::string& problem : report->problems) {
      std::cout << "problem: " << problem << "\n";
    }
    std::cout << absl::StrFormat(
        "%s: node '%s' in %s, %d keyspace%s, %d rows checked in %.2f s\n",
        report->ok() ? "sound"
                     : absl::StrCat(report->problems.size(), " problem",
                                    report->problems.size() == 1 ? "" : "s"),
        (*store)->node_name(), dir, report->keyspaces,
        report->keyspaces == 1 ? "" : "s", report->rows, seconds);
  }
  return report->ok() ? 0 : 1;
}

}  // namespace cli
}  // namespace tally
