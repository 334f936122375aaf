// TLS for tallyd and tally: PEM files in, gRPC credentials out.
//
// The same three settings serve the node and the CLI (`--tls-cert`,
// `--tls-key`, `--tls-ca`):
//
//   cert+key        the node serves TLS only; a client presents them.
//   cert+key+ca     mutual TLS: the node requires a client certificate
//                   signed by the CA and checks it; as a client (a node
//                   dialling its peers, or tally) it checks the server's
//                   certificate against the CA and presents its own.
//   ca              client only: TLS, the server checked against the CA,
//                   no client certificate (for a node without --tls-ca).
//   nothing         plaintext.
//
// A client without --tls-ca checks servers against the system's roots.
// Servers are checked by name: a node dialled as 10.0.0.2:7400 must hold a
// certificate with subjectAltName IP:10.0.0.2 (DNS names likewise). A
// server with a CA accepts any certificate the CA signed, whatever its
// name: the CA is the trust boundary, so give tally a CA of its own.
//
//   TlsFiles files{config.tls_cert, config.tls_key, config.tls_ca};
//   TALLY_RETURN_IF_ERROR(ValidateServerTlsFiles(files));
//   absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> server =
//       MakeServerCredentials(files);
//   absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> client =
//       MakeChannelCredentials(files);
//
// With a refresh interval (tallyd's --tls-refresh-interval, 60 s by
// default) a node's credentials watch the files (gRPC's
// FileWatcherCertificateProvider): a renewed certificate, key or CA written
// over the old files is served and presented from the next handshake after
// the next refresh, with no restart and no signal. A pair that does not
// match (the key written, the certificate not yet) is not taken; the old one
// stays until both fit. Without one (the CLI) files are read once. Keys must
// be unencrypted PEM.
//
// Thread-safe: pure functions of the files they read.
#ifndef TALLY_NODE_CLIENT_TLS_H_
#define TALLY_NODE_CLIENT_TLS_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace grpc {
class ChannelCredentials;
class ServerCredentials;
}  // namespace grpc

namespace tally {
namespace node {

// Paths of PEM files; an empty path is "not given".
struct TlsFiles {
  std::string cert;  // certificate chain, leaf first
  std::string key;   // private key of the leaf
  std::string ca;    // one or more CA certificates

  // True when any file is given: every connection is TLS.
  bool enabled() const { return !cert.empty() || !key.empty() || !ca.empty(); }
};

// Checks the files as a client uses them: --tls-cert and --tls-key both or
// neither; every file given can be read and holds PEM of the right kind;
// the key belongs to the certificate; the certificate is within its
// validity period. Errors name the flag and the file:
//   kInvalidArgument  cert without key or the reverse; not PEM; key does
//                     not match the certificate
//   kNotFound         no such file
//   kPermissionDenied the file cannot be read
//   kFailedPrecondition the certificate has expired or is not valid yet
absl::Status ValidateClientTlsFiles(const TlsFiles& files);

// As ValidateClientTlsFiles, and a server needs its own certificate:
// --tls-ca without --tls-cert and --tls-key is kInvalidArgument.
absl::Status ValidateServerTlsFiles(const TlsFiles& files);

// Credentials for a listening port: plaintext when no file is given, TLS
// with cert+key, and with a CA as well, client certificates required and
// checked against it. Errors as ValidateServerTlsFiles.
// With `refresh` > 0 the files are watched and re-read that often.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& files, absl::Duration refresh = absl::ZeroDuration());

// Credentials for dialling a node: plaintext when no file is given,
// otherwise TLS checked against the CA (or the system's roots without one),
// presenting cert+key when given. Errors as ValidateClientTlsFiles.
// With `refresh` > 0 the files are watched and re-read that often.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(const TlsFiles& files,
                       absl::Duration refresh = absl::ZeroDuration());

// One line for the log: what a node serving with `files` enforces.
std::string DescribeServerTls(const TlsFiles& files);

// gRPC reports a refused handshake as UNAVAILABLE with a low-level message
// ("Socket closed", "certificate verify failed"). Returns `status` with a
// sentence appended that says which setting is the likely cause, given the
// files this client dialled with; any other status comes back unchanged.
absl::Status ExplainTlsFailure(const absl::Status& status,
                               const TlsFiles& files);

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_CLIENT_TLS_H_
