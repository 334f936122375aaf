// Multi-process tests of TLS: real tallyd nodes serving and dialling mutual
// TLS with certificates made by openssl at test time, and the tally CLI
// with good, missing and foreign certificates.
#include "node/client/tls.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/client/client.h"
#include "support/process.h"
#include "support/temp_dir.h"
#include "tests/test_certs.h"

namespace tally {
namespace {

using ::tally::testing::CertFiles;
using ::tally::testing::CommandResult;
using ::tally::testing::FreeLoopbackAddress;
using ::tally::testing::NodeProcess;
using ::tally::testing::RunCommand;
using ::tally::testing::RunTally;
using ::tally::testing::TallydPath;
using ::tally::testing::TempDir;
using ::tally::testing::TestCa;
using ::testing::AnyOf;
using ::testing::HasSubstr;

std::vector<std::string> TlsFlags(const CertFiles& cert,
                                  const std::string& ca) {
  return {"--tls-cert", cert.cert, "--tls-key", cert.key, "--tls-ca", ca};
}

// Two nodes peering each other over mutual TLS, certificates from one CA;
// a second, unrelated CA issues a certificate neither node accepts.
class MutualTls : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ca = TestCa::Create(certs_.path(), "tally-ca");
    ASSERT_TRUE(ca.ok()) << ca.status();
    ca_ = std::make_unique<TestCa>(*std::move(ca));
    auto other_ca = TestCa::Create(certs_.path(), "other-ca");
    ASSERT_TRUE(other_ca.ok()) << other_ca.status();
    auto node_a = ca_->Issue("node-a");
    auto node_b = ca_->Issue("node-b");
    auto client = ca_->Issue("client");
    auto stranger = other_ca->Issue("stranger");
    ASSERT_TRUE(node_a.ok() && node_b.ok() && client.ok() && stranger.ok());
    client_ = *client;
    stranger_ = *stranger;
    other_ca_cert_ = other_ca->cert();

    address_a_ = FreeLoopbackAddress();
    address_b_ = FreeLoopbackAddress();
    std::vector<std::string> flags_a = TlsFlags(*node_a, ca_->cert());
    std::vector<std::string> flags_b = TlsFlags(*node_b, ca_->cert());
    for (auto* flags : {&flags_a, &flags_b}) {
      flags->insert(flags->end(),
                    {"--sync-writes", "false", "--sync-interval", "1s"});
    }
    flags_a.insert(flags_a.end(), {"--peer", address_b_});
    flags_b.insert(flags_b.end(), {"--peer", address_a_});
    auto a = NodeProcess::Start("node-a", dir_a_.path(), flags_a, address_a_);
    ASSERT_TRUE(a.ok()) << a.status();
    a_ = *std::move(a);
    auto b = NodeProcess::Start("node-b", dir_b_.path(), flags_b, address_b_);
    ASSERT_TRUE(b.ok()) << b.status();
    b_ = *std::move(b);
  }

  void TearDown() override {
    if (a_ != nullptr) {
      EXPECT_EQ(a_->Stop(), 0) << a_->Log();
    }
    if (b_ != nullptr) {
      EXPECT_EQ(b_->Stop(), 0) << b_->Log();
    }
  }

  // `tally ARGS --node NODE` plus the good client certificate.
  CommandResult TallyWithGoodCert(std::vector<std::string> args,
                                  const std::string& node) {
    args.insert(args.end(),
                {"--node", node, "--tls-cert", client_.cert, "--tls-key",
                 client_.key, "--tls-ca", ca_->cert()});
    return RunTally(args);
  }

  TempDir certs_, dir_a_, dir_b_;
  std::unique_ptr<TestCa> ca_;
  CertFiles client_, stranger_;
  std::string other_ca_cert_;
  std::string address_a_, address_b_;
  std::unique_ptr<NodeProcess> a_, b_;
};

TEST_F(MutualTls, WriteReachesThePeerOverMutualTls) {
  EXPECT_THAT(a_->Log(), HasSubstr("tls: mutual"));
  const CommandResult put =
      TallyWithGoodCert({"put", "tls-key", "tls-value"}, address_a_);
  ASSERT_EQ(put.exit_code, 0) << put.err;
  // B learns the row only through its feed subscription to A or a session
  // with A: both run over mutual TLS, with the nodes' own certificates.
  CommandResult get;
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  do {
    get = TallyWithGoodCert({"get", "tls-key"}, address_b_);
    if (get.exit_code == 0) break;
    absl::SleepFor(absl::Milliseconds(100));
  } while (absl::Now() < deadline);
  ASSERT_EQ(get.exit_code, 0) << get.err << "\n" << b_->Log();
  EXPECT_THAT(get.out, HasSubstr("tls-value"));
}

