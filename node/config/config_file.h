// The config file: tallyd's settings (node/config/config.h) as `name = value`
// lines, read with libinih (Debian's libinih-dev) and checked by tally.
//
//   # a comment line (`;` also starts one)
//   name = eu-west/db-3
//   data-dir = /var/lib/tally        # a comment after whitespace
//   tls-ca = "/etc/tally/ca #2.pem"  # quoted: the `#` is the value's
//   peer = 10.0.0.2:7400
//   peer = 10.0.0.4:7400
//
// libinih splits the lines into names and values, trims them and drops
// comment lines and a `;` comment after whitespace. As Debian builds it
// (version 55, checked by config_file_test.cc) it also reads `name: value`,
// keeps quotes and an inline `#`, cuts a value at ` ;` even inside quotes,
// reads an indented line as the continuation of the value above, splits a
// line of 200 characters or more into two, and knows [sections]. tally's
// part, here:
//  - a value in double or single quotes loses them, and everything inside
//    them, `#` included, is literal; unquoted, `#` after whitespace starts a
//    comment (so `eu#3` and `/srv/a#b` keep theirs). No escapes: a value
//    holding one kind of quote goes in the other.
//  - refused, each naming the file and the line: an unclosed quote, text
//    after the closing quote, a ` ;` inside quotes (libinih would cut the
//    value there), an empty value, a line that is not `name = value`, an
//    indented setting (libinih would take it for a continuation), a
//    [section] header (tally's file has none), a line too long for
//    libinih, an unknown name (with the nearest known one as a hint), a
//    setting given twice that does not repeat (all but `peer` and `table`),
//    a peer or table given twice, and every bad value ApplySetting refuses.
//
// Thread-compatible: the functions keep no state between calls.
#ifndef TALLY_NODE_CONFIG_CONFIG_FILE_H_
#define TALLY_NODE_CONFIG_CONFIG_FILE_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "node/config/config.h"

namespace tally {
namespace node {

// Applies the settings of a config file's text to `config`. Returns
// kInvalidArgument "SOURCE:LINE: what is wrong" for the first mistake;
// `source` names the text in messages (the file's path).
absl::Status ApplyConfigText(absl::string_view text, NodeConfig* config,
                             absl::string_view source = "config");

// The largest config file read: a config is a few hundred bytes of
// 'name = value' lines.
inline constexpr size_t kMaxConfigFileBytes = 1 << 20;

// Reads and applies a config file; errors name it as above. kNotFound if it
// cannot be opened; kInvalidArgument for a directory, anything else that is
// not a regular file (/dev/zero, a FIFO: never read, never waited on) or a
// file over kMaxConfigFileBytes (read no further).
absl::Status ApplyConfigFile(const std::string& path, NodeConfig* config);

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_CONFIG_CONFIG_FILE_H_
