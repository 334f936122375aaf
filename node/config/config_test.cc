#include "node/config/config.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/config/config_file.h"
#include "support/temp_dir.h"
#include "tests/test_certs.h"

namespace tally {
namespace node {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(ParsePeer, ReadsAddressAndRole) {
  auto peer = ParsePeer("10.0.0.2:7400");
  ASSERT_TRUE(peer.ok());
  EXPECT_EQ(peer->address, "10.0.0.2:7400");
  EXPECT_EQ(peer->role, PeerRole::kPeer);
  auto source = ParsePeer("10.0.0.3:7400,role=source");
  ASSERT_TRUE(source.ok());
  EXPECT_EQ(source->role, PeerRole::kSource);
}

TEST(ParsePeer, RejectsBadSpecs) {
  EXPECT_EQ(ParsePeer("no-port").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParsePeer("h:99999").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ParsePeer("h:1,role=boss").status().message()),
              HasSubstr("role=peer or role=source"));
}

TEST(ParsePeer, ADatabaseUrlIsASourceAndItsCommasAreItsOwn) {
  auto source = ParsePeer(
      "postgresql://reader:pa,ss@master:5432/app?sslmode=require,"
      "role=source");
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_TRUE(source->database);
  EXPECT_EQ(source->role, PeerRole::kSource);
  EXPECT_EQ(source->address,
            "postgresql://reader:pa,ss@master:5432/app?sslmode=require");
  EXPECT_TRUE(ParsePeer("postgres://m/app,role=source").ok());
  EXPECT_FALSE(ParsePeer("10.0.0.3:7400")->database);
}

TEST(ParsePeer, ADatabaseUrlWithoutRoleSourceIsRefusedWithoutItsPassword) {
  for (absl::string_view spec : {"postgresql://reader:s3cret@master/app",
                                 "postgresql://reader:s3cret@master/app,"
                                 "role=peer"}) {
    absl::StatusOr<PeerConfig> peer = ParsePeer(spec);
    ASSERT_FALSE(peer.ok()) << spec;
    EXPECT_EQ(peer.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(peer.status().message()),
                AllOf(HasSubstr("give it as role=source"),
                      HasSubstr("two-way with one is not supported"),
                      ::testing::Not(HasSubstr("s3cret"))));
  }
  // libpq's own parser judges the URL.
  EXPECT_FALSE(
      ParsePeer("postgresql://m/app?no_such_option=1,role=source").ok());
}

TEST(ValidateConfig, ADatabasePeerNeedsASidecar) {
  NodeConfig config;
  config.name = "n";
  config.data_dir = "/tmp/n";
  config.peers.push_back(*ParsePeer("postgresql://r@m/app,role=source"));
  absl::Status s = ValidateConfig(config);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("only a sidecar can copy"));
  config.postgres = "postgresql://tally@127.0.0.1/app";
  config.tables = {"public.t"};
  EXPECT_TRUE(ValidateConfig(config).ok()) << ValidateConfig(config);
  // A source is the only peer, a database one too.
  config.peers.push_back(*ParsePeer("10.0.0.2:7400"));
  EXPECT_FALSE(ValidateConfig(config).ok());
}

TEST(ParseDuration, AcceptsUnitsAndBareSeconds) {
  EXPECT_EQ(*ParseDuration("30s"), absl::Seconds(30));
  EXPECT_EQ(*ParseDuration("500ms"), absl::Milliseconds(500));
  EXPECT_EQ(*ParseDuration("2"), absl::Seconds(2));
  EXPECT_FALSE(ParseDuration("soon").ok());
  EXPECT_FALSE(ParseDuration("-1s").ok());
  EXPECT_FALSE(ParseDuration("0").ok());
}

TEST(ConfigText, SetsEverySettingTheFlagsHave) {
  NodeConfig config;
  ASSERT_TRUE(ApplyConfigText(R"(
# a comment
name = eu-west/db-3
data-dir = /var/lib/tally   # trailing comment
listen = 127.0.0.1:7500
peer = 127.0.0.1:7401
peer = 127.0.0.1:7402,role=source
sync-interval = 5s
max-sessions = 3
repair-bandwidth = 12.5
default-depth = 20
session-timeout = 1m
rpc-threads = 6
sync-writes = false
insecure = true
)",
                              &config)
                  .ok());
  EXPECT_EQ(config.name, "eu-west/db-3");
  EXPECT_EQ(config.data_dir, "/var/lib/tally");
  EXPECT_EQ(config.listen, "127.0.0.1:7500");
  ASSERT_EQ(config.peers.size(), 2u);
  EXPECT_EQ(config.peers[1].role, PeerRole::kSource);
  EXPECT_EQ(config.sync_interval, absl::Seconds(5));
  EXPECT_EQ(config.max_sessions, 3);
  EXPECT_DOUBLE_EQ(config.repair_bandwidth_mb, 12.5);
  EXPECT_EQ(config.default_depth, 20);
  EXPECT_EQ(config.session_timeout, absl::Minutes(1));
  EXPECT_EQ(config.rpc_threads, 6);
  EXPECT_FALSE(config.sync_writes);
  EXPECT_TRUE(config.insecure);
}

