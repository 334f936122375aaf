// recover: a stopped node's damaged store made usable again.
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "storage/store.h"
#include "tools/cli/commands/command.h"
#include "tools/cli/commands/commands.h"
#include "tools/cli/format.h"
#include "tree/status_macros.h"

namespace tally {
namespace cli {

// RepairDB, then the store's own Verify: a store that tallyd refuses to open
// (damaged or missing log, missing CURRENT) is made to open again with what
// was readable; the node's peers bring back the rest through anti-entropy.
CommandResult Recover(const Context& ctx) {
  const std::string dir = ctx.data_dir;
  if (dir.empty()) {
    return absl::InvalidArgumentError("recover needs --data-dir=DIR");
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrFormat("%s is not a directory", dir));
  }
  const absl::Time start = absl::Now();
  storage::StoreOptions options;
  options.node_name = ctx.node_name;
  // The names a keyspace that lost its record may have had.
  std::vector<std::string> keyspaces = {ctx.keyspace};
  if (ctx.keyspace != "default") keyspaces.push_back("default");
  const absl::StatusOr<storage::RepairReport> repaired =
      storage::RepairStore(dir, options, keyspaces);
  if (!repaired.ok()) {
    return absl::Status(repaired.status().code(),
                        absl::StrFormat("cannot recover the store in %s: %s",
                                        dir, repaired.status().message()));
  }
  const uint64_t removed = repaired->rows_removed;
  // An empty node name adopts the stored one.
  absl::StatusOr<std::unique_ptr<storage::Store>> store =
      storage::Store::Open(dir, storage::StoreOptions{});
  if (!store.ok()) {
    return absl::Status(
        store.status().code(),
        absl::StrFormat("recovered %s, but it still does not open: %s", dir,
                        store.status().message()));
  }
  absl::StatusOr<storage::VerifyReport> report = (*store)->Verify();
  if (!report.ok()) {
    return absl::Status(
        report.status().code(),
        absl::StrFormat("recovered %s, but verify could not read it: %s", dir,
                        report.status().message()));
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const std::string lost = (std::filesystem::path(dir) / "lost").string();
  if (ctx.json) {
    PrintJson({{"data_dir", dir},
               {"node", (*store)->node_name()},
               {"keyspaces", report->keyspaces},
               {"rows", report->rows},
               {"problems", report->problems},
               {"ok", report->ok()},
               {"rows_removed", removed},
               {"damaged_tables", repaired->damaged_tables},
               {"renamed_keyspaces", repaired->renamed_keyspaces},
               {"rows_unattributed", repaired->rows_unattributed},
               {"unattributed_keyspace_ids", repaired->unattributed_keyspaces},
               {"lost_dir", lost},
               {"seconds", seconds}});
  } else {
    for (const std::string& table : repaired->damaged_tables) {
      std::cout << "damaged table: " << table << "\n";
    }
    for (const std::string& keyspace : repaired->renamed_keyspaces) {
      std::cout << "named again: " << keyspace << "\n";
    }
    if (repaired->rows_unattributed > 0) {
      std::cout << absl::StrFormat(
          "unattributed: %d rows of keyspace id%s %s, whose record was lost, "
          "are kept but not served; if you know the keyspace's name, run "
          "recover again with --keyspace NAME\n",
          repaired->rows_unattributed,
          repaired->unattributed_keyspaces.size() == 1 ? "" : "s",
          absl::StrJoin(repaired->unattributed_keyspaces, ", "));
    }
    for (const std::string& problem : report->problems) {
      std::cout << "problem: " << problem << "\n";
    }
    std::cout << absl::StrFormat(
        "recovered: node '%s' in %s, %d keyspace%s, %d rows, %s, in %.2f s\n"
        "what LevelDB could not read was dropped, and %d row%s that did not "
        "match %s digest; the files LevelDB's repair replaced or could not "
        "read are in %s (the store no longer needs them)\n"
        "%s\n",
        (*store)->node_name(), dir, report->keyspaces,
        report->keyspaces == 1 ? "" : "s", report->rows,
        report->ok() ? "sound"
                     : absl::StrCat(report->problems.size(), " problem",
                                    report->problems.size() == 1 ? "" : "s"),
        seconds, removed, removed == 1 ? "" : "s",
        removed == 1 ? "its" : "their", lost,
        report->ok()
            ? "next: start tallyd; its anti-entropy sessions bring back from "
              "its peers the rows that were lost (or run `tally repair PEER "
              "NODE` once it is up)"
            : "the store is not sound: move the directory aside and start "
              "tallyd on an empty one, to be refilled from its peers");
  }
  return report->ok() ? 0 : 1;
}

}  // namespace cli
}  // namespace tally
