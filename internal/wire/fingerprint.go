package wire

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/goccl/goccl/commslog"
	"github.com/goccl/goccl/reduceop"
)

const (
	// FPLen is the length of a fingerprint.
	FPLen = 32
	// FPInline is the largest first message that carries its fingerprint
	// in front of the payload, in one message; a larger one is sent after
	// the fingerprint as a message of its own.
	FPInline = 4 << 10
)

// Fingerprint names a call: which collective, its group and sequence
// number, the element count, dtype, reduction and root, and how its bytes
// are cut (see the package doc).
type Fingerprint [FPLen]byte

// Call is what a fingerprint says, field by field.
type Call struct {
	Op       string         // the commslog op name ("all_reduce")
	DType    reduceop.DType // 0: none
	Redop    reduceop.Op    // 0: none
	ChunkLog uint8          // log2 of a device buffer's messages; 0: host memory
	SegLog   uint8          // log2 of the group's segments; 0: the default
	Layout   uint8          // a coalesced call's hash of its buffers' lengths; 0: one buffer
	Root     int            // -1: none
	Group    uint32         // the low 32 bits of the group id
	Count    int64          // elements; -1 where ranks may differ
	Seq      uint64         // the call's number in its group
}

var opNames = commslog.OpNames()

// opNumbers numbers the op names from 1 (0: unknown).
var opNumbers = func() map[string]uint8 {
	m := make(map[string]uint8, len(opNames))
	for i, op := range opNames {
		m[op] = uint8(i + 1)
	}
	return m
}()

// allReduce is all_reduce's number, the one latency-bound calls ask for.
var allReduce = opNumbers[commslog.AllReduce]

// OpNumber returns op's number in a fingerprint, 0 for an unknown op. The
// 8-byte allreduce skips the map, whose string hash costs it more than
// the rest of the fingerprint.
func OpNumber(op string) uint8 {
	if op == commslog.AllReduce {
		return allReduce
	}
	return opNumbers[op]
}

// Set makes f the fingerprint of a call, in place, in four 8-byte
// stores: a fingerprint is made on every call and read at once in 8-byte
// words (Put, Equal), and a wider read of narrower stores that have not
// reached the cache yet waits until they have. op is OpNumber's.
func (f *Fingerprint) Set(op uint8, dt reduceop.DType, redop reduceop.Op, chunkLog, segLog, layout uint8, root int, group uint64, count int64, seq uint64) {
	binary.LittleEndian.PutUint64(f[0:], 'G'|'F'<<8|uint64(op)<<16|
		uint64(uint8(dt))<<24|uint64(uint8(redop))<<32|uint64(chunkLog)<<40|uint64(segLog)<<48|uint64(layout)<<56)
	binary.LittleEndian.PutUint64(f[8:], uint64(uint32(int32(root)))|uint64(uint32(group))<<32)
	binary.LittleEndian.PutUint64(f[16:], uint64(count))
	binary.LittleEndian.PutUint64(f[24:], seq)
}

// NewFingerprint returns the fingerprint of c.
func NewFingerprint(c Call) Fingerprint {
	var f Fingerprint
	f.Set(OpNumber(c.Op), c.DType, c.Redop, c.ChunkLog, c.SegLog, c.Layout, c.Root, uint64(c.Group), c.Count, c.Seq)
	return f
}

// Put copies f into dst in 8-byte words (see Set).
func Put(dst []byte, f *Fingerprint) {
	_ = dst[FPLen-1]
	for i := 0; i < FPLen; i += 8 {
		binary.LittleEndian.PutUint64(dst[i:], binary.LittleEndian.Uint64(f[i:]))
	}
}

// Equal reports whether b starts with f, comparing 8-byte words.
func Equal(b []byte, f *Fingerprint) bool {
	_ = b[FPLen-1]
	for i := 0; i < FPLen; i += 8 {
		if binary.LittleEndian.Uint64(b[i:]) != binary.LittleEndian.Uint64(f[i:]) {
			return false
		}
	}
	return true
}