// A bandwidth is decimal MB/s, 0 or within 1 KB/s..1 TB/s: what a C parser
// also reads (1e30, 4.9e-324, 0x10, inf, -0) is refused as the typo it is.
TEST(ConfigText, BandwidthsAreDecimalAndWithinReason) {
  for (const char* good : {"0", "12.5", "0.001", "1000000", "100"}) {
    NodeConfig config;
    EXPECT_TRUE(ApplySetting("node-bandwidth", good, &config).ok()) << good;
    EXPECT_TRUE(ApplySetting("repair-bandwidth", good, &config).ok()) << good;
  }
  for (const char* bad :
       {"1e30", "4.9e-324", "0x10", "inf", "nan", "-0", "-1", "", ".", "1.2.3",
        "0.0001", "1000001", " 5", "5 MB"}) {
    NodeConfig config;
    absl::Status s = ApplySetting("node-bandwidth", bad, &config);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(config.node_bandwidth_mb, 0) << bad;
    EXPECT_EQ(ApplySetting("repair-bandwidth", bad, &config).code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

// The keyspace limit and the bulk-stream limits are settings.
TEST(ConfigText, ReadsTheKeyspaceAndStreamLimits) {
  NodeConfig config;
  EXPECT_EQ(config.max_keyspaces, 256);
  EXPECT_EQ(config.max_streams_per_client, 32);
  EXPECT_EQ(config.stream_idle_timeout, absl::Seconds(60));
  ASSERT_TRUE(ApplyConfigText(R"(max-keyspaces = 40
max-streams-per-client = 3
stream-idle-timeout = 5s
)",
                              &config)
                  .ok());
  EXPECT_EQ(config.max_keyspaces, 40);
  EXPECT_EQ(config.max_streams_per_client, 3);
  EXPECT_EQ(config.stream_idle_timeout, absl::Seconds(5));
  EXPECT_FALSE(ApplySetting("max-keyspaces", "0", &config).ok());
  EXPECT_FALSE(ApplySetting("max-keyspaces", "10001", &config).ok());
  EXPECT_FALSE(ApplySetting("max-streams-per-client", "0", &config).ok());
  EXPECT_FALSE(ApplySetting("stream-idle-timeout", "soon", &config).ok());
}

TEST(ConfigText, NamesTheLineOfABadSetting) {
  NodeConfig config;
  const absl::Status unknown =
      ApplyConfigText("name = a\nfrobs = 3\n", &config);
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(unknown.message()), HasSubstr("config:2:"));
  EXPECT_THAT(std::string(unknown.message()), HasSubstr("frobs"));
  EXPECT_FALSE(ApplyConfigText("default-depth = 30", &config).ok());
  EXPECT_FALSE(ApplyConfigText("max-sessions = none", &config).ok());
  EXPECT_FALSE(ApplyConfigText("just words", &config).ok());
}

TEST(ValidateConfig, RequiresNameAndDataDir) {
  NodeConfig config;
  EXPECT_THAT(std::string(ValidateConfig(config).message()),
              HasSubstr("--name"));
  config.name = "a";
  EXPECT_THAT(std::string(ValidateConfig(config).message()),
              HasSubstr("--data-dir"));
  config.data_dir = "/tmp/x";
  EXPECT_TRUE(ValidateConfig(config).ok());
}

TEST(ValidateConfig, RefusesTheReservedOriginPrefix) {
  NodeConfig config;
  config.data_dir = "/tmp/x";
  for (const char* reserved : {"tally.bootstrap", "tally.x"}) {
    config.name = reserved;
    const absl::Status refused = ValidateConfig(config);
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << reserved;
    EXPECT_THAT(std::string(refused.message()), HasSubstr("reserved"));
  }
  config.name = "tallyx.bootstrap";
  EXPECT_TRUE(ValidateConfig(config).ok());
}

// The sample config's `name = CHANGE-ME/db-1` passed --check-config, and
// a node started with it kept the name for good.
TEST(ValidateConfig, RefusesTheSampleConfigsPlaceholderName) {
  NodeConfig config;
  config.data_dir = "/tmp/x";
  for (const char* placeholder :
       {"CHANGE-ME/db-1", "CHANGE-ME", "eu/CHANGE-ME"}) {
    config.name = placeholder;
    const absl::Status refused = ValidateConfig(config);
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument)
        << placeholder;
    EXPECT_THAT(std::string(refused.message()), HasSubstr("placeholder"));
  }
  config.name = "eu-west/db-1";
  EXPECT_TRUE(ValidateConfig(config).ok());
}

