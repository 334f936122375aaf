// load: rows from a JSON Lines file or synthetic rows, streamed to a node.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tools/cli/commands/command.h"
#include "tools/cli/commands/commands.h"
#include "tools/cli/format.h"
#include "tools/cli/jsonl.h"
#include "tools/cli/progress_report.h"
#include "tools/cli/synthetic.h"
#include "tree/progress_meter.h"
#include "tree/status_macros.h"

namespace tally {
namespace cli {

CommandResult Load(const Context& ctx) {
  TALLY_RETURN_IF_ERROR(CheckKeyspace(ctx));
  const bool from_file = ctx.given.count("file") > 0;
  const bool synthetic = ctx.given.count("count") > 0;
  if (from_file == synthetic) {
    return absl::InvalidArgumentError(
        "load needs exactly one of --file=FILE.jsonl (or - for standard "
        "input) or --count=N");
  }
  if (from_file &&
      (ctx.given.count("seed") > 0 || ctx.given.count("value_size") > 0)) {
    return absl::InvalidArgumentError(
        "--seed and --value-size apply to load --count, not to --file");
  }
  const std::string path = ctx.file;
  const uint64_t count = ctx.count;
  // The input is read once, as it is sent: a pipe (`--file -`,
  // /dev/stdin, a FIFO) cannot be read twice, and a file checked first could
  // change before the second read. So a bad line cannot stop the load before
  // the rows ahead of it are sent; it stops it there, and the error says how
  // many rows went in. Loading a row again writes the same value, so fixing
  // the line and loading the whole input again is safe.
  std::ifstream file;
  std::optional<JsonlReader> reader;
  std::optional<SyntheticRows> rows;
  std::string input;  // the file's name in messages
  // A file's size (a regular file only: a pipe's is not known), so that
  // its progress has a total: the bytes read of it.
  std::optional<uint64_t> input_bytes;
  if (from_file) {
    if (path.empty()) return absl::InvalidArgumentError("--file is empty");
    if (path == "-") {
      input = "standard input";
      // std::cin reads a closed descriptor or a directory as an empty
      // input: "loaded 0 rows", exit 0.
      struct stat st;
      if (fstat(STDIN_FILENO, &st) != 0) {
        return absl::InvalidArgumentError(
            absl::StrFormat("--file -: standard input cannot be read: %s",
                            std::strerror(errno)));
      }
      if (S_ISDIR(st.st_mode)) {
        return absl::InvalidArgumentError(
            "--file -: standard input is a directory; give a JSON Lines "
            "file");
      }
      reader.emplace(&std::cin);
      // Standard input redirected from a file (`< rows.jsonl`) has a size;
      // the load reads it from where the descriptor stands.
      const off_t at = lseek(STDIN_FILENO, 0, SEEK_CUR);
      if (S_ISREG(st.st_mode) && at >= 0 && at <= st.st_size) {
        input_bytes = static_cast<uint64_t>(st.st_size - at);
      }
    } else {
      input = path;
      // An ifstream opens a directory and reads it as empty: 0 rows, exit 0.
      std::error_code ec;
      if (std::filesystem::is_directory(path, ec)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "--file %s is a directory; give a JSON Lines file, or - for "
            "standard input",
            path));
      }
      file.open(path);
      if (!file) {
        return absl::NotFoundError(
            absl::StrFormat("cannot open %s: %s", path, std::strerror(errno)));
      }
      reader.emplace(&file);
      struct stat st;
      if (stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
        input_bytes = static_cast<uint64_t>(st.st_size);
      }
    }
  } else {
    rows.emplace(count, ctx.seed, ctx.value_size);
  }

