package store

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The wire protocol. Every message, in either direction, is one frame:
//
//	u32 length      of everything after this field, little-endian
//	u8  op          an opcode (requests) or a status (responses)
//	u64 id          request id, echoed in the response
//	u16 nargs       number of arguments
//	nargs times:
//	  u32 len       argument length
//	  len bytes     argument
//
// A frame whose length exceeds the limit, whose op is unknown, whose
// arguments overrun the frame or leave bytes over, or that carries more
// than maxArgs arguments is refused with an error wrapping ErrProtocol.
// Integers carried as arguments (Add's delta and result, NumKeys) are
// 8-byte little-endian two's complement.

// op is a request opcode or response status.
type op uint8

const (
	opSet        op = 1  // key, value -> ok
	opGet        op = 2  // key -> ok value (waits)
	opAdd        op = 3  // key, delta -> ok new
	opCompareSet op = 4  // key, expected, desired -> ok current [present]
	opWait       op = 5  // keys... -> ok (waits)
	opDelete     op = 6  // key -> ok deleted(1 byte)
	opNumKeys    op = 7  // -> ok n
	opCancel     op = 8  // (id = request to cancel) -> no response
	opAuth       op = 9  // clientNonce, mac -> ok serverMac | err
	opEphemeral  op = 10 // key, value -> ok; the key goes with the connection

	opOK    op = 0x80 // response: success, results as arguments
	opErr   op = 0x81 // response: failure; args: code(1 byte), message
	opHello op = 0x90 // server greeting: magic, nonce, flags(1 byte)
)

func (o op) String() string {
	switch o {
	case opSet:
		return "set"
	case opGet:
		return "get"
	case opAdd:
		return "add"
	case opCompareSet:
		return "compareset"
	case opWait:
		return "wait"
	case opDelete:
		return "delete"
	case opNumKeys:
		return "numkeys"
	case opCancel:
		return "cancel"
	case opAuth:
		return "auth"
	case opEphemeral:
		return "ephemeral"
	case opOK:
		return "ok"
	case opErr:
		return "err"
	case opHello:
		return "hello"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

func (o op) valid() bool {
	return (o >= opSet && o <= opEphemeral) || o == opOK || o == opErr || o == opHello
}

// Limits of the protocol.
const (
	// DefaultMaxMessage is the largest frame accepted when
	// Options.MaxMessage is zero.
	DefaultMaxMessage = 64 << 20
	// maxArgs bounds the number of arguments of one frame (the keys of one
	// Wait, in practice).
	maxArgs = 1<<16 - 1
	// headerLen is op + id + nargs.
	headerLen = 1 + 8 + 2
	// protoMagic opens the server's hello; a client that reads anything
	// else is talking to the wrong server.
	protoMagic = "goccl-store/1"
)

// errFrameTooLarge marks readMsg's refusal of a frame over its limit.
var errFrameTooLarge = fmt.Errorf("%w", ErrProtocol)

// msg is one decoded frame.
type msg struct {
	op   op
	id   uint64
	args [][]byte
}

// encodedLen is the length of m's frame, length prefix included.
func (m *msg) encodedLen() int {
	n := 4 + headerLen
	for _, a := range m.args {
		n += 4 + len(a)
	}
	return n
}

// appendMsg appends the frame of m to b.
func appendMsg(b []byte, m *msg) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(m.encodedLen()-4))
	b = append(b, byte(m.op))
	b = binary.LittleEndian.AppendUint64(b, m.id)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(m.args)))
	for _, a := range m.args {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(a)))
		b = append(b, a...)
	}
	return b
}

// checkEncodable reports whether m fits the protocol limits.
func checkEncodable(m *msg, maxLen int) error {
	if len(m.args) > maxArgs {
		return fmt.Errorf("%w: %d arguments, limit %d", ErrTooLarge, len(m.args), maxArgs)
	}
	if n := m.encodedLen() - 4; n > maxLen {
		return fmt.Errorf("%w: message of %d bytes, limit %d", ErrTooLarge, n, maxLen)
	}
	return nil
}

// decodeMsg decodes the body of one frame (everything after the length
// prefix). The returned arguments alias body.
func decodeMsg(body []byte) (msg, error) {
	if len(body) < headerLen {
		return msg{}, fmt.Errorf("%w: frame of %d bytes is shorter than its header", ErrProtocol, len(body))
	}
	m := msg{op: op(body[0]), id: binary.LittleEndian.Uint64(body[1:9])}
	if !m.op.valid() {
		return msg{}, fmt.Errorf("%w: unknown op %d", ErrProtocol, body[0])
	}
	nargs := int(binary.LittleEndian.Uint16(body[9:11]))
	rest := body[headerLen:]
	// Every argument needs at least its 4-byte length: refuse counts that
	// cannot fit before allocating for them.
	if nargs > len(rest)/4 {
		return msg{}, fmt.Errorf("%w: %d arguments do not fit in %d bytes", ErrProtocol, nargs, len(rest))
	}
	if nargs > 0 {
		m.args = make([][]byte, nargs)
	}
	for i := range nargs {
		if len(rest) < 4 {
			return msg{}, fmt.Errorf("%w: argument %d: truncated length", ErrProtocol, i)
		}
		n := binary.LittleEndian.Uint32(rest)
		rest = rest[4:]
		if uint64(n) > uint64(len(rest)) {
			return msg{}, fmt.Errorf("%w: argument %d: length %d overruns the frame", ErrProtocol, i, n)
		}
		m.args[i] = rest[:n:n]
		rest = rest[n:]
	}
	if len(rest) != 0 {
		return msg{}, fmt.Errorf("%w: %d bytes after the last argument", ErrProtocol, len(rest))
	}
	return m, nil
}

// readMsg reads one frame from r, refusing frames longer than maxLen.
func readMsg(r *bufio.Reader, maxLen int) (msg, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return msg{}, err
	}
	n := binary.LittleEndian.Uint32(hdr[:])
	if uint64(n) > uint64(maxLen) {
		return msg{}, fmt.Errorf("%w: frame of %d bytes exceeds limit %d", errFrameTooLarge, n, maxLen)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return msg{}, err
	}
	return decodeMsg(body)
}

func putInt64(v int64) []byte {
	return binary.LittleEndian.AppendUint64(nil, uint64(v))
}

func getInt64(b []byte) (int64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("%w: integer of %d bytes, want 8", ErrProtocol, len(b))
	}
	return int64(binary.LittleEndian.Uint64(b)), nil
}
