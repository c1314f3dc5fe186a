//go:build !ibverbs

package ib

// This file is the package without the ibverbs build tag: Verbs returns a
// provider whose Open fails with ErrNotBuilt, so Connect with a nil
// Config.Provider reports that verbs are not built in, and the package
// needs no cgo. The transport itself (endpoint.go) is the same in both
// builds and runs over any Provider, the fake of transport/ib/ibfake
// included. TestStubMatchesVerbs keeps the two files' APIs identical.

// Verbs returns the libibverbs provider. Without the ibverbs tag its Open
// returns ErrNotBuilt.
func Verbs() Provider { return notBuilt{} }

type notBuilt struct{}

func (notBuilt) Open(name string, port, gidIndex int) (Device, error) { return nil, ErrNotBuilt }