TEST(ValidateConfig, RefusesNonLoopbackListenUnlessInsecure) {
  NodeConfig config;
  config.name = "a";
  config.data_dir = "/tmp/x";
  config.listen = "0.0.0.0:7400";
  const absl::Status refused = ValidateConfig(config);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("--insecure"));
  config.insecure = true;
  EXPECT_TRUE(ValidateConfig(config).ok());
  config.insecure = false;
  for (const char* loopback : {"127.0.0.1:1", "localhost:1", "[::1]:1"}) {
    config.listen = loopback;
    EXPECT_TRUE(ValidateConfig(config).ok()) << loopback;
  }
}

TEST(ValidateConfig, AllowsNonLoopbackListenWithTls) {
  testing::TempDir dir;
  auto ca = testing::TestCa::Create(dir.path(), "ca");
  ASSERT_TRUE(ca.ok()) << ca.status();
  auto cert = ca->Issue("node");
  ASSERT_TRUE(cert.ok()) << cert.status();
  NodeConfig config;
  config.name = "a";
  config.data_dir = "/tmp/x";
  config.listen = "0.0.0.0:7400";
  const absl::Status refused = ValidateConfig(config);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("--tls-cert"));
  config.tls_cert = cert->cert;
  config.tls_key = cert->key;
  EXPECT_TRUE(ValidateConfig(config).ok());
  config.tls_ca = ca->cert();
  EXPECT_TRUE(ValidateConfig(config).ok());
}

TEST(ValidateConfig, ChecksTlsFiles) {
  testing::TempDir dir;
  auto ca = testing::TestCa::Create(dir.path(), "ca");
  ASSERT_TRUE(ca.ok()) << ca.status();
  auto cert = ca->Issue("node");
  ASSERT_TRUE(cert.ok()) << cert.status();
  NodeConfig config;
  config.name = "a";
  config.data_dir = "/tmp/x";
  // On loopback too: a bad file is a mistake wherever the node listens.
  config.tls_cert = cert->cert;
  EXPECT_THAT(std::string(ValidateConfig(config).message()),
              HasSubstr("without --tls-key"));
  config.tls_key = dir.path() + "/missing.key";
  EXPECT_EQ(ValidateConfig(config).code(), absl::StatusCode::kNotFound);
  config.tls_cert.clear();
  config.tls_key.clear();
  config.tls_ca = ca->cert();
  EXPECT_THAT(std::string(ValidateConfig(config).message()),
              HasSubstr("--tls-ca is given without"));
  // A non-loopback listen with --insecure still gets its TLS files checked.
  config.listen = "0.0.0.0:7400";
  config.insecure = true;
  EXPECT_EQ(ValidateConfig(config).code(), absl::StatusCode::kInvalidArgument);
  config.tls_ca.clear();
  EXPECT_TRUE(ValidateConfig(config).ok());
}

TEST(ValidateConfig, RefusesPeeringWithItself) {
  NodeConfig config;
  config.name = "a";
  config.data_dir = "/tmp/x";
  config.peers.push_back(PeerConfig{config.listen, PeerRole::kPeer});
  EXPECT_EQ(ValidateConfig(config).code(), absl::StatusCode::kInvalidArgument);
}

// The README's first example (`--peer X --peer
// Y,role=source`) once flapped forever: the source's sessions erased the rows X
// brought, and X brought them back, every interval.
TEST(ValidateConfig, ReadmeFirstExampleFlapsForeverIsRefused) {
  NodeConfig config;
  config.name = "n";
  config.data_dir = "/tmp/n";
  config.peers = {*ParsePeer("127.0.0.1:7401"),
                  *ParsePeer("127.0.0.1:7402,role=source")};
  const absl::Status mixed = ValidateConfig(config);
  EXPECT_EQ(mixed.code(), absl::StatusCode::kInvalidArgument) << mixed;
  EXPECT_THAT(std::string(mixed.message()),
              AllOf(HasSubstr("127.0.0.1:7402 is role=source"),
                    HasSubstr("two-way from peer 127.0.0.1:7401"),
                    HasSubstr("only --peer")));
  // The order does not matter.
  std::swap(config.peers[0], config.peers[1]);
  EXPECT_EQ(ValidateConfig(config).code(), absl::StatusCode::kInvalidArgument);
  // Two sources would erase each other's rows.
  config.peers = {*ParsePeer("127.0.0.1:7401,role=source"),
                  *ParsePeer("127.0.0.1:7402,role=source")};
  EXPECT_THAT(std::string(ValidateConfig(config).message()),
              HasSubstr("both role=source"));
  // A source alone, or peers alone, are fine.
  config.peers = {*ParsePeer("127.0.0.1:7402,role=source")};
  EXPECT_TRUE(ValidateConfig(config).ok());
  config.peers = {*ParsePeer("127.0.0.1:7401"), *ParsePeer("127.0.0.1:7403")};
  EXPECT_TRUE(ValidateConfig(config).ok());
}

