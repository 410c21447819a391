#!/bin/sh
# Start nats-server for compose.yaml requiring one user: NATS_USER, and NATS_PASSWORD or the file
# NATS_PASSWORD_FILE names. The password goes into a config file of mode 0600, quoted, never onto a command
# line (`ps` shows those to every user of the host). Not as a `$NATS_PASSWORD` reference inside the config:
# nats-server parses the value of such a variable as config, so a password that is all digits, or holds a
# space, a comma or a brace, stopped the server or silently became another password.
# Arguments go to nats-server after the config (compose passes the store dir: -sd /data).
set -eu
if [ -n "${NATS_PASSWORD_FILE:-}" ]; then
  if [ -n "${NATS_PASSWORD:-}" ]; then
    echo "nats-start: both NATS_PASSWORD and NATS_PASSWORD_FILE are set: give the password one way" >&2
    exit 2
  fi
  NATS_PASSWORD=$(cat "$NATS_PASSWORD_FILE")
fi
: "${NATS_USER:?set NATS_USER}"
: "${NATS_PASSWORD:?set NATS_PASSWORD (or NATS_PASSWORD_FILE)}"

# A double-quoted config string takes JSON's escapes: a backslash or a double quote is escaped, all else is kept.
quoted() {
  printf '"%s"' "$(printf '%s' "$1" | sed 's/[\\"]/\\&/g')"
}

config=${NATS_RUNTIME_CONFIG:-/tmp/nats-server.conf}
umask 077
{
  cat "${NATS_BASE_CONFIG:-/etc/nats/nats.conf}"
  printf 'authorization {\n  user: %s\n  password: %s\n}\n' "$(quoted "$NATS_USER")" "$(quoted "$NATS_PASSWORD")"
} >"$config"
exec nats-server -c "$config" "$@"
