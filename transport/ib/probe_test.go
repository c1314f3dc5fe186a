package ib_test

import (
	"testing"

	"github.com/goccl/goccl/transport/ib"
	"github.com/goccl/goccl/transport/ib/ibfake"
)

// TestConfigProbe: Config.Probe opens the device Connect would open
// through the configured provider and closes it again, so Connect can
// open it next; a malformed HCA fails.
func TestConfigProbe(t *testing.T) {
	f := ibfake.New()
	cfg := ib.Config{Provider: f.Provider(), HCA: "hca0"}
	if err := cfg.Probe(); err != nil {
		t.Fatalf("Probe over the fake: %v", err)
	}
	if d := f.Device("hca0"); d == nil {
		t.Fatal("Probe opened no device hca0")
	}
	if u := f.Unclosed(); len(u) > 0 {
		t.Errorf("Probe left %q open", u)
	}
	if err := cfg.Probe(); err != nil {
		t.Errorf("second Probe: %v", err)
	}
	for _, hca := range []string{"hca0:0", "hca0:x", "hca0:2"} {
		if err := (ib.Config{Provider: f.Provider(), HCA: hca}).Probe(); err == nil {
			t.Errorf("Probe(%q) succeeded", hca)
		}
	}
	if m := f.Misuse(); len(m) > 0 {
		t.Errorf("misuse: %q", m)
	}
}