TEST(ValidateConfig, RefusesMalformedMetricsListen) {
  NodeConfig config;
  config.name = "a";
  config.data_dir = "/tmp/x";
  for (const char* bad : {"9400", ":9400", "127.0.0.1:", "127.0.0.1:http",
                          "127.0.0.1:65536", "127.0.0.1:-1", "[]:9400"}) {
    config.metrics_listen = bad;
    const absl::Status s = ValidateConfig(config);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(s.message()), HasSubstr("--metrics-listen")) << bad;
  }
  for (const char* good :
       {"127.0.0.1:0", "127.0.0.1:9400", "localhost:9400", "[::1]:9400"}) {
    config.metrics_listen = good;
    EXPECT_TRUE(ValidateConfig(config).ok()) << good;
  }
}

TEST(ValidateConfig, RefusesNonLoopbackMetricsListenUnlessInsecure) {
  NodeConfig config;
  config.name = "a";
  config.data_dir = "/tmp/x";
  config.metrics_listen = "0.0.0.0:9400";
  const absl::Status refused = ValidateConfig(config);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.message()),
              AllOf(HasSubstr("--metrics-listen 0.0.0.0:9400"),
                    HasSubstr("--insecure")));
  config.insecure = true;
  EXPECT_TRUE(ValidateConfig(config).ok());
}

TEST(ConfigText, MetricsListenOffIsEmpty) {
  NodeConfig config;
  ASSERT_TRUE(ApplySetting("metrics-listen", "127.0.0.1:9400", &config).ok());
  EXPECT_EQ(config.metrics_listen, "127.0.0.1:9400");
  ASSERT_TRUE(ApplySetting("metrics-listen", "off", &config).ok());
  EXPECT_EQ(config.metrics_listen, "");
}

}  // namespace
}  // namespace node
}  // namespace tally

