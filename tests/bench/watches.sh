#!/usr/bin/env bash
# The API server's open watches by resource, as its own gauge counts them
# (apiserver_longrunning_requests, verb WATCH): issue 50's "one watch per
# kind". Prints one "count resource" line per resource, most first.
#
#   NODEIMAGE_STATE=DIR tests/bench/watches.sh [RESOURCE...]
#
# With resources named (plural, such as imagepulljobs nodeimages), only
# those. To see what one client opens, read it with the client stopped and
# running, in the same session: the difference is its watches
# (docs/scale.md, "Watches").
set -euo pipefail
# shellcheck source=tests/cluster/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../cluster/lib.sh"
ENV_FILE=$STATE/env.sh
[[ -f $ENV_FILE ]] || die "no $ENV_FILE: start the cluster first (tests/cluster/up.sh)"
# shellcheck disable=SC1090
. "$ENV_FILE"
want=" $* "
"$KUBECTL" get --raw /metrics |
  awk -v want="$want" '
    /^apiserver_longrunning_requests\{/ && /verb="WATCH"/ {
      if (match($0, /resource="[^"]*"/) == 0) next
      r = substr($0, RSTART + 10, RLENGTH - 11)
      if (want != "  " && index(want, " " r " ") == 0) next
      n[r] += $NF
    }
    END { for (r in n) printf "%d %s\n", n[r], r }' |
  sort -rn