// The kinds of fingerprint, by their second byte.
const (
	KindCall  = 'F' // a call
	KindStray = 'S' // a message for a call its receiver had finished
	KindLeft  = 'L' // a rank that closed its communicator after Seq calls
)

// Kind returns the fingerprint's kind, or 0 for bytes that are none.
func (f *Fingerprint) Kind() byte {
	if f[0] != 'G' {
		return 0
	}
	switch f[1] {
	case KindCall, KindStray, KindLeft:
		return f[1]
	}
	return 0
}

// Parse returns the call a fingerprint of KindCall names.
func (f *Fingerprint) Parse() (Call, bool) {
	if f.Kind() != KindCall {
		return Call{}, false
	}
	return Call{
		Op:       f.Op(),
		DType:    reduceop.DType(f[3]),
		Redop:    reduceop.Op(f[4]),
		ChunkLog: f[5],
		SegLog:   f[6],
		Layout:   f[7],
		Root:     int(int32(binary.LittleEndian.Uint32(f[8:]))),
		Group:    f.Group(),
		Count:    int64(binary.LittleEndian.Uint64(f[16:])),
		Seq:      f.Seq(),
	}, true
}

// Op names the fingerprint's collective.
func (f *Fingerprint) Op() string {
	if i := int(f[2]) - 1; i >= 0 && i < len(opNames) {
		return opNames[i]
	}
	return fmt.Sprintf("op#%d", f[2])
}

// Group returns the low 32 bits of the call's group id.
func (f *Fingerprint) Group() uint32 { return binary.LittleEndian.Uint32(f[12:]) }

// Seq returns the call's sequence number (for KindLeft, the calls made).
func (f *Fingerprint) Seq() uint64 { return binary.LittleEndian.Uint64(f[24:]) }

// SameCall reports whether a and b are of the same slot in the order of
// calls: the same group and sequence number.
func SameCall(a, b *Fingerprint) bool { return a.Group() == b.Group() && a.Seq() == b.Seq() }

// Probe returns a fingerprint of kind that names only a slot: group and
// seq (a stray message's call, a leaver's count).
func Probe(kind byte, group uint32, seq uint64) Fingerprint {
	var f Fingerprint
	f[0], f[1] = 'G', kind
	binary.LittleEndian.PutUint32(f[12:], group)
	binary.LittleEndian.PutUint64(f[24:], seq)
	return f
}

// String describes the call a fingerprint stands for, as an error shows
// it: "all_reduce(dtype=float32, count=8, op=sum) #3".
func (f Fingerprint) String() string {
	switch f.Kind() {
	case KindStray:
		return fmt.Sprintf("a message for call #%d, which this rank had finished without expecting it", f.Seq())
	case KindLeft:
		return fmt.Sprintf("no collective: it closed its communicator after %d calls", f.Seq())
	case KindCall:
	default:
		return "a message without a fingerprint"
	}
	c, _ := f.Parse()
	var args []string
	if c.DType.Valid() {
		args = append(args, "dtype="+c.DType.String())
	}
	if c.Count > 0 || c.Count == 0 && len(args) > 0 {
		args = append(args, fmt.Sprintf("count=%d", c.Count))
	}
	if c.Redop != 0 {
		args = append(args, fmt.Sprintf("op=%v", c.Redop))
	}
	if c.ChunkLog != 0 {
		args = append(args, fmt.Sprintf("device buffer in %d-byte chunks", 1<<c.ChunkLog))
	}
	if c.SegLog != 0 {
		args = append(args, fmt.Sprintf("segments of %d bytes", 1<<c.SegLog))
	}
	if c.Layout != 0 {
		args = append(args, fmt.Sprintf("buffer lengths #%02x", c.Layout))
	}
	if c.Root >= 0 {
		args = append(args, fmt.Sprintf("root=%d", c.Root))
	}
	return fmt.Sprintf("%s(%s) #%d", c.Op, strings.Join(args, ", "), c.Seq)
}
