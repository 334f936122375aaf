// CapturePosition: where a MariaDB sidecar's index stands in the server's
// binary log, committed into the store with every captured write
// (storage::BackendPosition) so that after a restart the capture resumes
// exactly after what the store holds.
//
// It records:
//  - `gtid`: the GTID state after the last transaction the store holds
//    (every replication domain's last transaction, as BINLOG_GTID_POS and
//    @@gtid_binlog_pos print it); the binlog stream starts after it;
//  - `last_stamp`: the version timestamp given to that transaction
//    (mariadb/capture/commit_stamps.h), so that a replay gives the same
//    transactions the same versions and changes nothing;
//  - `fingerprints`: per kept table, the schema fingerprint the index was
//    built with, or kMissingTable for a kept table the server did not hold
//    then; a table whose fingerprint differs at the next start is rebuilt.
//
// Bytes: text, "mariadb/1" then one line per field, tab-separated:
//   mariadb/1
//   gtid\t0-1-42,1-2-7
//   stamp\t<u64 raw HLC timestamp>
//   table\t<keyspace>\t<fingerprint>      (one per kept table)
// Text so that an operator reading a dump of the store can tell where it
// stands; keyspace names and fingerprints never hold a tab or a newline.
//
// Thread-compatible value type.
#ifndef TALLY_MARIADB_CAPTURE_CAPTURE_POSITION_H_
#define TALLY_MARIADB_CAPTURE_CAPTURE_POSITION_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tree/hlc.h"

namespace tally {
namespace mariadb {

// What CapturePosition::fingerprints records for a kept table the server
// does not hold (dropped, or not created yet).
inline constexpr absl::string_view kMissingTable = "missing";

struct CapturePosition {
  std::string gtid;
  tree::HlcTimestamp last_stamp;
  std::map<std::string, std::string> fingerprints;

  std::string Encode() const;
  // Returns kDataLoss for bytes Encode did not write (another backend's
  // position among them: a store built by a PostgreSQL sidecar).
  static absl::StatusOr<CapturePosition> Decode(absl::string_view bytes);

  friend bool operator==(const CapturePosition& a, const CapturePosition& b) {
    return a.gtid == b.gtid && a.last_stamp == b.last_stamp &&
           a.fingerprints == b.fingerprints;
  }
};

}  // namespace mariadb
}  // namespace tally

#endif  // TALLY_MARIADB_CAPTURE_CAPTURE_POSITION_H_
