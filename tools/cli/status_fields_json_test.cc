// `tally status --json` against the status table
// (node/observe/status_fields.h): every number the table says the JSON holds
// is there, at its key, with the value /metrics shows; every place the
// JSON's layout keeps for the table is filled.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "node/observe/status_fields.h"
#include "tools/cli/status.h"

namespace tally {
namespace cli {
namespace {

using ::google::protobuf::FieldDescriptor;
using ::google::protobuf::Message;
using ::google::protobuf::Reflection;

// Sets every field of `m` to a value of its own (numbers 1, 2, 3, ...; a
// repeated message gets one element), so that a JSON number found under
// the wrong key shows.
void FillDistinct(Message* m, int depth, int* next) {
  const Reflection* r = m->GetReflection();
  for (int i = 0; i < m->GetDescriptor()->field_count(); ++i) {
    const FieldDescriptor* f = m->GetDescriptor()->field(i);
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (depth == 0) continue;
      Message* child =
          f->is_repeated() ? r->AddMessage(m, f) : r->MutableMessage(m, f);
      FillDistinct(child, depth - 1, next);
      continue;
    }
    const int v = (*next)++;
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_UINT64:
        f->is_repeated() ? r->AddUInt64(m, f, v) : r->SetUInt64(m, f, v);
        break;
      case FieldDescriptor::CPPTYPE_UINT32:
        f->is_repeated() ? r->AddUInt32(m, f, v) : r->SetUInt32(m, f, v);
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        f->is_repeated() ? r->AddInt64(m, f, v) : r->SetInt64(m, f, v);
        break;
      case FieldDescriptor::CPPTYPE_INT32:
        f->is_repeated() ? r->AddInt32(m, f, v) : r->SetInt32(m, f, v);
        break;
      case FieldDescriptor::CPPTYPE_DOUBLE:
        f->is_repeated() ? r->AddDouble(m, f, v) : r->SetDouble(m, f, v);
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        if (!f->is_repeated()) r->SetBool(m, f, true);
        break;
      case FieldDescriptor::CPPTYPE_STRING: {
        const std::string s = "s" + std::to_string(v);
        f->is_repeated() ? r->AddString(m, f, s) : r->SetString(m, f, s);
        break;
      }
      default:
        break;
    }
  }
}

// The JSON value at `path` ("peers[].feed.received": the first peer's),
// for item 0 of the scope; `<origin>` is the item's label value.
const Json* Find(const Json& root, absl::string_view path,
                 absl::string_view item_label) {
  const Json* at = &root;
  for (absl::string_view key : absl::StrSplit(path, '.')) {
    const bool array = absl::ConsumeSuffix(&key, "[]");
    const std::string name =
        absl::StartsWith(key, "<") ? std::string(item_label) : std::string(key);
    if (!at->is_object() || !at->contains(name)) return nullptr;
    at = &(*at)[name];
    if (array) {
      if (!at->is_array() || at->empty()) return nullptr;
      at = &(*at)[0];
    }
  }
  return at;
}

// The text view reads the table's numbers by their JSON keys
// (node::StatusNumber); a key the table lacks would show as
// "<no status number KEY>" and a real number read through it as nan.
TEST(StatusFieldsText, TheTextViewReadsOnlyKeysTheTableHolds) {
  v1::StatusResponse status;
  int next = 1;
  FillDistinct(&status, 3, &next);
  const std::string text =
      StatusText(status, "", absl::FromUnixSeconds(2000000000));
  EXPECT_FALSE(absl::StrContains(text, "<no status number")) << text;
  EXPECT_FALSE(absl::StrContains(text, "nan")) << text;
  // And a number shows as the table reads it: the first peer's feed
  // position, through the same accessor /metrics uses.
  EXPECT_TRUE(absl::StrContains(
      text, node::StatusNumberText(status, "peers[].feed.position", 0)));
}

TEST(StatusNumber, ReadsEverySeriesWithAJsonKeyAndRefusesOthers) {
  v1::StatusResponse status;
  int next = 1;
  FillDistinct(&status, 3, &next);
  for (const node::StatusField& field : node::StatusFields()) {
    for (const node::StatusSeries& series : field.series) {
      if (series.json_key.empty()) continue;
      if (node::StatusScopeSize(status, field.scope) == 0) continue;
      absl::StatusOr<node::StatusValue> value =
          node::StatusNumber(status, series.json_key, 0);
      ASSERT_TRUE(value.ok()) << series.json_key << ": " << value.status();
      EXPECT_EQ(value->Format(), series.value(status, 0).Format())
          << series.json_key;
    }
  }
  EXPECT_EQ(node::StatusNumber(status, "feed.no_such_number").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(node::StatusNumber(status, "peers[].rows_sent", 99).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(node::StatusNumberText(status, "feed.no_such_number"),
            "<no status number feed.no_such_number>");
  EXPECT_EQ(node::StatusCount(status, "feed.no_such_number"), 0u);
}

TEST(StatusFieldsJson, EveryJsonKeyOfTheTableHoldsTheTablesNumber) {
  v1::StatusResponse status;
  int next = 1;
  FillDistinct(&status, 3, &next);
  const Json json = StatusJson(status, "");
  int checked = 0;
  for (const node::StatusField& field : node::StatusFields()) {
    for (const node::StatusSeries& series : field.series) {
      if (series.json_key.empty()) continue;
      SCOPED_TRACE(std::string(field.metric) + " " +
                   std::string(series.json_key));
      ASSERT_GT(node::StatusScopeSize(status, field.scope), 0);
      const Json* value =
          Find(json, series.json_key,
               node::StatusScopeLabel(status, field.scope, 0).second);
      ASSERT_NE(value, nullptr) << json.dump(1);
      const node::StatusValue expected = series.value(status, 0);
      switch (expected.kind()) {
        case node::StatusValue::Kind::kCount:
          EXPECT_TRUE(value->is_number_unsigned()) << *value;
          EXPECT_EQ(value->get<double>(),
                    static_cast<double>(expected.count()));
          break;
        case node::StatusValue::Kind::kFlag:
          ASSERT_TRUE(value->is_boolean()) << *value;
          EXPECT_EQ(value->get<bool>() ? 1u : 0u, expected.count());
          break;
        case node::StatusValue::Kind::kReal:
          EXPECT_EQ(value->get<double>(), expected.real());
          break;
        case node::StatusValue::Kind::kUnixMs:
          EXPECT_EQ(value->get<int64_t>(), expected.unix_ms());
          break;
        case node::StatusValue::Kind::kAbsent:
          ADD_FAILURE() << "no value";
          break;
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 50);
}

// Whether `json` holds a place the layout kept for the table and the table
// did not fill (its path in `*where`).
bool HasUnfilledPlace(const Json& json, const std::string& path,
                      std::string* where) {
  if (json.is_discarded()) {
    *where = path;
    return true;
  }
  if (json.is_object()) {
    for (const auto& [key, value] : json.items()) {
      if (HasUnfilledPlace(value, path + "." + key, where)) return true;
    }
  }
  if (json.is_array()) {
    for (size_t i = 0; i < json.size(); ++i) {
      if (HasUnfilledPlace(json[i], absl::StrCat(path, "[", i, "]"), where)) {
        return true;
      }
    }
  }
  return false;
}

TEST(StatusFieldsJson, TheTableFillsEveryPlaceTheLayoutKeepsForIt) {
  for (int depth : {0, 1, 3}) {
    v1::StatusResponse status;
    int next = 1;
    FillDistinct(&status, depth, &next);
    std::string where;
    EXPECT_FALSE(HasUnfilledPlace(StatusJson(status, ""), "", &where))
        << "depth " << depth << ": " << where;
  }
}

TEST(StatusFieldsJson, EachItemsNumbersLandInItsOwnObjectInTheLayoutsOrder) {
  v1::StatusResponse status;
  for (int i = 0; i < 3; ++i) {
    v1::PeerStatus* p = status.add_peers();
    p->set_address(absl::StrCat("10.0.0.", i + 1, ":7100"));
    p->set_sessions_ok(10 * (i + 1));
    p->set_feed_connected(i == 1);
  }
  v1::OriginRows* o = status.add_copy_writes();
  o->set_origin("site-b");
  o->set_rows(7);
  const Json json = StatusJson(status, "");
  ASSERT_EQ(json["peers"].size(), 3u) << json.dump(1);
  for (int i = 0; i < 3; ++i) {
    const Json& peer = json["peers"][i];
    EXPECT_EQ(peer["address"], absl::StrCat("10.0.0.", i + 1, ":7100"));
    EXPECT_EQ(peer["sessions_ok"], 10u * (i + 1));
    EXPECT_EQ(peer["feed"]["connected"], i == 1);
    // No session yet: /metrics leaves the time out, the JSON says 0.
    EXPECT_EQ(peer["last_session_unix_ms"], 0);
  }
  EXPECT_EQ(json["copy_writes"]["site-b"], 7u);
  // The layout's order: the feed's counters start with what it sent.
  EXPECT_EQ(json["feed"].begin().key(), "sent");
  // A node that reports no process or PostgreSQL status: null.
  EXPECT_TRUE(json["process"].is_null());
  EXPECT_TRUE(json["postgres"].is_null());
}

// The table's rows of `text` (Table: columns two or more spaces apart),
// each split into its cells.
std::vector<std::vector<std::string>> TableRows(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<std::string> cells;
    for (absl::string_view cell :
         absl::StrSplit(absl::StripLeadingAsciiWhitespace(line), "  ",
                        absl::SkipEmpty())) {
      cells.emplace_back(absl::StripAsciiWhitespace(cell));
    }
    rows.push_back(std::move(cells));
  }
  return rows;
}

// Every number of the table has its place in the text's layout, or is left
// out of it on purpose: none ends under OTHER NUMBER, whatever the state
// that decides which lines the layout writes.
TEST(StatusFieldsText, TheLayoutPlacesEveryNumberOfTheTable) {
  v1::StatusResponse status;
  int next = 1;
  FillDistinct(&status, 3, &next);
  std::vector<std::pair<std::string, v1::StatusResponse>> states;
  states.push_back({"every field set", status});
  v1::StatusResponse writable = status;
  writable.set_read_only(false);
  writable.mutable_peers(0)->set_paused(false);
  writable.mutable_keyspace_trouble(0)->set_in_trouble(false);
  states.push_back({"writable, nothing paused or in trouble", writable});
  v1::StatusResponse building = status;
  building.mutable_postgres()->set_phase("building");
  states.push_back({"building", building});
  v1::StatusResponse nothing_yet = status;
  nothing_yet.mutable_database_source()->set_last_session_start_unix_ms(0);
  nothing_yet.mutable_process()->set_max_fds(0);
  nothing_yet.mutable_process()->set_start_unix_ms(0);
  nothing_yet.mutable_peers(0)->mutable_session()->set_phase_since_unix_ms(0);
  states.push_back({"no session, limit or start yet", nothing_yet});
  for (const auto& [name, state] : states) {
    const std::string text =
        StatusText(state, "", absl::FromUnixSeconds(2000000000));
    EXPECT_FALSE(absl::StrContains(text, "OTHER NUMBER")) << name << "\n"
                                                          << text;
    EXPECT_FALSE(absl::StrContains(text, "<no status number")) << name;
  }
}

// A number the layout does not name — as a number new to the table is —
// shows in OtherNumbersText with its caption, its item and its value.
TEST(StatusFieldsText, ANumberTheLayoutDoesNotNameShowsUnderOtherNumbers) {
  v1::StatusResponse status;
  int next = 1;
  FillDistinct(&status, 3, &next);
  node::StatusNumberReader nothing_read(status);
  const std::vector<std::vector<std::string>> rows =
      TableRows(OtherNumbersText(nothing_read));
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows[0], (std::vector<std::string>{"OTHER NUMBER", "OF", "VALUE"}));
  int checked = 0;
  for (const node::StatusNumberRef& number : node::StatusNumbersWithJsonKey()) {
    const node::StatusField& field = *number.field;
    ASSERT_EQ(node::StatusScopeSize(status, field.scope), 1)
        << number.series->json_key;
    const auto [label, value] = node::StatusScopeLabel(status, field.scope, 0);
    const std::vector<std::string> row = {
        node::StatusNumberCaption(number.series->json_key),
        label.empty() ? std::string("-") : absl::StrCat(label, " ", value),
        node::StatusValueForPeople(number.series->value(status, 0),
                                   field.unit)};
    EXPECT_NE(std::find(rows.begin(), rows.end(), row), rows.end())
        << absl::StrJoin(row, " | ");
    ++checked;
  }
  EXPECT_EQ(rows.size(), 1 + checked);

  // The layout's reads and places take numbers off the list.
  node::StatusNumberReader some_read(status);
  some_read.Text("feed.sent");
  some_read.Count("peers[].rows_sent");
  some_read.Place("process.open_fds");
  const std::string other = OtherNumbersText(some_read);
  EXPECT_TRUE(absl::StrContains(other, "feed skipped own"));
  EXPECT_FALSE(absl::StrContains(other, "feed sent")) << other;
  EXPECT_FALSE(absl::StrContains(other, "rows sent")) << other;
  EXPECT_FALSE(absl::StrContains(other, "process open fds")) << other;

  // Every number placed: nothing to show.
  node::StatusNumberReader all_placed(status);
  for (const node::StatusNumberRef& number : node::StatusNumbersWithJsonKey()) {
    all_placed.Place(number.series->json_key);
  }
  EXPECT_EQ(OtherNumbersText(all_placed), "");
  // A key the table lacks is said so.
  all_placed.Place("feed.no_such_number");
  EXPECT_EQ(all_placed.unknown_keys(),
            std::vector<std::string>{"feed.no_such_number"});
  EXPECT_TRUE(absl::StrContains(OtherNumbersText(all_placed),
                                "<no status number feed.no_such_number>"));
}

TEST(StatusNumberCaption, IsTheKeysWordsWithoutTheListsParts) {
  EXPECT_EQ(node::StatusNumberCaption("sessions_ok"), "sessions ok");
  EXPECT_EQ(node::StatusNumberCaption("peers[].feed.lag_entries"),
            "feed lag entries");
  EXPECT_EQ(node::StatusNumberCaption("copy_writes.<origin>"), "copy writes");
  EXPECT_EQ(node::StatusNumberCaption("postgres.tables[].rows"),
            "postgres rows");
}

TEST(StatusValueForPeople, WritesTheValueInItsUnit) {
  EXPECT_EQ(node::StatusValueForPeople(node::StatusValue::Count(12), "rows"),
            "12 rows");
  EXPECT_EQ(node::StatusValueForPeople(node::StatusValue::Count(3), ""), "3");
  EXPECT_EQ(node::StatusValueForPeople(node::StatusValue::Real(2.5), "seconds"),
            "2.5 seconds");
  EXPECT_EQ(node::StatusValueForPeople(node::StatusValue::Flag(true), ""),
            "yes");
  EXPECT_EQ(node::StatusValueForPeople(node::StatusValue::Flag(false), ""),
            "no");
  EXPECT_EQ(node::StatusValueForPeople(node::StatusValue::UnixMs(1800000000123),
                                       "seconds"),
            "2027-01-15T08:00:00Z");
  EXPECT_EQ(node::StatusValueForPeople(node::StatusValue::Absent(), "seconds"),
            "-");
}

}  // namespace
}  // namespace cli
}  // namespace tally
