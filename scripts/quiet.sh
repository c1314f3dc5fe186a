# quiet, sourced by the scripts that time alternated runs: it waits until
# both CPUs were at least 90% idle over 300 ms, so that another process's
# burst does not land on one side's run.
quiet() {
  while :; do
    read -r _ u1 n1 s1 i1 w1 q1 sq1 st1 _ < /proc/stat
    sleep 0.3
    read -r _ u2 n2 s2 i2 w2 q2 sq2 st2 _ < /proc/stat
    tot=$(( (u2+n2+s2+i2+w2+q2+sq2+st2) - (u1+n1+s1+i1+w1+q1+sq1+st1) ))
    (( tot > 0 && (i2 - i1) * 100 / tot >= 90 )) && return
    sleep 2
  done
}
