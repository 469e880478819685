#!/usr/bin/env bash
# A short real tour of mem against a throwaway vault (nothing outside a temp dir is touched).
set -euo pipefail
BIN="$(cd "$(dirname "$0")/.." && pwd)/.venv/bin"
DEMO="$(mktemp -d)"
trap 'rm -rf "$DEMO"' EXIT
export MEM_VAULT="$DEMO/vault" MEM_CONFIG_DIR="$DEMO/config" MEM_USER=demo MEM_ORG=acme
unset MEM_KEY_FILE MEM_KEY_COMMAND MEM_MASTER_KEY
mem() { "$BIN/mem" "$@"; }
step() { printf '\n\033[1m$ mem %s\033[0m\n' "$*"; }

step init;                                           mem init
step add '"Works on the billing service in Go"' --type context --tag work
mem add "Works on the billing service in Go" --type context --tag work
step add '"Prefers short answers with code first"' --type preference
mem add "Prefers short answers with code first" --type preference
step add '"Never push to main without a review"' --type instruction --importance 0.9
mem add "Never push to main without a review" --type instruction --importance 0.9
step add '"Standup is at 9:30 Berlin time"' --tag schedule
mem add "Standup is at 9:30 Berlin time" --tag schedule
step add '"Hi, can you look at the flaky invoice test?"' --type message --session s1
mem add "Hi, can you look at the flaky invoice test?" --type message --session s1
step list;                                           mem list
step 'pref set editor vim';                          mem pref set editor vim
step 'pref list';                                    mem pref list
step 'list --type preference --json';                mem list --type preference --json
step verify;                                         mem verify
step stats;                                          mem stats

printf '\n\033[1mWhat is on disk\033[0m (every file 0600, every directory 0700):\n'
(cd "$DEMO/vault" && find . -type f | sort)
printf '\nLooking for the words we stored in the vault files: '
if grep -rqa -e "billing" -e "Berlin" -e "flaky" "$DEMO/vault"; then
  echo "FOUND (this is a bug)"; exit 1
else
  echo "none found: everything is encrypted."
fi
