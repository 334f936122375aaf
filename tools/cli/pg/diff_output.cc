#include "tools/cli/pg/diff_output.h"

#include <iostream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/cli/format.h"

namespace tally {
namespace cli {

absl::StatusOr<std::vector<TablePair>> PairTables(
    const std::vector<std::string>& named, const std::vector<std::string>& in_a,
    const std::vector<std::string>& in_b,
    const std::function<absl::StatusOr<std::vector<TablePair>>()>& list_all) {
  std::vector<TablePair> pairs;
  if (!named.empty()) {
    if (!in_a.empty() || !in_b.empty()) {
      return absl::InvalidArgumentError(
          "name the tables either with table= in the URLs or with --table, "
          "not both");
    }
    for (const std::string& t : named) pairs.emplace_back(t, t);
    return pairs;
  }
  if (!in_a.empty() && !in_b.empty()) {
    if (in_a.size() != in_b.size()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "URL a names %d tables and URL b %d; tables pair up in order, so "
          "both must name as many (or only one URL names them)",
          in_a.size(), in_b.size()));
    }
    for (size_t i = 0; i < in_a.size(); ++i) {
      pairs.emplace_back(in_a[i], in_b[i]);
    }
    return pairs;
  }
  if (!in_a.empty() || !in_b.empty()) {
    for (const std::string& t : in_a.empty() ? in_b : in_a) {
      pairs.emplace_back(t, t);
    }
    return pairs;
  }
  return list_all();
}

const char* DifferenceKind(bool in_a, bool in_b) {
  if (in_a && in_b) return "differs";
  return in_a ? "only in a" : "only in b";
}

void PrintDifference(bool json, const std::string& table,
                     const std::string& key_text, bool in_a, bool in_b) {
  if (json) {
    Json line = Json::object();
    line["table"] = table;
    SetBytesField(line, "key", key_text);
    line["a"] = in_a;
    line["b"] = in_b;
    std::cout << DumpJson(line) << "\n";
  } else {
    std::cout << absl::CHexEscape(key_text) << "  "
              << DifferenceKind(in_a, in_b) << "\n";
  }
}

void PrintWouldRepair(bool json, const std::string& table,
                      const std::string& key_text, bool upsert,
                      const std::string& target) {
  if (json) {
    Json line = Json::object();
    line["table"] = table;
    SetBytesField(line, "key", key_text);
    line["would"] = upsert ? "upsert" : "delete";
    line["on"] = target;
    std::cout << DumpJson(line) << "\n";
  } else {
    std::cout << absl::StrFormat(
        "would %s %s %s %s\n", upsert ? "upsert" : "delete",
        absl::CHexEscape(key_text), upsert ? "into" : "from", target);
  }
}

void PrintDryRunSummary(bool json, const std::string& table,
                        const std::string& source, const std::string& target,
                        uint64_t would_upsert, uint64_t would_delete) {
  if (json) {
    std::cout << DumpJson({{"repair",
                            {{"table", table},
                             {"source", source},
                             {"dry_run", true},
                             {"would_upsert", would_upsert},
                             {"would_delete", would_delete}}}})
              << "\n";
  } else {
    std::cout << absl::StrFormat(
        "dry-run repair of table %s from %s: would upsert %d rows into %s "
        "and delete %d; nothing changed\n",
        table, source, would_upsert, target, would_delete);
  }
}

void PrintRepairSummary(bool json, const std::string& table,
                        const std::string& source, const std::string& target,
                        uint64_t upserted, uint64_t deleted, uint64_t checked,
                        const std::vector<std::string>& still_different) {
  if (json) {
    Json still = Json::array();
    for (const std::string& t : still_different) still.push_back(t);
    std::cout << DumpJson({{"repair",
                            {{"table", table},
                             {"source", source},
                             {"dry_run", false},
                             {"upserted", upserted},
                             {"deleted", deleted},
                             {"checked", checked},
                             {"still_different", still}}}})
              << "\n";
    return;
  }
  for (const std::string& t : still_different) {
    std::cout << absl::CHexEscape(t) << "  still differs\n";
  }
  std::cout << absl::StrFormat(
      "repair of table %s from %s: %d rows upserted into %s, %d deleted; "
      "re-read of the %d keys: %s\n",
      table, source, upserted, target, deleted, checked,
      still_different.empty()
          ? std::string("all equal")
          : absl::StrCat(still_different.size(),
                         " still differ (written during the repair?); run it "
                         "again"));
}

std::string ByteCount(uint64_t n) {
  if (n < 10 * 1024) return absl::StrCat(n, " B");
  if (n < 10 * 1024 * 1024) return absl::StrFormat("%.1f kB", n / 1024.0);
  return absl::StrFormat("%.1f MB", n / (1024.0 * 1024.0));
}

}  // namespace cli
}  // namespace tally
