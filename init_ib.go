package goccl

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/goccl/goccl/store"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/ib"
)

// testIBConfig, set by the package's own tests, adjusts the
// transport/ib configuration of job rank r before Init probes or connects
// it: tests give each rank the fake provider of transport/ib/ibfake and a
// device of its own, as if it were a host with an HCA.
var testIBConfig func(jobRank int, c *ib.Config)

// ibConfig is the transport/ib configuration of job rank jobRank, without
// the store: the device comes from GOCCL_IB_HCA and GOCCL_IB_GID_INDEX
// (read by transport/ib), the provider is libibverbs.
func ibConfig(jobRank int) ib.Config {
	var c ib.Config
	if testIBConfig != nil {
		testIBConfig(jobRank, &c)
	}
	return c
}

// ibUsable says whether this rank can use transport/ib: verbs built in and
// a device with an active port. A build without the ibverbs tag fails
// with an error wrapping ErrInvalid and ib.ErrNotBuilt that says how to
// build one; Init refuses GOCCL_TRANSPORT=ib with it before it sends
// anything.
func ibUsable(jobRank int) error {
	cfg := ibConfig(jobRank)
	err := cfg.Probe()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ib.ErrNotBuilt):
		return fmt.Errorf("%w: transport ib: InfiniBand verbs are not built in (build with -tags ibverbs, which needs cgo and libibverbs-dev): %w", ErrInvalid, err)
	default:
		dev := cmp.Or(cfg.HCA, os.Getenv(ib.EnvHCA), "the first active port")
		return fmt.Errorf("transport ib: no usable RDMA device (%s): %w", dev, err)
	}
}

// connectIB connects this process as rank of size ranks in r's epoch over
// transport/ib, through the epoch's keys of the store.
func (r *rendezvous) connectIB(ctx context.Context, rank, size int) (transport.Endpoint, error) {
	job := r.jobID
	if e := r.epoch(); e != "" {
		job += "/" + strings.TrimSuffix(e, "/")
	}
	cfg := ibConfig(r.jobRank)
	cfg.Rank, cfg.Size, cfg.JobID, cfg.Secret = rank, size, job, r.secret
	if r.spin != 0 {
		cfg.Spin = r.spin
	}
	cfg.KV = store.WithPrefix(r.st.st, r.key(r.epoch()))
	ep, err := ib.Connect(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("transport ib: %w", err)
	}
	return ep, nil
}

// ibKey counts, under the epoch's keys, the ranks that can use
// transport/ib.
const ibKey = "ib/usable"

// ibOffer is auto's first step towards InfiniBand, before hostGroup: a
// rank that can use transport/ib (verbs built in, an active port) adds
// itself to ibKey. A rank that cannot sends nothing, so a job without
// verbs pays no store request. It returns whether this rank offered.
func ibOffer(ctx context.Context, st store.Store, jobRank int, log *slog.Logger) (bool, error) {
	if err := ibUsable(jobRank); err != nil {
		if !errors.Is(err, ib.ErrNotBuilt) {
			debugLog(log, slog.LevelInfo, "goccl ib: not used", "reason", err)
		}
		return false, nil
	}
	if _, err := st.Add(ctx, ibKey, 1); err != nil {
		return false, err
	}
	return true, nil
}

// ibAgreed is auto's second step, after hostGroup: every rank had made
// its offer before any rank returned from hostGroup (each host's first
// arrival waits for every rank's arrival, and the others wait for it), so
// the count is final, and the ranks use transport/ib between hosts when
// all size of them offered. A rank that did not offer knows the answer
// (no) without asking.
func ibAgreed(ctx context.Context, st store.Store, offered bool, size int) (bool, error) {
	if !offered {
		return false, nil
	}
	n, err := st.Add(ctx, ibKey, 0)
	if err != nil {
		return false, err
	}
	return n == int64(size), nil
}
