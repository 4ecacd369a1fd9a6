# Sourced by the shell scripts here, first thing: `script_args "OPTIONS" "$@"`. -h or --help prints
# the script's opening comment (what it does and how to call it) and exits 0; any argument not in
# OPTIONS (space-separated; "*" lets every other argument through) is refused with exit 2 before
# anything runs.
script_args() {
  local allowed=$1 a
  shift
  for a in "$@"; do
    if [ "$a" = -h ] || [ "$a" = --help ]; then
      sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"
      exit 0
    fi
    if [ "$allowed" != "*" ] && [[ " $allowed " != *" $a "* ]]; then
      echo "$(basename "$0"): unknown argument '$a' (see --help)" >&2
      exit 2
    fi
  done
}