namespace tally {
namespace node {
namespace {

TEST(ConfigText, ReadsTheMaintenanceSettings) {
  NodeConfig config;
  ASSERT_TRUE(ApplyConfigText("log-retention-entries = 5000\n"
                              "log-retention-age = 2h\n"
                              "tombstone-min-age = 90m\n"
                              "max-clock-skew = 5s\n"
                              "maintenance-interval = 500ms\n",
                              &config)
                  .ok());
  EXPECT_EQ(config.log_retention_entries, 5000u);
  EXPECT_EQ(config.log_retention_age, absl::Hours(2));
  EXPECT_EQ(config.tombstone_min_age, absl::Minutes(90));
  EXPECT_EQ(config.max_clock_skew, absl::Seconds(5));
  EXPECT_EQ(config.maintenance_interval, absl::Milliseconds(500));
  // Zero turns retention limits off.
  ASSERT_TRUE(ApplySetting("log-retention-entries", "0", &config).ok());
  ASSERT_TRUE(ApplySetting("log-retention-age", "0", &config).ok());
  EXPECT_EQ(config.log_retention_entries, 0u);
  EXPECT_EQ(config.log_retention_age, absl::ZeroDuration());
}

TEST(ConfigText, RefusesBadMaintenanceValues) {
  NodeConfig config;
  for (const auto& [name, value] :
       std::vector<std::pair<std::string, std::string>>{
           {"log-retention-entries", "-5"},
           {"log-retention-entries", "lots"},
           {"log-retention-age", "a week"},
           {"tombstone-min-age", "0"},
           {"tombstone-min-age", "-1h"},
           {"max-clock-skew", "never"},
           {"maintenance-interval", "0"}}) {
    absl::Status s = ApplySetting(name, value, &config);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument)
        << name << "=" << value;
  }
}

TEST(ConfigText, ReadsThePgSchemaCheckIntervalAndRefusesBadOnes) {
  NodeConfig config;
  EXPECT_EQ(config.pg_schema_check_interval, absl::Seconds(60));
  ASSERT_TRUE(ApplyConfigText("pg-schema-check-interval = 5m\n", &config).ok());
  EXPECT_EQ(config.pg_schema_check_interval, absl::Minutes(5));
  ASSERT_TRUE(
      ApplyCommandLineSettings({{"pg-schema-check-interval", "1s"}}, &config)
          .ok());
  EXPECT_EQ(config.pg_schema_check_interval, absl::Seconds(1));
  for (const std::string value : {"0", "-1s", "often", "inf", "nan", "1e30"}) {
    EXPECT_EQ(ApplySetting("pg-schema-check-interval", value, &config).code(),
              absl::StatusCode::kInvalidArgument)
        << value;
  }
  EXPECT_EQ(config.pg_schema_check_interval, absl::Seconds(1));
}

TEST(ConfigText, ReadsTheScrubAndTestClockSettings) {
  NodeConfig config;
  EXPECT_EQ(config.scrub_interval, absl::Hours(6));
  EXPECT_EQ(config.test_clock_offset, absl::ZeroDuration());
  ASSERT_TRUE(ApplySetting("scrub-interval", "90m", &config).ok());
  EXPECT_EQ(config.scrub_interval, absl::Minutes(90));
  ASSERT_TRUE(ApplySetting("scrub-interval", "0", &config).ok());
  EXPECT_EQ(config.scrub_interval, absl::ZeroDuration());
  ASSERT_TRUE(ApplySetting("test-clock-offset", "-600s", &config).ok());
  EXPECT_EQ(config.test_clock_offset, absl::Seconds(-600));
  ASSERT_TRUE(ApplySetting("test-clock-offset", "2m", &config).ok());
  EXPECT_EQ(config.test_clock_offset, absl::Minutes(2));
  for (const auto& [name, value] :
       std::vector<std::pair<std::string, std::string>>{
           {"scrub-interval", "often"},
           {"scrub-interval", "-1h"},
           {"test-clock-offset", "--5s"},
           {"test-clock-offset", "later"}}) {
    EXPECT_EQ(ApplySetting(name, value, &config).code(),
              absl::StatusCode::kInvalidArgument)
        << name << "=" << value;
  }
}

}  // namespace
}  // namespace node
}  // namespace tally

// What the config file and the flags accept: dashes or underscores,
// quoted values, a hash inside a value, a peer given twice, durations.
namespace tally {
namespace node {
namespace {

TEST(ConfigText, UnderscoresWorkAsDashesInTheFile) {
  NodeConfig config;
  const absl::Status s = ApplyConfigText(
      "data_dir = /var/lib/tally\nmax_sessions = 3\nsync_interval = 5s\n",
      &config);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(config.data_dir, "/var/lib/tally");
  EXPECT_EQ(config.max_sessions, 3);
  EXPECT_EQ(config.sync_interval, absl::Seconds(5));
}

TEST(ConfigText, QuotesAroundAValueAreStripped) {
  NodeConfig config;
  absl::Status s = ApplyConfigText(
      "name = \"q\"\n"
      "data-dir = '/srv/tally data'   # a comment after the quotes\n"
      "tls-ca = \"/etc/tally/ca #2.pem\"\n",
      &config);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(config.name, "q");
  EXPECT_EQ(config.data_dir, "/srv/tally data");
  EXPECT_EQ(config.tls_ca, "/etc/tally/ca #2.pem");

  s = ApplyConfigText("name = \"q\n", &config);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("config:1:"), HasSubstr("closing")));
  s = ApplyConfigText("name = \"q\" trailing\n", &config);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("after the closing quote"));
}

TEST(ConfigText, HashInsideAValueIsKept) {
  NodeConfig config;
  const absl::Status s = ApplyConfigText(
      "  # a comment line\n"
      "name = eu#3\n"
      "data-dir = /srv/a#b   # a comment\n"
      "tls-cert = /etc/tally/a.pem#no space before it, so not a comment\n"
      "listen = 127.0.0.1:7500\t# a tab, then a comment\n",
      &config);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(config.name, "eu#3");
  EXPECT_EQ(config.data_dir, "/srv/a#b");
  EXPECT_EQ(config.tls_cert,
            "/etc/tally/a.pem#no space before it, so not a comment");
  EXPECT_EQ(config.listen, "127.0.0.1:7500");
}

TEST(ConfigText, DuplicatePeerIsRefused) {
  NodeConfig config;
  const absl::Status s = ApplyConfigText(
      "peer = 127.0.0.1:7401\n"
      "peer = 127.0.0.1:7402\n"
      "peer = 127.0.0.1:7401,role=source\n",
      &config);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("config:3:"), HasSubstr("127.0.0.1:7401"),
                    HasSubstr("twice")));

  NodeConfig flags;
  ASSERT_TRUE(ApplySetting("peer", "127.0.0.1:7401", &flags).ok());
  EXPECT_EQ(ApplySetting("peer", "127.0.0.1:7401", &flags).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(flags.peers.size(), 1u);
}

