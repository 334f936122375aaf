#include "node/client/tls.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/temp_dir.h"
#include "tests/test_certs.h"

namespace tally {
namespace node {
namespace {

using ::tally::testing::CertFiles;
using ::tally::testing::TempDir;
using ::tally::testing::TestCa;
using ::testing::AllOf;
using ::testing::HasSubstr;

// One CA and certificates for every test here: openssl takes a moment.
class TlsFilesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto ca = TestCa::Create(dir_->path(), "ca");
    ASSERT_TRUE(ca.ok()) << ca.status();
    ca_ = new TestCa(*std::move(ca));
    auto node = ca_->Issue("node");
    ASSERT_TRUE(node.ok()) << node.status();
    node_ = new CertFiles(*std::move(node));
    auto other = ca_->Issue("other");
    ASSERT_TRUE(other.ok()) << other.status();
    other_ = new CertFiles(*std::move(other));
  }
  static void TearDownTestSuite() {
    delete other_;
    delete node_;
    delete ca_;
    delete dir_;
  }

  std::string WriteFile(const std::string& name, const std::string& text) {
    const std::string path = absl::StrCat(dir_->path(), "/", name);
    std::ofstream(path) << text;
    return path;
  }

  static TempDir* dir_;
  static TestCa* ca_;
  static CertFiles* node_;
  static CertFiles* other_;
};

TempDir* TlsFilesTest::dir_ = nullptr;
TestCa* TlsFilesTest::ca_ = nullptr;
CertFiles* TlsFilesTest::node_ = nullptr;
CertFiles* TlsFilesTest::other_ = nullptr;

TEST_F(TlsFilesTest, NoFilesMeanPlaintextCredentials) {
  const TlsFiles none;
  EXPECT_FALSE(none.enabled());
  EXPECT_TRUE(ValidateServerTlsFiles(none).ok());
  EXPECT_TRUE(ValidateClientTlsFiles(none).ok());
  auto server = MakeServerCredentials(none);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_NE(*server, nullptr);
  auto channel = MakeChannelCredentials(none);
  ASSERT_TRUE(channel.ok()) << channel.status();
  EXPECT_NE(*channel, nullptr);
}

TEST_F(TlsFilesTest, GoodFilesMakeCredentialsWithAndWithoutCa) {
  for (const TlsFiles& files :
       {TlsFiles{node_->cert, node_->key, ""},
        TlsFiles{node_->cert, node_->key, ca_->cert()}}) {
    EXPECT_TRUE(files.enabled());
    EXPECT_TRUE(ValidateServerTlsFiles(files).ok());
    auto server = MakeServerCredentials(files);
    ASSERT_TRUE(server.ok()) << server.status();
    EXPECT_NE(*server, nullptr);
    auto channel = MakeChannelCredentials(files);
    ASSERT_TRUE(channel.ok()) << channel.status();
    EXPECT_NE(*channel, nullptr);
  }
}

TEST_F(TlsFilesTest, CertWithoutKeyAndKeyWithoutCertAreRefused) {
  const absl::Status no_key =
      ValidateClientTlsFiles(TlsFiles{node_->cert, "", ""});
  EXPECT_EQ(no_key.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(no_key.message()),
              HasSubstr("--tls-cert is given without --tls-key"));
  const absl::Status no_cert =
      ValidateServerTlsFiles(TlsFiles{"", node_->key, ca_->cert()});
  EXPECT_EQ(no_cert.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(no_cert.message()),
              HasSubstr("--tls-key is given without --tls-cert"));
  EXPECT_EQ(
      MakeChannelCredentials(TlsFiles{"", node_->key, ""}).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST_F(TlsFilesTest, CaAloneServesNoneButChecksServersForAClient) {
  const TlsFiles ca_only{"", "", ca_->cert()};
  const absl::Status server = MakeServerCredentials(ca_only).status();
  EXPECT_EQ(server.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(server.message()),
              HasSubstr("--tls-ca is given without --tls-cert and --tls-key"));
  auto channel = MakeChannelCredentials(ca_only);
  ASSERT_TRUE(channel.ok()) << channel.status();
  EXPECT_NE(*channel, nullptr);
}

TEST_F(TlsFilesTest, MissingFileIsNotFoundAndNamesFlagAndPath) {
  const std::string missing = dir_->path() + "/no-such.pem";
  const absl::Status cert =
      ValidateClientTlsFiles(TlsFiles{missing, node_->key, ""});
  EXPECT_EQ(cert.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(cert.message()),
              AllOf(HasSubstr("--tls-cert"), HasSubstr(missing),
                    HasSubstr("No such file")));
  const absl::Status key =
      ValidateClientTlsFiles(TlsFiles{node_->cert, missing, ""});
  EXPECT_EQ(key.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(key.message()), HasSubstr("--tls-key"));
  const absl::Status ca = ValidateClientTlsFiles(TlsFiles{"", "", missing});
  EXPECT_EQ(ca.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(ca.message()), HasSubstr("--tls-ca"));
}

TEST_F(TlsFilesTest, UnreadableFileIsPermissionDenied) {
  if (geteuid() == 0) GTEST_SKIP() << "root reads every file";
  const std::string path = WriteFile("unreadable.pem", "x");
  ASSERT_EQ(chmod(path.c_str(), 0), 0);
  const absl::Status s = ValidateClientTlsFiles(TlsFiles{"", "", path});
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(s.message()), HasSubstr(path));
}

TEST_F(TlsFilesTest, DirectoryAndEmptyFileAreRefused) {
  const absl::Status dir =
      ValidateClientTlsFiles(TlsFiles{"", "", dir_->path()});
  EXPECT_EQ(dir.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(dir.message()), HasSubstr("cannot read it"));
  const absl::Status empty =
      ValidateClientTlsFiles(TlsFiles{"", "", WriteFile("empty.pem", "")});
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(empty.message()), HasSubstr("is empty"));
}

TEST_F(TlsFilesTest, FileThatIsNotPemIsRefused) {
  const std::string garbage = WriteFile("garbage.pem", "not a certificate\n");
  const absl::Status cert =
      ValidateClientTlsFiles(TlsFiles{garbage, node_->key, ""});
  EXPECT_EQ(cert.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(cert.message()),
              AllOf(HasSubstr("--tls-cert"), HasSubstr("no PEM certificate")));
  const absl::Status ca = ValidateClientTlsFiles(TlsFiles{"", "", garbage});
  EXPECT_EQ(ca.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ca.message()),
              AllOf(HasSubstr("--tls-ca"), HasSubstr("no PEM certificate")));
  const absl::Status key =
      ValidateClientTlsFiles(TlsFiles{node_->cert, garbage, ""});
  EXPECT_EQ(key.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(key.message()),
              AllOf(HasSubstr("--tls-key"), HasSubstr("no PEM private key")));
}

