package settings

import (
	"testing"
	"time"
)

func TestSpin(t *testing.T) {
	for _, tt := range []struct {
		in    string
		d     time.Duration
		yield bool
		bad   bool
	}{
		{"50us", 50 * time.Microsecond, false, false},
		{" 2ms ", 2 * time.Millisecond, false, false},
		{"0", -1, false, false},
		{"yield", YieldSpin, true, false},
		{"YIELD", YieldSpin, true, false},
		{"-1ms", 0, false, true},
		{"fast", 0, false, true},
		{"", 0, false, true},
	} {
		d, yield, err := Spin(tt.in)
		if (err != nil) != tt.bad || err == nil && (d != tt.d || yield != tt.yield) {
			t.Errorf("Spin(%q) = %v, %v, %v; want %v, %v, error %v", tt.in, d, yield, err, tt.d, tt.yield, tt.bad)
		}
	}
}