TEST(ConfigFlags, PeerFlagsReplaceTheFilesPeers) {
  NodeConfig config;
  ASSERT_TRUE(ApplyConfigText("name = a\n"
                              "peer = 127.0.0.1:7401\n"
                              "peer = 127.0.0.1:7402\n"
                              "sync-interval = 5s\n",
                              &config)
                  .ok());
  const absl::Status s =
      ApplyCommandLineSettings({{"peer", "127.0.0.1:7403"},
                                {"peer", "127.0.0.1:7401,role=source"},
                                {"sync-interval", "7s"}},
                               &config);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(config.peers.size(), 2u);
  EXPECT_EQ(config.peers[0].address, "127.0.0.1:7403");
  EXPECT_EQ(config.peers[1].address, "127.0.0.1:7401");
  EXPECT_EQ(config.peers[1].role, PeerRole::kSource);
  EXPECT_EQ(config.sync_interval, absl::Seconds(7));
  EXPECT_EQ(config.name, "a");

  // Without --peer, the file's peers stay.
  NodeConfig kept;
  ASSERT_TRUE(ApplyConfigText("peer = 127.0.0.1:7401\n", &kept).ok());
  ASSERT_TRUE(ApplyCommandLineSettings({{"name", "b"}}, &kept).ok());
  EXPECT_EQ(kept.peers.size(), 1u);
  // A flag's error names the flag.
  EXPECT_THAT(
      std::string(
          ApplyCommandLineSettings({{"max-sessions", "x"}}, &kept).message()),
      HasSubstr("--max-sessions"));
}

TEST(ConfigFile, ADirectoryIsRefusedClearly) {
  testing::TempDir dir;
  NodeConfig config;
  const absl::Status s = ApplyConfigFile(dir.path(), &config);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr(dir.path()), HasSubstr("is a directory")));
}

TEST(ParseDuration, RefusesNonFiniteAndAbsurdDurations) {
  for (const char* bad : {"nan", "inf", "-inf", "infinity", "1e30", "1e300",
                          "100000000h", "NaN"}) {
    const absl::StatusOr<absl::Duration> d = ParseDuration(bad);
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument)
        << bad << " gave " << (d.ok() ? absl::FormatDuration(*d) : "");
  }
  EXPECT_EQ(*ParseDuration("8760h"), absl::Hours(8760));
  NodeConfig config;
  for (const auto& [name, value] :
       std::vector<std::pair<std::string, std::string>>{
           {"sync-interval", "nan"},
           {"sync-interval", "inf"},
           {"sync-interval", "1e30"},
           {"session-timeout", "inf"},
           {"max-clock-skew", "inf"},
           {"max-clock-skew", "2h"},
           {"tombstone-min-age", "inf"},
           {"log-retention-age", "inf"},
           {"maintenance-interval", "nan"},
           {"repair-bandwidth", "nan"},
           {"repair-bandwidth", "inf"}}) {
    const absl::Status s = ApplySetting(name, value, &config);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument)
        << name << "=" << value;
  }
  // The guard stays a guard, and what it was stays.
  EXPECT_EQ(config.max_clock_skew, absl::Seconds(60));
  EXPECT_EQ(config.sync_interval, absl::Seconds(30));
  EXPECT_TRUE(ApplySetting("max-clock-skew", "1h", &config).ok());
}

}  // namespace
}  // namespace node
}  // namespace tally

