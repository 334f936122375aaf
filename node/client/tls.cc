#include "node/client/tls.h"

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "tree/status_macros.h"

namespace tally {
namespace node {
namespace {

// A CA bundle of every public root is ~250 KB; a file many times that is
// not what the flag asks for.
constexpr size_t kMaxPemBytes = 4 << 20;

// The PEM text of the files given (empty where none was given).
struct Pem {
  std::string cert;
  std::string key;
  std::string ca;
};

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

// OpenSSL keeps errors in a per-thread queue, which gRPC's handshakes on
// the same thread would read as theirs: every parse here leaves it empty.
class ClearOpenSslErrors {
 public:
  ClearOpenSslErrors() = default;
  ClearOpenSslErrors(const ClearOpenSslErrors&) = delete;
  ClearOpenSslErrors& operator=(const ClearOpenSslErrors&) = delete;
  ~ClearOpenSslErrors() { ERR_clear_error(); }
};

std::string LastOpenSslError() {
  const unsigned long e = ERR_peek_last_error();
  if (e == 0) return "unknown error";
  char text[256];
  ERR_error_string_n(e, text, sizeof(text));
  return text;
}

BioPtr MemoryBio(const std::string& text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

absl::StatusOr<std::string> ReadPemFile(absl::string_view flag,
                                        const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    const int error = errno;
    const std::string message = absl::StrFormat(
        "%s %s: cannot read it: %s", flag, path, std::strerror(error));
    if (error == ENOENT) return absl::NotFoundError(message);
    if (error == EACCES) return absl::PermissionDeniedError(message);
    return absl::InvalidArgumentError(message);
  }
  std::string text;
  char buffer[64 * 1024];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0 &&
         text.size() <= kMaxPemBytes) {
    text.append(buffer, n);
  }
  const int error = std::ferror(file) ? errno : 0;
  std::fclose(file);
  if (error != 0) {
    // A directory opens, then fails to read with EISDIR.
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s %s: cannot read it: %s", flag, path, std::strerror(error)));
  }
  if (text.size() > kMaxPemBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s %s is larger than %d bytes; it should be a PEM "
                        "file of a few kilobytes",
                        flag, path, kMaxPemBytes));
  }
  if (text.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s %s is empty; it should be a PEM file", flag, path));
  }
  return text;
}

// Every certificate in `pem`, in order. kInvalidArgument when there is
// none, or a certificate block is damaged.
absl::StatusOr<std::vector<X509Ptr>> ParseCertificates(absl::string_view flag,
                                                       const std::string& path,
                                                       const std::string& pem) {
  ClearOpenSslErrors clear;
  BioPtr bio = MemoryBio(pem);
  std::vector<X509Ptr> certificates;
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    certificates.emplace_back(x);
  }
  // The loop ends with "no start line" at the end of the text; anything
  // else is a block that would not parse.
  const unsigned long end = ERR_peek_last_error();
  if (end != 0 && !(ERR_GET_LIB(end) == ERR_LIB_PEM &&
                    ERR_GET_REASON(end) == PEM_R_NO_START_LINE)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s %s: certificate %d is damaged: %s", flag, path,
                        certificates.size() + 1, LastOpenSslError()));
  }
  if (certificates.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s %s holds no PEM certificate (a '-----BEGIN CERTIFICATE-----' "
        "block)",
        flag, path));
  }
  return certificates;
}

std::string FormatAsn1Time(const ASN1_TIME* time) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  ASN1_TIME_print(bio.get(), time);
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, size > 0 ? size : 0);
}

// The leaf must be usable now: an expired certificate would otherwise only
// show as failed handshakes on the other side.
absl::Status CheckValidNow(const std::string& path, X509* leaf) {
  if (X509_cmp_current_time(X509_get0_notAfter(leaf)) < 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("--tls-cert %s expired on %s", path,
                        FormatAsn1Time(X509_get0_notAfter(leaf))));
  }
  if (X509_cmp_current_time(X509_get0_notBefore(leaf)) > 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("--tls-cert %s is not valid before %s", path,
                        FormatAsn1Time(X509_get0_notBefore(leaf))));
  }
  return absl::OkStatus();
}

