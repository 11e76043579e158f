#!/usr/bin/env bash
# client/cli/completion/trainyard.bash offers every subcommand `trainyard --help` lists, each
# subcommand's own flags (from its --help) and the global flags, without a controller.
# Usage: completion_test.sh TRAINYARD_BINARY COMPLETION_FILE
set -euo pipefail
cli=$1
# shellcheck source=/dev/null
source "$2"

complete_words() {  # complete_words WORD... -> COMPREPLY for the last word
  COMP_WORDS=("$@")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  COMP_LINE="${COMP_WORDS[*]}"
  COMPREPLY=()
  _trainyard
  printf '%s\n' "${COMPREPLY[@]}" | sort
}

fail=0
# Subcommands: the SUBCOMMANDS section of the top-level help.
help_commands=$("$cli" --help | awk '/^Subcommands:/ { on = 1; next } on && /^  [a-z]/ { print $1 } on && /^$/ { on = 0 }' | sort)
offered=$(complete_words trainyard "")
if [[ "$help_commands" != "$offered" ]]; then
  echo "subcommands differ: --help has [$(echo $help_commands)], completion offers [$(echo $offered)]"
  fail=1
fi
[[ -n "$help_commands" ]] || { echo "no subcommands parsed from --help"; fail=1; }

# Each subcommand's long flags (its --help, less --help) must be offered after "-".
for cmd in $help_commands; do
  words=(trainyard "$cmd")
  [[ "$cmd" == artifacts ]] && continue
  flags=$("$cli" "$cmd" --help | grep -oE '^\s+(-[a-zA-Z],)?--[a-z-]+' | grep -oE -- '--[a-z-]+' | { grep -v -- '--help' || true; } | sort -u)
  got=$(complete_words "${words[@]}" "--")
  for f in $flags; do
    if ! grep -qx -- "$f" <<<"$got"; then
      echo "trainyard $cmd: flag $f is not completed"
      fail=1
    fi
  done
  # Global flags are offered after any subcommand.
  grep -qx -- "--controller" <<<"$got" || { echo "trainyard $cmd: --controller not completed"; fail=1; }
done
for pair in artifacts:list artifacts:pull workers:cordon workers:uncordon workers:drain; do
  cmd=${pair%%:*} sub=${pair#*:}
  flags=$("$cli" "$cmd" "$sub" --help | grep -oE '^\s+(-[a-zA-Z],)?--[a-z-]+' | grep -oE -- '--[a-z-]+' | { grep -v -- '--help' || true; } | sort -u)
  got=$(complete_words trainyard "$cmd" "$sub" x1 "--")
  for f in $flags; do
    grep -qx -- "$f" <<<"$got" || { echo "trainyard $cmd $sub: flag $f is not completed"; fail=1; }
  done
done
# Sub-subcommands: those `workers --help` lists.
workers_subs=$("$cli" workers --help | awk '/^Subcommands:/ { on = 1; next } on && /^  [a-z]/ { print $1 } on && /^$/ { on = 0 }' | sort)
[[ "$workers_subs" == "$(complete_words trainyard workers "")" ]] ||
  { echo "workers subcommands differ: --help has [$(echo $workers_subs)], completion offers [$(complete_words trainyard workers "" | tr '\n' ' ')]"; fail=1; }
[[ -n "$workers_subs" ]] || { echo "no workers subcommands parsed from --help"; fail=1; }

# Values.
[[ "$(complete_words trainyard list --state RUN)" == "RUNNING" ]] || { echo "--state RUN"; fail=1; }
[[ "$(complete_words trainyard --output j)" == "json" ]] || { echo "--output j"; fail=1; }
[[ "$(complete_words trainyard --controller x:1 wa)" == "watch" ]] || { echo "global flag before the subcommand"; fail=1; }
[[ "$(complete_words trainyard artifacts p)" == "pull" ]] || { echo "artifacts p"; fail=1; }
[[ "$(complete_words trainyard workers dr)" == "drain" ]] || { echo "workers dr"; fail=1; }
[[ "$(complete_words trainyard workers un)" == "uncordon" ]] || { echo "workers un"; fail=1; }

if [[ $fail -eq 0 ]]; then echo "completion: ok ($(echo $help_commands | wc -w) subcommands)"; fi
exit $fail
