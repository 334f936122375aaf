#include "mariadb/sidecar/statement_tables.h"

#include <cstddef>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"

namespace tally {
namespace mariadb {
namespace {

bool IsNameChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' ||
         c == '$' || c == '.' || static_cast<unsigned char>(c) >= 0x80;
}

// The statement's words outside literals and comments; `db`.`t` reads as
// db.t.
std::vector<std::string> Words(absl::string_view sql) {
  std::vector<std::string> words;
  std::string current;
  auto flush = [&] {
    if (!current.empty()) words.push_back(std::move(current));
    current.clear();
  };
  const size_t n = sql.size();
  size_t i = 0;
  while (i < n) {
    const char c = sql[i];
    if (c == '\'' || c == '"') {
      // A string literal: backslash escapes, and the quote doubled.
      flush();
      size_t j = i + 1;
      while (j < n) {
        if (sql[j] == '\\') {
          j += 2;
        } else if (sql[j] == c) {
          if (j + 1 < n && sql[j + 1] == c) {
            j += 2;
          } else {
            break;
          }
        } else {
          ++j;
        }
      }
      i = j + 1;
    } else if (c == '`') {
      // A quoted name: part of the current word (`db`.`t`).
      size_t j = i + 1;
      while (j < n) {
        if (sql[j] == '`') {
          if (j + 1 < n && sql[j + 1] == '`') {
            current.push_back('`');
            j += 2;
            continue;
          }
          break;
        }
        current.push_back(sql[j]);
        ++j;
      }
      i = j + 1;
    } else if (c == '/' && i + 1 < n && sql[i + 1] == '*') {
      flush();
      if (i + 2 < n && sql[i + 2] == '!') {
        // Executable: its text is code. Skip the marker and the version.
        i += 3;
        while (i < n && absl::ascii_isdigit(static_cast<unsigned char>(sql[i])))
          ++i;
      } else {
        const size_t end = sql.find("*/", i + 2);
        i = end == absl::string_view::npos ? n : end + 2;
      }
    } else if (c == '*' && i + 1 < n && sql[i + 1] == '/') {
      flush();  // the end of an executable comment
      i += 2;
    } else if (c == '#' ||
               (c == '-' && i + 2 < n && sql[i + 1] == '-' &&
                absl::ascii_isspace(static_cast<unsigned char>(sql[i + 2])))) {
      flush();
      const size_t end = sql.find('\n', i);
      i = end == absl::string_view::npos ? n : end + 1;
    } else if (IsNameChar(c)) {
      current.push_back(c);
      ++i;
    } else {
      flush();
      ++i;
    }
  }
  flush();
  return words;
}

bool Is(const std::vector<std::string>& words, size_t i,
        absl::string_view keyword) {
  return i < words.size() && absl::EqualsIgnoreCase(words[i], keyword);
}

// Skips the modifiers in `modifiers` from `i` on.
size_t SkipModifiers(const std::vector<std::string>& words, size_t i,
                     std::initializer_list<absl::string_view> modifiers) {
  for (bool skipped = true; skipped;) {
    skipped = false;
    for (absl::string_view m : modifiers) {
      if (Is(words, i, m)) {
        ++i;
        skipped = true;
      }
    }
  }
  return i;
}

}  // namespace

std::vector<std::string> TablesAStatementMayChange(
    absl::string_view statement) {
  std::vector<std::string> words = Words(statement);
  if (words.empty()) return words;
  if (Is(words, 0, "INSERT") || Is(words, 0, "REPLACE")) {
    size_t i = SkipModifiers(
        words, 1, {"LOW_PRIORITY", "DELAYED", "HIGH_PRIORITY", "IGNORE"});
    if (Is(words, i, "INTO")) ++i;
    if (i < words.size()) return {words[i]};
    return words;
  }
  if (Is(words, 0, "UPDATE")) {
    const size_t first = SkipModifiers(words, 1, {"LOW_PRIORITY", "IGNORE"});
    std::vector<std::string> names;
    for (size_t i = first; i < words.size(); ++i) {
      if (Is(words, i, "SET")) return names;
      names.push_back(words[i]);
    }
    return words;  // no SET: not an UPDATE as known
  }
  if (Is(words, 0, "DELETE")) {
    const size_t i =
        SkipModifiers(words, 1, {"LOW_PRIORITY", "QUICK", "IGNORE"});
    if (Is(words, i, "FROM") && i + 1 < words.size()) {
      const size_t next = i + 2;
      if (next == words.size() || Is(words, next, "WHERE") ||
          Is(words, next, "ORDER") || Is(words, next, "LIMIT")) {
        return {words[i + 1]};
      }
    }
    return words;
  }
  return words;
}

}  // namespace mariadb
}  // namespace tally
