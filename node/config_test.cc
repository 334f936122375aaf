#include "node/config.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/temp_dir.h"
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

TEST(ConfigText, NamesTheLineOfABadSetting) {
  NodeConfig config;
  const absl::Status unknown =
      ApplyConfigText("name = a\nfrobs = 3\n", &config);
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(unknown.message()), HasSubstr("line 2"));
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
