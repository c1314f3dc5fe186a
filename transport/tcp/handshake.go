package tcp

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The handshake, all integers little-endian:
//
//	client -> server  hello{magic "GCCL", version u16, streams u16, rank u32,
//	                  size u32, stream u16, len(job) u16, job, nonce [32]}
//	server -> client  hello (its own), mac_s = HMAC(secret, "goccl server" ||
//	                  client nonce || job || server rank || client rank || stream)
//	client -> server  mac_c = HMAC(secret, "goccl client" || server nonce ||
//	                  job || client rank || server rank || stream)
//	server -> client  one byte 1: accepted
//
// Both sides check the other's hello (same job, size and streams, the rank
// they expect) and MAC. Without a secret the MACs use an empty key, which
// proves nothing but keeps one code path. A refusal is a closed connection.

const (
	magic        = "GCCL"
	version      = 1
	nonceLen     = 32
	macLen       = sha256.Size
	helloFixed   = 4 + 2 + 2 + 4 + 4 + 2 + 2
	acceptedByte = 1
)

type hello struct {
	version uint16
	streams uint16
	rank    uint32
	size    uint32
	stream  uint16
	job     string
	nonce   [nonceLen]byte
}

// errRefused marks handshake failures that are the peer's fault.
var errRefused = errors.New("handshake refused")

func newHello(cfg *Config, rank, stream int) (hello, error) {
	h := hello{version: version, streams: uint16(cfg.Streams), rank: uint32(rank),
		size: uint32(cfg.Size), stream: uint16(stream), job: cfg.JobID}
	if _, err := rand.Read(h.nonce[:]); err != nil {
		return h, err
	}
	return h, nil
}

func (h *hello) marshal() []byte {
	b := make([]byte, 0, helloFixed+len(h.job)+nonceLen)
	b = append(b, magic...)
	b = binary.LittleEndian.AppendUint16(b, h.version)
	b = binary.LittleEndian.AppendUint16(b, h.streams)
	b = binary.LittleEndian.AppendUint32(b, h.rank)
	b = binary.LittleEndian.AppendUint32(b, h.size)
	b = binary.LittleEndian.AppendUint16(b, h.stream)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(h.job)))
	b = append(b, h.job...)
	return append(b, h.nonce[:]...)
}

func readHello(r io.Reader) (hello, error) {
	var h hello
	var fixed [helloFixed]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return h, err
	}
	if string(fixed[:4]) != magic {
		return h, fmt.Errorf("%w: bad magic %q", errRefused, fixed[:4])
	}
	h.version = binary.LittleEndian.Uint16(fixed[4:])
	if h.version != version {
		return h, fmt.Errorf("%w: protocol version %d, want %d", errRefused, h.version, version)
	}
	h.streams = binary.LittleEndian.Uint16(fixed[6:])
	h.rank = binary.LittleEndian.Uint32(fixed[8:])
	h.size = binary.LittleEndian.Uint32(fixed[12:])
	h.stream = binary.LittleEndian.Uint16(fixed[16:])
	n := binary.LittleEndian.Uint16(fixed[18:])
	if n > 1024 {
		return h, fmt.Errorf("%w: job id of %d bytes", errRefused, n)
	}
	rest := make([]byte, int(n)+nonceLen)
	if _, err := io.ReadFull(r, rest); err != nil {
		return h, err
	}
	h.job = string(rest[:n])
	copy(h.nonce[:], rest[n:])
	return h, nil
}

// check verifies that a peer's hello belongs to our job.
func (h *hello) check(cfg *Config) error {
	switch {
	case h.job != cfg.JobID:
		return fmt.Errorf("%w: job id %q, want %q", errRefused, h.job, cfg.JobID)
	case int(h.size) != cfg.Size:
		return fmt.Errorf("%w: job size %d, want %d", errRefused, h.size, cfg.Size)
	case int(h.streams) != cfg.Streams:
		return fmt.Errorf("%w: %d streams, want %d", errRefused, h.streams, cfg.Streams)
	case int(h.stream) >= cfg.Streams:
		return fmt.Errorf("%w: stream %d out of range", errRefused, h.stream)
	case h.rank >= uint32(cfg.Size): // as uint32: int(h.rank) can be negative where int has 32 bits
		return fmt.Errorf("%w: rank %d out of range", errRefused, h.rank)
	}
	return nil
}

