#include "pg/schema/schema_difference.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tally {
namespace pg {
namespace {

// One line of a description, parsed back.
struct DescribedColumn {
  int key_position = 0;  // 0: not in the key
  std::string name;      // unquoted
  std::string type;
  std::string collation;  // unquoted; empty for none
};

// Reads a quoted identifier at the start of `*s` and removes it.
bool ConsumeQuoted(absl::string_view* s, std::string* out) {
  if (s->empty() || s->front() != '"') return false;
  out->clear();
  for (size_t i = 1; i < s->size(); ++i) {
    if ((*s)[i] != '"') {
      out->push_back((*s)[i]);
      continue;
    }
    if (i + 1 < s->size() && (*s)[i + 1] == '"') {
      out->push_back('"');
      ++i;
      continue;
    }
    s->remove_prefix(i + 1);
    return true;
  }
  return false;
}

bool ParseLine(absl::string_view line, DescribedColumn* col) {
  if (absl::ConsumePrefix(&line, "key ")) {
    const size_t space = line.find(' ');
    if (space == line.npos ||
        !absl::SimpleAtoi(line.substr(0, space), &col->key_position) ||
        col->key_position < 1) {
      return false;
    }
    line.remove_prefix(space + 1);
  } else if (!absl::ConsumePrefix(&line, "column ")) {
    return false;
  }
  if (!ConsumeQuoted(&line, &col->name) || !absl::ConsumePrefix(&line, " ")) {
    return false;
  }
  const size_t collate = line.rfind(" collate \"");
  if (collate != line.npos) {
    absl::string_view rest = line.substr(collate + 9);
    if (!ConsumeQuoted(&rest, &col->collation) || !rest.empty()) return false;
    line = line.substr(0, collate);
  }
  col->type = std::string(line);
  return !col->type.empty();
}

bool ParseDescription(absl::string_view text,
                      std::vector<DescribedColumn>* columns) {
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    DescribedColumn col;
    if (!ParseLine(line, &col)) return false;
    columns->push_back(std::move(col));
  }
  return true;
}

std::string KeyOf(const std::vector<DescribedColumn>& columns) {
  std::vector<std::pair<int, std::string>> key;
  for (const DescribedColumn& c : columns) {
    if (c.key_position > 0) key.emplace_back(c.key_position, c.name);
  }
  std::sort(key.begin(), key.end());
  return absl::StrCat(
      "(",
      absl::StrJoin(key, ", ",
                    [](std::string* out, const std::pair<int, std::string>& k) {
                      out->append(k.second);
                    }),
      ")");
}

std::string TypeWithCollation(const DescribedColumn& c) {
  if (c.collation.empty()) return c.type;
  return absl::StrCat(c.type, " collate \"", c.collation, "\"");
}

}  // namespace

std::string DescribePartitionChange(absl::string_view here,
                                    absl::string_view there) {
  // Lines are "oid relfilenode name": by OID, what is new, gone, rewritten.
  absl::flat_hash_map<std::string, std::pair<std::string, std::string>> a, b;
  auto parse = [](absl::string_view text, auto* out) {
    for (absl::string_view line :
         absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      std::vector<std::string> f =
          absl::StrSplit(line, absl::MaxSplits(' ', 2));
      if (f.size() == 3) (*out)[f[0]] = {f[1], f[2]};
    }
  };
  parse(here, &a);
  parse(there, &b);
  std::vector<std::string> added, gone, rewritten;
  for (const auto& [oid, leaf] : a) {
    auto it = b.find(oid);
    if (it == b.end()) {
      added.push_back(leaf.second);
    } else if (it->second.first != leaf.first) {
      rewritten.push_back(leaf.second);
    }
  }
  for (const auto& [oid, leaf] : b) {
    if (!a.contains(oid)) gone.push_back(leaf.second);
  }
  std::sort(added.begin(), added.end());
  std::sort(gone.begin(), gone.end());
  std::sort(rewritten.begin(), rewritten.end());
  std::vector<std::string> parts;
  if (!added.empty()) {
    parts.push_back(
        absl::StrCat("partitions new here: ", absl::StrJoin(added, ", ")));
  }
  if (!gone.empty()) {
    parts.push_back(
        absl::StrCat("partitions gone here: ", absl::StrJoin(gone, ", ")));
  }
  if (!rewritten.empty()) {
    parts.push_back(absl::StrCat("partitions truncated or rewritten here: ",
                                 absl::StrJoin(rewritten, ", ")));
  }
  return absl::StrJoin(parts, "; ");
}

std::string DescribeSchemaDifference(absl::string_view here,
                                     absl::string_view there) {
  if (here == there) return "";
  std::vector<DescribedColumn> a, b;
  if (!ParseDescription(here, &a) || !ParseDescription(there, &b)) {
    return absl::StrCat("the tables differ (here: ", here, "; there: ", there,
                        ")");
  }
  absl::flat_hash_map<std::string, const DescribedColumn*> by_name;
  for (const DescribedColumn& c : b) by_name[c.name] = &c;
  std::vector<std::string> parts;
  for (const DescribedColumn& c : a) {
    auto it = by_name.find(c.name);
    if (it == by_name.end()) {
      parts.push_back(absl::StrCat("column ", c.name, ": ",
                                   TypeWithCollation(c),
                                   " here, absent there"));
      continue;
    }
    const DescribedColumn& o = *it->second;
    if (c.type != o.type) {
      parts.push_back(absl::StrCat("column ", c.name, ": ", c.type, " here, ",
                                   o.type, " there"));
    } else if (c.collation != o.collation) {
      parts.push_back(absl::StrCat("column ", c.name, ": collation \"",
                                   c.collation, "\" here, \"", o.collation,
                                   "\" there"));
    }
    by_name.erase(it);
  }
  for (const DescribedColumn& o : b) {
    if (by_name.contains(o.name)) {
      parts.push_back(absl::StrCat("column ", o.name, ": absent here, ",
                                   TypeWithCollation(o), " there"));
    }
  }
  const std::string key_a = KeyOf(a), key_b = KeyOf(b);
  if (key_a != key_b) {
    parts.push_back(
        absl::StrCat("primary key ", key_a, " here, ", key_b, " there"));
  }
  if (parts.empty()) {
    return absl::StrCat("the tables differ (here: ", here, "; there: ", there,
                        ")");
  }
  return absl::StrJoin(parts, "; ");
}

}  // namespace pg
}  // namespace tally
