// Output formatting for the tally CLI: versions, rows and differences as
// one human-readable line or one JSON object.
//
// Keys and values are bytes. Human output shows them C-escaped
// (absl::CHexEscape) so that one key is always one line. JSON output shows
// valid UTF-8 as a JSON string; anything else as a C-escaped string in the
// same field plus the exact bytes in base64 under "<field>_base64", so that
// a machine never gets a lossy key.
//
//   Json line = DifferenceJson(key, in_a, in_b);
//   std::cout << DumpJson(line) << "\n";
//
// Thread-safe: pure functions.
#ifndef TALLY_TOOLS_CLI_FORMAT_H_
#define TALLY_TOOLS_CLI_FORMAT_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "tree/tree_view.h"
#include "tree/version.h"

namespace tally {
namespace cli {

// Keeps fields in insertion order, so that every line reads "key" first.
using Json = nlohmann::ordered_json;

// True when `bytes` is well-formed UTF-8 (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF), which is what JSON strings can carry.
bool IsValidUtf8(absl::string_view bytes);

// Sets obj[field] to `bytes` as described at the top of this file.
void SetBytesField(Json& obj, const std::string& field,
                   absl::string_view bytes);

// "2024-05-01T10:00:00.123Z" — the physical part of an HLC timestamp.
std::string WallTime(tree::HlcTimestamp timestamp);

// Sets obj["hlc"] to the timestamp's raw 64 bits as a decimal string, and
// obj["millis"] and obj["counter"] to its parts as numbers. JSON readers
// such as jq and JavaScript hold numbers as doubles, exact only up to 2^53;
// the raw value is always above that, so as a number it would lose its low
// bits (the logical counter). The parts are both exact as doubles.
void SetHlcFields(Json& obj, tree::HlcTimestamp timestamp);

// A 64-bit identifier such as a store's epoch as 16 hex digits, the way
// the text output and the metrics write it: random 64-bit values do not
// survive as JSON numbers (see SetHlcFields).
std::string Hex64(uint64_t value);

// {"hlc": "<raw 64 bits, decimal>", "millis": ..., "counter": ...,
//  "origin": ..., "time": WallTime(...)}.
Json VersionJson(const tree::Version& version);

// "2024-05-01T10:00:00.123Z+0 eu-west/db-3": time, HLC counter, origin.
std::string VersionText(const tree::Version& version);

// One side of a difference: "missing" (nullptr), "deleted <version>" for a
// tombstone, or the version.
std::string SideText(const tree::RowEntry* entry);

// VersionJson's fields plus "deleted", or null (nullptr: the key is
// absent).
Json SideJson(const tree::RowEntry* entry);

// The key of a difference, from whichever side has it.
// REQUIRES: in_a or in_b is not null.
const std::string& DifferenceKey(const tree::RowEntry* in_a,
                                 const tree::RowEntry* in_b);

// "key-17  a: 2024-...Z+0 eu/db-1  b: missing", with " (same version,
// different content)" when both sides carry the same version.
// `label_a`/`label_b` name the sides ("a", "b", or addresses).
std::string DifferenceText(const tree::RowEntry* in_a,
                           const tree::RowEntry* in_b,
                           absl::string_view label_a = "a",
                           absl::string_view label_b = "b");

// {"key": ..., "a": SideJson(in_a), "b": SideJson(in_b)}.
Json DifferenceJson(const tree::RowEntry* in_a, const tree::RowEntry* in_b);

// Serializes on one line. Never throws: invalid UTF-8 that slipped past
// SetBytesField is replaced with U+FFFD rather than aborting the program.
std::string DumpJson(const Json& value);

// "1.2 KB", "3.4 MB": byte counts for people.
std::string HumanBytes(uint64_t bytes);

// Rows as left-aligned columns two spaces apart, each line indented by two
// spaces and ended by a newline.
std::string Table(const std::vector<std::vector<std::string>>& rows);

// A 16-byte root digest as 32 hex digits; an empty one (an empty keyspace
// on the wire) as 32 zeros.
std::string RootHex(const std::string& root);

}  // namespace cli
}  // namespace tally

#endif  // TALLY_TOOLS_CLI_FORMAT_H_
