#!/usr/bin/env bash
# Makes the certificates of a Trainyard test fleet with the openssl CLI (EC P-256, SHA-256):
#   OUT_DIR/ca.pem, ca.key                 the fleet's CA (O=trainyard, CN=trainyard-ca)
#   OUT_DIR/controller.pem, controller.key  serverAuth; SAN DNS:localhost, IP:127.0.0.1 and
#                                          every --controller-san
#   OUT_DIR/worker-NAME.pem, .key          clientAuth, CN=NAME, OU=trainyard-worker (the
#                                          controller takes the worker's name from the CN)
#   OUT_DIR/client-NAME.pem, .key          clientAuth, CN=NAME, OU=trainyard-client (not a
#                                          worker: the controller refuses it on WorkerService)
# Keys are mode 0600. An existing CA is reused to sign new certificates and is never
# overwritten without --force; an existing certificate is kept (skipped) likewise, so the
# script can be run again to add workers. Usage:
#   deploy/make-certs.sh OUT_DIR [--workers n1,n2,...] [--clients c1,...]
#                        [--controller-san DNS:host|IP:addr]... [--days N] [--force]
set -euo pipefail

usage() {
  sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
die() { echo "make-certs: $*" >&2; exit 1; }

[[ $# -ge 1 ]] || usage
case "$1" in -h|--help) usage ;; -*) die "the first argument must be OUT_DIR, got '$1'" ;; esac
OUT=$1
shift
WORKERS="" CLIENTS="" DAYS=825 FORCE=0
SANS=("DNS:localhost" "IP:127.0.0.1")
while [[ $# -gt 0 ]]; do
  case "$1" in
    --workers) [[ $# -ge 2 ]] || die "--workers needs a value"; WORKERS=$2; shift 2 ;;
    --clients) [[ $# -ge 2 ]] || die "--clients needs a value"; CLIENTS=$2; shift 2 ;;
    --controller-san)
      [[ $# -ge 2 ]] || die "--controller-san needs a value"
      [[ $2 =~ ^(DNS:[A-Za-z0-9*][A-Za-z0-9.-]{0,252}|IP:[0-9A-Fa-f.:]{2,45})$ ]] ||
        die "--controller-san must be DNS:NAME or IP:ADDRESS, got '${2:0:100}'"
      SANS+=("$2"); shift 2 ;;
    --days)
      [[ $# -ge 2 && $2 =~ ^[1-9][0-9]{0,4}$ ]] || die "--days needs a number of days (1-99999)"
      DAYS=$2; shift 2 ;;
    --force) FORCE=1; shift ;;
    -h|--help) usage ;;
    *) die "unknown argument '${1:0:100}' (see --help)" ;;
  esac
done
command -v openssl >/dev/null || die "openssl is not installed (apt-get install openssl)"

# Names become file names and a certificate's CN (at most 64 characters).
check_name() {
  [[ $1 =~ ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$ ]] ||
    die "$2 name '${1:0:100}' must match [A-Za-z0-9][A-Za-z0-9._-]{0,63}"
}
split_names() {  # $1: comma-separated list; prints one name a line
  local names n
  IFS=, read -r -a names <<<"$1"  # no word splitting on spaces, no globbing of '*'
  for n in "${names[@]}"; do [[ -n $n ]] && printf '%s\n' "$n"; done
  return 0
}

while read -r name; do check_name "$name" worker; done < <(split_names "$WORKERS")
while read -r name; do check_name "$name" client; done < <(split_names "$CLIENTS")

mkdir -p "$OUT"
umask 077  # keys (and the CA serial scratch) are the owner's only
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

new_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; chmod 600 "$1"; }

if [[ -e $OUT/ca.pem || -e $OUT/ca.key ]] && [[ $FORCE -eq 0 ]]; then
  [[ -f $OUT/ca.pem && -f $OUT/ca.key ]] ||
    die "$OUT holds only one of ca.pem and ca.key; refusing to overwrite it (--force makes a new CA)"
  echo "make-certs: using the existing CA $OUT/ca.pem (--force makes a new one)"
else
  new_key "$OUT/ca.key"
  openssl req -x509 -new -key "$OUT/ca.key" -sha256 -days "$DAYS" \
    -subj "/O=trainyard/CN=trainyard-ca" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" -out "$OUT/ca.pem"
  chmod 644 "$OUT/ca.pem"
  echo "make-certs: wrote $OUT/ca.pem"
fi

# issue BASE SUBJECT EXTENSIONS: BASE.key and BASE.pem signed by the CA.
issue() {
  local base=$1 subject=$2 ext=$3
  if [[ -e $OUT/$base.pem && $FORCE -eq 0 ]]; then
    echo "make-certs: keeping $OUT/$base.pem"
    return
  fi
  new_key "$OUT/$base.key"
  openssl req -new -key "$OUT/$base.key" -subj "$subject" -out "$TMP/$base.csr"
  printf '%s\n' "$ext" >"$TMP/$base.ext"
  openssl x509 -req -in "$TMP/$base.csr" -CA "$OUT/ca.pem" -CAkey "$OUT/ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days "$DAYS" -sha256 \
    -extfile "$TMP/$base.ext" -out "$OUT/$base.pem" 2>/dev/null
  chmod 644 "$OUT/$base.pem"
  echo "make-certs: wrote $OUT/$base.pem ($subject)"
}

LEAF="basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment"
san=$(IFS=,; echo "${SANS[*]}")
issue controller "/O=trainyard/OU=trainyard-controller/CN=trainyard-controller" \
  "$LEAF
extendedKeyUsage=serverAuth
subjectAltName=$san"
while read -r name; do
  issue "worker-$name" "/O=trainyard/OU=trainyard-worker/CN=$name" "$LEAF
extendedKeyUsage=clientAuth"
done < <(split_names "$WORKERS")
while read -r name; do
  issue "client-$name" "/O=trainyard/OU=trainyard-client/CN=$name" "$LEAF
extendedKeyUsage=clientAuth"
done < <(split_names "$CLIENTS")
