# bash completion for trainyard, the Trainyard CLI: subcommands, their flags, the global
# flags (valid before or after the subcommand), job ids (and, for get, watch and cancel,
# sweep ids) from `trainyard list` and job files for submit/preflight. Install as
#   /usr/share/bash-completion/completions/trainyard
# or source it from ~/.bashrc.

_trainyard_job_ids() {
  # Ids of the controller named on the command line (or TRAINYARD_CONTROLLER); quiet
  # and quick when it is unreachable. With "sweeps": the ids of sweeps too, from the
  # second table `list` prints when there are sweeps.
  local args=() i want_sweeps="${1:-}"
  for ((i = 1; i < ${#COMP_WORDS[@]} - 1; i++)); do
    case "${COMP_WORDS[i]}" in
      --controller | --tls-ca | --token-file) args+=("${COMP_WORDS[i]}" "${COMP_WORDS[i + 1]}") ;;
    esac
  done
  # Each table starts with its header line (ID, SWEEP); a blank line separates them.
  trainyard list --timeout 2 --output text "${args[@]}" 2>/dev/null |
    awk -v sweeps="$want_sweeps" '
      $1 == "ID" { table = "jobs"; next }
      $1 == "SWEEP" { table = "sweeps"; next }
      NF == 0 { next }
      table == "jobs" || (table == "sweeps" && sweeps != "") { print $1 }'
}

_trainyard_worker_names() {
  # Worker names of the controller named on the command line, as for job ids.
  local args=() i
  for ((i = 1; i < ${#COMP_WORDS[@]} - 1; i++)); do
    case "${COMP_WORDS[i]}" in
      --controller | --tls-ca | --token-file) args+=("${COMP_WORDS[i]}" "${COMP_WORDS[i + 1]}") ;;
    esac
  done
  trainyard workers --timeout 2 --output text "${args[@]}" 2>/dev/null | awk 'NR > 1 { print $1 }'
}

_trainyard() {
  local cur prev words cword
  if declare -F _init_completion >/dev/null; then
    _init_completion || return
  else
    cur="${COMP_WORDS[COMP_CWORD]}"
    prev="${COMP_WORDS[COMP_CWORD - 1]}"
    words=("${COMP_WORDS[@]}")
    cword=$COMP_CWORD
  fi

  local global="--controller --timeout --tls-ca --token-file --output -o --json --help -h --version"
  local commands="submit list get explain watch logs workers cancel resize checkpoint artifacts preflight export tensorboard webhooks audit"

  # Values of flags.
  case "$prev" in
    --output | -o)
      # -o of `artifacts pull` and `tensorboard` is a directory, of `export` a file (or,
      # with --names hf, a folder: files and folders both complete).
      if [[ " ${words[*]} " == *" pull "* || " ${words[*]} " == *" tensorboard "* ]]; then
        COMPREPLY=($(compgen -d -- "$cur"))
      elif [[ " ${words[*]} " == *" export "* ]]; then
        COMPREPLY=($(compgen -f -- "$cur"))
      else
        COMPREPLY=($(compgen -W "text json" -- "$cur"))
      fi
      return ;;
    --tls-ca | --token-file | --train-binary | --output-file | --job-file)
      COMPREPLY=($(compgen -f -- "$cur"))
      return ;;
    --output-dir | --checkpoint)
      COMPREPLY=($(compgen -d -- "$cur"))
      return ;;
    --names)
      COMPREPLY=($(compgen -W "torchtitan hf" -- "$cur"))
      return ;;
    --state)
      COMPREPLY=($(compgen -W "PENDING SCHEDULED RUNNING RESTARTING SUCCEEDED FAILED CANCELLED" -- "${cur^^}"))
      return ;;
    --controller | --timeout | --set | --limit | --reason | --dp | --from-seq | --reconnect-for | --rank | --step | \
      --since | --sweep | --max-concurrent)
      return ;;
    --job | --after)
      COMPREPLY=($(compgen -W "$(_trainyard_job_ids)" -- "$cur"))
      return ;;
  esac

  # The subcommand (and sub-subcommand of artifacts, workers and webhooks): the first words that
  # are not flags or flag values.
  local cmd="" sub="" i w
  for ((i = 1; i < cword; i++)); do
    w="${words[i]}"
    case "$w" in
      --controller | --timeout | --tls-ca | --token-file | --output | -o | --set | --state | --limit | \
        --reason | --dp | --from-seq | --reconnect-for | --rank | --output-dir | --train-binary | \
        --checkpoint | --step | --output-file | --names | --job | --since | --after | --sweep | --max-concurrent)
        ((i++)) ;;
      -*) ;;
      *)
        if [[ -z "$cmd" ]]; then
          cmd="$w"
        elif [[ ( "$cmd" == artifacts || "$cmd" == workers || "$cmd" == webhooks ) && -z "$sub" ]]; then
          sub="$w"
        fi ;;
    esac
  done

  if [[ -z "$cmd" ]]; then
    if [[ "$cur" == -* ]]; then
      COMPREPLY=($(compgen -W "$global" -- "$cur"))
    else
      COMPREPLY=($(compgen -W "$commands" -- "$cur"))
    fi
    return
  fi

  local flags=""
  case "$cmd" in
    submit) flags="--set --after --sweep --max-concurrent --wait" ;;
    list) flags="--state --limit --with-sweep-children" ;;
    get | explain | checkpoint) flags="" ;;
    workers)
      if [[ -z "$sub" ]]; then
        if [[ "$cur" != -* ]]; then
          COMPREPLY=($(compgen -W "cordon uncordon drain" -- "$cur"))
          return
        fi
      elif [[ "$sub" == cordon || "$sub" == drain ]]; then
        flags="--reason"
      fi ;;
    watch) flags="--from-seq --reconnect-for --plain" ;;
    logs) flags="--rank --follow -f --reconnect-for" ;;
    cancel) flags="--reason" ;;
    resize) flags="--dp" ;;
    artifacts)
      if [[ -z "$sub" ]]; then
        COMPREPLY=($(compgen -W "list pull" -- "$cur"))
        return
      fi
      [[ "$sub" == pull ]] && flags="--output-dir -o" ;;
    preflight) flags="--set --shrink --json --train-binary --timeout" ;;
    export) flags="--checkpoint --job-file --step --best --output-file -o --names --force" ;;
    tensorboard) flags="--output-dir -o" ;;
    audit) flags="--job --since --limit" ;;
    webhooks)
      if [[ -z "$sub" && "$cur" != -* ]]; then
        COMPREPLY=($(compgen -W "status" -- "$cur"))
        return
      fi ;;
  esac

  if [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "$flags $global" -- "$cur"))
    return
  fi
  case "$cmd" in
    submit | preflight)
      COMPREPLY=($(compgen -f -X '!*.toml' -- "$cur") $(compgen -f -X '!*.json' -- "$cur")
        $(compgen -d -- "$cur")) ;;
    get | watch | cancel)
      COMPREPLY=($(compgen -W "$(_trainyard_job_ids sweeps)" -- "$cur")) ;;
    explain | logs | resize | checkpoint | artifacts | export | tensorboard)
      COMPREPLY=($(compgen -W "$(_trainyard_job_ids)" -- "$cur")) ;;
    workers)
      [[ -n "$sub" ]] && COMPREPLY=($(compgen -W "$(_trainyard_worker_names)" -- "$cur")) ;;
  esac
}

complete -F _trainyard trainyard
