#include "node/session/paused_peers.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tally {
namespace node {
namespace {

std::string PathIn(const std::string& data_dir) {
  return absl::StrCat(data_dir, "/", kPausedPeersFile);
}

absl::Status Failed(const std::string& what, const std::string& path) {
  return absl::UnavailableError(
      absl::StrCat("cannot ", what, " ", path, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<std::set<std::string>> ReadPausedPeers(
    const std::string& data_dir) {
  const std::string path = PathIn(data_dir);
  std::set<std::string> addresses;
  std::ifstream in(path);
  if (!in) {
    if (errno == ENOENT) return addresses;
    return Failed("read", path);
  }
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) return Failed("read", path);
  for (absl::string_view line : absl::StrSplit(text.str(), '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (!line.empty()) addresses.insert(std::string(line));
  }
  return addresses;
}

absl::Status WritePausedPeers(const std::string& data_dir,
                              const std::set<std::string>& addresses) {
  const std::string path = PathIn(data_dir);
  if (addresses.empty()) {
    if (std::remove(path.c_str()) != 0 && errno != ENOENT) {
      return Failed("remove", path);
    }
    return absl::OkStatus();
  }
  std::string text;
  for (const std::string& address : addresses) {
    absl::StrAppend(&text, address, "\n");
  }
  const std::string temp = absl::StrCat(path, ".tmp");
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return Failed("create", temp);
  const bool written = ::write(fd, text.data(), text.size()) ==
                           static_cast<ssize_t>(text.size()) &&
                       ::fsync(fd) == 0;
  const absl::Status status =
      written ? absl::OkStatus() : Failed("write", temp);
  ::close(fd);
  if (!status.ok()) return status;
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    return Failed("rename to", path);
  }
  return absl::OkStatus();
}

}  // namespace node
}  // namespace tally
