#!/bin/sh
# A link launcher (CMake's RULE_LAUNCH_LINK) for the `tally` CLI: runs the
# link command it is given with each shared library of the system's
# (/usr/lib/<triplet>/libNAME.so[.VERSION], or -lNAME) replaced by its
# static archive when Debian ships one (libNAME.a beside it), so that the
# CLI does not load ~90 shared objects at every start: with them, a short
# command such as `tally diff` spends ~35 ms of its ~85 ms in the dynamic
# loader (README "Benchmarks", pg-warm).
#
# Kept shared: libpq (its archive needs Kerberos and LDAP archives Debian
# does not ship), MariaDB's Connector/C (its archive needs the TLS and
# compression libraries and loads its authentication plugins as shared
# objects anyway), OpenSSL (libpq loads its shared copy; two copies in one
# process must not be mixed), the C and C++ runtimes, and anything without
# an archive. Set TALLY_STATIC_DEPS_DEBUG=1 to print the rewritten command.
set -eu
libdir=/usr/lib/$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
keep_shared() {
  case "$1" in
    libpq | libmariadb | libssl | libcrypto | libstdc++ | libgcc_s | libc | libm | libdl | \
      librt | libpthread | libatomic | libcpp-httplib) return 0 ;;
  esac
  return 1
}
first=1
for arg in "$@"; do
  if [ "$first" = 1 ]; then set --; first=0; fi
  name=
  case "$arg" in
    "$libdir"/lib*.so | "$libdir"/lib*.so.*)
      name=$(basename "$arg")
      name=${name%%.so*}
      ;;
    -l*)
      name=lib${arg#-l}
      ;;
  esac
  if [ -n "$name" ] && ! keep_shared "$name" && [ -f "$libdir/$name.a" ]; then
    arg=$libdir/$name.a
  fi
  set -- "$@" "$arg"
done
if [ "${TALLY_STATIC_DEPS_DEBUG:-0}" = 1 ]; then echo "$@" >&2; fi
exec "$@"
