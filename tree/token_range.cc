#include "tree/token_range.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"

namespace tally {
namespace tree {
namespace {

// One end of a range; `empty` is what an end left out means.
absl::StatusOr<Token> ParseEnd(absl::string_view text, Token empty,
                               absl::string_view which) {
  text = absl::StripAsciiWhitespace(text);
  if (text.empty()) return empty;
  absl::string_view digits = text;
  if (absl::StartsWithIgnoreCase(digits, "0x")) digits.remove_prefix(2);
  if (digits.empty() || digits.size() > 16) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "token range: %s token '%s' is not 1 to 16 hex digits", which, text));
  }
  Token token = 0;
  for (char c : digits) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "token range: %s token '%s' is not hexadecimal (tokens are written "
          "as the status page and `tally token` print them)",
          which, text));
    }
    const int value = absl::ascii_isdigit(static_cast<unsigned char>(c))
                          ? c - '0'
                          : absl::ascii_tolower(c) - 'a' + 10;
    token = (token << 4) | static_cast<Token>(value);
  }
  return token;
}

void Cover(const TokenRange& range, const NodeRef& node,
           std::vector<NodeRef>* out) {
  if (!range.Overlaps(node)) return;
  if (range.Covers(node)) {
    out->push_back(node);
    return;
  }
  // A node neither covered nor disjoint holds a boundary, so it holds more
  // than one token: level < 64.
  Cover(range, node.Descendant(1, 0), out);
  Cover(range, node.Descendant(1, 1), out);
}

}  // namespace

std::string TokenRange::ToString() const {
  return absl::StrFormat("%016x:%016x", first, last);
}

absl::StatusOr<TokenRange> ParseTokenRange(absl::string_view text) {
  size_t separator = text.find(':');
  if (separator == absl::string_view::npos) separator = text.find('-');
  if (separator == absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "token range '%s' has no ':'; write FROM:TO in hex, e.g. "
        "0400000000000000:07ffffffffffffff",
        text));
  }
  TokenRange range;
  auto first = ParseEnd(text.substr(0, separator), 0, "first");
  if (!first.ok()) return first.status();
  auto last = ParseEnd(text.substr(separator + 1), ~Token{0}, "last");
  if (!last.ok()) return last.status();
  if (*first > *last) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "token range '%s': the first token %016x is after the last %016x "
        "(ranges do not wrap; give two ranges)",
        text, *first, *last));
  }
  range.first = *first;
  range.last = *last;
  return range;
}

std::vector<NodeRef> CoverOf(const TokenRange& range, const NodeRef& within) {
  std::vector<NodeRef> out;
  Cover(range, within, &out);
  return out;
}

}  // namespace tree
}  // namespace tally