TEST_F(MutualTls, ClientWithGoodCertificateGetsStatus) {
  const CommandResult status = TallyWithGoodCert({"status"}, address_a_);
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_THAT(status.out, HasSubstr("node-a"));
}

TEST_F(MutualTls, ClientWithoutCertificateIsRefused) {
  // TLS, the node checked against the right CA, but no certificate shown.
  const CommandResult no_cert =
      RunTally({"status", "--node", address_a_, "--tls-ca", ca_->cert(),
                "--timeout", "5"});
  EXPECT_EQ(no_cert.exit_code, 2);
  EXPECT_THAT(no_cert.err, HasSubstr(address_a_));
  EXPECT_THAT(no_cert.err, HasSubstr("may require a client certificate"));
  EXPECT_THAT(no_cert.out, ::testing::Not(HasSubstr("node-a")));
  // No TLS flags at all: plaintext to a TLS port.
  const CommandResult plaintext =
      RunTally({"status", "--node", address_a_, "--timeout", "5"});
  EXPECT_EQ(plaintext.exit_code, 2);
  EXPECT_THAT(plaintext.err, HasSubstr(address_a_));
  EXPECT_THAT(plaintext.err,
              HasSubstr("if the node serves TLS, give --tls-ca"));
  // One line, tally's own: gRPC's handshake logs are kept off stderr.
  EXPECT_EQ(plaintext.err.find('\n'), plaintext.err.size() - 1)
      << plaintext.err;
  EXPECT_THAT(plaintext.out, ::testing::Not(HasSubstr("node-a")));
}

TEST_F(MutualTls, ClientWithCertificateOfAnotherCaIsRefused) {
  const CommandResult stranger = RunTally(
      {"status", "--node", address_a_, "--tls-cert", stranger_.cert,
       "--tls-key", stranger_.key, "--tls-ca", ca_->cert(), "--timeout", "5"});
  EXPECT_EQ(stranger.exit_code, 2);
  EXPECT_THAT(stranger.err, HasSubstr(address_a_));
  EXPECT_THAT(stranger.err, HasSubstr("refused this client's certificate"));
  EXPECT_EQ(stranger.err.find('\n'), stranger.err.size() - 1) << stranger.err;
  EXPECT_THAT(stranger.out, ::testing::Not(HasSubstr("node-a")));
  // The same client with the right certificate gets through: the refusal
  // above was the certificate, not the command.
  EXPECT_EQ(TallyWithGoodCert({"status"}, address_a_).exit_code, 0);
}

TEST_F(MutualTls, ClientRefusesANodeItsCaDidNotSign) {
  const CommandResult r = RunTally(
      {"status", "--node", address_a_, "--tls-cert", client_.cert, "--tls-key",
       client_.key, "--tls-ca", other_ca_cert_, "--timeout", "5"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("not signed by --tls-ca"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("node-a")));
}

TEST_F(MutualTls, PlaintextGrpcToATlsNodeFails) {
  node::ClientOptions options;
  options.rpc_timeout = absl::Seconds(5);
  auto client = node::NodeClient::Connect(address_a_, options);
  ASSERT_TRUE(client.ok()) << client.status();
  const auto status = (*client)->Status();
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.status().code(),
              AnyOf(absl::StatusCode::kUnavailable,
                    absl::StatusCode::kDeadlineExceeded));
  // The library's own TLS client, with a good certificate, gets through.
  auto credentials = node::MakeChannelCredentials(
      node::TlsFiles{client_.cert, client_.key, ca_->cert()});
  ASSERT_TRUE(credentials.ok()) << credentials.status();
  options.credentials = *credentials;
  auto tls_client = node::NodeClient::Connect(address_a_, options);
  ASSERT_TRUE(tls_client.ok());
  auto tls_status = (*tls_client)->Status();
  ASSERT_TRUE(tls_status.ok()) << tls_status.status();
}

