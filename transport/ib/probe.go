package ib

import "fmt"

// Probe reports whether Connect could open a device here: it opens the
// device hca names (as Config.HCA; empty: GOCCL_IB_HCA, else the first
// active port) through the libibverbs provider, checks that its port is
// active, and closes it. Without the ibverbs tag it returns ErrNotBuilt.
// A launcher's automatic transport choice calls it.
func Probe(hca string) error { return Config{HCA: hca}.Probe() }

// Probe is the package's Probe for the device that Connect(c) would open:
// c.Provider (nil: Verbs()), c.HCA (empty: GOCCL_IB_HCA, else the first
// active port) and c.GIDIndex. Only those fields are read.
func (c Config) Probe() error {
	cfg := Config{Provider: c.Provider, HCA: c.HCA, GIDIndex: c.GIDIndex}
	if err := cfg.defaults(getenv); err != nil {
		return err
	}
	name, port, err := cfg.device()
	if err != nil {
		return err
	}
	dev, err := cfg.Provider.Open(name, port, cfg.GIDIndex)
	if err != nil {
		return err
	}
	defer dev.Close()
	if pi := dev.Port(); !pi.Active {
		return fmt.Errorf("ib: device %s port %d is not active", dev.Name(), pi.Num)
	}
	return nil
}
