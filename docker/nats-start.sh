#!/bin/sh
# Start nats-server for compose.yaml. Who may connect:
#  - by default one user: NATS_USER, and NATS_PASSWORD or the file NATS_PASSWORD_FILE names;
#  - with NATS_SECRETS_DIR (docker/compose.secure.yaml mounts the directory YANTRA_NATS_SECRETS names) holding
#    accounts.conf: its accounts instead, a user per service (bcrypt hashes); with server.pem and server-key.pem
#    there, TLS on the client port, and with ca.pem too, TLS on the routes, each node proving itself to the others.
# With NATS_ROUTES (host:port of every node, separated by commas; compose's `cluster` profile) it is a node of a
# cluster named yantra, NATS_SERVER_NAME its name, its routes guarded by the user yantra-route and
# NATS_ROUTE_PASSWORD (or NATS_ROUTE_PASSWORD_FILE).
# Passwords go into a config file of mode 0600, quoted, never onto a command line (`ps` shows those to every user
# of the host). Not as a `$NATS_PASSWORD` reference inside the config: nats-server parses the value of such a
# variable as config, so a password that is all digits, or holds a space, a comma or a brace, stopped the server
# or silently became another password.
# Arguments go to nats-server after the config (compose passes the store dir: -sd /data).
set -eu

fail() {
  echo "nats-start: $1" >&2
  exit 2
}

# NAME from NAME or the file NAME_FILE names, not both
from_file() {
  eval "value=\${$1:-}; file=\${$1_FILE:-}"
  if [ -n "$file" ]; then
    [ -z "$value" ] || fail "both $1 and $1_FILE are set: give the password one way"
    [ -r "$file" ] || fail "$1_FILE=$file: cannot read it"
    value=$(cat "$file")
    eval "$1=\$value"
  fi
}

# A double-quoted config string takes JSON's escapes: a backslash or a double quote is escaped, all else is kept.
quoted() {
  printf '"%s"' "$(printf '%s' "$1" | sed 's/[\\"]/\\&/g')"
}

secrets=${NATS_SECRETS_DIR:-}
accounts="" cert="" ca=""
if [ -n "$secrets" ]; then
  [ -d "$secrets" ] || fail "NATS_SECRETS_DIR=$secrets is not a directory"
  [ -f "$secrets/accounts.conf" ] && accounts="$secrets/accounts.conf"
  if [ -f "$secrets/server.pem" ]; then
    [ -f "$secrets/server-key.pem" ] || fail "$secrets has server.pem but no server-key.pem: give both"
    cert="$secrets/server.pem"
  fi
  [ -f "$secrets/ca.pem" ] && ca="$secrets/ca.pem"
  [ -n "$accounts$cert" ] || fail "$secrets holds neither accounts.conf nor server.pem (docs/multi-machine.md)"
fi

if [ -z "$accounts" ]; then
  from_file NATS_PASSWORD
  : "${NATS_USER:?set NATS_USER}"
  : "${NATS_PASSWORD:?set NATS_PASSWORD (or NATS_PASSWORD_FILE)}"
fi

routes=${NATS_ROUTES:-}
if [ -n "$routes" ]; then
  from_file NATS_ROUTE_PASSWORD
  : "${NATS_SERVER_NAME:?set NATS_SERVER_NAME: each node of a cluster needs a name of its own}"
  : "${NATS_ROUTE_PASSWORD:?set NATS_ROUTE_PASSWORD (or NATS_ROUTE_PASSWORD_FILE): the routes between nodes need one}"
  # it goes into each route's URL, where other characters would need escaping
  case "$NATS_ROUTE_PASSWORD" in
    *[!A-Za-z0-9._~-]*) fail "NATS_ROUTE_PASSWORD: use letters, digits and - . _ ~ only (it goes in the route URLs)" ;;
  esac
  [ -z "$cert" ] || [ -n "$ca" ] || fail "$secrets has server.pem but no ca.pem: TLS routes verify each node with it"
fi

config=${NATS_RUNTIME_CONFIG:-/tmp/nats-server.conf}
umask 077
{
  cat "${NATS_BASE_CONFIG:-/etc/nats/nats.conf}"
  if [ -n "${NATS_SERVER_NAME:-}" ]; then
    printf 'server_name: %s\n' "$(quoted "$NATS_SERVER_NAME")"
  fi
  if [ -n "$accounts" ]; then
    cat "$accounts"
    printf '\n'
  else
    printf 'authorization {\n  user: %s\n  password: %s\n}\n' "$(quoted "$NATS_USER")" "$(quoted "$NATS_PASSWORD")"
  fi
  if [ -n "$cert" ]; then
    printf 'tls {\n  cert_file: %s\n  key_file: %s\n  timeout: 2\n}\n' \
      "$(quoted "$cert")" "$(quoted "$secrets/server-key.pem")"
  fi
  if [ -n "$routes" ]; then
    printf 'cluster {\n  name: "yantra"\n  listen: %s\n' "$(quoted "${NATS_ROUTE_LISTEN:-0.0.0.0:6222}")"
    printf '  authorization { user: "yantra-route", password: %s }\n' "$(quoted "$NATS_ROUTE_PASSWORD")"
    printf '  routes: ['
    sep=""
    for route in $(printf '%s' "$routes" | tr ',' ' '); do
      printf '%s"nats-route://yantra-route:%s@%s"' "$sep" "$NATS_ROUTE_PASSWORD" "$route"
      sep=", "
    done
    printf ']\n'
    if [ -n "$cert" ]; then
      printf '  tls {\n    cert_file: %s\n    key_file: %s\n    ca_file: %s\n    verify: true\n    timeout: 2\n  }\n' \
        "$(quoted "$cert")" "$(quoted "$secrets/server-key.pem")" "$(quoted "$ca")"
    fi
    printf '}\n'
  fi
} >"$config"
exec nats-server -c "$config" "$@"
