// TokenRange: a contiguous run of tokens, first and last included, that a
// diff or repair can be limited to (`tally repair A B --range FROM:TO`).
//
// Tokens are written as tally prints them elsewhere (the status page's heat
// map, `tally token`): hexadecimal, up to 16 digits, an optional `0x`.
// FROM:TO includes both ends; either end may be left out (`:8000...` from
// the first token, `c000...:` to the last). The status page's own
// `FROM-TO` form is read too, so that a segment's range can be pasted.
//
//   absl::StatusOr<TokenRange> range =
//   ParseTokenRange("0400000000000000:07ff"); for (const NodeRef& piece :
//   CoverOf(*range, NodeRef{0, 0})) ...
//
// Thread-safe: value types and pure functions.
#ifndef TALLY_TREE_TOKEN_RANGE_H_
#define TALLY_TREE_TOKEN_RANGE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tree/token.h"

namespace tally {
namespace tree {

struct TokenRange {
  Token first = 0;
  Token last = ~Token{0};  // included

  // The whole token space: a limit that limits nothing.
  bool IsAll() const { return first == 0 && last == ~Token{0}; }
  bool Contains(Token token) const { return first <= token && token <= last; }
  // Every token of `node` is in the range.
  bool Covers(const NodeRef& node) const {
    return first <= node.first_token() && node.last_token() <= last;
  }
  // Some token of `node` is in the range.
  bool Overlaps(const NodeRef& node) const {
    return first <= node.last_token() && node.first_token() <= last;
  }
  // "FROM:TO", 16 hex digits each: what ParseTokenRange reads back.
  std::string ToString() const;

  friend bool operator==(const TokenRange& a, const TokenRange& b) {
    return a.first == b.first && a.last == b.last;
  }
};

// Reads "FROM:TO" (or "FROM-TO") as described above. Returns
// kInvalidArgument naming the problem: no separator, a token that is not
// hex or has more than 16 digits, FROM after TO.
absl::StatusOr<TokenRange> ParseTokenRange(absl::string_view text);

// The fewest nodes whose union is the tokens of `within` that lie in
// `range`, in token order: empty when they do not overlap, {within} when the
// range covers it, else at most two per level below `within` (128 in all).
// REQUIRES: within.IsValid().
std::vector<NodeRef> CoverOf(const TokenRange& range, const NodeRef& within);

}  // namespace tree
}  // namespace tally

#endif  // TALLY_TREE_TOKEN_RANGE_H_