func handshakeMAC(secret []byte, role string, nonce []byte, job string, self, peer, stream int) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(role))
	m.Write(nonce)
	m.Write([]byte(job))
	var b [12]byte
	binary.LittleEndian.PutUint32(b[0:], uint32(self))
	binary.LittleEndian.PutUint32(b[4:], uint32(peer))
	binary.LittleEndian.PutUint32(b[8:], uint32(stream))
	m.Write(b[:])
	return m.Sum(nil)
}

// clientHandshake runs the dialing side, expecting rank peer on stream.
func clientHandshake(rw io.ReadWriter, cfg *Config, peer, stream int) error {
	mine, err := newHello(cfg, cfg.Rank, stream)
	if err != nil {
		return err
	}
	if _, err := rw.Write(mine.marshal()); err != nil {
		return err
	}
	theirs, err := readHello(rw)
	if err != nil {
		return err
	}
	if err := theirs.check(cfg); err != nil {
		return err
	}
	if int(theirs.rank) != peer || int(theirs.stream) != stream {
		return fmt.Errorf("%w: server is rank %d stream %d, want rank %d stream %d", errRefused, theirs.rank, theirs.stream, peer, stream)
	}
	mac := make([]byte, macLen)
	if _, err := io.ReadFull(rw, mac); err != nil {
		return err
	}
	want := handshakeMAC(cfg.Secret, "goccl server", mine.nonce[:], cfg.JobID, peer, cfg.Rank, stream)
	if !hmac.Equal(mac, want) {
		return fmt.Errorf("%w: server failed authentication (wrong secret?)", errRefused)
	}
	if _, err := rw.Write(handshakeMAC(cfg.Secret, "goccl client", theirs.nonce[:], cfg.JobID, cfg.Rank, peer, stream)); err != nil {
		return err
	}
	var ok [1]byte
	if _, err := io.ReadFull(rw, ok[:]); err != nil {
		return fmt.Errorf("%w: server closed the connection (wrong secret or duplicate?): %v", errRefused, err)
	}
	if ok[0] != acceptedByte {
		return fmt.Errorf("%w: bad acceptance byte %d", errRefused, ok[0])
	}
	return nil
}

// serverHandshake runs the accepting side. It returns the client's rank and
// stream once the client has authenticated; accept decides (duplicates)
// before the acceptance byte is sent.
func serverHandshake(rw io.ReadWriter, cfg *Config, accept func(rank, stream int) error) (rank, stream int, err error) {
	theirs, err := readHello(rw)
	if err != nil {
		return -1, -1, err
	}
	rank, stream = int(theirs.rank), int(theirs.stream)
	if err := theirs.check(cfg); err != nil {
		return rank, stream, err
	}
	if rank == cfg.Rank || rank > cfg.Rank && !cfg.Lazy {
		return rank, stream, fmt.Errorf("%w: rank %d must be dialled by rank %d, not dial it", errRefused, rank, cfg.Rank)
	}
	mine, err := newHello(cfg, cfg.Rank, stream)
	if err != nil {
		return rank, stream, err
	}
	out := append(mine.marshal(), handshakeMAC(cfg.Secret, "goccl server", theirs.nonce[:], cfg.JobID, cfg.Rank, rank, stream)...)
	if _, err := rw.Write(out); err != nil {
		return rank, stream, err
	}
	mac := make([]byte, macLen)
	if _, err := io.ReadFull(rw, mac); err != nil {
		return rank, stream, fmt.Errorf("%w: no client authentication: %v", errRefused, err)
	}
	want := handshakeMAC(cfg.Secret, "goccl client", mine.nonce[:], cfg.JobID, rank, cfg.Rank, stream)
	if !hmac.Equal(mac, want) {
		return rank, stream, fmt.Errorf("%w: client failed authentication (wrong secret?)", errRefused)
	}
	if err := accept(rank, stream); err != nil {
		return rank, stream, err
	}
	if _, err := rw.Write([]byte{acceptedByte}); err != nil {
		return rank, stream, err
	}
	return rank, stream, nil
}