TEST_F(TlsFilesTest, FilesSwappedAreRefused) {
  // A key where the certificate belongs holds no certificate, and the
  // reverse.
  const absl::Status s =
      ValidateClientTlsFiles(TlsFiles{node_->key, node_->cert, ""});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("no PEM certificate"));
}

TEST_F(TlsFilesTest, DamagedCertificateBlockIsRefused) {
  const std::string damaged =
      WriteFile("damaged.pem",
                "-----BEGIN CERTIFICATE-----\n@@@@ not base64 @@@@\n"
                "-----END CERTIFICATE-----\n");
  const absl::Status s = ValidateClientTlsFiles(TlsFiles{"", "", damaged});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("damaged"));
}

TEST_F(TlsFilesTest, KeyOfAnotherCertificateIsRefused) {
  const absl::Status s =
      ValidateServerTlsFiles(TlsFiles{node_->cert, other_->key, ""});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("is not the private key of the certificate"));
}

TEST_F(TlsFilesTest, EncryptedKeyIsRefusedWithoutPrompting) {
  const std::string encrypted = dir_->path() + "/encrypted.key";
  ASSERT_EQ(std::system(absl::StrCat("openssl pkey -in '", node_->key,
                                     "' -aes256 -passout pass:secret -out '",
                                     encrypted, "' 2>/dev/null")
                            .c_str()),
            0);
  const absl::Status s =
      ValidateClientTlsFiles(TlsFiles{node_->cert, encrypted, ""});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("is encrypted"));
}

TEST_F(TlsFilesTest, ExpiredCertificateIsFailedPrecondition) {
  auto expired = ca_->Issue("expired", /*expired=*/true);
  ASSERT_TRUE(expired.ok()) << expired.status();
  const absl::Status s =
      ValidateServerTlsFiles(TlsFiles{expired->cert, expired->key, ""});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("expired on"));
}

TEST(ExplainTlsFailure, NamesTheLikelyCauseOfARefusedHandshake) {
  const TlsFiles none;
  const TlsFiles ca_only{"", "", "ca.pem"};
  const TlsFiles mutual{"c.pem", "c.key", "ca.pem"};
  auto explain = [](absl::string_view message, const TlsFiles& files) {
    return std::string(
        ExplainTlsFailure(absl::UnavailableError(message), files).message());
  };
  EXPECT_THAT(explain("ipv4:127.0.0.1:1: Socket closed", none),
              HasSubstr("if the node serves TLS, give --tls-ca"));
  EXPECT_THAT(explain("ipv4:127.0.0.1:1: Socket closed", ca_only),
              HasSubstr("may require a client certificate"));
  EXPECT_THAT(explain("ipv4:127.0.0.1:1: Socket closed", mutual),
              HasSubstr("refused this client's certificate"));
  EXPECT_THAT(explain("SSL routines::wrong version number", mutual),
              HasSubstr("does not seem to serve TLS"));
  EXPECT_THAT(explain("SSL routines::certificate verify failed", mutual),
              HasSubstr("not signed by --tls-ca"));
  EXPECT_THAT(explain("SSL routines::certificate verify failed",
                      TlsFiles{"c.pem", "c.key", ""}),
              HasSubstr("system root"));
  EXPECT_THAT(explain("Peer name 10.0.0.2 is not in peer certificate", mutual),
              HasSubstr("subjectAltName"));
  // The original message stays; other failures pass unchanged.
  EXPECT_THAT(explain("x: Socket closed", none), HasSubstr("x: Socket closed"));
  EXPECT_EQ(explain("Connection refused", none), "Connection refused");
  const absl::Status not_found = absl::NotFoundError("Socket closed");
  EXPECT_EQ(ExplainTlsFailure(not_found, none), not_found);
}

TEST(DescribeServerTls, SaysWhatTheNodeEnforces) {
  EXPECT_EQ(DescribeServerTls(TlsFiles{}), "tls: off, plaintext");
  EXPECT_THAT(DescribeServerTls(TlsFiles{"c.pem", "c.key", ""}),
              HasSubstr("clients need no certificate"));
  EXPECT_THAT(DescribeServerTls(TlsFiles{"c.pem", "c.key", "ca.pem"}),
              HasSubstr("tls: mutual"));
}

}  // namespace
}  // namespace node
}  // namespace tally