// Refuses a passphrase instead of prompting for one on the terminal.
int NoPassphrase(char*, int, int, void*) { return -1; }

absl::StatusOr<PkeyPtr> ParsePrivateKey(const std::string& path,
                                        const std::string& pem) {
  ClearOpenSslErrors clear;
  BioPtr bio = MemoryBio(pem);
  PkeyPtr key(
      PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr));
  if (key != nullptr) return key;
  if (absl::StrContains(pem, "ENCRYPTED")) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--tls-key %s is encrypted; tally needs an unencrypted key (openssl "
        "pkey -in ENCRYPTED.pem -out KEY.pem)",
        path));
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "--tls-key %s holds no PEM private key (a '-----BEGIN PRIVATE KEY-----' "
      "block): %s",
      path, LastOpenSslError()));
}

absl::StatusOr<Pem> LoadClientPem(const TlsFiles& files) {
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError(
        files.cert.empty()
            ? "--tls-key is given without --tls-cert; give both (the "
              "certificate and its private key) or neither"
            : "--tls-cert is given without --tls-key; give both (the "
              "certificate and its private key) or neither");
  }
  Pem pem;
  if (!files.cert.empty()) {
    TALLY_ASSIGN_OR_RETURN(pem.cert, ReadPemFile("--tls-cert", files.cert));
    TALLY_ASSIGN_OR_RETURN(pem.key, ReadPemFile("--tls-key", files.key));
    TALLY_ASSIGN_OR_RETURN(
        std::vector<X509Ptr> chain,
        ParseCertificates("--tls-cert", files.cert, pem.cert));
    TALLY_ASSIGN_OR_RETURN(PkeyPtr key, ParsePrivateKey(files.key, pem.key));
    {
      ClearOpenSslErrors clear;
      if (X509_check_private_key(chain.front().get(), key.get()) != 1) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "--tls-key %s is not the private key of the certificate in "
            "--tls-cert %s",
            files.key, files.cert));
      }
    }
    TALLY_RETURN_IF_ERROR(CheckValidNow(files.cert, chain.front().get()));
  }
  if (!files.ca.empty()) {
    TALLY_ASSIGN_OR_RETURN(pem.ca, ReadPemFile("--tls-ca", files.ca));
    TALLY_RETURN_IF_ERROR(
        ParseCertificates("--tls-ca", files.ca, pem.ca).status());
  }
  return pem;
}

absl::StatusOr<Pem> LoadServerPem(const TlsFiles& files) {
  if (!files.ca.empty() && files.cert.empty() && files.key.empty()) {
    return absl::InvalidArgumentError(
        "--tls-ca is given without --tls-cert and --tls-key: a node needs "
        "its own certificate and key to serve TLS, and the CA only checks "
        "the certificates of its clients and peers");
  }
  return LoadClientPem(files);
}

// The watcher's interval in whole seconds, at least 1.
unsigned int RefreshSeconds(absl::Duration refresh) {
  return static_cast<unsigned int>(
      std::max<int64_t>(1, absl::ToInt64Seconds(refresh)));
}

}  // namespace

absl::Status ValidateClientTlsFiles(const TlsFiles& files) {
  return LoadClientPem(files).status();
}

