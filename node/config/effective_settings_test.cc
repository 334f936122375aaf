#include "node/config/effective_settings.h"

#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/config/config_file.h"

namespace tally {
namespace node {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A config with every setting away from its default.
NodeConfig EverySetting() {
  NodeConfig config;
  config.name = "eu-west/db-3";
  config.data_dir = "/srv/tally data #2";
  config.listen = "127.0.0.1:7500";
  config.peers = {*ParsePeer("127.0.0.1:7401,role=source")};
  config.sync_interval = absl::Seconds(5);
  config.max_sessions = 3;
  config.repair_bandwidth_mb = 12.5;
  config.default_depth = 20;
  config.session_timeout = absl::Minutes(90);
  config.rpc_threads = 6;
  config.max_keyspaces = 40;
  config.max_streams_per_client = 3;
  config.stream_idle_timeout = absl::Milliseconds(1500);
  config.sync_writes = false;
  config.insecure = true;
  config.tls_cert = "/etc/tally/a;b.pem";
  config.tls_key = "/etc/tally/node.key";
  config.tls_ca = "/etc/tally/ca.pem";
  config.postgres = "dbname=app user=tally";
  config.tables = {"public.users", "public.orders"};
  config.pg_schema_check_interval = absl::Minutes(5);
  config.metrics_listen = "127.0.0.1:9400";
  config.log_retention_entries = 5000;
  config.log_retention_age = absl::Hours(2);
  config.tombstone_min_age = absl::Minutes(90);
  config.max_clock_skew = absl::Seconds(5);
  config.maintenance_interval = absl::Milliseconds(500);
  config.scrub_interval = absl::Hours(1);
  config.test_clock_offset = absl::Seconds(-600);
  config.test_fault_point = "apply-after-db-commit:2";
  return config;
}

std::string Text(const NodeConfig& config) {
  return FormatEffectiveSettings(config);
}

TEST(EffectiveSettings, NameEverySettingOnce) {
  std::multiset<std::string> names;
  for (const auto& [name, value] : EffectiveSettings(EverySetting())) {
    names.insert(name);
  }
  // EverySetting is a PostgreSQL sidecar; the MariaDB sidecar's settings
  // are shown only with --mariadb (MaskTheMariaDbPasswordAndShowTheServerId).
  for (absl::string_view name : SettingNames()) {
    const size_t want = name == "table"                                    ? 2u
                        : name == "mariadb" || name == "mariadb-server-id" ? 0u
                                                                           : 1u;
    EXPECT_EQ(names.count(std::string(name)), want) << name;
  }
  EXPECT_EQ(names.size(), SettingNames().size() + 1 - 2);
}

// The printed settings are a config file that gives the same config.
TEST(EffectiveSettings, ReadBackAsTheSameConfig) {
  const NodeConfig config = EverySetting();
  NodeConfig read;
  const absl::Status s = ApplyConfigText(Text(config), &read);
  ASSERT_TRUE(s.ok()) << s << "\n" << Text(config);
  EXPECT_EQ(Text(read), Text(config));
  EXPECT_EQ(read.data_dir, config.data_dir);
  EXPECT_EQ(read.tls_cert, config.tls_cert);
  EXPECT_EQ(read.test_clock_offset, config.test_clock_offset);
  EXPECT_EQ(read.stream_idle_timeout, config.stream_idle_timeout);
  EXPECT_DOUBLE_EQ(read.repair_bandwidth_mb, 12.5);

  // The defaults too, with the "off"s.
  NodeConfig defaults;
  defaults.name = "a";
  defaults.data_dir = "/x";
  defaults.scrub_interval = absl::ZeroDuration();
  defaults.log_retention_age = absl::ZeroDuration();
  const std::string text = Text(defaults);
  EXPECT_THAT(text, HasSubstr("metrics-listen = off\n"));
  EXPECT_THAT(text, HasSubstr("scrub-interval = off\n"));
  EXPECT_THAT(text, HasSubstr("log-retention-age = 0\n"));
  EXPECT_THAT(text, HasSubstr("sync-interval = 30s\n"));
  EXPECT_THAT(text, Not(HasSubstr("peer")));
  EXPECT_THAT(text, Not(HasSubstr("tls-")));
  NodeConfig read_defaults;
  ASSERT_TRUE(ApplyConfigText(text, &read_defaults).ok()) << text;
  EXPECT_EQ(Text(read_defaults), text);
}

TEST(EffectiveSettings, QuoteWhatWouldNotReadBack) {
  const std::string text = Text(EverySetting());
  EXPECT_THAT(text, HasSubstr("data-dir = \"/srv/tally data #2\"\n"));
  EXPECT_THAT(text, HasSubstr("tls-cert = \"/etc/tally/a;b.pem\"\n"));
  EXPECT_THAT(text, HasSubstr("peer = 127.0.0.1:7401,role=source\n"));
  EXPECT_THAT(text, HasSubstr("test-clock-offset = -10m\n"));
}

TEST(EffectiveSettings, MaskThePostgresPassword) {
  NodeConfig config = EverySetting();
  config.postgres = "postgresql://tally:s3cret@127.0.0.1:5432/app";
  std::string text = Text(config);
  EXPECT_THAT(text, HasSubstr("postgres = postgresql://tally:********@"));
  EXPECT_THAT(text, Not(HasSubstr("s3cret")));
  config.postgres = "host=db dbname=app password=s3cret";
  text = Text(config);
  EXPECT_THAT(text, HasSubstr("postgres = "));
  EXPECT_THAT(text, Not(HasSubstr("s3cret")));
}

TEST(EffectiveSettings, MaskTheMariaDbPasswordAndShowTheServerId) {
  NodeConfig config = EverySetting();
  config.postgres.clear();
  config.mariadb = "mariadb://tally:s3cret@127.0.0.1:3306/app";
  config.mariadb_server_id = 4242;
  const std::string text = Text(config);
  EXPECT_THAT(text,
              HasSubstr("mariadb = mariadb://tally@127.0.0.1:3306/app\n"));
  EXPECT_THAT(text, HasSubstr("mariadb-server-id = 4242\n"));
  EXPECT_THAT(text, Not(HasSubstr("s3cret")));
}

}  // namespace
}  // namespace node
}  // namespace tally