  TALLY_ASSIGN_OR_RETURN(auto client, Connect(ctx, ctx.node));
  TALLY_RETURN_IF_ERROR(RequireKeyspace(ctx, *client));
  // Load's row source cannot fail: a bad line ends the stream early (what
  // was sent is committed), and the error is reported afterwards.
  absl::Status read_error;
  uint64_t sent = 0;
  ProgressLine progress;
  const absl::Time start = absl::Now();
  // Progress counts rows for synthetic rows (their count is the total) and
  // bytes of a file (its size is the total; a pipe has none); the rows'
  // rate is shown either way.
  const absl::string_view unit = from_file ? kBytes : "rows";
  tree::ProgressMeter meter(start);
  meter.set_total(from_file ? input_bytes : std::optional<uint64_t>(count));
  tree::ProgressMeter row_meter(start);
  absl::Time last_json = start;
  auto report = [&] {
    const absl::Time now = absl::Now();
    const bool json_due = ctx.json && now - last_json >= kJsonProgressInterval;
    if (!progress.enabled() && !json_due) return;
    meter.Record(now, from_file ? reader->bytes_read() : sent);
    row_meter.Record(now, sent);
    const tree::ProgressEstimate e = meter.Estimate(now);
    const double rows_per_second = row_meter.Estimate(now).rate;
    progress.Update(
        from_file ? absl::StrFormat("load: %d rows (%.0f rows/s); %s", sent,
                                    rows_per_second, ProgressText(e, unit))
                  : absl::StrCat("load: ", ProgressText(e, unit)));
    if (json_due) {
      last_json = now;
      Json line = {{"keyspace", ctx.keyspace},
                   {"rows", sent},
                   {"rows_per_second", rows_per_second}};
      line.update(ProgressJson(e, unit));
      PrintJson({{"progress", std::move(line)}});
      std::cout.flush();
    }
  };
  absl::StatusOr<v1::LoadResponse> r =
      client->Load(ctx.keyspace, [&](std::string* key, std::string* value) {
        bool more;
        if (reader.has_value()) {
          KeyValue row;
          absl::StatusOr<bool> next = reader->Next(&row);
          if (!next.ok()) read_error = next.status();
          more = next.ok() && *next;
          if (more) {
            *key = std::move(row.key);
            *value = std::move(row.value);
          }
        } else {
          more = rows->Next(key, value);
        }
        if (more && ++sent % 64 == 0) report();
        return more;
      });
  progress.Clear();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  // std::cin (synchronised with stdio) ends at a read error as at the end
  // of the input; only stdin's error flag tells them apart.
  if (read_error.ok() && path == "-" && from_file && std::ferror(stdin)) {
    read_error = absl::UnavailableError(
        absl::StrCat("read error after line ", reader->line_number()));
  }
  if (!r.ok()) {
    // A node that refused a message says itself what the earlier ones
    // committed (node/rpc/internal/write_stream.h); only a call lost on the way
    // (the node or the link died) leaves the client not knowing.
    const absl::StatusCode code = r.status().code();
    const bool lost = code == absl::StatusCode::kUnavailable ||
                      code == absl::StatusCode::kDeadlineExceeded ||
                      code == absl::StatusCode::kCancelled ||
                      code == absl::StatusCode::kUnknown ||
                      code == absl::StatusCode::kInternal;
    if (sent == 0 || !lost) return CallFailed(ctx, r.status());
    return absl::Status(
        r.status().code(),
        absl::StrFormat("%s; some of the %d rows sent may have been written "
                        "(loading again is safe)",
                        CallFailed(ctx, r.status()).message(), sent));
  }
  if (!read_error.ok()) {
    return absl::Status(
        read_error.code(),
        absl::StrFormat("%s %s; the load stopped there: the %d rows before it "
                        "were loaded into keyspace '%s' (fix the input and "
                        "load it again; loading a row twice is harmless)",
                        input, read_error.message(), r->rows(), ctx.keyspace));
  }
  // Never "success" for fewer rows than were read.
  const uint64_t expected = rows.has_value() ? count : sent;
  if (r->rows() != expected || sent != expected) {
    return absl::DataLossError(absl::StrFormat(
        "read %d rows from %s but the node loaded %d into keyspace '%s'; load "
        "again",
        sent, rows.has_value() ? "the synthetic source" : input, r->rows(),
        ctx.keyspace));
  }
  const double rate = seconds > 0 ? r->rows() / seconds : 0;
  if (ctx.json) {
    Json out = Json::object();
    out["keyspace"] = ctx.keyspace;
    out["rows"] = r->rows();
    out["seconds"] = seconds;
    out["rows_per_second"] = rate;
    PrintJson(out);
  } else {
    std::cout << absl::StrFormat(
        "loaded %d rows into keyspace '%s' on %s in %.2f s (%.0f rows/s)\n",
        r->rows(), ctx.keyspace, client->address(), seconds, rate);
  }
  return 0;
}

}  // namespace cli
}  // namespace tally
