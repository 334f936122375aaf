// TestCa: a certificate authority made at test time with the `openssl`
// command, and certificates it signs, for the TLS tests.
//
//   absl::StatusOr<TestCa> ca = TestCa::Create(dir.path(), "tally-ca");
//   absl::StatusOr<CertFiles> node = ca->Issue("node-a");
//   // ca->cert(), node->cert, node->key are PEM files in dir.
//
// Every certificate it issues is valid for a day from now, for servers and
// clients alike, with subjectAltName IP:127.0.0.1 and DNS:localhost, so a
// node dialled as 127.0.0.1:PORT passes the name check. Keys are P-256.
//
// Thread-compatible. Needs the `openssl` command on the PATH.
#ifndef TALLY_TESTS_TEST_CERTS_H_
#define TALLY_TESTS_TEST_CERTS_H_

#include <string>

#include "absl/status/statusor.h"

namespace tally {
namespace testing {

struct CertFiles {
  std::string cert;  // PEM certificate
  std::string key;   // PEM private key, unencrypted
};

class TestCa {
 public:
  // Makes a self-signed CA named `name` in `dir` (which must exist and
  // outlive the TestCa). kInternal with openssl's output if it fails.
  static absl::StatusOr<TestCa> Create(const std::string& dir,
                                       const std::string& name);

  // The CA's certificate (PEM).
  const std::string& cert() const { return files_.cert; }

  // Issues a certificate for `name`. With `expired`, its validity ended
  // before it began (a day ago), for tests of expired certificates.
  absl::StatusOr<CertFiles> Issue(const std::string& name,
                                  bool expired = false) const;

 private:
  TestCa(std::string dir, CertFiles files)
      : dir_(std::move(dir)), files_(std::move(files)) {}

  std::string dir_;
  CertFiles files_;
};

}  // namespace testing
}  // namespace tally

#endif  // TALLY_TESTS_TEST_CERTS_H_
