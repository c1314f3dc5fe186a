package goccl

import (
	"bytes"
	"context"
	"encoding/gob"
	"fmt"
	"slices"
	"time"

	"github.com/goccl/goccl/commslog"
)

// The object collectives move any gob-encodable Go value, as torch's
// *_object collectives move picklable objects. Decoding a peer's bytes can
// fail only if the ranks disagree on T; the error names that peer and wraps
// ErrProtocol.

func encode(v any) ([]byte, error) {
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func decode[T any](c *Comm, op string, peer int, b []byte) (T, error) {
	var v T
	if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&v); err != nil {
		return v, &Error{Op: op, Rank: c.rank, Peer: peer, Dir: "<-", Err: fmt.Errorf("%w: decoding object: %w", ErrProtocol, err)}
	}
	return v, nil
}

// timed logs a composite call (made of other collectives) under its own
// DeepSpeed op name.
func (c *Comm) timed(op string, size *int64, fn func() error) error {
	if err := c.usable(op); err != nil {
		return err
	}
	log := c.shared.log
	if !log.Profiling(op) {
		return fn()
	}
	start := time.Now()
	err := fn()
	if err == nil {
		log.Append(commslog.Record{Op: op, Bytes: *size, DType: "object", Rank: c.rank, WorldSize: c.Size(),
			Start: start, Latency: time.Since(start)})
	}
	return err
}

// BroadcastObject returns root's v on every rank (broadcast_object_list).
func BroadcastObject[T any](ctx context.Context, c *Comm, v T, root int) (T, error) {
	const op = commslog.BroadcastObjectList
	ctx = commslog.Internal(ctx) // the object op is logged, not its parts
	var out T
	var size int64
	err := c.timed(op, &size, func() error {
		if err := c.checkRoot(op, root); err != nil {
			return err
		}
		var b []byte
		if c.rank == root {
			var err error
			if b, err = encode(v); err != nil {
				return invalid(op, c.rank, "encode: %v", err)
			}
		}
		n := []int64{int64(len(b))}
		if err := c.Broadcast(ctx, n, root); err != nil {
			return err
		}
		size = n[0]
		if c.rank != root {
			b = make([]byte, n[0])
		}
		if err := c.Broadcast(ctx, b, root); err != nil {
			return err
		}
		if c.rank == root {
			out = v
			return nil
		}
		var err error
		out, err = decode[T](c, op, root, b)
		return err
	})
	return out, err
}

// AllGatherObject returns every rank's v, indexed by rank (all_gather_object).
func AllGatherObject[T any](ctx context.Context, c *Comm, v T) ([]T, error) {
	const op = commslog.AllGatherObject
	ctx = commslog.Internal(ctx) // the object op is logged, not its parts
	var out []T
	var size int64
	err := c.timed(op, &size, func() error {
		b, err := encode(v)
		if err != nil {
			return invalid(op, c.rank, "encode: %v", err)
		}
		lens := make([]int64, c.Size())
		if err := c.AllGather(ctx, []int64{int64(len(b))}, lens); err != nil {
			return err
		}
		parts := make([]any, c.Size())
		for r, n := range lens {
			size += n
			if r == c.rank {
				parts[r] = b
			} else {
				parts[r] = make([]byte, n)
			}
		}
		if err := c.AllGatherList(ctx, b, parts); err != nil {
			return err
		}
		out = make([]T, c.Size())
		for r, p := range parts {
			if r == c.rank {
				out[r] = v
				continue
			}
			if out[r], err = decode[T](c, op, r, p.([]byte)); err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}

// GatherObject returns every rank's v on root, indexed by rank, and nil
// elsewhere (gather_object).
func GatherObject[T any](ctx context.Context, c *Comm, v T, root int) ([]T, error) {
	const op = commslog.GatherObject
	ctx = commslog.Internal(ctx) // the object op is logged, not its parts
	var out []T
	var size int64
	err := c.timed(op, &size, func() error {
		if err := c.checkRoot(op, root); err != nil {
			return err
		}
		b, err := encode(v)
		if err != nil {
			return invalid(op, c.rank, "encode: %v", err)
		}
		lens := make([]int64, c.Size())
		if err := c.AllGather(ctx, []int64{int64(len(b))}, lens); err != nil {
			return err
		}
		width := int(slices.Max(lens))
		size = int64(width * c.Size())
		padded := make([]byte, width)
		copy(padded, b)
		var all []byte
		if c.rank == root {
			all = make([]byte, width*c.Size())
		}
		if err := c.Gather(ctx, padded, all, root); err != nil {
			return err
		}
		if c.rank != root {
			return nil
		}
		out = make([]T, c.Size())
		for r := range out {
			if out[r], err = decode[T](c, op, r, all[r*width:r*width+int(lens[r])]); err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}

// ScatterObject gives rank i root's objs[i] (scatter_object_list). objs is
// read on root only and must have Size() entries there.
func ScatterObject[T any](ctx context.Context, c *Comm, objs []T, root int) (T, error) {
	const op = commslog.ScatterObjectList
	ctx = commslog.Internal(ctx) // the object op is logged, not its parts
	var out T
	var size int64
	err := c.timed(op, &size, func() error {
		if err := c.checkRoot(op, root); err != nil {
			return err
		}
		var all []byte
		lens := make([]int64, c.Size()+1) // per-rank lengths, then the width
		if c.rank == root {
			if len(objs) != c.Size() {
				return invalid(op, c.rank, "objs has %d entries, want %d", len(objs), c.Size())
			}
			enc := make([][]byte, len(objs))
			for i, o := range objs {
				b, err := encode(o)
				if err != nil {
					return invalid(op, c.rank, "encode objs[%d]: %v", i, err)
				}
				enc[i] = b
				lens[i] = int64(len(b))
				lens[c.Size()] = max(lens[c.Size()], int64(len(b)))
			}
			width := int(lens[c.Size()])
			all = make([]byte, width*c.Size())
			for i, b := range enc {
				copy(all[i*width:], b)
			}
		}
		if err := c.Broadcast(ctx, lens, root); err != nil {
			return err
		}
		width := int(lens[c.Size()])
		size = int64(width * c.Size())
		mine := make([]byte, width)
		if err := c.Scatter(ctx, all, mine, root); err != nil {
			return err
		}
		var err error
		out, err = decode[T](c, op, root, mine[:lens[c.rank]])
		return err
	})
	return out, err
}
