// The status page (node/observe/status_page.h) in a real browser: two real
// tallyd nodes with a mismatch in known token segments, one session between
// them, and headless Chromium loading http://HOST:PORT/ from the first node's
// metrics port — the screenshot is a real image of the page, and the DOM
// the browser built shows the peer, the keyspace and exactly the segments
// where the mismatch was as hot, with their counts.
//
// Chromium (Debian package `chromium`, scripts/install-deps.sh) is required:
// without it this test fails rather than skips. Set
// TALLY_STATUS_PAGE_SCREENSHOT=/some/file.png to keep the screenshot.
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/client/client.h"
#include "node/sync/repair_heat.h"
#include "support/process.h"
#include "support/temp_dir.h"
#include "tests/node_connect.h"
#include "tests/node_metrics.h"
#include "tree/token.h"

namespace tally {
namespace {

using ::tally::testing::CommandResult;
using ::tally::testing::Connect;
using ::tally::testing::MetricsPort;
using ::tally::testing::NodeProcess;
using ::tally::testing::RunCommand;
using ::tally::testing::TempDir;
using ::testing::HasSubstr;

constexpr char kChromium[] = "/usr/bin/chromium";
constexpr char kKeyspace[] = "orders";
constexpr int kWidth = 1280;
constexpr int kHeight = 1400;
// Where the mismatch is: 3 keys in one segment, 1 in another.
constexpr int kHotSegment = 9;
constexpr int kWarmSegment = 44;

// A key whose token lies in heat segment `segment`, the `n`-th such.
std::string KeyInSegment(int segment, int n) {
  for (int i = 0;; ++i) {
    std::string key = absl::StrCat("order-", i);
    if (node::HeatSegmentOf(tree::TokenOf(key)) == segment && n-- == 0) {
      return key;
    }
  }
}

std::unique_ptr<NodeProcess> StartNode(const std::string& name,
                                       const std::string& dir,
                                       std::vector<std::string> extra = {}) {
  extra.insert(extra.begin(), {"--sync-writes", "false"});
  auto node = NodeProcess::Start(name, dir, extra);
  EXPECT_TRUE(node.ok()) << node.status();
  return node.ok() ? std::move(*node) : nullptr;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The big-endian 32-bit number at `at`.
uint32_t BigEndian32(const std::string& bytes, size_t at) {
  uint32_t n = 0;
  for (size_t i = 0; i < 4; ++i) {
    n = (n << 8) | static_cast<unsigned char>(bytes[at + i]);
  }
  return n;
}

// The opening <rect ...> of `segment` in the strip of `window`, from the
// browser's DOM.
std::string SegmentRect(const std::string& dom, const std::string& peer,
                        const std::string& window, int segment) {
  const std::string strip =
      absl::StrCat("data-peer=\"", peer, "\" data-keyspace=\"", kKeyspace,
                   "\" data-window=\"", window, "\"");
  const size_t from = dom.find(strip);
  if (from == std::string::npos) return "";
  const std::string svg = dom.substr(from, dom.find("</svg>", from) - from);
  std::smatch m;
  const std::regex rect(
      absl::StrCat("<rect [^>]*data-segment=\"", segment, "\"[^>]*>"));
  return std::regex_search(svg, m, rect) ? m.str() : "";
}

int CountOf(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

TEST(StatusPageInABrowser, TheHeatMapShowsWhereTheNodesDiffered) {
  ASSERT_TRUE(std::filesystem::exists(kChromium))
      << kChromium
      << " is missing: install the Debian package chromium "
         "(scripts/install-deps.sh lists it)";
  TempDir dir_a, dir_b, browser;
  auto b = StartNode("node-b", dir_b.path());
  ASSERT_TRUE(b);

  // The rows go to a while it has no peer, so that no feed carries them:
  // only a session finds them, and in the segments chosen.
  {
    auto a = StartNode("node-a", dir_a.path());
    ASSERT_TRUE(a);
    auto client = Connect(a->address());
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(
          client->Put(kKeyspace, KeyInSegment(kHotSegment, i), "v").ok());
    }
    ASSERT_TRUE(
        client->Put(kKeyspace, KeyInSegment(kWarmSegment, 0), "v").ok());
    ASSERT_EQ(a->Stop(), 0);
  }
  // One session (the first starts within a second; the next is an hour
  // away), which sends the four rows to b.
  auto a = StartNode("node-a", dir_a.path(),
                     {"--peer", b->address(), "--sync-interval", "1h",
                      "--metrics-listen", "127.0.0.1:0"});
  ASSERT_TRUE(a);
  const int port = MetricsPort(*a);
  ASSERT_GT(port, 0) << a->Log();
  auto client_a = Connect(a->address());
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  v1::StatusResponse status;
  while (absl::Now() < deadline) {
    absl::StatusOr<v1::StatusResponse> s = client_a->Status();
    ASSERT_TRUE(s.ok()) << s.status();
    status = *s;
    if (status.peers_size() == 1 && status.peers(0).sessions_ok() >= 1) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_EQ(status.peers_size(), 1);
  ASSERT_EQ(status.peers(0).sessions_ok(), 1u) << a->Log();
  ASSERT_EQ(status.peers(0).rows_sent(), 4u) << a->Log();
  // The recording, as Admin.Status sends it.
  ASSERT_EQ(status.peers(0).heat_size(), 1);
  const v1::KeyspaceHeat& heat = status.peers(0).heat(0);
  EXPECT_EQ(heat.keyspace(), kKeyspace);
  ASSERT_EQ(heat.last_size(), 2);
  EXPECT_EQ(heat.last(0).segment(), static_cast<uint32_t>(kHotSegment));
  EXPECT_EQ(heat.last(0).differences(), 3u);
  EXPECT_EQ(heat.last(0).rows_repaired(), 3u);
  EXPECT_EQ(heat.last(1).segment(), static_cast<uint32_t>(kWarmSegment));
  EXPECT_EQ(heat.last(1).rows_repaired(), 1u);

  // One browser run: the screenshot and the DOM it built.
  const std::string shot = browser.path() + "/page.png";
  const std::string url = absl::StrCat("http://127.0.0.1:", port, "/");
  const CommandResult chromium =
      RunCommand({kChromium, "--headless", "--no-sandbox", "--disable-gpu",
                  "--hide-scrollbars",
                  absl::StrCat("--user-data-dir=", browser.path(), "/profile"),
                  absl::StrCat("--window-size=", kWidth, ",", kHeight),
                  absl::StrCat("--screenshot=", shot), "--dump-dom", url},
                 absl::Seconds(90));
  ASSERT_EQ(chromium.exit_code, 0) << chromium.err;

  const std::string png = ReadFile(shot);
  ASSERT_GE(png.size(), 24u) << chromium.err;
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(png.substr(12, 4), "IHDR");
  EXPECT_EQ(BigEndian32(png, 16), static_cast<uint32_t>(kWidth));
  EXPECT_EQ(BigEndian32(png, 20), static_cast<uint32_t>(kHeight));
  // A blank page of that size compresses to a few kB; text, tables and
  // 256 coloured segments do not.
  EXPECT_GT(png.size(), 40000u);
  if (const char* keep = std::getenv("TALLY_STATUS_PAGE_SCREENSHOT")) {
    std::filesystem::copy_file(
        shot, keep, std::filesystem::copy_options::overwrite_existing);
  }

  const std::string& dom = chromium.out;
  EXPECT_THAT(dom, HasSubstr("<span id=\"node-name\">node-a</span>"));
  EXPECT_THAT(dom, HasSubstr(absl::StrCat("data-peer=\"", b->address(), "\"")));
  EXPECT_THAT(dom, HasSubstr("node-b"));
  EXPECT_THAT(dom, HasSubstr(absl::StrCat("<tr data-keyspace=\"", kKeyspace,
                                          "\"><td>", kKeyspace, "</td>")));
  EXPECT_THAT(dom, HasSubstr("<span class=\"ok\">ok</span>"));
  // Both strips (the last session and all of them) show the two segments
  // and no other.
  for (const char* window : {"last", "recent"}) {
    SCOPED_TRACE(window);
    const std::string hot = SegmentRect(dom, b->address(), window, kHotSegment);
    EXPECT_THAT(hot, HasSubstr("class=\"seg hot\""));
    EXPECT_THAT(hot, HasSubstr("data-differences=\"3\""));
    EXPECT_THAT(hot, HasSubstr("data-rows-repaired=\"3\""));
    const std::string warm =
        SegmentRect(dom, b->address(), window, kWarmSegment);
    EXPECT_THAT(warm, HasSubstr("class=\"seg hot\""));
    EXPECT_THAT(warm, HasSubstr("data-differences=\"1\""));
    const std::string cold =
        SegmentRect(dom, b->address(), window, kHotSegment + 1);
    EXPECT_THAT(cold, HasSubstr("class=\"seg\""));
    EXPECT_THAT(cold, HasSubstr("data-differences=\"0\""));
  }
  EXPECT_EQ(CountOf(dom, "class=\"seg hot\""), 4) << dom;
  EXPECT_THAT(dom, HasSubstr("<span class=\"label\">all sessions (1)</span>"));
  EXPECT_THAT(dom, HasSubstr("4 differences, 4 rows repaired, in 2 of 64 "
                             "segments; hottest #9 (3)"));
  EXPECT_EQ(a->Stop(), 0);
  EXPECT_EQ(b->Stop(), 0);
}

}  // namespace
}  // namespace tally
