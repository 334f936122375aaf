// The settings a node runs with, written out as config-file lines: what
// `tallyd --check-config` prints after the file and the flags are applied.
//
//   name = eu-west/db-3
//   data-dir = /var/lib/tally
//   listen = 127.0.0.1:7400
//   peer = 10.0.0.2:7400
//   sync-interval = 30s
//   ...
//   postgres = postgresql://tally:********@127.0.0.1/app
//
// Every setting of node/config/config.h, in --help's order; a setting with no
// value (no peers, no TLS files, no PostgreSQL, the tests' settings at their
// defaults) is left out, and `metrics-listen`, `scrub-interval` and
// `log-retention-age` write their "off" as `off` / `0`. A value that would
// not read back as itself (a `#` or `;`, spaces at its ends) is quoted, so
// the text is a config file giving the same settings — but for the
// PostgreSQL password, which is masked (MaskConninfo), and a value holding
// both kinds of quote or a ` ;`, which no config file can hold.
//
// Thread-compatible: functions of their arguments.
#ifndef TALLY_NODE_CONFIG_EFFECTIVE_SETTINGS_H_
#define TALLY_NODE_CONFIG_EFFECTIVE_SETTINGS_H_

#include <string>
#include <utility>
#include <vector>

#include "node/config/config.h"

namespace tally {
namespace node {

// (name, value) pairs, `peer` and `table` once per peer and table.
std::vector<std::pair<std::string, std::string>> EffectiveSettings(
    const NodeConfig& config);

// The pairs as `name = value` lines, each ending in a newline.
std::string FormatEffectiveSettings(const NodeConfig& config);

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_CONFIG_EFFECTIVE_SETTINGS_H_
