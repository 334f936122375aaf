#include "node/feed/keyspace_trouble.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "node/observe/log.h"

namespace tally {
namespace node {
namespace {

// At most one log line a minute per keyspace while its reason stays.
constexpr absl::Duration kLogEvery = absl::Minutes(1);
// Keys are shown up to this many bytes (escaped).
constexpr size_t kMaxKeyShown = 128;

int64_t UnixMillisOrZero(absl::Time t) {
  return t == absl::InfinitePast() ? 0 : absl::ToUnixMillis(t);
}

}  // namespace

KeyspaceTrouble::KeyspaceTrouble(std::function<absl::Time()> now)
    : now_(std::move(now)) {}

void KeyspaceTrouble::Rejected(const TroubleReport& report) {
  const absl::Time now = now_();
  std::string key = absl::CHexEscape(report.key.substr(0, kMaxKeyShown));
  if (report.key.size() > kMaxKeyShown) absl::StrAppend(&key, "...");
  bool log = false;
  bool began = false;
  uint64_t rows_logged = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = keyspaces_.find(report.keyspace);
    if (it == keyspaces_.end()) {
      it = keyspaces_.emplace(std::string(report.keyspace), State{}).first;
    }
    State& s = it->second;
    began = !s.in_trouble;
    if (began) s.since = now;
    s.in_trouble = true;
    s.reason = std::string(report.reason);
    s.last_error = std::string(report.error.message());
    if (!report.key.empty()) s.last_key = key;
    s.peer = std::string(report.peer);
    s.last = now;
    s.rows_by_reason[s.reason] += report.rows;
    s.rows_since_logged += report.rows;
    if (began || s.logged_reason != s.reason || now - s.logged >= kLogEvery) {
      log = true;
      rows_logged = s.rows_since_logged;
      s.rows_since_logged = 0;
      s.logged = now;
      s.logged_reason = s.reason;
    }
  }
  if (!log) return;
  LogWarning(began ? "keyspace in trouble: its rows from a peer are left out "
                     "(the other keyspaces flow on; sessions retry it)"
                   : "keyspace still in trouble",
             {{"keyspace", report.keyspace},
              {"reason", report.reason},
              {"key", key},
              {"peer", report.peer},
              {"rows", rows_logged},
              {"error", report.error.message()}});
}

void KeyspaceTrouble::Flowed(absl::string_view keyspace) {
  absl::Duration lasted;
  {
    absl::MutexLock lock(&mu_);
    auto it = keyspaces_.find(keyspace);
    if (it == keyspaces_.end() || !it->second.in_trouble) return;
    State& s = it->second;
    s.in_trouble = false;
    lasted = now_() - s.since;
    s.since = absl::InfinitePast();
    s.logged = absl::InfinitePast();
    s.logged_reason.clear();
    s.rows_since_logged = 0;
  }
  LogInfo("keyspace flows again",
          {{"keyspace", keyspace}, {"trouble_lasted", lasted}});
}

void KeyspaceTrouble::Resolved(absl::string_view keyspace,
                               absl::string_view reason,
                               absl::string_view peer) {
  {
    absl::MutexLock lock(&mu_);
    auto it = keyspaces_.find(keyspace);
    if (it == keyspaces_.end() || !it->second.in_trouble ||
        it->second.reason != reason || it->second.peer != peer) {
      return;
    }
  }
  Flowed(keyspace);
}

bool KeyspaceTrouble::InTrouble(absl::string_view keyspace) const {
  absl::MutexLock lock(&mu_);
  auto it = keyspaces_.find(keyspace);
  return it != keyspaces_.end() && it->second.in_trouble;
}

std::vector<std::string> KeyspaceTrouble::InTrouble() const {
  std::vector<std::string> names;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, s] : keyspaces_) {
    if (s.in_trouble) names.push_back(name);
  }
  return names;
}

void KeyspaceTrouble::FillStatus(v1::StatusResponse* response) {
  absl::MutexLock lock(&mu_);
  for (const auto& [name, s] : keyspaces_) {
    v1::KeyspaceTroubleStatus* t = response->add_keyspace_trouble();
    t->set_keyspace(name);
    t->set_in_trouble(s.in_trouble);
    t->set_reason(s.reason);
    t->set_last_error(s.last_error);
    t->set_last_key(s.last_key);
    t->set_peer(s.peer);
    t->set_last_unix_ms(UnixMillisOrZero(s.last));
    t->set_since_unix_ms(s.in_trouble ? UnixMillisOrZero(s.since) : 0);
    uint64_t total = 0;
    for (const auto& [reason, rows] : s.rows_by_reason) {
      v1::ReasonCount* c = t->add_rejected();
      c->set_reason(reason);
      c->set_rows(rows);
      total += rows;
    }
    t->set_rows_rejected(total);
  }
  if (!response->has_postgres()) return;
  // A table whose index is ready but whose rows are left out must not look
  // simply "ready".
  for (v1::PostgresTable& table :
       *response->mutable_postgres()->mutable_tables()) {
    auto it = keyspaces_.find(table.keyspace());
    if (it == keyspaces_.end() || !it->second.in_trouble) continue;
    table.set_trouble(absl::StrCat("rows from ", it->second.peer, " left out (",
                                   it->second.reason,
                                   "): ", it->second.last_error));
  }
}

}  // namespace node
}  // namespace tally