// The README gives test-clock-offset's default as 0, but writing that
// default down (`test-clock-offset = 0`) was refused as "must be positive".
namespace tally {
namespace node {
namespace {

TEST(ConfigText, TestClockOffsetOfZeroIsItsDefault) {
  NodeConfig config;
  ASSERT_TRUE(ApplySetting("test-clock-offset", "2m", &config).ok());
  for (const std::string zero : {"0", "0s", "-0"}) {
    const absl::Status s = ApplySetting("test-clock-offset", zero, &config);
    EXPECT_TRUE(s.ok()) << zero << ": " << s;
    EXPECT_EQ(config.test_clock_offset, absl::ZeroDuration()) << zero;
  }
}

TEST(PostgresSettings, ReadTheDatabaseAndRepeatedTablesFromTheFile) {
  NodeConfig config;
  ASSERT_TRUE(ApplyConfigText("name = a\ndata-dir = /tmp/x\n"
                              "postgres = 'postgresql://t:pw@127.0.0.1/app'\n"
                              "table = public.users\n"
                              "table = public.orders\n",
                              &config)
                  .ok());
  EXPECT_EQ(config.postgres, "postgresql://t:pw@127.0.0.1/app");
  EXPECT_THAT(config.tables,
              ::testing::ElementsAre("public.users", "public.orders"));
  EXPECT_TRUE(ValidateConfig(config).ok()) << ValidateConfig(config);
  // --table flags replace the file's list, as --peer flags do.
  ASSERT_TRUE(ApplyCommandLineSettings(
                  {{"table", "app.items"}, {"table", "app.carts"}}, &config)
                  .ok());
  EXPECT_THAT(config.tables, ::testing::ElementsAre("app.items", "app.carts"));
}

TEST(PostgresSettings, RefuseABadOrRepeatedTable) {
  NodeConfig config;
  const absl::Status unqualified = ApplyConfigText("table = users\n", &config);
  EXPECT_THAT(std::string(unqualified.message()),
              AllOf(HasSubstr("config:1:"), HasSubstr("SCHEMA.TABLE")));
  const absl::Status twice = ApplyCommandLineSettings(
      {{"table", "public.t"}, {"table", "public.t"}}, &config);
  EXPECT_THAT(std::string(twice.message()),
              AllOf(HasSubstr("--table"), HasSubstr("twice")));
}

TEST(PostgresSettings, AreRefusedOneWithoutTheOther) {
  NodeConfig config;
  config.name = "a";
  config.data_dir = "/tmp/x";
  config.tables = {"public.users"};
  EXPECT_THAT(std::string(ValidateConfig(config).message()),
              AllOf(HasSubstr("--table public.users needs --postgres")));
  config.tables.clear();
  config.postgres = "postgresql://tally:s3cret@127.0.0.1/app";
  const absl::Status no_table = ValidateConfig(config);
  EXPECT_EQ(no_table.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(no_table.message()),
              AllOf(HasSubstr("--table"), HasSubstr("tally:********@"),
                    ::testing::Not(HasSubstr("s3cret"))));
  config.tables = {"public.users"};
  EXPECT_TRUE(ValidateConfig(config).ok());
  config.postgres = "host='unclosed";
  EXPECT_THAT(std::string(ValidateConfig(config).message()),
              HasSubstr("--postgres"));
  config.postgres = "dbname=app";
  config.max_keyspaces = 1;
  config.tables = {"public.a", "public.b"};
  EXPECT_THAT(std::string(ValidateConfig(config).message()),
              HasSubstr("--max-keyspaces"));
}

// The crash tests' hidden setting: a known point, optionally with a count,
// and only on a sidecar; a misspelt point is refused, naming the points.
TEST(PostgresSettings, TheTestFaultPointMustBeKnownAndNeedsASidecar) {
  NodeConfig config;
  config.name = "a";
  config.data_dir = "/tmp/x";
  ASSERT_TRUE(
      ApplySetting("test-fault-point", "apply-after-db-commit:2", &config)
          .ok());
  EXPECT_EQ(config.test_fault_point, "apply-after-db-commit:2");
  EXPECT_THAT(std::string(ValidateConfig(config).message()),
              HasSubstr("--test-fault-point apply-after-db-commit:2 needs "
                        "--postgres or --mariadb"));
  config.mariadb = "mariadb://tally@127.0.0.1/db1";
  config.tables = {"db1.users"};
  EXPECT_TRUE(ValidateConfig(config).ok()) << ValidateConfig(config);
  config.mariadb.clear();
  config.postgres = "dbname=app";
  config.tables = {"public.users"};
  EXPECT_TRUE(ValidateConfig(config).ok());
  const absl::Status unknown =
      ApplySetting("test-fault-point", "after-commit", &config);
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(unknown.message()),
              AllOf(HasSubstr("after-commit"),
                    HasSubstr("capture-after-index-commit")));
  EXPECT_EQ(ApplySetting("test-fault-point", "apply-after-db-commit:0", &config)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace node
}  // namespace tally

namespace tally {
namespace node {
namespace {

// kSettingNames (for "did you mean" and the file's checks) and
// ApplySetting's branches are kept in step by hand; this keeps them so.
TEST(SettingNames, AreTheOnesApplySettingKnows) {
  for (absl::string_view name : SettingNames()) {
    NodeConfig config;
    const absl::Status s = ApplySetting(name, "", &config);
    EXPECT_THAT(std::string(s.message()),
                ::testing::Not(HasSubstr("unknown setting")))
        << name;
    EXPECT_TRUE(IsSettingName(name)) << name;
  }
  EXPECT_FALSE(IsSettingName("sync_interval"));  // names are with dashes
  EXPECT_FALSE(IsSettingName("config"));
  EXPECT_TRUE(SettingRepeats("peer"));
  EXPECT_TRUE(SettingRepeats("table"));
  EXPECT_FALSE(SettingRepeats("name"));
}

TEST(ApplySetting, AnUnknownNameGetsAHint) {
  NodeConfig config;
  EXPECT_THAT(std::string(ApplySetting("data-dirr", "/x", &config).message()),
              AllOf(HasSubstr("unknown setting 'data-dirr'"),
                    HasSubstr("did you mean 'data-dir'?")));
  EXPECT_THAT(std::string(ApplySetting("tls_cret", "/x", &config).message()),
              HasSubstr("did you mean 'tls-cert'?"));
  EXPECT_THAT(std::string(ApplySetting("frobs", "3", &config).message()),
              ::testing::Not(HasSubstr("did you mean")));
}

TEST(ApplySetting, PeersDifferingOnlyInCaseAreOnePeer) {
  NodeConfig config;
  ASSERT_TRUE(ApplySetting("peer", "db-2:7400", &config).ok());
  EXPECT_THAT(std::string(ApplySetting("peer", "DB-2:7400", &config).message()),
              HasSubstr("twice"));
}

}  // namespace
}  // namespace node
}  // namespace tally

namespace tally {
namespace node {
namespace {

TEST(MariaDbSettings, ReadTheServerAndTablesAndDeriveTheServerId) {
  NodeConfig config;
  ASSERT_TRUE(ApplyConfigText("name = eu/db-1\ndata-dir = /tmp/x\n"
                              "mariadb = 'mariadb://t:pw@127.0.0.1:3306/app'\n"
                              "table = app.users\n",
                              &config)
                  .ok());
  EXPECT_EQ(config.mariadb, "mariadb://t:pw@127.0.0.1:3306/app");
  EXPECT_TRUE(ValidateConfig(config).ok()) << ValidateConfig(config);
  EXPECT_TRUE(HasSidecar(config));
  EXPECT_EQ(SidecarDatabase(config), config.mariadb);
  // Derived from the name: the same at every start, even (the reader takes
  // the next), away from the small ids servers get.
  const uint32_t id = MariaDbServerId(config);
  EXPECT_EQ(MariaDbServerId(config), id);
  EXPECT_GE(id, 1000000000u);
  EXPECT_LE(id, 1999999998u);
  EXPECT_EQ(id % 2, 0u);
  config.name = "eu/db-2";
  EXPECT_NE(MariaDbServerId(config), id);
  ASSERT_TRUE(ApplySetting("mariadb-server-id", "4242", &config).ok());
  EXPECT_EQ(MariaDbServerId(config), 4242u);
  EXPECT_FALSE(ApplySetting("mariadb-server-id", "0", &config).ok());
  EXPECT_FALSE(ApplySetting("mariadb-server-id", "4294967295", &config).ok());
}

TEST(MariaDbSettings, AreRefusedWithTheFixWithoutTheirPassword) {
  NodeConfig config;
  config.name = "a";
  config.data_dir = "/tmp/x";
  config.mariadb = "mariadb://tally:s3cret@127.0.0.1/app";
  const absl::Status no_table = ValidateConfig(config);
  EXPECT_EQ(no_table.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(no_table.message()),
              AllOf(HasSubstr("--mariadb"), HasSubstr("DATABASE.TABLE"),
                    ::testing::Not(HasSubstr("s3cret"))));
  config.tables = {"app.users"};
  EXPECT_TRUE(ValidateConfig(config).ok());
  config.postgres = "dbname=app";
  EXPECT_THAT(std::string(ValidateConfig(config).message()),
              HasSubstr("--postgres and --mariadb are both set"));
  config.postgres.clear();
  config.mariadb = "postgresql://tally:s3cret@127.0.0.1/app";
  EXPECT_THAT(
      std::string(ValidateConfig(config).message()),
      AllOf(HasSubstr("mariadb://"), ::testing::Not(HasSubstr("s3cret"))));
  config.mariadb = "mariadb://tally:s3cret@127.0.0.1/app?table=app.users";
  EXPECT_THAT(std::string(ValidateConfig(config).message()),
              AllOf(HasSubstr("table="), ::testing::Not(HasSubstr("s3cret"))));
  config.mariadb.clear();
  config.tables.clear();
  config.mariadb_server_id = 7;
  EXPECT_THAT(std::string(ValidateConfig(config).message()),
              HasSubstr("--mariadb-server-id needs --mariadb"));
}

}  // namespace
}  // namespace node
}  // namespace tally