TEST(TlsNode, RefusesToStartWithBadTlsFiles) {
  TempDir dir;
  auto ca = TestCa::Create(dir.path(), "ca");
  ASSERT_TRUE(ca.ok()) << ca.status();
  auto cert = ca->Issue("node");
  ASSERT_TRUE(cert.ok()) << cert.status();
  const std::vector<std::string> base = {TallydPath(), "--name", "n",
                                         "--data-dir", dir.path() + "/data"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv = base;
    argv.insert(argv.end(), extra.begin(), extra.end());
    return RunCommand(argv);
  };
  const CommandResult no_key = with({"--tls-cert", cert->cert});
  EXPECT_EQ(no_key.exit_code, 2);
  EXPECT_THAT(no_key.err, HasSubstr("--tls-cert is given without --tls-key"));
  const CommandResult missing =
      with({"--tls-cert", cert->cert, "--tls-key", dir.path() + "/nope.key"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr("nope.key"));
  const CommandResult not_pem =
      with({"--tls-cert", cert->key, "--tls-key", cert->key});
  EXPECT_EQ(not_pem.exit_code, 2);
  EXPECT_THAT(not_pem.err, HasSubstr("no PEM certificate"));
  // And tally says the same about its own flags, before dialling anything.
  const CommandResult cli = RunTally({"status", "--tls-key", cert->key});
  EXPECT_EQ(cli.exit_code, 2);
  EXPECT_THAT(cli.err, HasSubstr("--tls-key is given without --tls-cert"));
}

TEST(TlsNode, ListensOnANonLoopbackAddressWithTls) {
  TempDir dir;
  auto ca = TestCa::Create(dir.path(), "ca");
  ASSERT_TRUE(ca.ok()) << ca.status();
  auto cert = ca->Issue("node");
  ASSERT_TRUE(cert.ok()) << cert.status();
  // Server TLS without --tls-ca: clients show no certificate.
  auto node = NodeProcess::Start(
      "n", dir.path() + "/data",
      {"--tls-cert", cert->cert, "--tls-key", cert->key}, "0.0.0.0:0");
  ASSERT_TRUE(node.ok()) << node.status();
  const std::string port =
      (*node)->address().substr((*node)->address().rfind(':') + 1);
  const CommandResult status = RunTally(
      {"status", "--node", "127.0.0.1:" + port, "--tls-ca", ca->cert()});
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_EQ((*node)->Stop(), 0);
}

// A certificate renewed on disk is served without a restart
// or a signal (the files are watched, --tls-refresh-interval).
TEST(TlsRotation, ARenewedCertificateIsServedWithoutARestart) {
  TempDir certs, data;
  auto old_ca = TestCa::Create(certs.path(), "old-ca");
  auto new_ca = TestCa::Create(certs.path(), "new-ca");
  ASSERT_TRUE(old_ca.ok() && new_ca.ok());
  auto old_cert = old_ca->Issue("node-old");
  auto new_cert = new_ca->Issue("node-new");
  ASSERT_TRUE(old_cert.ok() && new_cert.ok());
  // The files the node is given, replaced in place as a renewal does.
  const std::string cert = certs.path() + "/live-cert.pem";
  const std::string key = certs.path() + "/live-key.pem";
  auto install = [&](const CertFiles& from) {
    for (const auto& [source, target] :
         {std::make_pair(from.key, key), std::make_pair(from.cert, cert)}) {
      const CommandResult copied =
          RunCommand({"/bin/sh", "-c",
                      "cp '" + source + "' '" + target + ".tmp' && mv '" +
                          target + ".tmp' '" + target + "'"});
      ASSERT_EQ(copied.exit_code, 0) << copied.err;
    }
  };
  install(*old_cert);
  auto node =
      NodeProcess::Start("node", data.path(),
                         {"--sync-writes", "false", "--tls-cert", cert,
                          "--tls-key", key, "--tls-refresh-interval", "1s"});
  ASSERT_TRUE(node.ok()) << node.status();
  auto status_trusting = [&](const std::string& ca) {
    return RunTally({"status", "--node", (*node)->address(), "--tls-ca", ca,
                     "--timeout", "5"})
        .exit_code;
  };
  EXPECT_EQ(status_trusting(old_ca->cert()), 0);
  EXPECT_NE(status_trusting(new_ca->cert()), 0);

  install(*new_cert);
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (status_trusting(new_ca->cert()) != 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(200));
  }
  EXPECT_EQ(status_trusting(new_ca->cert()), 0) << (*node)->Log();
  EXPECT_NE(status_trusting(old_ca->cert()), 0);
  EXPECT_EQ((*node)->Stop(), 0);
}

}  // namespace
}  // namespace tally
