// StatusFields: every number of a node's status that /metrics exports, in
// one table — the Prometheus family's name, type, help text, labels and
// unit, where the number lives in the StatusResponse (an accessor), and its
// key in `tally status --json`.
//
// The table drives every surface that shows these numbers: RenderPrometheus
// (node/observe/metrics.h), the generated metrics reference
// (docs/reference/metrics.md, from StatusFieldsMarkdown()), the numbers of
// `tally status --json` that have a JSON key here (the JSON's layout in
// tools/cli/status.cc names where each goes and the table fills it), and the
// two views for people: the text of `tally status` and the status page
// (node/observe/status_page.h). The views read every number through a
// StatusNumberReader, by its JSON key: their layouts place the numbers they
// name, and each ends with the numbers its layout does not name (the
// reader's Unplaced), by caption, item and value. The proto
// (tally/v1/tally.proto) stays the wire schema; this table is what the node
// tells operators about it.
//
// A new status number needs one row here, with a JSON key: it is then in
// /metrics, the reference, the JSON (at the end of its object, until the
// JSON's layout names its place) and the "other numbers" of both views
// (until their layouts name its place or leave it out on purpose). A number
// that is no metric of its own (a sum or a maximum of a family's series, a
// part of a ratio another family exports) gets a row without a family name:
// the JSON, the views and the reference's second table have it, /metrics
// does not.
//
//   for (const StatusField& f : StatusFields()) {
//     ... f.metric, f.help, f.series[i].value(status, item) ...
//   }
//
// Thread-safe: the table is immutable.
#ifndef TALLY_NODE_OBSERVE_STATUS_FIELDS_H_
#define TALLY_NODE_OBSERVE_STATUS_FIELDS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "tally/v1/tally.pb.h"

namespace tally {
namespace node {

enum class MetricType { kCounter, kGauge, kHistogram };
// "counter", "gauge", "histogram": the # TYPE word.
absl::string_view MetricTypeName(MetricType type);

// What a family's series are per: one per node, or one per item of a list
// of the status (each series then carries the item's label, e.g. peer).
enum class StatusScope {
  kNode,
  kKeyspace,         // status.keyspaces, label keyspace
  kOrigin,           // status.origins, label origin
  kPeer,             // status.peers, label peer
  kKeyspaceTrouble,  // status.keyspace_trouble, label keyspace
  kSubscriber,       // status.subscriptions, label subscriber
  kCopyWrites,       // status.copy_writes, label origin
  kProcess,          // status.process, when set
  kPostgres,         // status.postgres, when set
  kPostgresTable,    // status.postgres.tables, label keyspace
  kDatabaseSource,   // status.database_source, when set
};

// How many items `scope` has in `status` (1 for kNode; 0 or 1 for the
// optional messages).
int StatusScopeSize(const ::tally::v1::StatusResponse& status,
                    StatusScope scope);
// The label that names item `item` of `scope` ({"peer", address}), or an
// empty name for the scopes without one.
std::pair<absl::string_view, absl::string_view> StatusScopeLabel(
    const ::tally::v1::StatusResponse& status, StatusScope scope, int item);

// One sample's value as the exposition writes it: a count (integer
// digits), a flag (1 or 0; true or false in the JSON), a real number, or a
// Unix time in milliseconds (written as seconds, every digit kept; as
// milliseconds in the JSON); kAbsent leaves the sample out (a peer with no
// session yet has no last-session time: a 0 would read as 1970), and the
// JSON writes 0 for it.
class StatusValue {
 public:
  enum class Kind { kCount, kFlag, kReal, kUnixMs, kAbsent };

  static StatusValue Count(uint64_t v) { return StatusValue(Kind::kCount, v); }
  static StatusValue Flag(bool b) {
    return StatusValue(Kind::kFlag, b ? 1 : 0);
  }
  static StatusValue Real(double v) {
    StatusValue value(Kind::kReal, 0);
    value.real_ = v;
    return value;
  }
  static StatusValue Absent() { return StatusValue(Kind::kAbsent, 0); }
  // Absent unless unix_ms > 0.
  static StatusValue UnixMs(int64_t unix_ms) {
    if (unix_ms <= 0) return Absent();
    StatusValue value(Kind::kUnixMs, 0);
    value.unix_ms_ = unix_ms;
    return value;
  }

  Kind kind() const { return kind_; }
  uint64_t count() const { return count_; }
  double real() const { return real_; }
  int64_t unix_ms() const { return unix_ms_; }

  // The sample's text in the exposition format.
  std::string Format() const;

 private:
  StatusValue(Kind kind, uint64_t count) : kind_(kind), count_(count) {}

