package cpu

import (
	"os"
	"runtime"
	"strconv"
	"strings"
)

// Online returns the number of CPUs this host has online, which a
// launcher's binding of each rank to its share does not narrow (as it
// does runtime.NumCPU's count), else runtime.NumCPU().
func Online() int {
	if b, err := os.ReadFile("/sys/devices/system/cpu/online"); err == nil {
		if n := CountList(strings.TrimSpace(string(b))); n > 0 {
			return n
		}
	}
	return runtime.NumCPU()
}

// CountList counts the CPUs of a kernel CPU list ("0-3,8,10-11"); 0 when
// it cannot read it.
func CountList(list string) int {
	n := 0
	for r := range strings.SplitSeq(list, ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		a, err := strconv.Atoi(lo)
		b, errHi := a, error(nil)
		if isRange {
			b, errHi = strconv.Atoi(hi)
		}
		if err != nil || errHi != nil || a < 0 || b < a {
			return 0
		}
		n += b - a + 1
	}
	return n
}
