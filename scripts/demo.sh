#!/usr/bin/env bash
# A short real tour of mem against a throwaway vault (nothing outside a temp dir is touched).
set -euo pipefail
BIN="$(cd "$(dirname "$0")/.." && pwd)/.venv/bin"
DEMO="$(mktemp -d)"
trap 'rm -rf "$DEMO"' EXIT
export MEM_VAULT="$DEMO/vault" MEM_CONFIG_DIR="$DEMO/config" MEM_USER=demo MEM_ORG=acme
export MEM_EMBEDDINGS_BACKGROUND=false  # no detached child outlives the demo's temp dir
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

# A transcript as an agent hook would hand it over: one line holds an AWS key (withheld),
# another an email address (masked).
cat > "$DEMO/session.jsonl" <<'JSONL'
{"id": "m1", "role": "user", "content": "The invoice test fails every Monday; can you look?"}
{"id": "m2", "role": "assistant", "content": "It reads the clock directly. Mock the clock in conftest and it passes."}
{"id": "m3", "role": "user", "content": "Use AKIAIOSFODNN7EXAMPLE for the staging bucket"}
{"id": "m4", "role": "user", "content": "Great. Send the summary to ana@example.com"}
JSONL
step 'ingest session.jsonl --session s2';           mem ingest "$DEMO/session.jsonl" --session s2
step 'ingest session.jsonl --session s2  (again: nothing new)'
mem ingest "$DEMO/session.jsonl" --session s2
step 'search "why does the invoice test fail on mondays?"'
mem search "why does the invoice test fail on mondays?"
step 'search --session s2 email'; mem search --session s2 email
step 'add "Prefers pytest with fixtures" --type preference'
mem add "Prefers pytest with fixtures" --type preference
# Writes embed in the background; the demo embeds at once so that what follows is the same
# every run (the detached child would race it).
step 'embed  (what the background does after each write, and cron beside compaction)'
mem embed
step 'search "how does the user like to test" --all  (the preference shares no word with it and the built-in model does not put it near enough to match: --all lists it after the match, marked weak)'
mem search "how does the user like to test" --all
step brief;                                          mem brief
step 'compact --session s2  (what cron does nightly: a summary in CLAUDE.md, originals archived)'
mem compact --session s2
step 'search invoice --type summary';               mem search invoice --type summary
step 'forget --tag schedule';                        mem forget --tag schedule
step verify;                                         mem verify
step stats;                                          mem stats

cd "$DEMO"
printf 'correct horse battery staple\n' > passphrase
mkdir remote
step 'key backup --output key.backup --passphrase-file passphrase'
mem key backup --output key.backup --passphrase-file passphrase
step 'sync --remote remote  (a folder: a NAS, a Syncthing folder; or s3://bucket/prefix)'
mem sync --remote remote
printf '\n\033[1mOn a second machine\033[0m (its own vault and config):\n'
export MEM_VAULT="$DEMO/laptop/vault" MEM_CONFIG_DIR="$DEMO/laptop/config"
step 'key restore key.backup --passphrase-file passphrase'
mem key restore key.backup --passphrase-file passphrase
step 'sync --remote remote';                         mem sync --remote remote
step 'search "invoice test"';                        mem search "invoice test"

printf '\n\033[1mWhat is on disk\033[0m (every file 0600, every directory 0700):\n'
(cd "$DEMO/vault" && find . -type f | sort)
printf '\nLooking for the words we stored in both vaults and the sync folder: '
if grep -rqa -e "billing" -e "Berlin" -e "flaky" -e "invoice" -e "AKIA" -e "ana@" \
    "$DEMO/vault" "$DEMO/laptop/vault" "$DEMO/remote"; then
  echo "FOUND (this is a bug)"; exit 1
else
  echo "none found: everything is encrypted."
fi