  Kind kind_;
  uint64_t count_ = 0;
  double real_ = 0;
  int64_t unix_ms_ = 0;
};

// A double as the exposition writes it: NaN, +Inf, -Inf, or StrCat's digits.
std::string FormatPrometheusValue(double v);

using MetricLabels =
    absl::Span<const std::pair<absl::string_view, absl::string_view>>;
// Takes one sample of a family: the name's suffix ("" or, for a histogram,
// "_bucket", "_sum", "_count"), its labels and its value.
using MetricSink = absl::FunctionRef<void(
    absl::string_view suffix, MetricLabels labels, const StatusValue& value)>;

// One series of a family for each item of its scope.
struct StatusSeries {
  // A label with a fixed value that tells the family's series apart
  // ({"outcome", "ok"}), or an empty name.
  absl::string_view label;
  absl::string_view label_value;
  // The number's key in `tally status --json`, within the JSON object of
  // the item ("feed.sent": out["feed"]["sent"]); empty if the JSON has no
  // such number (it shows it otherwise, or not at all).
  absl::string_view json_key;
  StatusValue (*value)(const ::tally::v1::StatusResponse& status, int item);
  // Whether the JSON writes null for an absent value (a time left that is
  // not known) instead of 0 (a time that has not come yet).
  bool json_null_when_absent = false;
};

// One metric family.
struct StatusField {
  // The family's name; empty for a row that is no metric (HasFamily): its
  // series, each with a JSON key, are numbers of `tally status` only.
  absl::string_view metric;
  MetricType type;
  StatusScope scope;
  // The labels `samples` writes, for the reference ("`peer`, `phase`");
  // empty for the families with `series`, whose labels the reference
  // derives from the scope and the series.
  absl::string_view labels;
  // The unit of the value, for the reference ("seconds", "bytes", "rows").
  absl::string_view unit;
  absl::string_view help;
  // The family's series, in the order the exposition lists them (for each
  // item of the scope, every series).
  std::vector<StatusSeries> series;
  // Instead of `series`, for the families whose samples are not one number
  // per item (enums, info metrics, histograms, nested lists): writes every
  // sample of the family, labels included.
  void (*samples)(const ::tally::v1::StatusResponse& status,
                  MetricSink sink) = nullptr;
};

// Whether `field` is a family of /metrics (it has a name); the exposition
// and the reference's table of families leave out the rows that are not.
inline bool HasFamily(const StatusField& field) {
  return !field.metric.empty();
}

// Every row: the families in the order of the exposition, and the rows
// without a family among them.
const std::vector<StatusField>& StatusFields();

// Writes every sample of `field` for `status` into `sink`, labels of the
// scope first.
void StatusFieldSamples(const StatusField& field,
                        const ::tally::v1::StatusResponse& status,
                        MetricSink sink);

// The metrics reference (docs/reference/metrics.md), from the table.
std::string StatusFieldsMarkdown();

// The number whose JSON key is `json_key` ("feed.sent",
// "peers[].rows_sent") for item `item` of its scope, read through the
// table's accessor: how the views for people read the numbers the table
// holds (through StatusNumberReader), so that each number has one
// definition. kNotFound for a
// key the table does not hold, and for an item past the scope's end.
absl::StatusOr<StatusValue> StatusNumber(
    const ::tally::v1::StatusResponse& status, absl::string_view json_key,
    int item = 0);

// StatusNumber for the views: the count (a flag as 1 or 0; a real number
// truncated), or `text` of the value as `--json` writes it. A key the
// table lacks reads as the text "<no status number KEY>", which the views'
// tests look for, and as 0 from StatusCount.
uint64_t StatusCount(const ::tally::v1::StatusResponse& status,
                     absl::string_view json_key, int item = 0);
double StatusReal(const ::tally::v1::StatusResponse& status,
                  absl::string_view json_key, int item = 0);
std::string StatusNumberText(const ::tally::v1::StatusResponse& status,
                             absl::string_view json_key, int item = 0);

// A number of the table that has a JSON key: its family and its series.
struct StatusNumberRef {
  const StatusField* field;
  const StatusSeries* series;
};

// Every number of the table that has a JSON key, in the table's order.
const std::vector<StatusNumberRef>& StatusNumbersWithJsonKey();

// A number's name for people, from its JSON key: the words of the key
// without the lists' parts, which the item names ("peers[].feed.lag_entries":
// "feed lag entries"; "process.open_fds": "process open fds").
std::string StatusNumberCaption(absl::string_view json_key);

// `value` for people, in `unit` (the field's): "12 rows", "2.5 seconds",
// "yes" or "no" for a flag, a time as "2027-01-15T07:59:48Z", "-" when
// absent.
std::string StatusValueForPeople(const StatusValue& value,
                                 absl::string_view unit);

// How a view for people reads the table's numbers: by JSON key, through the
// table's accessor (as StatusNumberText, StatusCount and StatusReal), while
// remembering each key it read, so that the view can then show the numbers
// its layout does not name — a number new to the table — by caption
// (Unplaced). A view whose layout leaves a number out on purpose, or shows
// it only in some states, says so with Place.
//
//   StatusNumberReader numbers(status);
//   ... numbers.Text("feed.sent") ... numbers.Count("peers[].rows_sent", i)
//   for (const StatusNumberRef& ref : numbers.Unplaced()) ...
//
// One per rendering; not thread-safe. `status` must outlive the reader.
class StatusNumberReader {
 public:
  explicit StatusNumberReader(const ::tally::v1::StatusResponse& status);

  StatusNumberReader(const StatusNumberReader&) = delete;
  StatusNumberReader& operator=(const StatusNumberReader&) = delete;

  const ::tally::v1::StatusResponse& status() const { return status_; }

  // StatusNumberText, StatusCount and StatusReal of `json_key`; each marks
  // the key placed.
  std::string Text(absl::string_view json_key, int item = 0);
  uint64_t Count(absl::string_view json_key, int item = 0);
  double Real(absl::string_view json_key, int item = 0);
  // The value itself, for a view that tells an absent value from 0 (a time
  // left not known); Absent for a key the table lacks, which it remembers
  // as the others do.
  StatusValue Value(absl::string_view json_key, int item = 0);

  // Marks `json_key` placed without reading it.
  void Place(absl::string_view json_key);

  // The numbers with a JSON key that were neither read nor placed, in the
  // table's order.
  std::vector<StatusNumberRef> Unplaced() const;
  // The keys read or placed that the table lacks (a view's typo, or a
  // number the table lost), in the order first met.
  const std::vector<std::string>& unknown_keys() const { return unknown_; }

 private:
  void Mark(absl::string_view json_key);

  const ::tally::v1::StatusResponse& status_;
  // By the number's index in StatusNumbersWithJsonKey().
  std::vector<bool> placed_;
  std::vector<std::string> unknown_;
};

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_OBSERVE_STATUS_FIELDS_H_
