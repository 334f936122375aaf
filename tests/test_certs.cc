#include "tests/test_certs.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tally {
namespace testing {
namespace {

std::string Quote(const std::string& path) {
  return absl::StrCat("'", path, "'");
}

// Runs a shell command with its output in `log`; on failure returns it.
absl::Status Run(const std::string& command, const std::string& log) {
  const int rc =
      std::system(absl::StrCat(command, " >", Quote(log), " 2>&1").c_str());
  if (rc == 0) return absl::OkStatus();
  std::ifstream in(log);
  std::stringstream output;
  output << in.rdbuf();
  return absl::InternalError(
      absl::StrFormat("'%s' failed (%d): %s", command, rc, output.str()));
}

// P-256 keys: quick to make, and every TLS stack takes them.
constexpr char kNewKey[] =
    "openssl req -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1";

}  // namespace

absl::StatusOr<TestCa> TestCa::Create(const std::string& dir,
                                      const std::string& name) {
  const std::string base = absl::StrCat(dir, "/", name);
  CertFiles files{base + ".pem", base + ".key"};
  absl::Status s = Run(
      absl::StrCat(kNewKey, " -x509 -days 1 -subj ", Quote("/CN=" + name),
                   " -keyout ", Quote(files.key), " -out ", Quote(files.cert)),
      base + ".log");
  if (!s.ok()) return s;
  return TestCa(dir, std::move(files));
}

absl::StatusOr<CertFiles> TestCa::Issue(const std::string& name,
                                        bool expired) const {
  const std::string base = absl::StrCat(dir_, "/", name);
  const std::string extensions = base + ".ext";
  std::ofstream(extensions) << "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                               "basicConstraints=CA:FALSE\n"
                               "keyUsage=digitalSignature,keyEncipherment\n"
                               "extendedKeyUsage=serverAuth,clientAuth\n";
  CertFiles files{base + ".pem", base + ".key"};
  absl::Status s =
      Run(absl::StrCat(kNewKey, " -subj ", Quote("/CN=" + name), " -keyout ",
                       Quote(files.key), " -out ", Quote(base + ".csr")),
          base + ".log");
  if (!s.ok()) return s;
  // -days -1 puts the end of validity a day before its start: expired.
  s = Run(absl::StrCat("openssl x509 -req -in ", Quote(base + ".csr"), " -CA ",
                       Quote(files_.cert), " -CAkey ", Quote(files_.key),
                       " -CAcreateserial -days ", expired ? "-1" : "1",
                       " -extfile ", Quote(extensions), " -out ",
                       Quote(files.cert)),
          base + ".log");
  if (!s.ok()) return s;
  return files;
}

}  // namespace testing
}  // namespace tally