absl::Status ValidateServerTlsFiles(const TlsFiles& files) {
  return LoadServerPem(files).status();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& files, absl::Duration refresh) {
  if (!files.enabled()) return grpc::InsecureServerCredentials();
  TALLY_ASSIGN_OR_RETURN(Pem pem, LoadServerPem(files));
  if (refresh > absl::ZeroDuration()) {
    // The files were just checked; the watcher re-reads them every
    // `refresh` and keeps the last pair that fit.
    auto provider =
        std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
            files.key, files.cert, files.ca, RefreshSeconds(refresh));
    grpc::experimental::TlsServerCredentialsOptions options(provider);
    options.watch_identity_key_cert_pairs();
    if (!files.ca.empty()) {
      options.watch_root_certs();
      options.set_cert_request_type(
          GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    }
    std::shared_ptr<grpc::ServerCredentials> watched =
        grpc::experimental::TlsServerCredentials(options);
    if (watched == nullptr) {
      return absl::InternalError("gRPC refused the TLS server credentials");
    }
    return watched;
  }
  grpc::SslServerCredentialsOptions options(
      pem.ca.empty()
          ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
          : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = pem.ca;
  options.pem_key_cert_pairs.push_back({pem.key, pem.cert});
  std::shared_ptr<grpc::ServerCredentials> credentials =
      grpc::SslServerCredentials(options);
  if (credentials == nullptr) {
    return absl::InternalError("gRPC refused the TLS server credentials");
  }
  return credentials;
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(const TlsFiles& files, absl::Duration refresh) {
  if (!files.enabled()) return grpc::InsecureChannelCredentials();
  TALLY_ASSIGN_OR_RETURN(Pem pem, LoadClientPem(files));
  if (refresh > absl::ZeroDuration()) {
    std::shared_ptr<grpc::experimental::FileWatcherCertificateProvider>
        provider;
    if (files.cert.empty()) {
      provider =
          std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
              files.ca, RefreshSeconds(refresh));
    } else {
      provider =
          std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
              files.key, files.cert, files.ca, RefreshSeconds(refresh));
    }
    grpc::experimental::TlsChannelCredentialsOptions options;
    options.set_certificate_provider(provider);
    if (!files.cert.empty()) options.watch_identity_key_cert_pairs();
    // Without a CA the system's roots, as SslCredentials uses them.
    if (!files.ca.empty()) options.watch_root_certs();
    // The server is checked by name, as with SslCredentials.
    options.set_certificate_verifier(
        std::make_shared<grpc::experimental::HostNameCertificateVerifier>());
    std::shared_ptr<grpc::ChannelCredentials> watched =
        grpc::experimental::TlsCredentials(options);
    if (watched == nullptr) {
      return absl::InternalError("gRPC refused the TLS channel credentials");
    }
    return watched;
  }
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = pem.ca;  // empty: gRPC's default roots
  options.pem_private_key = pem.key;
  options.pem_cert_chain = pem.cert;
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      grpc::SslCredentials(options);
  if (credentials == nullptr) {
    return absl::InternalError("gRPC refused the TLS channel credentials");
  }
  return credentials;
}

std::string DescribeServerTls(const TlsFiles& files) {
  if (!files.enabled()) return "tls: off, plaintext";
  if (files.ca.empty()) {
    return absl::StrFormat("tls: on with %s; clients need no certificate",
                           files.cert);
  }
  return absl::StrFormat(
      "tls: mutual with %s; clients and peers need a certificate signed by "
      "%s",
      files.cert, files.ca);
}

absl::Status ExplainTlsFailure(const absl::Status& status,
                               const TlsFiles& files) {
  if (!absl::IsUnavailable(status)) return status;
  const absl::string_view message = status.message();
  absl::string_view hint;
  if (!files.enabled()) {
    // A TLS server drops a client that speaks plaintext.
    if (absl::StrContains(message, "Socket closed")) {
      hint =
          "if the node serves TLS, give --tls-ca, and --tls-cert and "
          "--tls-key if it requires client certificates";
    }
  } else if (absl::StrContains(message, "wrong version number")) {
    hint = "the node does not seem to serve TLS; dial it without --tls-*";
  } else if (absl::StrContains(message, "certificate verify failed")) {
    hint = files.ca.empty()
               ? "the node's certificate is not signed by a system root; "
                 "give its CA with --tls-ca"
               : "the node's certificate is not signed by --tls-ca";
  } else if (absl::StrContains(message, "Peer name")) {
    hint =
        "the node's certificate does not name the host dialled; its "
        "subjectAltName must hold that IP address or DNS name";
  } else if (absl::StrContains(message, "Socket closed") ||
             absl::StrContains(message, "handshake")) {
    hint = files.cert.empty()
               ? "the node may require a client certificate: give --tls-cert "
                 "and --tls-key signed by its CA"
               : "the node may have refused this client's certificate: it "
                 "must be signed by the node's --tls-ca";
  }
  if (hint.empty()) return status;
  return absl::Status(status.code(), absl::StrFormat("%s (%s)", message, hint));
}

}  // namespace node
}  // namespace tally
