// sync: node A starts a session with its peer(s) now, and this tool follows
// it to its end (Admin.Sync).
#include <atomic>
#include <csignal>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tools/cli/commands/command.h"
#include "tools/cli/commands/commands.h"
#include "tools/cli/format.h"
#include "tools/cli/progress_report.h"
#include "tree/status_macros.h"

namespace tally {
namespace cli {
namespace {

// Set by the first Ctrl-C: the call is cancelled and node A stops the
// sessions it started for it (between batches).
std::atomic<bool> interrupted{false};

extern "C" void OnSyncInterrupt(int) {
  interrupted.store(true);
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C ends the process at once
}

std::string Who(const v1::SyncPeerState& p) {
  return absl::StrCat(
      p.address(), p.name().empty() ? "" : absl::StrCat(" (", p.name(), ")"));
}

// One peer's part of the progress line.
std::string PeerProgressText(const v1::SyncPeerState& p) {
  const v1::SessionProgress& s = p.progress();
  if (p.state() != "running") return absl::StrCat(p.address(), " ", p.state());
  return absl::StrFormat(
      "%s %s%s (%d/%d keyspaces), %d differences, rows in/out %d/%d; %s",
      p.address(), s.phase(),
      s.keyspace().empty() ? "" : absl::StrCat(" ", s.keyspace()),
      s.keyspaces_done(), s.keyspaces(), s.differences(), s.rows_received(),
      s.rows_sent(), ProgressText(SessionEstimate(s, absl::Now()), "rows"));
}

Json PeerJson(const v1::SyncPeerState& p) {
  const v1::SessionProgress& s = p.progress();
  Json out = {
      {"peer", p.address()},
      {"name", p.name()},
      {"state", p.state()},
      {"phase", s.phase()},
      {"keyspace", s.keyspace()},
      {"keyspaces", s.keyspaces()},
      {"keyspaces_done", s.keyspaces_done()},
      {"differences", s.differences()},
      {"rows_received", s.rows_received()},
      {"rows_sent", s.rows_sent()},
      {"rows_expected",
       s.has_rows_expected() ? Json(s.rows_expected()) : Json()},
      {"rows_per_second", s.rows_per_second()},
      {"eta_seconds", s.has_eta_seconds() ? Json(s.eta_seconds()) : Json()}};
  if (p.state() == "done") {
    const v1::SessionRecord& r = p.record();
    out["outcome"] = r.outcome();
    out["seconds"] = r.seconds();
    out["differences"] = r.differences();
    out["rows_received"] = r.rows_received();
    out["rows_sent"] = r.rows_sent();
    out["rows_erased"] = r.rows_erased();
    out["conflicts"] = r.conflicts();
    out["bytes_repaired"] = r.bytes_repaired();
    out["rows_changed_during_session"] = r.rows_changed_during_session();
    Json differing = Json::array();
    for (const std::string& ks : p.differing_after()) differing.push_back(ks);
    out["equal_after"] = r.outcome() == "ok" && p.differing_after_size() == 0;
    out["differing_after"] = std::move(differing);
  }
  return out;
}

// The final line for one peer.
std::string ResultText(const v1::SyncPeerState& p) {
  if (p.state() == "skipped") {
    return absl::StrFormat(
        "sync with %s: skipped (paused; tally peer resume "
        "%s)\n",
        Who(p), p.address());
  }
  const v1::SessionRecord& r = p.record();
  if (r.outcome() != "ok") {
    return absl::StrFormat(
        "sync with %s: failed after %.1f s: %s (rows in/out "
        "so far %d/%d)\n",
        Who(p), r.seconds(), r.outcome(), r.rows_received(), r.rows_sent());
  }
  std::string after =
      p.differing_after_size() == 0
          ? std::string("the nodes are equal")
          : absl::StrCat("still different in ",
                         absl::StrJoin(p.differing_after(), ", "),
                         " (writes during the session, or ties); sync again");
  const std::string changed =
      r.rows_changed_during_session() == 0
          ? std::string()
          : absl::StrFormat(
                ", %d changed by applications meanwhile (left to "
                "the capture)",
                r.rows_changed_during_session());
  return absl::StrFormat(
      "sync with %s: ok in %.1f s; %d keyspace%s, %d differences, rows in/out "
      "%d/%d, %d erased, %d conflicts%s, %s moved; %s\n",
      Who(p), r.seconds(), r.keyspaces(), r.keyspaces() == 1 ? "" : "s",
      r.differences(), r.rows_received(), r.rows_sent(), r.rows_erased(),
      r.conflicts(), changed, HumanBytes(r.bytes_repaired()), after);
}

}  // namespace

CommandResult Sync(const Context& ctx) {
  v1::SyncRequest request;
  if (ctx.given.count("keyspace") > 0) {
    TALLY_RETURN_IF_ERROR(CheckKeyspace(ctx));
    request.set_keyspace(ctx.keyspace);
  }
  if (ctx.given.count("peer") > 0) {
    if (ctx.peer.empty()) {
      return absl::InvalidArgumentError(
          "--peer is empty; give one of node A's peers by its address or node "
          "name, or leave --peer out for all of them");
    }
    request.set_peer(ctx.peer);
  }
  TALLY_ASSIGN_OR_RETURN(auto a, Connect(ctx, ctx.args[0]));

  ProgressLine progress;
  v1::SyncEvent last;
  absl::Time last_json = absl::InfinitePast();
  node::StreamCanceller canceller;
  std::atomic<bool> call_done{false};
  std::signal(SIGINT, OnSyncInterrupt);
  // A signal handler cannot cancel a call; this thread does it for it.
  std::thread watcher([&] {
    while (!call_done.load()) {
      if (interrupted.load()) {
        canceller.Cancel();
        return;
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
  });
  const absl::Status status = a->Sync(
      request,
      [&](v1::SyncEvent& event) {
        last = event;
        if (ctx.json) {
          // A progress line a second; the result comes once, at the end.
          const absl::Time now = absl::Now();
          if (now - last_json >= absl::Seconds(1)) {
            last_json = now;
            Json peers = Json::array();
            for (const v1::SyncPeerState& p : event.peers()) {
              peers.push_back(PeerJson(p));
            }
            PrintJson({{"progress", std::move(peers)}});
          }
        } else {
          std::vector<std::string> parts;
          for (const v1::SyncPeerState& p : event.peers()) {
            parts.push_back(PeerProgressText(p));
          }
          progress.Update(absl::StrCat("sync: ", absl::StrJoin(parts, "; ")));
        }
        return absl::OkStatus();
      },
      &canceller);
  call_done.store(true);
  watcher.join();
  std::signal(SIGINT, SIG_DFL);
  progress.Clear();
  if (!status.ok()) {
    if (interrupted.load()) {
      return absl::CancelledError(absl::StrFormat(
          "sync interrupted: node %s stops the sessions it started for it "
          "(rows repaired so far stay repaired)",
          a->address()));
    }
    return CallFailed(ctx, status);
  }

  int failed = 0;
  bool differ = false;
  std::vector<std::string> failures;
  Json results = Json::array();
  std::string text;
  for (const v1::SyncPeerState& p : last.peers()) {
    if (p.state() == "done" && p.record().outcome() != "ok") {
      ++failed;
      failures.push_back(absl::StrCat(p.address(), ": ", p.record().outcome()));
    }
    if (p.differing_after_size() > 0) differ = true;
    results.push_back(PeerJson(p));
    absl::StrAppend(&text, ResultText(p));
  }
  if (ctx.json) {
    PrintJson({{"result", std::move(results)}});
  } else {
    std::cout << text;
  }
  std::cout.flush();
  if (failed > 0) {
    // Exit 2, as a failed repair; the lines above say what each did.
    return absl::AbortedError(
        absl::StrFormat("sync with %d of %d peers failed: %s", failed,
                        last.peers_size(), absl::StrJoin(failures, "; ")));
  }
  // Exit 1, as a repair that leaves the nodes different.
  return differ ? 1 : 0;
}

}  // namespace cli
}  // namespace tally
