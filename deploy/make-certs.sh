#!/usr/bin/env bash
# Makes what deploy/compose.yaml mounts at /etc/keycap/tls: a private CA (ca.pem, ca.key)
# and one server certificate (server.pem, server.key) whose SANs name every service of the
# compose file (kernel, ledger-1, ledger-2) and localhost, 127.0.0.1 for health checks and
# published ports. For a real deployment use your own CA; this is for trying it out.
#
#   deploy/make-certs.sh deploy/certs [extra DNS names...]
set -euo pipefail
dir="${1:?usage: make-certs.sh DIR [DNS name...]}"
shift
mkdir -p "$dir"
cd "$dir"
sans="DNS:kernel,DNS:ledger-1,DNS:ledger-2,DNS:localhost,IP:127.0.0.1"
for name in "$@"; do sans="$sans,DNS:$name"; done

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 825 \
  -subj "/CN=keycap local CA" -keyout ca.key -out ca.pem \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
  -subj "/CN=keycap" -keyout server.key -out server.csr 2>/dev/null
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 825 -out server.pem \
  -extfile <(printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\nkeyUsage=critical,digitalSignature\n' "$sans") 2>/dev/null
rm -f server.csr ca.srl
# The services run as uid 10001 in the image, not the owner of these files: the key is
# world-readable so they can read it. Fine for trying it out; in production mount it as a
# secret owned by that uid.
chmod 0644 ca.pem server.pem
chmod 0644 server.key
chmod 0600 ca.key
echo "wrote $(pwd)/{ca.pem,server.pem,server.key} for: $sans"
