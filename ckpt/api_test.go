package ckpt_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/ckpt"
)

// checkpointer is one rank's side of a checkpoint API under test: a Store
// of its own, or the package-level functions.
type checkpointer interface {
	Save(ctx context.Context, state []byte) error
	Restore(ctx context.Context) ([]byte, error)
	Rebind(c ckpt.Comm) error
	store() *ckpt.Store // for Generation and HeldBytes; nil if none
	lose() error        // the rank loses its memory; a replacement takes its place
	close()
}

// storeCkpt checkpoints through a Store it holds.
type storeCkpt struct {
	*ckpt.Store
	c   ckpt.Comm
	cfg ckpt.Config
}

func openStore(c ckpt.Comm, cfg ckpt.Config) (checkpointer, error) {
	s, err := ckpt.New(c, cfg)
	return &storeCkpt{s, c, cfg}, err
}

func (s *storeCkpt) Rebind(c ckpt.Comm) error {
	if err := s.Store.Rebind(c); err != nil {
		return err
	}
	s.c = c
	return nil
}

func (s *storeCkpt) store() *ckpt.Store { return s.Store }

func (s *storeCkpt) lose() (err error) {
	s.Store, err = ckpt.New(s.c, s.cfg)
	return err
}

func (s *storeCkpt) close() {}

// pkgCkpt checkpoints through ckpt.Save and ckpt.Restore on c.
type pkgCkpt struct{ c ckpt.Comm }

func openPackage(c ckpt.Comm, _ ckpt.Config) (checkpointer, error) { return &pkgCkpt{c}, nil }

func (p *pkgCkpt) Save(ctx context.Context, state []byte) error { return ckpt.Save(ctx, p.c, state) }
func (p *pkgCkpt) Restore(ctx context.Context) ([]byte, error)  { return ckpt.Restore(ctx, p.c) }

func (p *pkgCkpt) Rebind(c ckpt.Comm) error {
	if err := ckpt.Rebind(p.c, c); err != nil {
		return err
	}
	p.c = c
	return nil
}

func (p *pkgCkpt) store() *ckpt.Store { return ckpt.KeptStore(p.c) }
func (p *pkgCkpt) lose() error        { ckpt.Forget(p.c); return nil }
func (p *pkgCkpt) close()             { ckpt.Forget(p.c) }

// apis are the checkpoint APIs that tests run. The package-level one takes
// only the default Config.
var apis = []struct {
	name      string
	open      func(c ckpt.Comm, cfg ckpt.Config) (checkpointer, error)
	anyConfig bool
}{
	{"Store", openStore, true},
	{"package", openPackage, false},
}

// checkNoneKept fails t if the package still keeps a Store: every test
// forgets the ones it made.
func checkNoneKept(t *testing.T) {
	t.Helper()
	if n := ckpt.KeptStores(); n != 0 {
		t.Errorf("%d Stores still kept after the test", n)
	}
}

// localComms returns n in-process communicators, closed when t ends.
func localComms(t *testing.T, n int) []*goccl.Comm {
	t.Helper()
	comms, err := goccl.NewLocal(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range comms {
			c.Close()
		}
	})
	return comms
}

// eachRank runs f for ranks 0..n-1 at once and joins their errors.
func eachRank(n int, f func(r int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { errs[r] = f(r) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
