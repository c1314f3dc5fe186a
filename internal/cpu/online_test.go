package cpu

import "testing"

func TestCountList(t *testing.T) {
	for list, want := range map[string]int{"0": 1, "0-1": 2, "0-3,8,10-11": 7, "": 0, "x": 0, "3-1": 0, "-1": 0} {
		if got := CountList(list); got != want {
			t.Errorf("CountList(%q) = %d, want %d", list, got, want)
		}
	}
	if Online() < 1 {
		t.Errorf("Online() = %d", Online())
	}
}
